"""``build_graph``: one rank's dependency graph from its views, vectorized (no per-event Python)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.work_classes import GEMM_CLASSES, kernel_class_of
from traceinsight.derive.views import Views
from traceinsight.derive.whatif.graph import BLOCKING, DEFAULT_LAUNCH_NS, DEFAULT_QUEUE_NS, GPU, MAX_STEPS, MIN_SAMPLES, Graph, WORK
from traceinsight.derive.whatif.nodes import host_nodes, of_rank
from traceinsight.vocab.masks import coded, coded_in
from traceinsight.derive.whatif.edges import inferred_cross, launch_positions, launched_by_stream, order_in_groups, queue_full, queue_waits, recorded_event_waits
from traceinsight.derive.whatif.window import step_table, replay_window


def build_graph(views: Views, rank: int, max_steps: int = MAX_STEPS, warmup: "pd.DataFrame | None" = None) -> Graph | None:
    """The dependency graph of ``rank`` (vectorized; no per-event Python). None when the rank has no GPU work.

    Node-length arrays are the graph's own or few: what only GPU nodes have (a launch, a device) is kept on
    GPU-length arrays, and each latency is computed in place in the array the graph keeps (every edit reads the
    measured gap at the index it writes, so no copy of the gaps is needed). The steps, in order: the nodes
    (``host_nodes`` and the GPU rows), program and stream order, launch edges, launches that block, the typical
    latencies, hand-offs, each edge's latency, what blocking calls wait for, and each kernel's work class.
    """
    act = of_rank(views.gpu_activity, rank)
    if act.empty:
        return None
    ng = len(act)
    cols, nh, rt_rows, rt_names, marker_steps = host_nodes(views, rank, ng)
    n = nh + ng
    G = slice(nh, n)
    ntype, start, end, pid, tid, lbl = (cols[k] for k in ("ntype", "start", "end", "pid", "tid", "lbl"))
    ntype[G] = GPU
    gs, ge = start[G], end[G]
    gs[:] = act["start_ns"].to_numpy(np.int64)
    np.maximum(act["dur_ns"].to_numpy(np.int64), 0, out=ge)
    ge += gs
    pid[G] = act["pid"].to_numpy(np.int64)
    tid[G] = act["stream"].to_numpy(np.int64)  # GPU rows: the stream
    act_lbl = act.index.to_numpy().astype(np.int64, copy=False)
    dev = act["device"].to_numpy(np.int64)  # GPU nodes only (index - nh)

    order, same, prev, seq, has_prev, prev_end, prev_gap = _program_order(nh, pid, tid, dev, start, end)
    launch, lg, hl, is_launch, launch_start, launch_end, launch_lat = _launch_edges(views, rank, lbl, rt_rows, act_lbl, start, end, nh)
    act_kind = coded(act["kind"])
    q_full = _blocking_launches(act, act_kind, ntype, lg, hl, gs, ge, act_lbl, launch_start, launch_end)
    # typical latencies, from tasks where that edge bound the start (GPU tasks)
    hp, pe, le = has_prev[G], prev_end[G], launch_end
    q_bind = hp & (~hl | (pe >= le))
    l_bind = hl & (~hp | (le > pe))
    d_queue = int(np.median(np.clip(prev_gap[G][q_bind], 0, None))) if q_bind.sum() >= MIN_SAMPLES else DEFAULT_QUEUE_NS
    d_launch = int(np.median(np.clip(launch_lat[G][l_bind], 0, None))) if l_bind.sum() >= MIN_SAMPLES else DEFAULT_LAUNCH_NS

    # hand-off between host threads of one process; producer stream for GPU tasks
    cross = np.full(n, -1, np.int64)
    inferred_cross(cross, nh, pid, dev, tid, start, end, has_prev, prev_gap, prev_end, launch_end)
    inferred = cross[G] >= 0
    recorded_event_waits(rt_names, pid, tid, lbl, launch, cross, start, end, nh + np.flatnonzero(hl))
    prev_lat, cross_lat = _edge_latencies(nh, start, end, cross, inferred, prev_gap, launch_lat, pe, le, launch_start, launch_end, hl,
                                          q_bind, l_bind, hp, d_queue, d_launch)
    waits, own, wait_on = _blocking_waits(ntype, order, same, nh, hl, dev, tid, pid, start, end, launch_start, lg, q_full)
    work, gemm = _work_codes(act, act_kind, nh, n)

    steps, step_cols = step_table(start, nh, marker_steps, max_steps)
    g = Graph(rank=rank, ntype=ntype, start=start, end=end, dur=end - start, prev=prev, prev_lat=prev_lat, cross=cross,
              cross_lat=cross_lat, launch=launch, launch_lat=launch_lat, own=own, waits=waits, wait_on=wait_on,
              is_launch=is_launch, gemm=gemm, work=work, steps=steps, window=np.zeros(0, np.int64),
              defaults={"launch": d_launch, "queue": d_queue, "warmup": _warmup_windows(warmup, rank)}, seq=seq)
    if step_cols is not None:
        g.defaults["_step_arrays"] = (steps, step_cols)
    g.window = replay_window(g, steps)
    return g.freeze()


def _program_order(nh: int, pid: np.ndarray, tid: np.ndarray, dev: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Program / stream order (GPU rows: group by device+stream; host rows: pid+tid): the order and whether each
    position continues the group before it, each node's predecessor (-1: none), its position, whether it has a
    predecessor, the predecessor's end (0: none) and the gap from it (0: none; becomes ``prev_lat``)."""
    n = len(start)
    order, same = order_in_groups(nh, pid, tid, dev, start, end)
    prev_o = np.empty(n, np.int64)  # in that order: the node before, where of the same group
    prev_o[0] = -1
    prev_o[1:] = order[:-1]
    prev_o[1:][~same] = -1
    prev = np.empty(n, np.int64)
    prev[order] = prev_o
    del prev_o
    seq = np.empty(n, np.int64)
    seq[order] = np.arange(n)  # program / stream position: breaks ties between tasks that start together
    has_prev = prev >= 0
    no_prev = ~has_prev
    prev_end = np.take(end, prev, mode="clip")
    prev_end[no_prev] = 0
    prev_gap = start - prev_end  # becomes prev_lat (edited in place below)
    prev_gap[no_prev] = 0
    return order, same, prev, seq, has_prev, prev_end, prev_gap


