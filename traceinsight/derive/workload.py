"""The workload of a trace: what one step does, in terms two runs of the same model share.

Two traces are comparable when they run the same work: the same framework ops with the same input shapes in a
step. Kernel names are not that: the same ``aten::linear`` runs ``ampere_sgemm_*`` on an NVIDIA GPU and
``Cijk_*`` on an AMD one. So every GPU row is tied to the *top-level* framework op that launched it (the outermost
``cpu_op`` on the launching thread covering the launch: ``aten::linear``, not the vendor's inner
``aten::addmm``/``aten::cudnn_convolution``), and the workload lists, per steady-state step:

* ``steps``: every step marker per rank, its duration, and whether it is warm-up (the ledger's first-step rule);
* ``ops``: the top-level framework ops, count and GPU time per step;
* ``shapes``: the same keyed by input shapes, with the batch size read off them (``batch``);
* ``kernels``: every GPU row name with its class (``traceinsight.vocab.kernels``), its top-level op, and count/time;
* ``repeats``: regions the program runs again and again (compiled regions, graph replays, repeated user ranges)
  with each occurrence's time: the samples a diff compares when step markers are absent or too few.

The JSON report carries this block (docs/json-report.md, ``workload``) so ``traceinsight diff`` reads a saved
report exactly as it reads a trace.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from traceinsight.vocab.kernels import classify_names
from traceinsight.vocab.intervals import lexsort_ints, merge_intervals, run_cummax
from traceinsight.vocab.masks import codes_in, distinct_texts, kind_mask, name_mask
from traceinsight.vocab.patterns import DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, RUNTIME_INTERNAL

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.views import Views

#: Rows kept per table (the largest by time / count): a report stays small on a trace with 10^5 distinct shapes.
MAX_KERNELS = 1000
MAX_OPS = 1000
MAX_SHAPES = 2000

_FIRST_DIMS = re.compile(r"^\s*\[\s*\[\s*(\d+)\s*,")


def of(views: "Views", warmup: "pd.DataFrame | None") -> dict[str, Any]:
    """The workload block of the JSON report (see the module docstring), from the views and the time ledger's
    warm-up regions (``Ledger.warmup``: its warm-up steps are left out of the per-step figures)."""
    steps = _steps(views, warmup)
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
        "repeats": repeats(views),
    }


def _steps(views: "Views", w: "pd.DataFrame | None") -> list[dict[str, Any]]:
    st = views.steps
    if st.empty:
        return []
    warm = set()
    if w is not None and not w.empty:
        firsts = w[w["reason"].astype(str).str.startswith(("warm-up step", "first step"))]
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


def _categorical(col: pd.Series, pos: np.ndarray) -> pd.Categorical:
    """``col``'s rows at ``pos`` as a categorical, on the column's own codes when it is one (no factorizing)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return pd.Categorical.from_codes(col.cat.codes.to_numpy()[pos], dtype=col.dtype)
    return pd.Categorical(col.take(pos).astype(object).fillna("").astype(str))


def _host_ops(views) -> pd.DataFrame:
    """Top-level framework ops (outermost ``cpu_op`` per thread): rank, tid, start, end, step, and the name and
    input shapes as categoricals (a 10^6-op trace holds a few hundred distinct names: counted on codes).

    Found on arrays: ops sorted by (rank, thread, start, longest first); an op is top-level when it starts at or
    after the running end of the ops before it on its thread. Only those rows become a frame."""
    host = views.host_events
    pos = np.flatnonzero(kind_mask(host["kind"], ("cpu_op",)))
    rank, tid = host["rank"].to_numpy()[pos].astype(np.int64), host["tid"].to_numpy()[pos].astype(np.int64)
    start = host["start_ns"].to_numpy()[pos].astype(np.int64)
    end = start + host["dur_ns"].to_numpy()[pos].astype(np.int64)
    # one rank (every rank's own trace): the rank key sorts nothing, and a sort key less is a pass less
    order = lexsort_ints((-end, start, tid) if len(rank) and rank.min() == rank.max() else (-end, start, tid, rank))
    rank, tid, start, end = rank[order], tid[order], start[order], end[order]
    if len(order):
        new = np.r_[True, (rank[1:] != rank[:-1]) | (tid[1:] != tid[:-1])]
        reach = run_cummax(end, new)  # the latest end so far on each thread
        top = new.copy()
        top[1:] |= start[1:] >= reach[:-1]
    else:
        top = np.zeros(0, dtype=bool)
    top &= ~_inside_data_waits(host, rank, tid, start, end)
    keep = order[top]
    rows = pos[keep]
    if "input_shapes" in host:
        shapes = _categorical(host["input_shapes"], rows)
    else:  # no shapes recorded: every op's is "" (one category, made once, not a column of "" per host row)
        shapes = _categorical(pd.Series([""], dtype=object), np.zeros(min(len(rows), 1), np.intp))
        if len(rows):
            shapes = pd.Categorical.from_codes(np.zeros(len(rows), np.int8), dtype=shapes.dtype)
    return pd.DataFrame({
        "rank": rank[top], "tid": tid[top], "start": start[top], "end": end[top],
        "step": host["step"].to_numpy()[rows].astype(np.int64),
        "name": _categorical(host["name"], rows),
        "shapes": shapes,
    })


