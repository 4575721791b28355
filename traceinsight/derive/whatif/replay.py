"""The replay: new start and end of every task of the window (native pass or ``_replay_py``), and step times
from replayed times."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab import native
from traceinsight.derive.whatif.graph import BLOCKING, GPU, Graph


def replay(g: Graph, out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """New (start, end) of every node; nodes outside the window keep their original times.

    ``out``: two int64 arrays of the graph's length to write them into (a replay's arrays reused for the next,
    instead of two fresh ones). The pass runs in the optional C extension (``traceinsight.derive._replay``) where it is
    built and not switched off (``TRACEINSIGHT_PURE_PYTHON``); ``_replay_py`` is the reference it must match
    number for number.
    """
    if out is None:
        ns, ne = g.start.copy(), g.end.copy()
    else:
        ns, ne = out
        np.copyto(ns, g.start)
        np.copyto(ne, g.end)
    ends = -1 - g.window[g.window < 0]
    waits = [g.waits[b] for b in ends.tolist()]
    end_ptr = np.zeros(len(waits) + 1, np.int64)
    end_ptr[1:] = np.cumsum([len(w) for w in waits], dtype=np.int64)
    end_waits = np.fromiter((t for w in waits for t in w), np.int64, int(end_ptr[-1]))
    mod = native.scanner("whatif")
    if mod is not None:
        i64 = lambda a: np.ascontiguousarray(a, np.int64)  # noqa: E731
        mod.replay(i64(g.window), i64(g.ntype), i64(g.prev), i64(g.prev_lat), i64(g.cross), i64(g.cross_lat),
                   i64(g.launch), i64(g.launch_lat), i64(g.dur), i64(g.own), np.ascontiguousarray(g.wait_on, np.bool_),
                   end_ptr, end_waits, ns, ne)
    else:
        _replay_py(g, ns, ne, end_ptr, end_waits)
    return ns, ne


def _replay_py(g: Graph, ns: np.ndarray, ne: np.ndarray, end_ptr: np.ndarray, end_waits: np.ndarray) -> None:
    """The replay pass in Python, on the nodes the window touches only (its tasks and their predecessors)."""
    w = g.window
    ids = np.where(w >= 0, w, -1 - w)
    refs = [ids, g.prev[ids], g.cross[ids], g.launch[ids], end_waits]
    touched = np.unique(np.concatenate(refs))
    touched = touched[touched >= 0]
    loc = lambda a: np.where(a >= 0, np.searchsorted(touched, a), -1).tolist()  # noqa: E731
    s_l, e_l = ns[touched].tolist(), ne[touched].tolist()
    node = loc(ids)
    is_end = (w < 0).tolist()
    prev, cross, launch = loc(g.prev[ids]), loc(g.cross[ids]), loc(g.launch[ids])
    plat, clat, llat = g.prev_lat[ids].tolist(), g.cross_lat[ids].tolist(), g.launch_lat[ids].tolist()
    dur, own = g.dur[ids].tolist(), g.own[ids].tolist()
    blocking = (g.ntype[ids] == BLOCKING).tolist()
    wait_on = g.wait_on[ids].tolist()
    waits = loc(end_waits)
    ptr = end_ptr.tolist()
    k_end = 0
    for i, end, p, pl, c, cl, la, ll, d, o, blk, won in zip(
        node, is_end, prev, plat, cross, clat, launch, llat, dur, own, blocking, wait_on
    ):
        if end:  # a blocking call returns
            e = s_l[i] + o
            if won:
                for t in waits[ptr[k_end]: ptr[k_end + 1]]:
                    if e_l[t] + o > e:
                        e = e_l[t] + o
            k_end += 1
            e_l[i] = e
            continue
        t = None
        if p >= 0:
            t = e_l[p] + pl
        if c >= 0:
            x = e_l[c] + cl
            t = x if t is None or x > t else t
        if la >= 0:
            x = s_l[la] + ll
            t = x if t is None or x > t else t
        if t is None:
            t = s_l[i]
        s_l[i] = t
        if not blk:
            e_l[i] = t + d
    ns[touched] = s_l
    ne[touched] = e_l


def _step_buckets(g: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GPU tasks launched up to the last step's marker end, grouped by the step that launched them (0: before
    the first step, k: step k-1 from its marker start to the next one's): (tasks, grouped; each group's step; each
    group's first position). The same for every replay of a graph with these steps and this structure: kept in
    ``g.defaults`` (shared by copies) and rebuilt when either is replaced."""
    st = g.steps
    key = (st, g.ntype, g.launch, g.start)
    cached = g.defaults.get("_step_buckets")
    if cached is not None and all(a is b for a, b in zip(cached[0], key)):
        return cached[1]
    first, last = _step_nodes(g)
    t0 = g.start[first]
    gl = np.flatnonzero((g.ntype == GPU) & (g.launch >= 0))
    lt = g.start[g.launch[gl]]
    cuts = np.r_[t0, g.start[int(last[-1])] + 1]
    # GPU work launched before the first step, then in [t0_k, t0_k+1), the last step up to its marker end
    which = np.searchsorted(cuts, lt, side="right") - 1  # -1: before the first step; len(st): after the last
    sel = which < len(st)
    gl, bucket = gl[sel], which[sel] + 1
    o = np.argsort(bucket, kind="stable")  # launch order is step order but for a few tasks: nearly sorted
    gl, bucket = gl[o], bucket[o]
    heads = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]]) if len(bucket) else np.zeros(0, np.intp)
    out = (gl, bucket[heads], heads)
    g.defaults["_step_buckets"] = (key, out)
    return out


