"""The workload of a trace: what one step does, in terms two runs of the same model share.

Two traces are comparable when they run the same work: the same framework ops with the same input shapes in a
step. Kernel names are not that: the same ``aten::linear`` runs ``ampere_sgemm_*`` on an NVIDIA GPU and
``Cijk_*`` on an AMD one. So every GPU row is tied to the *top-level* framework op that launched it (the outermost
``cpu_op`` on the launching thread covering the launch: ``aten::linear``, not the vendor's inner
``aten::addmm``/``aten::cudnn_convolution``), and the workload lists, per steady-state step:

* ``steps``: every step marker per rank, its duration, and whether it is warm-up (the ledger's first-step rule);
* ``ops``: the top-level framework ops, count and GPU time per step;
* ``shapes``: the same keyed by input shapes, with the batch size read off them (``batch``);
* ``kernels``: every GPU row name with its class (``traceinsight.kernels``), its top-level op, and count/time.

The JSON report carries this block (docs/json-report.md, ``workload``) so ``traceinsight diff`` reads a saved
report exactly as it reads a trace.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .kernels import classify_names
from .views import kind_mask

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Analysis

#: Rows kept per table (the largest by time / count): a report stays small on a trace with 10^5 distinct shapes.
MAX_KERNELS = 1000
MAX_OPS = 1000
MAX_SHAPES = 2000

_FIRST_DIMS = re.compile(r"^\s*\[\s*\[\s*(\d+)\s*,")
_LEAD = re.compile(r"^(\s*\[\s*\[\s*)(\d+)(\s*,)")


def of(analysis: "Analysis") -> dict[str, Any]:
    """The workload block of the JSON report (see the module docstring)."""
    views = analysis.views
    steps = _steps(analysis)
    steady = {(r["rank"], r["step"]) for r in steps if not r["warmup"]}
    n = max(len(steady), 1)
    ops_df = _host_ops(views)
    op_of = _top_level_op(views, ops_df)
    gpu = views.gpu_activity
    in_steady = _in_steps(gpu["rank"].to_numpy(), gpu["step"].to_numpy(), steady) if steady else np.ones(len(gpu), bool)
    return {
        "steps": steps,
        "steady_steps": len(steady),
        "kernels": _kernels(gpu, op_of, in_steady, n),
        "ops": _ops(ops_df, gpu, op_of, in_steady, steady, n),
        "shapes": _shapes(ops_df, steady, n),
        "batch": batch_size(ops_df, steady),
    }


def _steps(analysis: "Analysis") -> list[dict[str, Any]]:
    st = analysis.views.steps
    if st.empty:
        return []
    warm = set()
    ledger = analysis.ledger if analysis.ledger is not None else analysis.views.ledger
    w = getattr(ledger, "warmup", None)
    if isinstance(w, pd.DataFrame) and not w.empty:
        firsts = w[w["reason"].astype(str).str.startswith("first step")]
        warm = set(zip(firsts["rank"].astype(int).tolist(), firsts["start_ns"].astype(int).tolist()))
    return [
        {"rank": int(r), "step": int(s), "dur_ns": int(d), "warmup": (int(r), int(t)) in warm}
        for r, s, d, t in zip(st["rank"].tolist(), st["step"].tolist(), st["dur_ns"].tolist(), st["start_ns"].tolist())
    ]


def _in_steps(rank: np.ndarray, step: np.ndarray, steady: set[tuple[int, int]]) -> np.ndarray:
    keys = np.array(sorted(steady), dtype=np.int64).reshape(-1, 2)
    big = np.int64(1 << 32)
    want = keys[:, 0] * big + keys[:, 1]
    return np.isin(rank.astype(np.int64) * big + step.astype(np.int64), want)


def _host_ops(views) -> pd.DataFrame:
    """Top-level framework ops (outermost ``cpu_op`` per thread): rank, tid, start, end, name, shapes, step."""
    host = views.host_events
    pos = np.flatnonzero(kind_mask(host["kind"], ("cpu_op",)))
    cols = {
        "rank": host["rank"].to_numpy()[pos].astype(np.int64),
        "tid": host["tid"].to_numpy()[pos].astype(np.int64),
        "start": host["start_ns"].to_numpy()[pos].astype(np.int64),
        "step": host["step"].to_numpy()[pos].astype(np.int64),
        "name": host["name"].take(pos).astype(str).to_numpy(),
    }
    cols["end"] = cols["start"] + host["dur_ns"].to_numpy()[pos].astype(np.int64)
    if "input_shapes" in host:
        cols["shapes"] = host["input_shapes"].take(pos).astype(object).fillna("").astype(str).to_numpy()
    else:
        cols["shapes"] = np.full(len(pos), "", dtype=object)
    df = pd.DataFrame(cols).sort_values(["rank", "tid", "start", "end"], ascending=[True, True, True, False], kind="stable")
    if df.empty:
        return df.assign(top=np.zeros(0, bool))
    same = (df["rank"].to_numpy()[1:] == df["rank"].to_numpy()[:-1]) & (df["tid"].to_numpy()[1:] == df["tid"].to_numpy()[:-1])
    grp = np.r_[0, np.cumsum(~same)]
    reach = pd.Series(df["end"].to_numpy()).groupby(grp).cummax().to_numpy()
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    top = (df["start"].to_numpy() >= prev) | np.r_[True, ~same]
    return df[top].reset_index(drop=True)


def _top_level_op(views, ops: pd.DataFrame) -> pd.Series:
    """Per GPU row label (``events`` index): the name of the top-level framework op (``ops``) whose launch made it."""
    ln = views.launches
    if ln.empty or ops.empty:
        return pd.Series(dtype=object)
    out = np.full(len(ln), None, dtype=object)
    l_rank, l_tid, l_t = ln["rank"].to_numpy().astype(np.int64), ln["tid"].to_numpy().astype(np.int64), ln["launch_start_ns"].to_numpy()
    for (r, t), g in ops.groupby(["rank", "tid"], sort=False):
        m = np.flatnonzero((l_rank == r) & (l_tid == t))
        if not len(m):
            continue
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        i = np.searchsorted(s, l_t[m], side="right") - 1
        ok = (i >= 0) & (e[np.maximum(i, 0)] > l_t[m])
        out[m[ok]] = g["name"].to_numpy()[i[ok]]
    return pd.Series(out, index=ln["gpu_idx"].to_numpy())


def _kernels(gpu: pd.DataFrame, op_of: pd.Series, in_steady: np.ndarray, n: int) -> list[dict[str, Any]]:
    """Per GPU row name, counted on the name's category codes (one pass, no per-row strings)."""
    if gpu.empty:
        return []
    names = gpu["name"] if isinstance(gpu["name"].dtype, pd.CategoricalDtype) else gpu["name"].astype("category")
    codes = names.cat.codes.to_numpy().astype(np.int64)
    ok = codes >= 0
    codes, dur, steady = codes[ok], gpu["dur_ns"].to_numpy()[ok].astype(np.float64), in_steady[ok]
    k = len(names.cat.categories)
    count = np.bincount(codes, minlength=k)
    total = np.bincount(codes, weights=dur, minlength=k)
    s_count = np.bincount(codes, weights=steady.astype(np.float64), minlength=k)
    s_ns = np.bincount(codes, weights=np.where(steady, dur, 0.0), minlength=k)
    present = np.flatnonzero(count)
    first = np.full(k, -1, np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # the first row of each name
    kinds = gpu["kind"].to_numpy()[ok][first[present]]
    cls = classify_names(pd.Series(names.cat.categories[present].astype(str)), pd.Series(kinds).astype(str))
    # the op that launched most of a name's time names it (a kernel several ops share goes to the largest)
    op_name = np.full(k, "", dtype=object)
    if len(op_of):
        op = op_of.reindex(gpu.index).to_numpy()[ok]
        linked = pd.notna(op)
        if linked.any():
            op_codes, op_names = pd.factorize(op[linked])
            g = pd.DataFrame({"c": codes[linked], "o": op_codes, "d": dur[linked]}).groupby(["c", "o"], sort=False)["d"].sum().reset_index()
            best = g.sort_values("d", ascending=False, kind="stable").drop_duplicates("c")
            op_name[best["c"].to_numpy()] = np.asarray(op_names, dtype=object)[best["o"].to_numpy()]
    order = present[np.lexsort((-count[present], -total[present]))][:MAX_KERNELS]
    where = {c: i for i, c in enumerate(present.tolist())}
    cats = names.cat.categories
    return [
        {
            "name": str(cats[c]),
            "class": str(cls[where[c]]),
            "op": str(op_name[c]),
            "count": int(count[c]),
            "total_ns": int(total[c]),
            "per_step": round(float(s_count[c]) / n, 4),
            "ns_per_step": round(float(s_ns[c]) / n, 1),
        }
        for c in order.tolist()
    ]


def _ops(ops: pd.DataFrame, gpu: pd.DataFrame, op_of: pd.Series, in_steady: np.ndarray, steady: set, n: int) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    m = _in_steps(ops["rank"].to_numpy(), ops["step"].to_numpy(), steady) if steady else np.ones(len(ops), bool)
    counts = pd.Series(ops["name"].to_numpy()[m]).value_counts().to_dict()
    gpu_ns: dict[str, float] = {}
    if len(op_of):
        op_s = op_of.reindex(gpu.index)
        op = op_s.to_numpy()
        keep = in_steady & op_s.notna().to_numpy()
        if keep.any():
            s = pd.Series(gpu["dur_ns"].to_numpy()[keep]).groupby(op[keep].astype(str)).sum()
            gpu_ns = {str(k): float(v) for k, v in s.items()}
    names = sorted(set(counts) | set(gpu_ns), key=lambda k: (-gpu_ns.get(k, 0.0), -counts.get(k, 0), k))[:MAX_OPS]
    return [{"name": k, "per_step": round(counts.get(k, 0) / n, 4), "gpu_ns_per_step": round(gpu_ns.get(k, 0.0) / n, 1)} for k in names]


def _shapes(ops: pd.DataFrame, steady: set, n: int) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    m = _in_steps(ops["rank"].to_numpy(), ops["step"].to_numpy(), steady) if steady else np.ones(len(ops), bool)
    c = ops[m].groupby(["name", "shapes"], sort=False).size().sort_values(ascending=False, kind="stable").head(MAX_SHAPES)
    return [{"name": str(k), "shapes": str(s), "per_step": round(int(v) / n, 4)} for (k, s), v in c.items()]


def batch_size(ops: pd.DataFrame, steady: set) -> int | None:
    """The batch size the framework ops show: the most common leading dimension of the first input of top-level
    ops whose first input has two or more dimensions (activations lead with the batch; weights come later)."""
    if ops.empty:
        return None
    m = _in_steps(ops["rank"].to_numpy(), ops["step"].to_numpy(), steady) if steady else np.ones(len(ops), bool)
    lead = pd.Series(ops["shapes"].to_numpy()[m], dtype=object).str.extract(_FIRST_DIMS.pattern, expand=False).dropna()
    if lead.empty:
        return None
    counts = lead.astype(int).value_counts()
    value, count = int(counts.index[0]), int(counts.iloc[0])
    return value if value > 1 and count >= 2 else None


def with_batch(shapes: str, batch: int | None) -> str:
    """``shapes`` with its first input's leading dimension written ``B`` when it is the batch size."""
    if not batch or not shapes:
        return shapes
    hit = _LEAD.match(shapes)
    if hit and int(hit.group(2)) == batch:
        return shapes[: hit.start(2)] + "B" + shapes[hit.end(2):]
    return shapes
