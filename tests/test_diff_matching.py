"""Kernel matching in the diff (``traceinsight.delta.compare.kernel_diff``): kernels with different names are paired
only when they do the same work, the same framework op *and* the same kernel class on both sides (cuBLAS against
hipBLASLt under ``aten::mm``). Everything else keeps its status: a kernel that vanished stays "vanished", a kernel of
another class that appeared under the same op stays "new", and neither names the other in ``matched_with``.

Reports are a few hand-written lines (the unit the diff reads), so each row's expected status is plain to see.
"""

from __future__ import annotations

import importlib

from traceinsight.delta.side import Side

C = importlib.import_module("traceinsight.delta.compare")


def _k(name, cls, ns, op):
    return {"name": name, "class": cls, "op": op, "count": 3, "total_ns": int(ns * 3), "per_step": 1.0, "ns_per_step": ns}


def _side(kernels):
    ops = [{"name": "aten::mm", "per_step": 1, "gpu_ns_per_step": 1000}]
    return Side({"trace": {"format": "pytorch"}, "workload": {"steps": [], "kernels": list(kernels), "ops": ops, "shapes": []}}, "x.json")


def _status(base, head):
    rows, _ = C.kernel_diff(_side(base), _side(head))
    return {r["name"]: (r["status"], r["matched_with"]) for r in rows}


def test_a_vanished_kernel_and_a_new_kernel_of_another_class_under_one_op_stay_apart():
    """BASE ran a GEMM under aten::mm; HEAD runs an elementwise kernel under aten::mm instead: not the same work."""
    got = _status([_k("cublas_gemm", "gemm", 500, "aten::mm")], [_k("vectorized_elementwise_kernel", "elementwise", 40, "aten::mm")])
    assert got == {"cublas_gemm": ("vanished", []), "vectorized_elementwise_kernel": ("new", [])}


def test_a_kernel_that_vanishes_with_nothing_in_its_place_stays_vanished():
    got = _status([_k("cublas_gemm", "gemm", 500, "aten::mm"), _k("gone_gemm", "gemm", 70, "aten::bmm")],
                  [_k("cublas_gemm", "gemm", 480, "aten::mm")])
    assert got == {"cublas_gemm": ("same", []), "gone_gemm": ("vanished", [])}


def test_the_same_class_under_another_op_is_not_the_same_work():
    got = _status([_k("cublas_gemm", "gemm", 500, "aten::mm")], [_k("hipblaslt_gemm", "gemm", 450, "aten::bmm")])
    assert got == {"cublas_gemm": ("vanished", []), "hipblaslt_gemm": ("new", [])}


def test_pairs_form_only_within_a_class_beside_kernels_of_other_classes():
    """Under aten::mm a GEMM renamed across vendors is matched; the elementwise kernel that appeared beside it and
    the attention kernel that vanished beside it keep their own status, and no pair names them."""
    got = _status(
        [_k("cublas_gemm", "gemm", 500, "aten::mm"), _k("flash_fwd_kernel", "attention", 30, "aten::mm")],
        [_k("hipblaslt_gemm", "gemm", 450, "aten::mm"), _k("elementwise_kernel", "elementwise", 20, "aten::mm")],
    )
    assert got == {
        "cublas_gemm": ("matched", ["hipblaslt_gemm"]),
        "hipblaslt_gemm": ("matched", ["cublas_gemm"]),
        "flash_fwd_kernel": ("vanished", []),
        "elementwise_kernel": ("new", []),
    }


def test_kernels_without_an_op_are_never_matched():
    got = _status([_k("old", "gemm", 500, "")], [_k("new", "gemm", 500, "")])
    assert got == {"old": ("vanished", []), "new": ("new", [])}
