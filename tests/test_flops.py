"""The FLOPs and bytes model of one op (``flops.count_op``) by value, formula by formula, from the arguments the
profiler records (``Input Dims``, ``Input type``, ``Concrete Inputs``), and which op a kernel is counted under
(``flops.count_ops`` on planted kineto traces).

Every expected figure is written out from the textbook formula (2·M·N·K for a matmul, 2·N·outputs·weight for a
convolution, two matmuls for attention), never taken from the code.
"""

from __future__ import annotations

import numpy as np
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.derive.flops import ATTENTION_BACKWARD_FACTOR, MAX_DIM, STRIDE_ASSUMED, count_op, count_ops

F32, BF16 = "float", "c10::BFloat16"


def _c(name, dims, types=None, concrete=None):
    got = count_op(name, dims, types if types is not None else [F32] * len(dims), concrete)
    assert got is not None, name
    return got


# --- matrix products -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "dims", "flops", "elements"),
    [
        # (FLOPs, elements of A + B + C)
        ("aten::mm", [[8, 16], [16, 32]], 2 * 8 * 16 * 32, 8 * 16 + 16 * 32 + 8 * 32),
        ("aten::_scaled_mm", [[8, 16], [16, 32], [], []], 2 * 8 * 16 * 32, 8 * 16 + 16 * 32 + 8 * 32),
        ("aten::addmm", [[32], [8, 16], [16, 32], [], []], 2 * 8 * 16 * 32, 8 * 16 + 16 * 32 + 8 * 32),
        ("aten::_addmm_activation", [[32], [8, 16], [16, 32], [], []], 2 * 8 * 16 * 32, 8 * 16 + 16 * 32 + 8 * 32),
        ("aten::bmm", [[4, 8, 16], [4, 16, 32]], 2 * 4 * 8 * 16 * 32, 4 * (8 * 16 + 16 * 32 + 8 * 32)),
        ("aten::baddbmm", [[4, 8, 32], [4, 8, 16], [4, 16, 32], [], []], 2 * 4 * 8 * 16 * 32, 4 * (8 * 16 + 16 * 32 + 8 * 32)),
        # addbmm sums over the batch: one output matrix
        ("aten::addbmm", [[8, 32], [4, 8, 16], [4, 16, 32], [], []], 2 * 4 * 8 * 16 * 32, 4 * 8 * 16 + 4 * 16 * 32 + 8 * 32),
        ("aten::mv", [[8, 16], [16]], 2 * 8 * 16, 8 * 16 + 16 + 8),
        ("aten::addmv", [[8], [8, 16], [16], [], []], 2 * 8 * 16, 8 * 16 + 16 + 8),
        ("aten::dot", [[16], [16]], 2 * 16, 16 + 16 + 1),
        # linear(x[B, S, K], w[N, K]): M = B·S rows
        ("aten::linear", [[2, 3, 16], [32, 16], [32]], 2 * 6 * 16 * 32, 6 * 16 + 16 * 32 + 6 * 32),
        ("aten::matmul", [[4, 8, 16], [16, 32]], 2 * 4 * 8 * 16 * 32, 4 * 8 * 16 + 4 * 16 * 32 + 4 * 8 * 32),
        # broadcast batch: (2, 1) with (3,) gives 2 x 3 matrices
        ("aten::matmul", [[2, 1, 8, 16], [3, 16, 32]], 2 * 6 * 8 * 16 * 32, 6 * (8 * 16 + 16 * 32 + 8 * 32)),
        ("aten::matmul", [[16], [16, 32]], 2 * 16 * 32, 16 + 16 * 32 + 32),  # vector x matrix
        ("aten::matmul", [[8, 16], [16]], 2 * 8 * 16, 8 * 16 + 16 + 8),  # matrix x vector
    ],
)
def test_matrix_products(name, dims, flops, elements):
    got = _c(name, dims)
    assert got.flops == flops and got.bytes == 4 * elements
    assert (got.dtype, got.item, got.assumed) == ("fp32", 4, "")


@pytest.mark.parametrize(
    ("name", "dims"),
    [
        ("aten::mm", [[8, 16], [17, 32]]),  # inner dimensions differ
        ("aten::mm", [[8, 16]]),  # one operand
        ("aten::mm", [[16], [16, 32]]),  # mm takes matrices only
        ("aten::bmm", [[2, 8, 16], [3, 16, 32]]),  # batches that do not broadcast
        ("aten::matmul", [[], [16, 32]]),
        ("aten::matmul", [[16, 8]]),
        ("aten::linear", [[2, 16], [32, 15], [32]]),  # features differ
        ("aten::linear", [[2, 16], [32, 16, 1]]),  # weight not a matrix
        ("aten::linear", [[2, 16]]),
        ("aten::mv", [[8, 16], []]),
        ("aten::addmv", [[8], [8, 16]]),
        ("aten::dot", [[16], []]),
        ("aten::dot", [[], [16]]),
        ("aten::mm", [[8, -16], [-16, 32]]),  # not shapes
        ("aten::mm", [[8, True], [True, 32]]),
        ("aten::mm", [[8, MAX_DIM + 1], [MAX_DIM + 1, 32]]),
        ("aten::mm", [[8, 1.5], [1.5, 32]]),
        ("aten::einsum", [[8, 16], [16, 32]]),  # no equation
    ],
)
def test_matrix_products_that_do_not_resolve(name, dims):
    assert count_op(name, dims, [F32] * len(dims), None) is None


def test_largest_dimension_is_still_a_shape():
    got = _c("aten::mm", [[1, MAX_DIM], [MAX_DIM, 1]])
    assert got.flops == 2.0 * MAX_DIM