def _launch_edges(views: Views, rank: int, lbl: np.ndarray, rt_rows: slice, act_lbl: np.ndarray, start: np.ndarray, end: np.ndarray,
                  nh: int) -> tuple[np.ndarray, ...]:
    """Launch -> GPU task: each node's launch call (-1: none), and per GPU node (arrays of length ng) its launch,
    whether it has one, the launch's start and end (0: none); which host nodes launched GPU work; and
    ``launch_lat``, the gap from the launch's start (edited in place later)."""
    n = len(start)
    G = slice(nh, n)
    gs = start[G]
    launch = np.full(n, -1, np.int64)
    ln = views.launches
    if not ln.empty:
        ln = of_rank(ln, rank) if "rank" in ln else ln
        ix = views.events.index
        ranged = isinstance(ix, pd.RangeIndex) and ix.start >= 0 and ix.step > 0
        lp, gp = launch_positions(lbl, rt_rows, act_lbl, ln["launch_idx"].to_numpy(np.int64),
                                   ln["gpu_idx"].to_numpy(np.int64), ranged)
        ok = (lp >= 0) & (gp >= 0)
        launch[nh + gp[ok]] = lp[ok]
    lg = launch[G]
    hl = lg >= 0
    is_launch = np.zeros(n, bool)
    is_launch[lg[hl]] = True
    launch_start = np.take(start, lg, mode="clip")
    launch_start[~hl] = 0
    launch_end = np.take(end, lg, mode="clip")
    launch_end[~hl] = 0
    launch_lat = np.zeros(n, np.int64)  # the gap from the launch's start; edited in place below
    lgap = launch_lat[G]
    np.subtract(gs, launch_start, out=lgap)
    lgap[~hl] = 0
    return launch, lg, hl, is_launch, launch_start, launch_end, launch_lat


def _blocking_launches(act: pd.DataFrame, act_kind: tuple, ntype: np.ndarray, lg: np.ndarray, hl: np.ndarray, gs: np.ndarray, ge: np.ndarray,
                       act_lbl: np.ndarray, launch_start: np.ndarray, launch_end: np.ndarray) -> np.ndarray:
    """Marks the launch calls that block (``ntype``, in place) and returns which GPU tasks' launches waited for a
    full launch queue.

    A launch call whose own GPU work ended before it returned blocked on it (pageable or blocking copy); so did
    an async copy of pageable memory that spans most of its copy: the driver stages it chunk by chunk and returns
    once the last chunk is staged, a little before the DMA ends, so its length is the copy's, not host work. A
    kernel launch that returns only when the GPU frees a slot in its full launch queue (a GPU-bound loop whose
    host ran ahead by a queue's depth of launches) waits on the GPU like a blocking call: its length is the wait
    for an earlier task to finish, so faster GPU work shortens it in the replay."""
    is_copy = coded_in(act_kind, ("memcpy", "memset"))
    own_done = hl & (ge <= launch_end) & (act_lbl >= 0) & is_copy
    if "pageable" in act.columns:
        staged = hl & is_copy & act["pageable"].to_numpy(dtype=bool) & (2 * (launch_end - launch_start) >= ge - gs)
        own_done |= staged
    ntype[lg[own_done]] = BLOCKING
    q_full = queue_full(hl, launch_start, launch_end, gs)
    ntype[lg[q_full]] = BLOCKING
    return q_full


