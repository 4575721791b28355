"""FLOPs and bytes of framework ops from the shapes a trace recorded, and the kernels each op launched.

PyTorch's profiler with ``record_shapes=True`` writes ``Input Dims``, ``Input type`` and ``Concrete Inputs`` on every
op (``with_flops=True`` computes FLOPs for its own tables but does not export them). The formulas here are the
standard ones (a matmul is 2·M·N·K per batch; a convolution 2·N·out-positions·weight elements; attention two
matmuls of Q·Kᵀ and P·V), computed once per distinct (op, shapes, types, arguments), never per row.

Only the innermost counted op is counted: ``aten::linear`` is counted through its ``aten::addmm`` child, the
attention front end through its backend op. A kernel belongs to the innermost counted op around the op that
launched it (kineto ``External id``; the launching runtime call when the id is absent).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.vocab.work_classes import DTYPES, MATRIX_CLASSES, OP_FORMULAS
from traceinsight.vocab.intervals import lexsort_ints

#: Where causal-attention flags sit among each attention op's arguments (``Concrete Inputs`` index).
_CAUSAL_ARG = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
}
#: Backward attention = the forward's two matmuls recomputed once plus four gradient matmuls: 2.5x the forward.
ATTENTION_BACKWARD_FACTOR = 2.5


@dataclass
class OpCount:
    """One op's model: FLOPs (None when its shapes do not resolve), bytes moved, dtype, and what was assumed."""

    flops: float | None
    bytes: float | None
    dtype: str | None
    assumed: str = ""
    item: int = 4  # bytes per element of its dtype


@dataclass
class OpCounts:
    """The counted ops of a timeline and the kernels they launched.

    ``ops``: one row per counted (innermost) op: ``row`` (position in the events frame), ``name``, ``cls``,
    ``flops``, ``bytes``, ``dtype``, ``assumed``, ``rank``, ``step``, ``kernel_ns`` (time of the kernels it
    launched), ``kernels``, ``launches`` (runtime calls its thread made inside it: an op with none ran on the host). ``kernel_op``: per row of the kernels frame given, the position in ``ops`` of the op
    that launched it (-1 when none).
    """

    ops: pd.DataFrame
    kernel_op: np.ndarray
    shapes_recorded: bool
    assumed: dict[str, int] = field(default_factory=dict)  # assumption -> ops it applies to


def _dims(text: Any) -> list | None:
    return _parse(str(text)) if text is not None and not (isinstance(text, float) and math.isnan(text)) else None


@lru_cache(maxsize=65536)
def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


#: The largest dimension taken as real (2^40): traces are untrusted, and a shape past this is not one a GPU ran.
MAX_DIM = 1 << 40


def _is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DIM for v in x)


def _numel(shape: list[int]) -> float:
    return float(np.prod(np.asarray(shape, dtype=np.float64))) if shape else 1.0


def _dtype(types: list | None) -> tuple[str | None, int]:
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and t in DTYPES and DTYPES[t][0] not in ("int64", "int32", "bool"):
            return DTYPES[t]
    return None, 0


def _concrete(args: list | None, i: int | None) -> Any:
    """Argument ``i`` as recorded (``Concrete Inputs``): a number, a list, a JSON string, Python's True/False;
    None when absent or unreadable (an empty string is one)."""
    if i is None or not isinstance(args, list) or i >= len(args) or not isinstance(args[i], (str, int, float)):
        return None
    v = args[i]
    if v in ("True", "False"):
        return v == "True"
    return _parse(v) if isinstance(v, str) else v