def test_dtype_is_the_first_floating_type():
    got = count_op("aten::addmm", [[32], [8, 16], [16, 32], [], []], ["long int", BF16, BF16, "Scalar", "Scalar"], None)
    assert (got.dtype, got.item, got.bytes) == ("bf16", 2, 2 * (8 * 16 + 16 * 32 + 8 * 32))
    for skipped in ("long int", "int", "bool"):  # indices and masks never set the dtype
        got = count_op("aten::mm", [[8, 16], [16, 32]], [skipped, "c10::Half"], None)
        assert (got.dtype, got.item) == ("fp16", 2)
    got = count_op("aten::mm", [[8, 16], [16, 32]], ["double", "double"], None)
    assert (got.dtype, got.item) == ("fp64", 8)
    for types in (None, {"a": 1}, ["int", "long int"], ["weird"], [3]):  # unknown: 4 bytes an element, no dtype
        got = count_op("aten::mm", [[8, 16], [16, 32]], types, None)
        assert (got.dtype, got.item, got.bytes) == (None, 4, 4 * (8 * 16 + 16 * 32 + 8 * 32))


def test_ops_without_a_model():
    relu = count_op("aten::relu_", [[4, 8]], [F32], None)  # elementwise: one FLOP an element, read and write
    assert (relu.flops, relu.bytes) == (32, 4 * 64)
    assert count_op("aten::not_an_op", [[8, 16], [16, 32]], [F32, F32], None) is None
    assert count_op("aten::mm", None, [F32], None) is None
    assert count_op("aten::mm", "[[8, 16], [16, 32]]", [F32], None) is None  # text, not parsed dims


# --- einsum --------------------------------------------------------------------------------------------------
def test_einsum_counts_every_index_once():
    dims = [[], [[4, 8, 16], [4, 16, 32]]]
    got = count_op("aten::einsum", dims, ["", F32], ["bmk, bkn -> bmn", ""])
    assert got.flops == 2 * 4 * 8 * 16 * 32
    assert got.bytes == 4 * (4 * 8 * 16 + 4 * 16 * 32 + 4 * 8 * 32)
    # a contraction to a scalar: every index summed
    got = count_op("aten::einsum", [[], [[8, 16], [8, 16]]], ["", F32], ["ij,ij->", ""])
    assert got.flops == 2 * 8 * 16 and got.bytes == 4 * (8 * 16 * 2 + 1)


@pytest.mark.parametrize(
    ("eq", "ops"),
    [
        ("bmk,bkn", [[4, 8, 16], [4, 16, 32]]),  # no output
        ("...mk,...kn->...mn", [[4, 8, 16], [4, 16, 32]]),  # ellipsis
        ("mk,kn,np->mp", [[8, 16], [16, 32]]),  # three terms
        ("bmk,bkn->bmn", [[4, 8, 16]]),  # one operand
        ("bmk,kn->bmn", [[4, 8, 16], [4, 16, 32]]),  # a term of the wrong rank
        (3, [[4, 8], [8, 4]]),
    ],
)
def test_einsum_that_does_not_resolve(eq, ops):
    assert count_op("aten::einsum", [[], ops], ["", F32], [eq, ""]) is None
    assert count_op("aten::einsum", [[], ops], ["", F32], None) is None


def test_einsum_operands_must_be_shapes():
    assert count_op("aten::einsum", [[], [[4, 8], "x"]], ["", F32], ["ij,jk->ik", ""]) is None
    assert count_op("aten::einsum", [[]], ["", F32], ["ij,jk->ik", ""]) is None


# --- convolutions --------------------------------------------------------------------------------------------
def _conv_args(stride="[1, 1]", padding="[0, 0]", dilation="[1, 1]", transposed="False", groups="1"):
    return ["", "", "", stride, padding, dilation, transposed, "[0, 0]", groups]


X, W = [8, 64, 56, 56], [128, 64, 3, 3]


def _conv_elements(x, w, n_out):
    return int(np.prod(x)) + int(np.prod(w)) + n_out


@pytest.mark.parametrize(
    ("concrete", "out_hw"),
    [
        (_conv_args(), (54, 54)),  # valid: 56 - 3 + 1
        (_conv_args(stride="[2, 2]", padding="[1, 1]"), (28, 28)),  # (56 + 2 - 2 - 1) // 2 + 1
        (_conv_args(stride="[2]", padding="[1]"), (28, 28)),  # one value stands for every dimension
        (_conv_args(stride="2", padding="1"), (28, 28)),
        (_conv_args(stride="[1, 2]", padding="[1, 0]"), (56, 27)),
        (_conv_args(dilation="[2, 2]", padding="[2, 2]"), (56, 56)),  # (56 + 4 - 4 - 1) // 1 + 1
        (_conv_args(dilation="[2, 1]"), (52, 54)),
    ],
)
def test_convolution_output_size_from_its_arguments(concrete, out_hw):
    got = _c("aten::_convolution", [X, W, [], [], [], [], [], [], []], [BF16, BF16] + [""] * 7, concrete)
    outs = out_hw[0] * out_hw[1]
    assert got.flops == 2 * 8 * outs * 128 * 64 * 9
    assert got.bytes == 2 * _conv_elements(X, W, 8 * 128 * outs)
    assert (got.dtype, got.assumed) == ("bf16", "")