def step_columns(g: Graph, steps: pd.DataFrame | None = None) -> dict[str, np.ndarray]:
    """The columns of ``steps`` (default ``g.steps``) as arrays, kept in ``g.defaults`` for that frame (copies
    carry it; a transform that replaces the steps gets its own): the window and every replay read them, and on a
    small rank reading a frame's columns costs more than the step times themselves."""
    st = g.steps if steps is None else steps
    cached = g.defaults.get("_step_arrays")
    if cached is not None and cached[0] is st:
        return cached[1]
    out = {c: st[c].to_numpy() for c in ("start_node", "end_node", "t0", "t1")}
    g.defaults["_step_arrays"] = (st, out)
    return out


def _step_nodes(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(start_node, end_node) of ``g.steps`` as arrays (``step_columns``)."""
    cols = step_columns(g)
    return cols["start_node"], cols["end_node"]


def median_of(x: np.ndarray) -> float:
    """``float(np.median(x))``; one value is its own median (``np.median``'s fixed cost is most of a one-step
    rank's prediction, which takes several)."""
    return float(x[0]) if len(x) == 1 else float(np.median(x))


def step_times(g: Graph, ns: np.ndarray, ne: np.ndarray) -> np.ndarray:
    """Per step: the time between its boundary and the next one's.

    A step's boundary is the later of its marker's start and the end of the GPU work launched in the step before:
    a step is over when both the host and the GPU have finished it, so a host that runs ahead (syncs removed)
    cannot make a step shorter than its GPU work. The last step ends at the later of its marker end and the end
    of its GPU work.
    """
    st = g.steps
    if st.empty:  # one pseudo-step: first launch (or GPU task) to the end of the last GPU task (``replay_window``
        # spans every GPU task then, and a graph has GPU work)
        ids = g.window[g.window >= 0]
        gi = ids[g.ntype[ids] == GPU]
        return np.array([int(ne[gi].max() - ns[ids].min())])
    gl, steps_of, heads = _step_buckets(g)
    first, end_nodes = _step_nodes(g)
    gend = np.full(len(st) + 1, np.iinfo(np.int64).min)
    if len(gl):
        gend[steps_of] = np.maximum.reduceat(ne[gl], heads)
    marker = ns[first]
    bound = np.maximum.accumulate(np.maximum(marker, gend[:-1]))  # overlapping markers never give negative steps
    last = max(int(ne[int(end_nodes[-1])]), int(gend[-1]), int(bound[-1]))
    return np.diff(np.r_[bound, last])