def _inside_data_waits(host: pd.DataFrame, rank: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per op (the arrays): does it run inside a data-loading range on its thread (``enumerate(DataLoader)#...``)?
    Those ops build the batch (a dataset's ``__getitem__``, the collate's ``stack``), not the model: a loader moved
    to worker processes takes them out of the trace, and the workload must stay the same workload."""
    out = np.zeros(len(start), dtype=bool)
    if not len(start):
        return out
    m = kind_mask(host["kind"], DATA_WAIT_KINDS) & name_mask(host["name"], DATA_WAIT_PRIMARY, case=True)
    if not m.any():
        return out
    w_rank, w_tid = host["rank"].to_numpy()[m].astype(np.int64), host["tid"].to_numpy()[m].astype(np.int64)
    w_start = host["start_ns"].to_numpy()[m].astype(np.int64)
    w_end = w_start + host["dur_ns"].to_numpy()[m].astype(np.int64)
    for r, t in set(zip(w_rank.tolist(), w_tid.tolist())):
        sel = (w_rank == r) & (w_tid == t)
        ms, me = merge_intervals(w_start[sel], w_end[sel])
        on = np.flatnonzero((rank == r) & (tid == t))
        j = np.searchsorted(ms, start[on], side="right") - 1
        out[on] = (j >= 0) & (end[on] <= me[np.clip(j, 0, None)])
    return out


def _top_level_op(views, ops: pd.DataFrame) -> pd.Series:
    """Per GPU row label (``events`` index): the top-level framework op (``ops``) whose launch made it, as a
    categorical (missing where the launch lies outside every op)."""
    ln = views.launches
    if ln.empty or ops.empty:
        return pd.Series(dtype=object)
    codes = ops["name"].cat.codes.to_numpy()
    out = np.full(len(ln), -1, dtype=codes.dtype)
    l_rank, l_tid, l_t = ln["rank"].to_numpy().astype(np.int64), ln["tid"].to_numpy().astype(np.int64), ln["launch_start_ns"].to_numpy()
    r, t = ops["rank"].to_numpy(), ops["tid"].to_numpy()
    cut = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (t[1:] != t[:-1]), True])
    s_all, e_all = ops["start"].to_numpy(), ops["end"].to_numpy()
    for a, b in zip(cut[:-1].tolist(), cut[1:].tolist()):
        m = np.flatnonzero((l_rank == r[a]) & (l_tid == t[a]))
        if not len(m):
            continue
        s, e = s_all[a:b], e_all[a:b]
        i = np.searchsorted(s, l_t[m], side="right") - 1
        ok = (i >= 0) & (e[np.maximum(i, 0)] > l_t[m])
        out[m[ok]] = codes[a:b][i[ok]]
    return pd.Series(pd.Categorical.from_codes(out, categories=ops["name"].cat.categories), index=ln["gpu_idx"].to_numpy())


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
    kinds = gpu["kind"].iloc[np.flatnonzero(ok)[first[present]]].to_numpy()  # the few first rows' kinds, not every row's
    cls = classify_names(pd.Series(names.cat.categories[present].astype(str)), pd.Series(kinds).astype(str))
    # the op that launched most of a name's time names it (a kernel several ops share goes to the largest)
    op_name = np.full(k, "", dtype=object)
    if len(op_of):
        oc = op_of.reindex(gpu.index).cat.codes.to_numpy()[ok]
        linked = oc >= 0
        if linked.any():
            best_c, best_o = _largest_pair(codes[linked], oc[linked].astype(np.int64), dur[linked], k, len(op_of.cat.categories))
            op_name[best_c] = np.asarray(op_of.cat.categories.astype(str), dtype=object)[best_o]
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


def _largest_pair(c: np.ndarray, o: np.ndarray, d: np.ndarray, n_c: int, n_o: int) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct ``c``: the ``o`` whose rows' ``d`` sum most (the first in (c, o) order at a tie), as
    ``groupby(["c", "o"]).sum()`` sorted by the sum, descending and stable, then ``drop_duplicates("c")`` give it.

    The pairs are counted in one table over (c, o) when it is small (a few thousand names by a few hundred ops),
    the sums by ``np.bincount``: the durations are whole numbers, so every order of adding them gives the same
    float."""
    if n_c * n_o <= (1 << 24):
        key = c * n_o + o
        size = n_c * n_o
        keys = np.flatnonzero(np.bincount(key, minlength=size))  # the pairs present, in (c, o) order
        sums = np.bincount(key, weights=d, minlength=size)[keys]
        pc, po = keys // n_o, keys % n_o
    else:
        g = pd.DataFrame({"c": c, "o": o, "d": d}).groupby(["c", "o"], sort=True)["d"].sum().reset_index()
        pc, po, sums = g["c"].to_numpy(), g["o"].to_numpy(), g["d"].to_numpy()
    order = np.argsort(-sums, kind="stable")
    _, first = np.unique(pc[order], return_index=True)  # each c's first row by descending sum
    at = order[first]
    return pc[at], po[at]


def _steady_ops(ops: pd.DataFrame, steady: set) -> np.ndarray:
    return _in_steps(ops["rank"].to_numpy(), ops["step"].to_numpy(), steady) if steady else np.ones(len(ops), bool)


def _ops(ops: pd.DataFrame, gpu: pd.DataFrame, op_of: pd.Series, in_steady: np.ndarray, steady: set, n: int) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    cats = ops["name"].cat.categories
    k = len(cats)
    counts = np.bincount(ops["name"].cat.codes.to_numpy()[_steady_ops(ops, steady)], minlength=k)
    gpu_ns = np.zeros(k)
    if len(op_of):
        oc = op_of.reindex(gpu.index).cat.codes.to_numpy()
        keep = in_steady & (oc >= 0)
        gpu_ns = np.bincount(oc[keep], weights=gpu["dur_ns"].to_numpy()[keep].astype(np.float64), minlength=k)
    present = np.flatnonzero((counts > 0) | (gpu_ns > 0))
    names = cats[present].astype(str).to_numpy()
    order = np.lexsort((names, -counts[present], -gpu_ns[present]))[:MAX_OPS]
    return [{"name": str(names[i]), "per_step": round(int(counts[present[i]]) / n, 4), "gpu_ns_per_step": round(float(gpu_ns[present[i]]) / n, 1)} for i in order.tolist()]


def _shapes(ops: pd.DataFrame, steady: set, n: int) -> list[dict[str, Any]]:
    if ops.empty:
        return []
    m = _steady_ops(ops, steady)
    nc, sc = ops["name"].cat.codes.to_numpy()[m].astype(np.int64), ops["shapes"].cat.codes.to_numpy()[m].astype(np.int64)
    width = len(ops["shapes"].cat.categories) + 1
    keys, counts = np.unique(nc * width + (sc + 1), return_counts=True)
    top = np.argsort(-counts, kind="stable")[:MAX_SHAPES]
    ncat, scat = ops["name"].cat.categories, ops["shapes"].cat.categories
    out = []
    for i in top.tolist():
        name, shape = divmod(int(keys[i]), width)
        out.append({"name": str(ncat[name]), "shapes": "" if shape == 0 else str(scat[shape - 1]), "per_step": round(int(counts[i]) / n, 4)})
    return out


def batch_size(ops: pd.DataFrame, steady: set) -> int | None:
    """The batch size the framework ops show: the most common leading dimension of the first input of top-level
    ops whose first input has two or more dimensions (activations lead with the batch; weights come later)."""
    if ops.empty:
        return None
    sc = ops["shapes"].cat.codes.to_numpy()[_steady_ops(ops, steady)]
    cats = ops["shapes"].cat.categories
    weight = np.bincount(sc[sc >= 0], minlength=len(cats))
    lead = pd.Series(cats.astype(str), dtype=object).str.extract(_FIRST_DIMS.pattern, expand=False)
    hit = lead.notna().to_numpy() & (weight > 0)
    if not hit.any():
        return None
    per_dim = pd.Series(weight[hit]).groupby(lead[hit].astype(int).to_numpy()).sum().sort_index()
    value = int(per_dim.idxmax())
    count = int(per_dim.max())
    return value if value > 1 and count >= 2 else None


#: Repeated regions, in the order a diff prefers them as samples: (kind, host-event kinds, name pattern). A
#: compiled region (``torch.compile``'s ``Torch-Compiled Region``, its autograd ``CompiledFunction``, Inductor's
#: one per call: a denoising iteration, a decode step) is one model call (Inductor's ``## Call CompiledFxGraph <hash>
#: ##`` is one graph of it, forward or backward: a user range); a
#: CUDA/HIP graph replay is one captured call; a user range (``record_function``, NVTX) is whatever the user marked,
#: which a runtime's own ranges never are (``patterns.RUNTIME_INTERNAL``: TF's ``ExecutorState::Process`` runs per batch of
#: graph nodes on the pool's threads, its runs overlapping each other: their summed GPU extents passed for most of a
#: Keras step while the median run was 0.7 % of it).
REPEAT_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("compiled_region", ("cpu_op", "annotation", "user_annotation"), r"^(?:Torch-Compiled Region|CompiledFunction)"),
    ("graph_replay", ("runtime",), r"^(?:cuda|hip)GraphLaunch"),
    ("user_range", ("annotation", "user_annotation"), rf"^(?!{RUNTIME_INTERNAL})."),
)
#: Fewest occurrences that make a repeated region worth listing, names kept per kind, and occurrences kept per name.
MIN_REPEATS = 2
MAX_REPEAT_NAMES = 3
MAX_REPEAT_SAMPLES = 5000
#: The frame/recompile counter of ``Torch-Compiled Region: 0/0``, which differs between two runs of one program:
#: left out of the name a diff matches by.
_REPEAT_NOISE = re.compile(r"(?<=Region): \d+/\d+")


def repeats(views) -> list[dict[str, Any]]:
    """Repeated regions (``REPEAT_KINDS``), each occurrence timed as the GPU extent of the work launched inside
    it (first kernel start to last kernel end: what the region costs the GPU, without the queueing behind the
    previous call that its host start would add), or its host duration when it launched none. Occurrences nested
    in an occurrence of the same name are the same call and are left out; a name a kind before took is not listed
    again (Inductor's graph call is both a compiled region and a user range). Step markers are not repeats."""
    host = views.host_events
    if host.empty:
        return []
    launches = _launch_arrays(views.launches)
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    for kind, kinds, pattern in REPEAT_KINDS:
        pos = np.flatnonzero(kind_mask(host["kind"], kinds))
        if not len(pos):
            continue
        # tested once per distinct name (the name column is categorical: a few hundred names over 10^6 rows)
        codes, texts = distinct_texts(host["name"], pos)
        rx = re.compile(pattern)
        hit = np.fromiter((rx.search(t) is not None and not t.startswith("ProfilerStep") for t in texts), bool, len(texts))
        keep_rows = codes_in(codes, hit)
        pos, codes = pos[keep_rows], codes[keep_rows]
        if not len(pos):
            continue
        # the names a diff matches by, per distinct text, then per row through the text's code
        clean = np.array([_REPEAT_NOISE.sub("", t) for t in texts], dtype=object).astype(str)
        used = np.flatnonzero(hit)
        uniq, inv_used = np.unique(clean[used], return_inverse=True)
        by_text = np.full(len(texts), -1, np.int64)
        by_text[used] = inv_used.ravel()
        inv = by_text[codes]
        counts = np.bincount(inv, minlength=len(uniq))
        durs = host["dur_ns"].to_numpy()[pos].astype(np.float64)
        total = np.bincount(inv, weights=durs, minlength=len(uniq))
        keep = [i for i in np.argsort(-total, kind="stable").tolist() if counts[i] >= MIN_REPEATS and str(uniq[i]) not in taken][:MAX_REPEAT_NAMES]
        for i in keep:
            times = _occurrence_times(host, launches, pos[inv == i])
            if len(times) >= MIN_REPEATS:
                taken.add(str(uniq[i]))
                out.append({"kind": kind, "name": str(uniq[i]), "count": int(len(times)), "dur_ns": [int(t) for t in times[:MAX_REPEAT_SAMPLES]]})
    return out


def _launch_arrays(ln: pd.DataFrame) -> tuple[np.ndarray, ...] | None:
    """The launches as (launch start, rank, thread, GPU start, GPU end) arrays sorted by launch start (read once
    for every repeated name; a name's occurrences then look only at the launches inside their span). None
    without launches."""
    if ln.empty:
        return None
    l_t = ln["launch_start_ns"].to_numpy().astype(np.int64, copy=False)
    order = np.argsort(l_t, kind="stable")
    g_s = ln["gpu_start_ns"].to_numpy().astype(np.int64, copy=False)[order]
    return (l_t[order], ln["rank"].to_numpy().astype(np.int64, copy=False)[order], ln["tid"].to_numpy().astype(np.int64, copy=False)[order],
            g_s, g_s + ln["gpu_dur_ns"].to_numpy().astype(np.int64, copy=False)[order])


def _occurrence_times(host: pd.DataFrame, launches: tuple[np.ndarray, ...] | None, sel: np.ndarray) -> np.ndarray:
    rank = host["rank"].to_numpy()[sel].astype(np.int64)
    tid = host["tid"].to_numpy()[sel].astype(np.int64)
    start = host["start_ns"].to_numpy()[sel].astype(np.int64)
    end = start + host["dur_ns"].to_numpy()[sel].astype(np.int64)
    order = lexsort_ints((-end, start, tid, rank))
    rank, tid, start, end = rank[order], tid[order], start[order], end[order]
    new = np.r_[True, (rank[1:] != rank[:-1]) | (tid[1:] != tid[:-1])]
    reach = run_cummax(end, new)
    outer = new.copy()
    outer[1:] |= start[1:] >= reach[:-1]
    rank, tid, start, end = rank[outer], tid[outer], start[outer], end[outer]
    first = np.full(len(start), np.iinfo(np.int64).max)
    last = np.full(len(start), np.iinfo(np.int64).min)
    if launches is not None and len(start):
        # a launch inside an occurrence starts at or after the first occurrence's start and before the latest end
        l_all = launches[0]
        lo, hi = np.searchsorted(l_all, [start.min(), end.max()], side="left").tolist()
        l_t, l_rank, l_tid, g_s, g_e = (a[lo:hi] for a in launches)
        for r, t in set(zip(rank.tolist(), tid.tolist())):
            occ = np.flatnonzero((rank == r) & (tid == t))
            m = np.flatnonzero((l_rank == r) & (l_tid == t))
            if not len(m):
                continue
            # a thread's outer occurrences are disjoint and in start order, its launches in start order: each
            # occurrence's launches are one run of them, found by two searches per occurrence (not one per launch)
            lt = l_t[m]
            a = np.searchsorted(lt, start[occ], side="left")
            b = np.searchsorted(lt, end[occ], side="left")
            has = np.flatnonzero(b > a)
            if not len(has):
                continue
            # the runs' bounds interleaved (a0, b0, a1, b1, ...: non-decreasing); the reductions over [a_k, b_k) are
            # the even ones, the odd ones (between runs) are dropped; one element past the end keeps b_k in range
            at = np.empty(2 * len(has), np.intp)
            at[0::2], at[1::2] = a[has], b[has]
            occ = occ[has]
            first[occ] = np.minimum.reduceat(np.r_[g_s[m], 0], at)[0::2]
            last[occ] = np.maximum.reduceat(np.r_[g_e[m], 0], at)[0::2]
    launched = last > np.iinfo(np.int64).min
    times = np.where(launched, last - first, end - start)
    return times[np.argsort(start, kind="stable")]