def test_conv2d_arguments_and_padding_words():
    dims = [X, W, [], [], [], [], []]
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert got.flops == 2 * 8 * 28 * 28 * 128 * 64 * 9
    # "same" keeps the size (stride 1): pad = dilation·(k − 1) // 2; "valid" pads nothing
    same = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", '"same"', "[2, 2]", "1"])
    assert same.flops == 2 * 8 * 56 * 56 * 128 * 64 * 9
    valid = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", '"valid"', "[1, 1]", "1"])
    assert valid.flops == 2 * 8 * 54 * 54 * 128 * 64 * 9
    # conv2d has no "transposed" argument: its groups (index 6) must not be read as one
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "2"])
    assert got.flops == 2 * 8 * 56 * 56 * 128 * 64 * 9


def test_conv1d_and_conv3d():
    got = _c("aten::conv1d", [[4, 16, 100], [32, 16, 5]], concrete=["", "", "", "[1]", "[0]", "[1]", "1"])
    assert got.flops == 2 * 4 * 96 * 32 * 16 * 5
    assert got.bytes == 4 * (4 * 16 * 100 + 32 * 16 * 5 + 4 * 32 * 96)
    got = _c("aten::conv3d", [[2, 3, 8, 16, 16], [6, 3, 3, 3, 3]], concrete=["", "", "", "[1, 2, 2]", "[1, 1, 1]", "[1, 1, 1]", "1"])
    assert got.flops == 2 * 2 * (8 * 8 * 8) * 6 * 3 * 27


def test_convolution_without_arguments_assumes_same_padding():
    got = _c("aten::convolution", [X, W, [], [], [], [], [], [], []])
    assert got.flops == 2 * 8 * 56 * 56 * 128 * 64 * 9
    assert got.assumed == STRIDE_ASSUMED
    # with only the stride recorded, padding still defaults to "same" but nothing is assumed about the stride
    got = _c("aten::convolution", [X, W, [], [], [], [], [], [], []], concrete=["", "", "", "[2, 2]", "", ""])
    assert got.flops == 2 * 8 * 28 * 28 * 128 * 64 * 9 and got.assumed == ""


def test_transposed_convolution():
    # input [N, Cin, H, W], weight [Cin, Cout/groups, kh, kw]: every input element meets every weight element
    x, w = [2, 16, 10, 10], [16, 8, 4, 4]
    got = _c("aten::_convolution", [x, w, [], [], [], [], [], [], []],
             concrete=_conv_args(stride="[2, 2]", padding="[1, 1]", transposed="True", groups="2"))
    assert got.flops == 2 * 2 * 100 * (16 * 8 * 16)
    out = (10 - 1) * 2 - 2 + 3 + 1  # 20
    assert got.bytes == 4 * (2 * 16 * 100 + 16 * 8 * 16 + 2 * (8 * 2) * out * out)
    no_groups = _c("aten::_convolution", [x, w, [], [], [], [], [], [], []],
                   concrete=_conv_args(stride="[2, 2]", padding="[1, 1]", transposed="True", groups=""))
    assert no_groups.bytes == 4 * (2 * 16 * 100 + 16 * 8 * 16 + 2 * 8 * out * out)
    zero_groups = _c("aten::_convolution", [x, w, [], [], [], [], [], [], []],
                     concrete=_conv_args(stride="[2, 2]", padding="[1, 1]", transposed="True", groups="0"))
    assert zero_groups.bytes == no_groups.bytes


@pytest.mark.parametrize(
    "dims",
    [
        [[8, 64], [128, 64]],  # no spatial dimension
        [[8, 64, 56, 56], [128, 64, 3]],  # ranks differ
        [[8, 64, 56, 56]],
        [[8, 64, 2, 2], [128, 64, 3, 3]],  # kernel larger than the padded input: no output
        [[8, 64, 56, -56], [128, 64, 3, 3]],
    ],
)
def test_convolutions_that_do_not_resolve(dims):
    assert count_op("aten::_convolution", dims, [F32] * len(dims), _conv_args()) is None


def test_convolution_backward():
    go, x, w = [8, 128, 28, 28], [8, 64, 56, 56], [128, 64, 3, 3]
    fwd = 2 * 8 * 28 * 28 * 128 * 64 * 9
    elems = 8 * 128 * 28 * 28 + 8 * 64 * 56 * 56 + 128 * 64 * 9
    args = ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[1, 1, 0]"]
    got = _c("aten::convolution_backward", [go, x, w] + [[]] * 8, concrete=args)
    assert got.flops == 2 * fwd and got.bytes == 4 * elems * 2 and got.assumed == ""
    one = _c("aten::convolution_backward", [go, x, w] + [[]] * 8, concrete=args[:10] + ["[0, 1, 1]"])
    assert one.flops == fwd and one.bytes == 4 * elems * 1.5  # weight gradient only
    none = _c("aten::convolution_backward", [go, x, w] + [[]] * 8, concrete=args[:10] + ["[0, 0, 1]"])
    assert none.flops == 0 and none.bytes == 4 * elems
    unknown = _c("aten::convolution_backward", [go, x, w] + [[]] * 8, concrete=args[:10] + ["[1]"])
    assert unknown.flops == 2 * fwd and unknown.assumed == "grad input and grad weight both computed (output_mask not recorded)"
    # transposed: the forward's input is the larger side
    tr = _c("aten::convolution_backward", [x, go, [64, 128, 3, 3]] + [[]] * 8,
            concrete=args[:7] + ["True"] + args[8:])
    assert tr.flops == 2 * 2 * 8 * (28 * 28) * (64 * 128 * 9)