def _edge_latencies(nh: int, start: np.ndarray, end: np.ndarray, cross: np.ndarray, inferred: np.ndarray, prev_gap: np.ndarray,
                    launch_lat: np.ndarray, pe: np.ndarray, le: np.ndarray, launch_start: np.ndarray, launch_end: np.ndarray,
                    hl: np.ndarray, q_bind: np.ndarray, l_bind: np.ndarray, hp: np.ndarray, d_queue: int, d_launch: int) -> tuple[np.ndarray, np.ndarray]:
    """(prev_lat, cross_lat): the binding edge keeps its gap, the others the typical one (never more than they
    had). Each edit reads the gap at the indices it writes, and the index sets of one array's edits are disjoint;
    ``prev_gap`` becomes ``prev_lat`` and ``launch_lat`` is edited, both in place."""
    n = len(start)
    G, H = slice(nh, n), slice(0, nh)
    has_cross = cross >= 0
    xi = np.flatnonzero(has_cross)
    cross_lat = np.zeros(n, np.int64)  # the gap from the producer's end; edited in place below
    cross_lat[xi] = start[xi] - end[cross[xi]]
    hc = has_cross[G]
    # an edge binds a GPU task when it ended after everything else the task waited for (prev_end and launch_end
    # are 0 where the task has no such edge)
    x_bind = hc & (inferred | (np.take(end, cross[G], mode="clip") > np.maximum(pe, le)))
    prev_lat = prev_gap
    ph = prev_lat[H]
    host_x = has_cross[H]
    ph[host_x] = np.minimum(ph[host_x], 0)  # the thread waited for the hand-off, not for work
    pl, ll, cl = prev_lat[G], launch_lat[G], cross_lat[G]
    lcost = launch_end - launch_start
    x_nb = hc & ~x_bind
    cl[x_nb] = np.minimum(cl[x_nb], d_queue)
    hc = x_bind  # below: a non-binding event wait leaves prev/launch as they were
    pl[hc] = np.minimum(pl[hc], d_queue)
    ll[hc] = np.minimum(ll[hc], d_launch + lcost[hc])
    q = ~hc & q_bind & hl
    ll[q] = np.minimum(ll[q], d_launch + lcost[q])
    lb = ~hc & l_bind & hp
    pl[lb] = np.minimum(pl[lb], d_queue)
    return prev_lat, cross_lat


def _blocking_waits(ntype: np.ndarray, order: np.ndarray, same: np.ndarray, nh: int, hl: np.ndarray, dev: np.ndarray, tid: np.ndarray,
                    pid: np.ndarray, start: np.ndarray, end: np.ndarray, launch_start: np.ndarray, lg: np.ndarray,
                    q_full: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
    """Blocking calls: the last GPU task per stream launched before the call and ended before it returned. Returns
    (waits per node, own cost once the GPU work is done, whether the blocking edge is active)."""
    n = len(start)
    waits: list = [()] * n
    own = np.zeros(n, np.int64)
    wait_on = ntype == BLOCKING
    b_ids = np.flatnonzero(wait_on)
    if len(b_ids):
        per_b: list[list[int]] = [[] for _ in b_ids]
        wmax = np.full(len(b_ids), np.iinfo(np.int64).min)
        for sg in launched_by_stream(order, same, nh, hl, dev, tid, start, end):
            ls = np.maximum.accumulate(launch_start[sg - nh])
            ec = np.maximum.accumulate(end[sg])
            same_pid = pid[sg[0]]
            i1 = np.searchsorted(ls, start[b_ids], side="right") - 1
            i2 = np.searchsorted(ec, end[b_ids], side="right") - 1
            i = np.minimum(i1, i2)
            okw = (i >= 0) & (pid[b_ids] == same_pid)
            for j in np.flatnonzero(okw):
                t = int(sg[i[j]])
                if start[t] < end[b_ids[j]]:
                    per_b[j].append(t)
                    wmax[j] = max(wmax[j], end[t])
        queue_waits(b_ids, per_b, wmax, lg[q_full], dev[q_full], dev, nh, start, end)
        for j, b in enumerate(b_ids):
            waits[b] = tuple(per_b[j])
        d = end[b_ids] - start[b_ids]
        after = np.where(wmax > np.iinfo(np.int64).min, end[b_ids] - wmax, d)
        own[b_ids] = np.clip(np.minimum(d, after), 0, None)
        wait_on[b_ids] = [len(w) > 0 for w in (waits[b] for b in b_ids)]
    return waits, own, wait_on


def _work_codes(act: pd.DataFrame, act_kind: tuple, nh: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node: its kernel's position in ``work_classes.CLASSES`` (-1: not a kernel), and whether it is a
    GEMM/convolution kernel."""
    work = np.full(n, -1, np.int8)
    ncol = coded(act["name"])
    per_name = np.array([WORK.index(kernel_class_of(c)) for c in ncol[1]] + [-1], dtype=np.int8)
    work[nh:] = np.where(coded_in(act_kind, ("kernel",)), per_name[np.where(ncol[0] >= 0, ncol[0], len(per_name) - 1)], -1)
    gemm = np.isin(work, [WORK.index(c) for c in GEMM_CLASSES])
    return work, gemm


def _warmup_windows(w: "pd.DataFrame | None", rank: int) -> np.ndarray:
    """The warm-up regions ``w`` (the ledger's) of ``rank`` as (start, end) rows: one-time work the replay leaves out."""
    if w is None or w.empty:
        return np.zeros((0, 2), np.int64)
    w = w[w["rank"].to_numpy() == rank]
    return np.stack([w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)], axis=1) if len(w) else np.zeros((0, 2), np.int64)