def _gemm(fn: str, d: list) -> tuple[float, list[list[int]]] | None:
    """(FLOPs, [A, B, C] shapes) of a matmul-family op, or None when the shapes do not fit the signature."""
    t = [x if _is_shape(x) else None for x in d]

    def get(i: int) -> list[int] | None:
        return t[i] if i < len(t) else None

    if fn in ("mm", "_scaled_mm"):
        a, b = get(0), get(1)
    elif fn in ("addmm", "_addmm_activation"):
        a, b = get(1), get(2)
    elif fn == "bmm":
        a, b = get(0), get(1)
    elif fn in ("baddbmm", "addbmm"):
        a, b = get(1), get(2)
    elif fn == "mv":
        a, b = get(0), get(1) + [1] if get(1) else None
    elif fn == "addmv":
        a, b = get(1), get(2) + [1] if get(2) else None
    elif fn == "dot":
        a, b = ([1] + get(0)) if get(0) else None, (get(1) + [1]) if get(1) else None
    elif fn == "linear":
        x, w = get(0), get(1)
        if not x or not w or len(w) != 2 or x[-1] != w[1]:
            return None
        m = _numel(x[:-1])
        return 2.0 * m * w[1] * w[0], [[m, w[1]], [w[1], w[0]], [m, w[0]]]
    elif fn == "matmul":
        a, b = get(0), get(1)
        if not a or not b:
            return None
        a = [1] + a if len(a) == 1 else a
        b = b + [1] if len(b) == 1 else b
    else:  # einsum is resolved from its equation by _einsum
        return None
    if not a or not b or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    try:
        batch = list(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    except ValueError:
        return None
    nb = _numel(batch)
    m, k, n = a[-2], a[-1], b[-1]
    return 2.0 * nb * m * k * n, [[nb * m, k], [nb * k, n], [(1 if fn == "addbmm" else nb) * m, n]]


def _einsum(d: list, concrete: list | None) -> tuple[float, list[list[int]]] | None:
    """Two-operand einsum: 2 x the product of every index's size (each output element sums over the contracted ones)."""
    eq = concrete[0] if concrete else None
    ops = d[1] if len(d) > 1 and isinstance(d[1], list) and all(_is_shape(x) for x in d[1]) else None
    if not isinstance(eq, str) or "->" not in eq or not ops or len(ops) != 2 or "." in eq:
        return None
    lhs, out = eq.replace(" ", "").split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    size: dict[str, int] = {}
    for term, shape in zip(terms, ops):
        if len(term) != len(shape):
            return None
        for ch, n in zip(term, shape):
            size[ch] = n
    if any(c not in size for c in out):  # an output index no operand has: not an equation torch runs
        return None
    flops = 2.0 * _numel(list(size.values()))
    return flops, [ops[0], ops[1], [size[c] for c in out]]


def _conv(name: str, d: list, concrete: list | None) -> tuple[float, float, str] | None:
    """(FLOPs, elements moved, assumption) of a forward convolution."""
    x, w = (d[0] if d else None), (d[1] if len(d) > 1 else None)
    if not _is_shape(x) or not _is_shape(w) or len(x) < 3 or len(x) != len(w):
        return None
    sp = len(x) - 2
    short = name in ("aten::conv1d", "aten::conv2d", "aten::conv3d")
    stride, padding, dilation = (_concrete(concrete, i) for i in (3, 4, 5))
    transposed = False if short else bool(_concrete(concrete, 6))
    assumed = ""
    k = w[2:]
    if stride is None and padding is None:
        assumed = STRIDE_ASSUMED
    if isinstance(padding, str):  # conv2d(padding="same"/"valid"); "same" is the default padding below
        padding = None if padding == "same" else [0] * sp
    stride, padding, dilation = _expand(stride, sp, 1), _expand(padding, sp, None), _expand(dilation, sp, 1)
    padding = [p if p is not None else (dl * (kk - 1)) // 2 for p, kk, dl in zip(padding, k, dilation)]
    n = x[0]
    if transposed:
        flops = 2.0 * n * _numel(x[2:]) * _numel(w)
        out_sp = [(i - 1) * s - 2 * p + dl * (kk - 1) + 1 for i, s, p, dl, kk in zip(x[2:], stride, padding, dilation, k)]
        cout = w[1] * max(int(_concrete(concrete, 8) or 1), 1)
    else:
        out_sp = [(i + 2 * p - dl * (kk - 1) - 1) // max(s, 1) + 1 for i, s, p, dl, kk in zip(x[2:], stride, padding, dilation, k)]
        if any(o <= 0 for o in out_sp):
            return None
        flops = 2.0 * n * _numel(out_sp) * _numel(w)
        cout = w[0]
    return flops, float(_numel(x) + _numel(w) + n * cout * _numel(out_sp)), assumed


def _expand(v: Any, n: int, default: Any) -> list:
    if isinstance(v, list) and v and all(isinstance(i, int) for i in v):
        return (v + [v[-1]] * n)[:n]  # one value stands for all; a short list repeats its last
    if isinstance(v, int):
        return [v] * n
    return [default] * n


def _conv_backward(d: list, concrete: list | None, self_first: bool) -> tuple[float, float, str] | None:
    """``convolution_backward(grad_output, input, weight, ...)``; the older ``cudnn_convolution_backward(input,
    grad_output, weight, ...)`` when ``self_first`` (its output mask is not recorded: both gradients assumed)."""
    go, x, w = (d[i] if len(d) > i else None for i in ((1, 0, 2) if self_first else (0, 1, 2)))
    if not (_is_shape(go) and _is_shape(x) and _is_shape(w)) or len(go) < 3:
        return None
    transposed = False if self_first else bool(_concrete(concrete, 7))
    fwd = 2.0 * go[0] * _numel(x[2:] if transposed else go[2:]) * _numel(w)
    mask = None if self_first else _concrete(concrete, 10)
    assumed = ""
    if not (isinstance(mask, list) and len(mask) >= 2):
        mask, assumed = [True, True], "grad input and grad weight both computed (output_mask not recorded)"
    passes = int(bool(mask[0])) + int(bool(mask[1]))
    return fwd * passes, float(_numel(go) + _numel(x) + _numel(w)) * (1 + passes / 2), assumed


def _sdpa(name: str, d: list, concrete: list | None, backward: bool) -> tuple[float, float, str] | None:
    q, k, v = (d[i] if len(d) > i else None for i in ((1, 2, 3) if backward else (0, 1, 2)))
    if not (_is_shape(q) and _is_shape(k) and _is_shape(v)) or len(q) != 4 or len(k) != 4:
        return None
    b, h, sq, dq = q
    sk, dv = k[2], v[3]
    flops = 2.0 * b * h * sq * sk * dq + 2.0 * b * h * sq * sk * dv
    causal = _concrete(concrete, _CAUSAL_ARG.get(name))
    assumed = ""
    if causal is True:
        flops *= 0.5
    elif causal is None:
        assumed = "attention not causal (is_causal not recorded)"
    elems = _numel(q) + _numel(k) + _numel(v) + b * h * sq * dv
    if backward:
        return flops * ATTENTION_BACKWARD_FACTOR, 2.0 * elems, assumed
    return flops, float(elems), assumed


def count_op(name: str, dims: list | None, types: list | None, concrete: list | None) -> OpCount | None:
    """The FLOPs/bytes model of one op from its recorded arguments; None when the op has none or shapes are absent."""
    entry = OP_FORMULAS.get(name)
    if entry is None or not isinstance(dims, list):
        return None
    cls, formula = entry
    dtype, item = _dtype(types)
    item = item or 4
    if formula in ("conv", "conv_backward", "conv_backward_self_first", "sdpa", "sdpa_backward"):
        if formula == "conv":
            r = _conv(name, dims, concrete)
        elif formula in ("conv_backward", "conv_backward_self_first"):
            r = _conv_backward(dims, concrete, formula == "conv_backward_self_first")
        else:
            r = _sdpa(name, dims, concrete, formula == "sdpa_backward")
        if r is None:
            return None
        return OpCount(r[0], r[1] * item, dtype, r[2], item)
    if cls == "gemm":
        g = _einsum(dims, concrete) if formula == "einsum" else _gemm(formula, dims)
        if g is None:
            return None
        flops, shapes = g
        return OpCount(flops, float(sum(_numel(s) for s in shapes)) * item, dtype, "", item)
    tensors = [x for x in dims if _is_shape(x) and x]
    lists = [s for x in dims if isinstance(x, list) and x and all(_is_shape(y) for y in x) for s in x]
    if not tensors and not lists:
        return None
    sizes = [_numel(s) for s in tensors + lists]
    big = max(sizes)
    if formula == "copy":
        if name in ("aten::index_select", "aten::embedding") and len(tensors) >= 2:
            table, idx = (tensors[0], tensors[-1])
            moved = _numel(idx) * _numel(table[1:])
            return OpCount(0.0, 2.0 * moved * item, dtype, "", item)
        return OpCount(0.0, 2.0 * sum(sizes) * item if name == "aten::cat" else 2.0 * big * item, dtype, "", item)
    if formula == "reduction":
        return OpCount(float(big), float(sum(sizes)) * item, dtype, "", item)
    if formula == "bytes":  # normalisation: read the input (and grad), write the output
        return OpCount(float(5 * big), float(sum(sizes) + big) * item, dtype, "", item)
    return OpCount(float(big), float(sum(sizes) + big) * item, dtype, "", item)


#: Backward convolutions whose arguments name (grad_output, input, weight) positions, by op name.
_BACKWARD_ARGS = {"aten::convolution_backward": (0, 1, 2), "aten::cudnn_convolution_backward": (1, 0, 2),
                  "aten::miopen_convolution_backward": (1, 0, 2)}
STRIDE_ASSUMED = "stride 1, same padding (Concrete Inputs not recorded)"


def _outputs_from_backward(models: list, names: list[str], dims: list) -> None:
    """Forward convolutions recorded without stride/padding take their output size from the backward op with the
    same input and weight shapes (its grad_output is the forward's output), when exactly one such size exists."""
    if not any(m is not None and m.assumed == STRIDE_ASSUMED for m in models):
        return
    out: dict[tuple, set] = {}
    for name, d in zip(names, dims):
        idx = _BACKWARD_ARGS.get(name)
        if idx is None or not isinstance(d, list) or len(d) <= max(idx):
            continue
        go, x, w = (d[i] for i in idx)
        if _is_shape(go) and _is_shape(x) and _is_shape(w):
            out.setdefault((tuple(x), tuple(w)), set()).add(tuple(go))
    for i, (m, d) in enumerate(zip(models, dims)):
        if m is None or m.assumed != STRIDE_ASSUMED:
            continue
        x, w = d[0], d[1]
        found = out.get((tuple(x), tuple(w)), set())
        if len(found) != 1:
            continue
        go = next(iter(found))
        models[i] = OpCount(2.0 * x[0] * _numel(list(go[2:])) * _numel(w),
                            float(_numel(x) + _numel(w) + _numel(list(go))) * m.item, m.dtype, "", m.item)


#: ``OpCounts.ops`` without a row, copied for each trace without counted ops (a copy costs a twentieth of
#: building it).
_NO_OPS = pd.DataFrame(columns=["row", "name", "cls", "flops", "bytes", "dtype", "assumed", "rank", "step", "kernel_ns", "kernels", "launches"])


def count_ops(events: pd.DataFrame, kernels: pd.DataFrame) -> OpCounts:
    """Counted ops of ``events`` and, for each row of ``kernels``, the op that launched it."""
    empty = OpCounts(_NO_OPS.copy(), np.full(len(kernels), -1, np.int64), False)
    if "input_shapes" not in events or events.empty:
        return empty
    kind = events["kind"].to_numpy()
    names = events["name"]
    is_op = (kind == "cpu_op") & names.isin(list(OP_FORMULAS)).to_numpy()
    if not is_op.any():
        empty.shapes_recorded = True
        return empty
    pos = np.flatnonzero(is_op)
    cols = {c: events[c].to_numpy()[pos] if c in events else np.full(len(pos), None, dtype=object)
            for c in ("name", "input_shapes", "input_types", "concrete_inputs")}
    key = pd.DataFrame({c: pd.Categorical(v).codes if c != "name" else pd.Categorical(v.astype(str)).codes for c, v in cols.items()})
    group = key.groupby(list(key.columns), sort=False).ngroup().to_numpy()
    first = pd.Series(np.arange(len(pos))).groupby(group).first().to_numpy()
    models: list[OpCount | None] = []
    for i in first:
        models.append(count_op(str(cols["name"][i]), _dims(cols["input_shapes"][i]), _dims(cols["input_types"][i]),
                               _dims(cols["concrete_inputs"][i])))
    _outputs_from_backward(models, [str(cols["name"][i]) for i in first], [_dims(cols["input_shapes"][i]) for i in first])
    ok_group = np.array([m is not None for m in models], dtype=bool)
    ok = ok_group[group]
    pos, group = pos[ok], group[ok]
    if not len(pos):
        out = empty
        out.shapes_recorded = events["input_shapes"].notna().any()
        return out
    flops = np.array([m.flops if m and m.flops is not None else np.nan for m in models])[group]
    nbytes = np.array([m.bytes if m and m.bytes is not None else np.nan for m in models])[group]
    dtype = np.array([(m.dtype or "") if m else "" for m in models], dtype=object)[group]
    assumed = np.array([m.assumed if m else "" for m in models], dtype=object)[group]
    name_codes, name_uniques = pd.factorize(names.to_numpy()[pos])
    name = np.asarray([str(u) for u in name_uniques], dtype=object)[name_codes]
    cls = np.asarray([OP_FORMULAS[str(u)][0] for u in name_uniques], dtype=object)[name_codes]
    start = events["start_ns"].to_numpy()[pos]
    end = start + events["dur_ns"].to_numpy()[pos]
    thread = _thread_key(events, pos)
    matrix = np.isin(cls, MATRIX_CLASSES)
    leaf = np.zeros(len(pos), dtype=bool)
    for fam in (matrix, ~matrix):
        idx = np.flatnonzero(fam)
        leaf[idx] = _leaves(thread[idx], start[idx], end[idx])
    sel = np.flatnonzero(leaf)
    ops = pd.DataFrame({
        "row": pos[sel], "name": name[sel], "cls": cls[sel], "flops": flops[sel], "bytes": nbytes[sel],
        "dtype": dtype[sel], "assumed": assumed[sel], "rank": events["rank"].to_numpy()[pos[sel]],
        "step": events["step"].to_numpy()[pos[sel]], "start_ns": start[sel], "end_ns": end[sel],
    })
    kernel_op = _attribute(events, kernels, ops, thread[sel])
    ops["launches"] = _launch_calls(events, ops)
    hit = kernel_op >= 0
    kdur = kernels["dur_ns"].to_numpy()
    ops["kernel_ns"] = np.bincount(kernel_op[hit], weights=kdur[hit], minlength=len(ops)).astype(np.int64)
    ops["kernels"] = np.bincount(kernel_op[hit], minlength=len(ops)).astype(np.int64)
    counts = pd.Series(ops["assumed"][ops["assumed"] != ""]).value_counts()
    return OpCounts(ops, kernel_op, True, {str(k): int(v) for k, v in counts.items()})


def _launch_calls(events: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Per counted op: the runtime calls (kernel launches, copies) its thread made inside it. An op with none ran
    on the host (a CPU tensor); one with some ran on the GPU even when the trace does not link its kernels to it."""
    out = np.zeros(len(ops), np.int64)
    if not len(ops) or "kind" not in events:
        return out
    rt = np.flatnonzero(events["kind"].to_numpy() == "runtime")
    if not len(rt):
        return out
    rows = ops["row"].to_numpy()
    cols = [np.concatenate([events[c].to_numpy()[rows], events[c].to_numpy()[rt]]).astype(np.int64) for c in ("rank", "pid", "tid")]
    key = pd.factorize(pd.MultiIndex.from_arrays(cols))[0].astype(np.int64)
    op_key, rt_key = key[: len(rows)], key[len(rows):]
    rt_start = events["start_ns"].to_numpy()[rt].astype(np.int64)
    span = int(max(rt_start.max(initial=0), ops["end_ns"].to_numpy().max(initial=0))) + 1
    if span <= 0 or span >= (1 << 62) // max(int(key.max(initial=0)) + 1, 1):
        return out  # times too large to combine with a thread key: no count (never a wrong one)
    combined = np.sort(rt_key * span + rt_start)
    lo = op_key * span + ops["start_ns"].to_numpy().astype(np.int64)
    hi = op_key * span + ops["end_ns"].to_numpy().astype(np.int64)
    return (np.searchsorted(combined, hi, side="left") - np.searchsorted(combined, lo, side="left")).astype(np.int64)


def _thread_key(events: pd.DataFrame, pos: np.ndarray) -> np.ndarray:
    """One integer per (rank, pid, tid) of the rows at ``pos``."""
    cols = [events[c].to_numpy()[pos] for c in ("rank", "pid", "tid")]
    return pd.factorize(pd.MultiIndex.from_arrays(cols))[0]


def _leaves(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Ops with no other op of the same family inside them on their thread (intervals on a thread nest): sorted by
    thread, start and longest first, an op holds another exactly when the next one starts before it ends."""
    order = lexsort_ints((-end, start, thread))
    s, e, t = start[order], end[order], thread[order]
    holds = np.zeros(len(order), dtype=bool)
    holds[:-1] = (t[1:] == t[:-1]) & ((s[1:] < e[:-1]) | (s[1:] == s[:-1]))
    out = np.empty_like(holds)
    out[order] = ~holds
    return out


def _attribute(events: pd.DataFrame, kernels: pd.DataFrame, ops: pd.DataFrame, op_thread: Any) -> np.ndarray:
    """Per kernel: the counted op whose interval (on the launching thread) holds the op or call that launched it."""
    out = np.full(len(kernels), -1, dtype=np.int64)
    # the launching point of each kernel: its External id's op, else its runtime call (both host rows)
    host = events
    kind = host["kind"].to_numpy()
    point = pd.DataFrame({"r": kernels["rank"].to_numpy().astype(np.int64), "p": np.full(len(kernels), -1, np.int64),
                          "t": np.full(len(kernels), -1, np.int64), "s": np.full(len(kernels), -1, np.int64)})
    found = np.zeros(len(kernels), dtype=bool)
    if "external_id" in events:
        cpu = host[(kind == "cpu_op") & (host["external_id"].to_numpy() >= 0)]
        src = cpu[["rank", "external_id", "pid", "tid", "start_ns"]].drop_duplicates(["rank", "external_id"])
        dst = pd.DataFrame({"rank": point["r"], "external_id": kernels["external_id"].to_numpy()})
        m = dst.merge(src, on=["rank", "external_id"], how="left")
        hit = m["start_ns"].notna().to_numpy() & (dst["external_id"].to_numpy() >= 0)
        point.loc[hit, ["p", "t", "s"]] = m.loc[hit, ["pid", "tid", "start_ns"]].to_numpy(dtype=np.int64)
        found = hit
    if not found.all():
        rt = host[(kind == "runtime") & (host["correlation"].to_numpy() >= 0)]
        src = rt[["rank", "pid", "correlation", "tid", "start_ns"]].drop_duplicates(["rank", "pid", "correlation"])
        dst = pd.DataFrame({"rank": point["r"], "pid": kernels["pid"].to_numpy(), "correlation": kernels["correlation"].to_numpy()})
        m = dst.merge(src, on=["rank", "pid", "correlation"], how="left")
        hit = ~found & m["start_ns"].notna().to_numpy()
        point.loc[hit, "p"] = dst.loc[hit, "pid"].to_numpy()
        point.loc[hit, ["t", "s"]] = m.loc[hit, ["tid", "start_ns"]].to_numpy(dtype=np.int64)
        found |= hit
    if not found.any():
        return out
    # ops and launch points on one thread key; counted ops of one family never overlap on a thread, but an
    # elementwise op may sit inside a matrix op: take the innermost (latest-starting) op holding the point.
    ev_r = events["rank"].to_numpy()[ops["row"].to_numpy()]
    ev_p = events["pid"].to_numpy()[ops["row"].to_numpy()]
    ev_t = events["tid"].to_numpy()[ops["row"].to_numpy()]
    keys = pd.MultiIndex.from_arrays([np.concatenate([ev_r, point["r"].to_numpy()[found]]).astype(np.int64),
                                      np.concatenate([ev_p, point["p"].to_numpy()[found]]).astype(np.int64),
                                      np.concatenate([ev_t, point["t"].to_numpy()[found]]).astype(np.int64)])
    codes = pd.factorize(keys)[0].astype(np.int64)
    op_key, pt_key = codes[: len(ops)], codes[len(ops):]
    scale = np.int64(1) << np.int64(62 - max(int(codes.max(initial=0)).bit_length(), 1))
    op_start, op_end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    pt_s = point["s"].to_numpy()[found]
    best = np.full(len(pt_s), -1, dtype=np.int64)
    best_start = np.full(len(pt_s), np.iinfo(np.int64).min)
    fam = np.isin(ops["cls"].to_numpy(), MATRIX_CLASSES)
    span = max(int(max(op_end.max(initial=0), pt_s.max(initial=0))) + 1, 1)
    if span >= scale:
        return out  # times too large to combine with a thread key; no attribution (never a wrong one)
    for f in (fam, ~fam):
        idx = np.flatnonzero(f)
        if not len(idx):
            continue
        ok_key = op_key[idx] * scale + op_start[idx]
        order = np.argsort(ok_key, kind="stable")
        sk = ok_key[order]
        q = pt_key * scale + pt_s
        j = np.searchsorted(sk, q, side="right") - 1
        valid = j >= 0
        cand = np.where(valid, idx[order][np.clip(j, 0, None)], -1)
        inside = valid & (op_key[np.clip(cand, 0, None)] == pt_key) & (pt_s < np.maximum(op_end[np.clip(cand, 0, None)], op_start[np.clip(cand, 0, None)] + 1))
        better = inside & (op_start[np.clip(cand, 0, None)] >= best_start)
        best = np.where(better, cand, best)
        best_start = np.where(better, op_start[np.clip(cand, 0, None)], best_start)
    out[np.flatnonzero(found)] = best
    return out