def test_older_backward_names_input_first_and_assumes_both_gradients():
    go, x, w = [8, 128, 28, 28], [8, 64, 56, 56], [128, 64, 3, 3]
    for name in ("aten::cudnn_convolution_backward", "aten::miopen_convolution_backward"):
        got = _c(name, [x, go, w] + [[]] * 6, concrete=["", "", "", "[1, 1, 0]"] + [""] * 6)
        assert got.flops == 2 * 2 * 8 * 28 * 28 * 128 * 64 * 9
        assert got.assumed == "grad input and grad weight both computed (output_mask not recorded)"
    assert count_op("aten::convolution_backward", [[8, 128], x, w], [F32] * 3, None) is None
    assert count_op("aten::convolution_backward", [go, x], [F32] * 2, None) is None


# --- attention -----------------------------------------------------------------------------------------------
Q = [2, 16, 1024, 64]


@pytest.mark.parametrize(
    ("name", "causal_at"),
    [
        ("aten::scaled_dot_product_attention", 5),
        ("aten::_scaled_dot_product_flash_attention", 4),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", 4),
        ("aten::_scaled_dot_product_efficient_attention", 6),
        ("aten::_scaled_dot_product_cudnn_attention", 6),
    ],
)
def test_attention_forward_and_its_causal_flag(name, causal_at):
    dims = [Q, Q, Q] + [[]] * 6
    full = 2 * 2 * 16 * 1024 * 1024 * 64 * 2  # Q·Kᵀ and P·V
    elems = 4 * 2 * 16 * 1024 * 64
    args = [""] * 9
    got = _c(name, dims, [BF16] * 3 + [""] * 6, args)
    assert got.flops == full and got.bytes == 2 * elems
    assert got.assumed == "attention not causal (is_causal not recorded)"
    args[causal_at] = "True"
    got = _c(name, dims, [BF16] * 3 + [""] * 6, args)
    assert got.flops == full / 2 and got.assumed == ""
    args[causal_at] = "False"
    got = _c(name, dims, [BF16] * 3 + [""] * 6, args)
    assert got.flops == full and got.assumed == ""


def test_attention_with_other_lengths_and_head_sizes():
    q, k, v = [1, 8, 128, 64], [1, 8, 512, 64], [1, 8, 512, 32]
    got = _c("aten::_scaled_dot_product_efficient_attention", [q, k, v], concrete=["", "", "", "", "", "", "False"])
    assert got.flops == 2 * 8 * 128 * 512 * 64 + 2 * 8 * 128 * 512 * 32
    assert got.bytes == 4 * (8 * 128 * 64 + 8 * 512 * 64 + 8 * 512 * 32 + 8 * 128 * 32)


@pytest.mark.parametrize(
    ("name", "causal_at"),
    [
        ("aten::_scaled_dot_product_flash_attention_backward", 11),
        ("aten::_scaled_dot_product_efficient_attention_backward", 11),
        ("aten::_scaled_dot_product_cudnn_attention_backward", 14),
    ],
)
def test_attention_backward(name, causal_at):
    dims = [Q, Q, Q, Q] + [[]] * 12  # grad_out first, then q, k, v
    args = [""] * 16
    args[causal_at] = "True"
    got = _c(name, dims, [BF16] * 4 + [""] * 12, args)
    fwd = 2 * 2 * 16 * 1024 * 1024 * 64 * 2 / 2
    assert ATTENTION_BACKWARD_FACTOR == 2.5
    assert got.flops == fwd * 2.5 and got.bytes == 2 * 2 * 4 * 2 * 16 * 1024 * 64


def test_attention_that_does_not_resolve():
    assert count_op("aten::scaled_dot_product_attention", [[2, 1024, 64], Q, Q], [F32] * 3, None) is None
    assert count_op("aten::scaled_dot_product_attention", [Q, [2, 1024, 64], Q], [F32] * 3, None) is None
    assert count_op("aten::scaled_dot_product_attention", [Q, Q], [F32] * 2, None) is None


# --- memory-bound ops ----------------------------------------------------------------------------------------
def test_elementwise_reduction_norm_and_copies():
    a, b = [64, 128], [128]
    n = 64 * 128
    got = _c("aten::add", [a, b, []], [F32, F32, "Scalar"])
    assert (got.flops, got.bytes) == (n, 4 * (n + 128 + n))  # read both, write the larger
    got = _c("aten::sum", [a, []], [F32, "ScalarList"])
    assert (got.flops, got.bytes) == (n, 4 * n)
    got = _c("aten::native_layer_norm", [a, [128], [128], [128], []], [BF16] * 4 + ["Scalar"])
    assert (got.flops, got.bytes) == (5 * n, 2 * (n + 3 * 128 + n))
    got = _c("aten::copy_", [a, a, []], [BF16, F32, "Scalar"])
    assert (got.flops, got.bytes) == (0, 2 * 2 * n)  # read and write the tensor once
    got = _c("aten::cat", [[[4, 8], [6, 8]], []], ["TensorList", "Scalar"])
    assert (got.flops, got.bytes) == (0, 4 * 2 * (32 + 48))  # every piece moved
    # a row gather moves (indices x row) elements, whatever the table's size
    got = _c("aten::embedding", [[50000, 256], [4, 32]], [F32, "long int"])
    assert (got.flops, got.bytes, got.dtype) == (0, 4 * 2 * (4 * 32) * 256, "fp32")
    got = _c("aten::index_select", [[1000, 16], [], [10]], [BF16, "Scalar", "long int"])
    assert got.bytes == 2 * 2 * 10 * 16
    got = _c("aten::index_select", [[1000, 16]], [BF16])  # no index tensor recorded: the tensor once
    assert got.bytes == 2 * 2 * 1000 * 16
    assert count_op("aten::add", [[], []], [F32, F32], None) is None  # scalars only


# --- which op a kernel belongs to ----------------------------------------------------------------------------
def _counts(path):
    tl = traceinsight.load(path)
    from traceinsight.derive.derived import Derived

    views = Derived(tl)
    return count_ops(tl.events, views.kernels), views.kernels


def _mm_args(m, k, n):
    return {"Input Dims": [[m, k], [k, n]], "Input type": [F32, F32], "Concrete Inputs": ["", ""]}


def test_innermost_op_counts_and_owns_the_kernels(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    outer = t.cpu_op("aten::matmul", 10, 100, args={"Input Dims": [[8, 16], [16, 32]], "Input type": [F32, F32], "Concrete Inputs": ["", ""]})
    inner = t.cpu_op("aten::mm", 20, 50, args=_mm_args(8, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=inner)
    add = t.cpu_op("aten::add", 300, 20, args={"Input Dims": [[8, 32], [8, 32], []], "Input type": [F32, F32, "Scalar"],
                                                "Concrete Inputs": ["", "", "1"]})
    t.kernel("vectorized_elementwise_kernel", 400, 5, launch_us=305, op=add)
    t.kernel("vectorized_elementwise_kernel", 410, 7, launch_us=310, op=add)
    counts, kernels = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns").reset_index(drop=True)
    assert list(ops["name"]) == ["aten::mm", "aten::add"]  # matmul holds mm: only mm is counted
    assert list(ops["flops"]) == [2 * 8 * 16 * 32, 8 * 32]
    assert list(ops["kernels"]) == [1, 2] and list(ops["kernel_ns"]) == [40_000, 12_000]
    assert list(ops["cls"]) == ["gemm", "elementwise"] and list(ops["step"]) == [1, 1]
    assert counts.shapes_recorded and counts.assumed == {}
    names = kernels["name"].astype(str).to_numpy()
    owner = ops["name"].to_numpy()[counts.kernel_op]
    assert dict(zip(names, owner)) == {"ampere_sgemm_64x32_nn": "aten::mm", "vectorized_elementwise_kernel": "aten::add"}


def test_elementwise_inside_a_matrix_op_owns_its_own_kernel(tmp_path):
    """Families are nested separately: an add inside a linear is counted, and its kernel is the add's."""
    t = KinetoTrace()
    t.step(1, 0, 2000)
    mm = t.cpu_op("aten::mm", 10, 200, args=_mm_args(8, 16, 32))
    add = t.cpu_op("aten::add", 50, 20, args={"Input Dims": [[8, 32], [8, 32], []], "Input type": [F32, F32, "Scalar"],
                                               "Concrete Inputs": ["", "", "1"]})
    t.kernel("ampere_sgemm_64x32_nn", 300, 40, launch_us=20, op=mm)
    t.kernel("vectorized_elementwise_kernel", 400, 5, launch_us=55, op=add)
    counts, kernels = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.set_index("name")
    assert ops.loc["aten::mm", "kernel_ns"] == 40_000 and ops.loc["aten::add", "kernel_ns"] == 5_000
    assert ops.loc["aten::mm", "kernels"] == 1 and ops.loc["aten::add", "kernels"] == 1


def test_same_ops_on_two_threads_are_both_leaves(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    a = t.cpu_op("aten::mm", 10, 100, args=_mm_args(8, 16, 32))
    b = t.cpu_op("aten::mm", 20, 50, tid=77, args=_mm_args(4, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=a)
    t.kernel("ampere_sgemm_64x32_nn", 300, 30, launch_us=40, tid=77, op=b)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns")
    assert list(ops["flops"]) == [2 * 8 * 16 * 32, 2 * 4 * 16 * 32] and list(ops["kernel_ns"]) == [40_000, 30_000]


def test_back_to_back_ops_are_both_counted(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    a = t.cpu_op("aten::mm", 10, 20, args=_mm_args(8, 16, 32))
    b = t.cpu_op("aten::mm", 30, 20, args=_mm_args(4, 16, 32))  # starts where the first ends
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=15, op=a)
    t.kernel("ampere_sgemm_64x32_nn", 300, 30, launch_us=35, op=b)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns")
    assert list(ops["kernel_ns"]) == [40_000, 30_000]


def test_kernels_without_an_external_id_follow_their_launch(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.cpu_op("aten::mm", 10, 100, args=_mm_args(8, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30)  # no op given: the runtime call inside mm
    t.kernel("ampere_sgemm_64x32_nn", 300, 40, launch_us=150)  # launched after mm ended: nobody's
    counts, kernels = _counts(t.write(tmp_path / "t.json"))
    assert list(counts.ops["kernels"]) == [1] and list(counts.ops["kernel_ns"]) == [40_000]
    assert sorted(counts.kernel_op.tolist()) == [-1, 0]


def test_no_shapes_and_no_counted_ops(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    op = t.cpu_op("aten::mm", 10, 100)  # recorded without shapes
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=op)
    counts, kernels = _counts(t.write(tmp_path / "t.json"))
    assert not counts.shapes_recorded and counts.ops.empty and counts.kernel_op.tolist() == [-1]
    t = KinetoTrace()
    t.step(1, 0, 2000)
    op = t.cpu_op("aten::relu", 10, 100, args={"Input Dims": [[]], "Input type": [F32], "Concrete Inputs": [""]})
    t.kernel("vectorized_elementwise_kernel", 200, 40, launch_us=30, op=op)
    counts, _ = _counts(t.write(tmp_path / "u.json"))
    assert counts.shapes_recorded and counts.ops.empty


# --- argument edge cases the formulas must read right ------------------------------------------------------
def test_expand_one_value_per_spatial_dimension():
    from traceinsight.derive.flops import _expand

    assert _expand([2], 3, 1) == [2, 2, 2]  # one value stands for all
    assert _expand([1, 2], 3, 0) == [1, 2, 2]  # short: the last value repeats
    assert _expand([1, 2, 3, 4], 2, 0) == [1, 2]
    assert _expand(5, 2, 0) == [5, 5]
    assert _expand(None, 2, 7) == [7, 7] and _expand([], 2, 7) == [7, 7] and _expand([1.5], 2, 7) == [7, 7]


def test_concrete_arguments():
    from traceinsight.derive.flops import _concrete

    args = ["", "True", "False", "[2, 2]", 3, '"same"', "x", None, 1.5]
    assert [_concrete(args, i) for i in range(len(args))] == [None, True, False, [2, 2], 3, "same", None, None, 1.5]
    assert _concrete(args, 9) is None and _concrete(args, None) is None and _concrete("[1]", 0) is None


def test_padding_for_even_kernels_and_dilation():
    x, w4 = [8, 64, 56, 56], [128, 64, 4, 4]
    dims = [x, w4, [], [], [], [], []]
    # "same" with an even kernel pads (k − 1)·d // 2 on each side: 1 for k = 4, d = 1 (output 55), 3 for d = 2 (56)
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", '"same"', "[1, 1]", "1"])
    assert got.flops == 2 * 8 * 55 * 55 * 128 * 64 * 16
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", '"same"', "[2, 2]", "1"])
    assert got.flops == 2 * 8 * 56 * 56 * 128 * 64 * 16
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[1, 1]", '"same"', "", "1"])  # dilation not recorded: 1
    assert got.flops == 2 * 8 * 55 * 55 * 128 * 64 * 16
    got = _c("aten::convolution", [x, w4] + [[]] * 7)  # nothing recorded: same padding assumed
    assert got.flops == 2 * 8 * 55 * 55 * 128 * 64 * 16 and got.assumed == STRIDE_ASSUMED
    got = _c("aten::conv2d", dims, concrete=["", "", "", "[2, 2]", "[0, 0]", "", "1"])  # dilation not recorded: 1
    assert got.flops == 2 * 8 * 27 * 27 * 128 * 64 * 16


def test_a_single_output_position_is_an_output():
    got = _c("aten::conv2d", [[2, 8, 3, 3], [16, 8, 3, 3], [], [], [], [], []], concrete=["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"])
    assert got.flops == 2 * 2 * 1 * 16 * 8 * 9
    assert count_op("aten::_convolution", [], [], None) is None


def test_transposed_convolution_padding():
    x, w = [2, 16, 10, 10], [16, 8, 4, 4]
    got = _c("aten::_convolution", [x, w, [], [], [], [], [], [], []],
             concrete=_conv_args(stride="[2, 2]", padding="[2, 2]", transposed="True", groups="1"))
    out = (10 - 1) * 2 - 4 + 3 + 1  # 18
    assert got.bytes == 4 * (2 * 16 * 100 + 16 * 8 * 16 + 2 * 8 * out * out)


def test_backward_argument_positions():
    go, x, w = [8, 128, 28, 28], [8, 64, 56, 56], [128, 64, 3, 3]
    elems = 8 * 128 * 28 * 28 + 8 * 64 * 56 * 56 + 128 * 64 * 9
    # the older op: (input, grad_output, weight); its arguments 7 and 10 are not "transposed" and the output mask
    got = _c("aten::cudnn_convolution_backward", [x, go, w] + [[]] * 8, concrete=[""] * 7 + ["True", "", "", "[0, 1, 0]"])
    assert got.flops == 2 * 2 * 8 * 28 * 28 * 128 * 64 * 9 and got.bytes == 4 * elems * 2
    # a two-entry mask is a mask
    got = _c("aten::convolution_backward", [go, x, w] + [[]] * 8, concrete=[""] * 10 + ["[0, 1]"])
    assert got.flops == 2 * 8 * 28 * 28 * 128 * 64 * 9 and got.assumed == ""
    # one spatial dimension
    got = _c("aten::convolution_backward", [[4, 32, 96], [4, 16, 100], [32, 16, 5]] + [[]] * 8, concrete=[""] * 10 + ["[1, 1, 0]"])
    assert got.flops == 2 * 2 * 4 * 96 * 32 * 16 * 5


def test_attention_backward_reads_q_k_v_after_the_gradient():
    go, q, k, v = [2, 16, 1024, 32], [2, 16, 1024, 64], [2, 16, 512, 64], [2, 16, 512, 32]
    got = _c("aten::_scaled_dot_product_efficient_attention_backward", [go, q, k, v] + [[]] * 12, concrete=[""] * 16)
    fwd = 2 * 2 * 16 * 1024 * 512 * 64 + 2 * 2 * 16 * 1024 * 512 * 32
    assert got.flops == fwd * 2.5
    assert got.bytes == 4 * 2 * (2 * 16 * (1024 * 64 + 512 * 64 + 512 * 32 + 1024 * 32))


def test_vector_products_with_unreadable_operands():
    assert count_op("aten::dot", [[-1], [16]], [F32] * 2, None) is None
    assert count_op("aten::dot", [[16], [-1]], [F32] * 2, None) is None
    assert count_op("aten::dot", [[16], [8]], [F32] * 2, None) is None  # lengths differ
    assert count_op("aten::mv", [[8, 16], [-1]], [F32] * 2, None) is None
    assert count_op("aten::addmv", [[8], [8, 16], [-1]], [F32] * 3, None) is None
    assert count_op("aten::matmul", [[-1], [16, 32]], [F32] * 2, None) is None
    assert count_op("aten::matmul", [[16, 8], [-1]], [F32] * 2, None) is None


def test_einsum_ellipsis_and_unknown_output_index():
    assert count_op("aten::einsum", [[], [[2, 3, 4, 16], [16, 32]]], ["", F32], ["...k,kn->...n", ""]) is None
    assert count_op("aten::einsum", [[], [[8, 16], [16, 32]]], ["", F32], ["ij,jk->ikz", ""]) is None


def test_addbmm_batches_must_agree():
    assert count_op("aten::addbmm", [[8, 32], [4, 8, 16], [3, 16, 32], [], []], [F32] * 5, None) is None


def test_same_start_the_longer_op_holds_the_shorter(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.cpu_op("aten::addmm", 10, 100, args={"Input Dims": [[32], [8, 16], [16, 32], [], []], "Input type": [F32] * 3 + ["Scalar"] * 2,
                                           "Concrete Inputs": [""] * 5})
    inner = t.cpu_op("aten::mm", 10, 50, args=_mm_args(4, 16, 32))  # starts with its parent
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=inner)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    assert list(counts.ops["name"]) == ["aten::mm"] and list(counts.ops["flops"]) == [2 * 4 * 16 * 32]


def test_nesting_is_per_thread(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.cpu_op("aten::mm", 10, 100, args=_mm_args(8, 16, 32))  # thread A
    t.cpu_op("aten::matmul", 20, 60, tid=77, args=_mm_args(2, 16, 32))  # thread B: matmul holding mm
    t.cpu_op("aten::mm", 30, 20, tid=77, args=_mm_args(4, 16, 32))
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    assert sorted(counts.ops["flops"]) == [2 * 4 * 16 * 32, 2 * 8 * 16 * 32]


def test_the_external_id_names_the_op_even_from_another_thread(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    a = t.cpu_op("aten::mm", 10, 40, args=_mm_args(8, 16, 32))
    t.cpu_op("aten::mm", 190, 40, tid=77, args=_mm_args(4, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 300, 40, launch_us=200, tid=77, op=a)  # launched inside the second op's span
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns")
    assert list(ops["kernel_ns"]) == [40_000, 0] and list(ops["kernels"]) == [1, 0]


def test_an_unknown_external_id_falls_back_to_the_launch(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.cpu_op("aten::mm", 10, 100, args=_mm_args(8, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=999)  # no op has id 999
    t.kernel("ampere_sgemm_64x32_nn", 300, 40, launch_us=150, op=998)  # nor 998, and launched outside mm
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    assert list(counts.ops["kernel_ns"]) == [40_000] and counts.kernel_op.tolist() == [0, -1]


def test_kernels_with_no_launch_record_belong_to_no_op(tmp_path):
    import json

    t = KinetoTrace()
    t.step(1, 0, 2000)
    t.cpu_op("aten::mm", 10, 100, args=_mm_args(8, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 200, 40, launch_us=30, op=999)
    doc = t.to_dict()  # drop the launch: a kernel whose runtime call the profiler lost
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "cudaLaunchKernel" and e.get("cat") != "ac2g"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    counts, kernels = _counts(path)
    assert len(kernels) == 1 and counts.kernel_op.tolist() == [-1] and list(counts.ops["kernels"]) == [0]


def _add_args(n):
    return {"Input Dims": [[n], [n], []], "Input type": [F32, F32, "Scalar"], "Concrete Inputs": ["", "", "1"]}


def test_elementwise_ops_alone_own_their_kernels(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    add = t.cpu_op("aten::add", 10, 50, args=_add_args(1024))
    t.kernel("vectorized_elementwise_kernel", 200, 7, launch_us=20, op=add)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    assert list(counts.ops["kernel_ns"]) == [7_000] and counts.kernel_op.tolist() == [0]


def test_a_matrix_op_owns_what_it_launches_after_an_inner_elementwise_op(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    mm = t.cpu_op("aten::mm", 10, 200, args=_mm_args(8, 16, 32))
    add = t.cpu_op("aten::add", 50, 20, args=_add_args(256))  # inside mm, ended before mm launches its GEMM
    t.kernel("vectorized_elementwise_kernel", 300, 5, launch_us=55, op=add)
    t.kernel("ampere_sgemm_64x32_nn", 400, 40, launch_us=100, op=999)  # found by its launch call, inside mm only
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.set_index("name")
    del mm
    assert (ops.loc["aten::mm", "kernel_ns"], ops.loc["aten::add", "kernel_ns"]) == (40_000, 5_000)


def test_ops_on_two_threads_own_their_own_kernels(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    for i, (tid, at) in enumerate(((None, 10), (77, 15), (None, 300), (77, 310))):
        op = t.cpu_op("aten::mm", at, 100, tid=tid, args=_mm_args(8 + i, 16, 32))
        t.kernel("ampere_sgemm_64x32_nn", 600 + 100 * i, 10 + i, launch_us=at + 5, tid=tid, op=op)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns")
    assert list(ops["flops"]) == [2 * (8 + i) * 16 * 32 for i in range(4)]
    assert list(ops["kernel_ns"]) == [10_000, 11_000, 12_000, 13_000]


def test_the_launch_fallback_leaves_kernels_found_by_external_id_alone(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 2000)
    a = t.cpu_op("aten::mm", 10, 40, args=_mm_args(8, 16, 32))
    b = t.cpu_op("aten::mm", 190, 40, tid=77, args=_mm_args(4, 16, 32))
    t.kernel("ampere_sgemm_64x32_nn", 300, 40, launch_us=200, tid=77, op=a)  # by its External id: op a
    t.kernel("ampere_sgemm_64x32_nn", 400, 30, launch_us=210, tid=77, op=999)  # by its launch: op b
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    ops = counts.ops.sort_values("start_ns")
    assert list(ops["kernel_ns"]) == [40_000, 30_000]
    del b



def test_memory_bound_models_in_full():
    from traceinsight.derive.flops import OpCount

    n = 64 * 128
    assert count_op("aten::add", [[64, 128], [128], []], [BF16, BF16, "Scalar"], None) == OpCount(n, 2 * (2 * n + 128), "bf16", "", 2)
    assert count_op("aten::sum", [[64, 128], []], [BF16, "ScalarList"], None) == OpCount(n, 2 * n, "bf16", "", 2)
    assert count_op("aten::native_layer_norm", [[64, 128], [128], [128], []], [BF16] * 3 + ["Scalar"], None) == OpCount(
        5 * n, 2 * (2 * n + 2 * 128), "bf16", "", 2)
    assert count_op("aten::copy_", [[64, 128], [64, 128], []], [BF16, BF16, "Scalar"], None) == OpCount(0.0, 2 * 2 * n, "bf16", "", 2)
    assert count_op("aten::embedding", [[500, 64], [8]], [BF16, "long int"], None) == OpCount(0.0, 2 * 2 * 8 * 64, "bf16", "", 2)
    assert count_op("aten::cat", [[[4, 8], [6, 8]], []], ["TensorList", "Scalar"], None) == OpCount(0.0, 4 * 2 * 80, None, "", 4)


def _conv_fwd_bwd(t, at, x, w, go, fwd_dims=None):
    fwd = t.cpu_op("aten::_convolution", at, 30, args={"Input Dims": (fwd_dims or [x, w]) + [[]] * 11, "Input type": [BF16] * 2 + [""] * 11})
    t.kernel("implicit_convolve_sgemm", at + 40, 100, launch_us=at + 5, op=fwd)
    bwd = t.cpu_op("aten::convolution_backward", at + 200, 30, args={
        "Input Dims": [go, x, w] + [[]] * 8, "Input type": [BF16] * 3 + [""] * 8, "Concrete Inputs": [""] * 10 + ["[1, 1, 0]"]})
    t.kernel("dgrad_engine", at + 240, 100, launch_us=at + 205, op=bwd)


def test_output_size_from_the_backward_in_full(tmp_path):
    x, w, go = [32, 64, 56, 56], [128, 64, 3, 3], [32, 128, 28, 28]
    t = KinetoTrace()
    t.step(1, 0, 5000)
    _conv_fwd_bwd(t, 10, x, w, go)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    fwd = counts.ops[counts.ops["name"] == "aten::_convolution"].iloc[0]
    assert fwd["flops"] == 2 * 32 * 28 * 28 * 128 * 64 * 9
    assert fwd["bytes"] == 2 * (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 28 * 28)
    assert (fwd["dtype"], fwd["assumed"]) == ("bf16", "") and counts.assumed == {}


def test_backward_ops_that_cannot_give_an_output_size(tmp_path):
    x, w = [32, 64, 56, 56], [128, 64, 3, 3]
    t = KinetoTrace()
    t.step(1, 0, 5000)
    _conv_fwd_bwd(t, 10, x, w, [32, 128, -1, 28])  # grad_output not a shape
    short = t.cpu_op("aten::convolution_backward", 700, 30, args={"Input Dims": [[32, 128, 28, 28], x], "Input type": [BF16] * 2})
    t.kernel("dgrad_engine", 800, 10, launch_us=705, op=short)
    _conv_fwd_bwd(t, 1000, [8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 32, 32])  # a second, resolvable pair after them
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    fwd = counts.ops[counts.ops["name"] == "aten::_convolution"].sort_values("start_ns")
    assert list(fwd["assumed"]) == [STRIDE_ASSUMED, ""]
    assert list(fwd["flops"]) == [2 * 32 * 56 * 56 * 128 * 64 * 9, 2 * 8 * 32 * 32 * 16 * 3 * 9]


def test_two_backward_output_sizes_leave_the_forward_on_its_assumption(tmp_path):
    """Two backward ops with the forward's input and weight shapes but different grad_output sizes (28 x 28 and
    14 x 14: two convolutions of one shape at different strides): which one is the forward's output cannot be told,
    so the forward keeps the stride-1, same-padding assumption (56 x 56 out) and says so."""
    x, w = [32, 64, 56, 56], [128, 64, 3, 3]
    t = KinetoTrace()
    t.step(1, 0, 5000)
    _conv_fwd_bwd(t, 10, x, w, [32, 128, 28, 28])
    bwd = t.cpu_op("aten::convolution_backward", 1000, 30, args={
        "Input Dims": [[32, 128, 14, 14], x, w] + [[]] * 8, "Input type": [BF16] * 3 + [""] * 8, "Concrete Inputs": [""] * 10 + ["[1, 1, 0]"]})
    t.kernel("dgrad_engine", 1040, 100, launch_us=1005, op=bwd)
    counts, _ = _counts(t.write(tmp_path / "t.json"))
    fwd = counts.ops[counts.ops["name"] == "aten::_convolution"]
    assert len(fwd) == 1
    assert fwd["flops"].iloc[0] == 2 * 32 * 56 * 56 * 128 * 64 * 9
    assert fwd["bytes"].iloc[0] == 2 * (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 56 * 56)
    assert fwd["assumed"].iloc[0] == STRIDE_ASSUMED and counts.assumed == {STRIDE_ASSUMED: 1}
