"""What-if step times: replay a step's dependency graph with one root cause taken out (Daydream-style).

Why a replay and not a subtraction: removing 70 ms of data loading from a 176 ms step does not give 106 ms when
the GPU was still busy with the previous step during those 70 ms; the next step's kernels then queue behind it.
Only a model that knows which task waits for which can say how much of a removed cost the step really gets back.

The model (docs/whatif.md has the long form):

* **Nodes.** Host tasks per host thread in program order: runtime/driver calls, data-wait ranges (the calls
  inside them belong to the wait) and zero-length step markers. GPU tasks per stream in stream order: kernels,
  copies, memsets.
* **Edges.** Program order on a thread and stream order on a stream; launch call -> its GPU task through
  (rank, pid, correlation); GPU -> host for blocking calls (a synchronize or a blocking copy cannot return before
  the GPU work it waits for has ended); a hand-off between host threads of one process (a thread that sat idle
  until another thread's call ended resumes after it, e.g. PyTorch's autograd thread); GPU-side dependencies
  between streams, from recorded ``cudaEventRecord`` / ``cudaStreamWaitEvent`` calls, and inferred where a task
  started right after another stream's task ended and nothing on its own stream or launch explains the wait.
* **Latencies.** Every edge keeps the time the trace shows between the predecessor and the task (host work
  between calls, launch latency, kernel-to-kernel delay) for the predecessor that bound the task; an edge that
  did not bind gets the trace's typical latency of its type (never more than it had). Replaying the unmodified
  graph therefore reproduces the measured times; a difference means an edge contradicts the trace.
* **Replay.** Events are processed in original time order, which is a topological order of the graph: a task
  starts at the latest of (predecessor end or launch start) + latency; a blocking call ends at the latest of its
  own cost and the end of the GPU work it waits for plus its return latency. Tasks before the replayed steps stay
  where they were. The only Python loop is this one, over the tasks of the replayed steps.
* **Step time.** A step's boundary is the later of its marker's start and the end of the GPU work the step
  before launched; step time is the distance between boundaries (the period a training loop sees), so a host
  that runs ahead cannot make a step shorter than its GPU work.

Transforms are small edits of the graph's arrays (``TRANSFORMS``); ``predict_step_ns`` replays with one applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from traceinsight.vocab import native
from traceinsight.model.finding import instance_columns
from traceinsight.vocab.intervals import Coverage, merge_grouped, merge_intervals
from traceinsight.vocab.masks import coded as _codes, coded_hits as _name_hits, coded_in as _kind_in, coded_match as _name_match, coded_rows as _rows_where
from traceinsight.vocab.patterns import DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, EVENT_RECORD, IMPLICIT_SYNC_CALL, STREAM_WAIT, SYNC_CALL
from traceinsight.vocab.work_classes import CLASSES as WORK_CLASSES, GEMM_CLASSES, kernel_class_of
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.vocab.units import format_what_if  # noqa: F401  (the reports' one-line form of a prediction)
from traceinsight.derive.views import Views
from traceinsight.derive.steady import warmup_steps

#: A host thread idle this long (ns) before resuming right after another thread's call is taken to have waited
#: for that thread (a hand-off), rather than to have been busy with untraced work.
HANDOFF_MIN_GAP_NS = 20_000
#: A GPU task that starts within this many ns of another stream's task ending, with its own stream and launch
#: explaining less of its wait, is taken to depend on that task (an event wait).
STREAM_DEP_MAX_NS = 10_000
#: Typical delays when the trace shows too few (< MIN_SAMPLES) tasks bound by that edge: kernel-to-kernel delay of
#: queued work and launch-call start to kernel start (a few µs on current NVIDIA and AMD GPUs).
DEFAULT_QUEUE_NS = 2_000
DEFAULT_LAUNCH_NS = 6_000
MIN_SAMPLES = 20
#: Most steps replayed per rank (the middle of the run when there are more); bounds the Python loop.
MAX_STEPS = 24


# node types
HOST, DATA_WAIT, BLOCKING, MARKER, GPU = 0, 1, 2, 3, 4


@dataclass
class Graph:
    """One rank's dependency graph as flat arrays (index = node id).

    Transforms edit a ``copy``: its timing arrays (``dur``, ``own``, the latencies, ``wait_on``) are its own; the
    structure (``STRUCTURE``: node types, original times, edges, window) is shared with the graph it was copied
    from and read-only, so a transform that wants another structure assigns a new array instead of editing one.
    """

    rank: int
    ntype: np.ndarray  # HOST / DATA_WAIT / BLOCKING / MARKER / GPU
    start: np.ndarray  # original start, ns
    end: np.ndarray  # original end, ns
    dur: np.ndarray  # replayed own duration (host calls, GPU tasks)
    prev: np.ndarray  # thread / stream predecessor (-1: none); reference = its end
    prev_lat: np.ndarray
    cross: np.ndarray  # hand-off thread or producer stream (-1: none); reference = its end
    cross_lat: np.ndarray
    launch: np.ndarray  # GPU task's launch call (-1: none); reference = its start
    launch_lat: np.ndarray
    own: np.ndarray  # blocking call: its cost once the GPU work is done
    waits: list  # blocking call: node ids of the GPU tasks it waits for (one per stream)
    wait_on: np.ndarray  # bool: blocking edge active
    is_launch: np.ndarray  # host node that launched GPU work
    gemm: np.ndarray  # GPU node that is a GEMM/convolution kernel (``work_classes.GEMM_CLASSES``)
    work: np.ndarray  # int8 per node: its kernel's position in ``work_classes.CLASSES`` (-1: not a kernel)
    steps: pd.DataFrame  # step, name, start_node, end_node, orig start/end, dur_ns (marker), in order
    window: np.ndarray  # node ids replayed, in event order (node id; negative -1-id for a blocking end event)
    defaults: dict = field(default_factory=dict)  # typical latencies: launch, queue (kernel-to-kernel)
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # position in thread / stream order

    def copy(self) -> "Graph":
        g = Graph(**{k: (v.copy() if isinstance(v, (np.ndarray, dict)) and k not in STRUCTURE else v)
                     for k, v in vars(self).items()})
        return g

    def freeze(self) -> "Graph":
        """Make the structure read-only (it is shared by every copy)."""
        for k in STRUCTURE:
            v = getattr(self, k)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        return self


#: The fields of a ``Graph`` that its copies share (never edited in place by a transform).
STRUCTURE = ("ntype", "start", "end", "prev", "cross", "launch", "waits", "is_launch", "gemm", "work", "window", "seq")
#: The work classes in ``Graph.work``'s code order.
_WORK = tuple(WORK_CLASSES)


# --- building ---------------------------------------------------------------------------------------------
def _key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 per (a, b) pair, e.g. (pid, tid): ids fit in 32 bits on every source (negative ids included)."""
    return (np.asarray(a, np.int64) << 32) | (np.asarray(b, np.int64) & 0xFFFFFFFF)


def _latest_end_before(end_sorted_ids: np.ndarray, ends_sorted: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t: the id of the node with the latest end < t among ``end_sorted_ids`` (-1 if none).

    Strictly before: a zero-length node (a step marker) must not find itself.
    """
    i = np.searchsorted(ends_sorted, t, side="left") - 1
    return np.where(i >= 0, np.take(end_sorted_ids, i, mode="clip"), -1)


def _of_rank(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The rows of ``rank``; the frame itself when it holds no other rank (no copy of a single-rank trace)."""
    m = df["rank"].to_numpy() == rank
    return df if m.all() else df[m]


def _host_nodes(views: Views, rank: int, ng: int) -> tuple[dict[str, np.ndarray], int, slice, tuple, np.ndarray]:
    """The rank's host nodes, written into the first rows of the node columns (pid, tid, start, end, ntype),
    which have room for ``ng`` GPU nodes after them, and their row labels (``lbl``, host nodes only; -1 for nodes
    that are no row): merged data waits first, then runtime calls not inside one,
    then step markers (a start node per step, then an end node per step). Also returned: the number of host
    nodes, the runtime calls' node ids (a slice), their names in node order, and each marker's step number.

    Every column is allocated once at its final length and the runtime calls (most of the nodes) are gathered
    straight into it: no host-length temporaries beyond a few masks, no concatenation afterwards.
    """
    ev = _of_rank(views.host_events, rank)
    kind, names = _codes(ev["kind"]), _codes(ev["name"])
    s = ev["start_ns"].to_numpy(np.int64)
    dur = ev["dur_ns"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy(np.int64)
    tid = ev["tid"].to_numpy(np.int64)
    rt = _kind_in(kind, ("runtime",))
    # data waits: merged per thread, the runtime calls inside them dropped (the names first: most traces have none)
    dw: dict[str, np.ndarray] = {}
    dw_name = _name_hits(names, re.compile(DATA_WAIT_PRIMARY))
    dwm = _kind_in(kind, DATA_WAIT_KINDS) & _rows_where(names, dw_name) if dw_name.any() else None
    if dwm is not None and dwm.any():
        thread_key = _key(pid, tid)
        m = merge_grouped(thread_key[dwm], s[dwm], s[dwm] + np.maximum(dur[dwm], 0))
        first = pd.DataFrame({"k": thread_key[dwm], "pid": pid[dwm], "tid": tid[dwm]}).drop_duplicates("k").set_index("k")
        dw = {"lbl": np.full(len(m), -1, np.int64), "pid": first.loc[m["group"], "pid"].to_numpy(np.int64),
              "tid": first.loc[m["group"], "tid"].to_numpy(np.int64), "start": m["start_ns"].to_numpy(np.int64),
              "end": m["end_ns"].to_numpy(np.int64), "ntype": np.full(len(m), DATA_WAIT, np.int64)}
        inside = np.zeros(len(s), bool)
        dk = _key(dw["pid"], dw["tid"])
        for k in np.unique(dk):
            sel = np.flatnonzero(rt & (thread_key == k))
            gs, ge = dw["start"][dk == k], dw["end"][dk == k]
            i = np.searchsorted(gs, s[sel], side="right") - 1
            inside[sel] = (i >= 0) & (s[sel] < ge[np.clip(i, 0, None)])
        rt &= ~inside
    rti = np.flatnonzero(rt)
    rt_names = (names[0][rti], names[1], names[2])
    blocking = _name_match(rt_names, SYNC_CALL, case=True) | _name_match(rt_names, IMPLICIT_SYNC_CALL, case=True)
    sti = np.flatnonzero(_kind_in(kind, ("step",)))
    n_dw, n_rt, n_mk = len(dw.get("start", ())), len(rti), 2 * len(sti)
    nh = n_dw + n_rt + n_mk
    cols = {k: np.empty(nh if k == "lbl" else nh + ng, np.int64) for k in ("lbl", "pid", "tid", "start", "end", "ntype")}
    for k, v in dw.items():
        cols[k][:n_dw] = v
    R, M = slice(n_dw, n_dw + n_rt), slice(n_dw + n_rt, nh)
    idx = ev.index
    if isinstance(idx, pd.RangeIndex):  # labels from positions: no label array of every host row
        np.multiply(rti, idx.step, out=cols["lbl"][R])
        cols["lbl"][R] += idx.start
    else:
        np.take(idx.to_numpy().astype(np.int64, copy=False), rti, out=cols["lbl"][R])
    np.take(pid, rti, out=cols["pid"][R])
    np.take(tid, rti, out=cols["tid"][R])
    np.take(s, rti, out=cols["start"][R])
    e_rt = cols["end"][R]
    np.take(dur, rti, out=e_rt)
    np.maximum(e_rt, 0, out=e_rt)
    e_rt += cols["start"][R]
    nt_rt = cols["ntype"][R]
    nt_rt[:] = HOST
    nt_rt[blocking] = BLOCKING
    stn = ev["step"].to_numpy()[sti].astype(np.int64)
    if len(sti):  # zero-length markers at the step's start and at its end
        st_s = s[sti]
        st_e = st_s + np.maximum(dur[sti], 0)
        cols["lbl"][M] = -1
        cols["pid"][M] = np.r_[pid[sti], pid[sti]]
        cols["tid"][M] = np.r_[tid[sti], tid[sti]]
        cols["start"][M] = cols["end"][M] = np.r_[st_s, st_e]
        cols["ntype"][M] = MARKER
    return cols, nh, R, rt_names, stn


def _time_order(ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``ids`` (ascending) sorted by (start, end, id), as ``ids[np.lexsort((end[ids], start[ids]))]``; nodes of one
    thread or stream are mostly in time order already, so this checks first and sorts only where needed."""
    if len(ids) and int(ids[-1]) - int(ids[0]) + 1 == len(ids):  # a range of ids: views, not gathers
        st, en = start[int(ids[0]): int(ids[-1]) + 1], end[int(ids[0]): int(ids[-1]) + 1]
    else:
        st, en = start[ids], end[ids]
    if not (st[1:] < st[:-1]).any():
        tie = np.flatnonzero(st[1:] == st[:-1])  # equal starts must come in end order
        if not len(tie) or not (en[tie + 1] < en[tie]).any():
            return ids
    o = np.argsort(st, kind="stable")  # a few sorted runs: timsort merges them
    so = st[o]
    tie = np.flatnonzero(so[1:] == so[:-1])
    if len(tie) and (en[o[tie + 1]] < en[o[tie]]).any():  # equal starts out of end order
        o = np.lexsort((en, st))
    return ids[o]


def _order_in_groups(nh: int, pid: np.ndarray, tid: np.ndarray, dev: np.ndarray, start: np.ndarray,
                     end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Program / stream order: node ids sorted by (GPU or not, a, b, start, end, id), with a = pid and b = tid for
    the host nodes (ids < ``nh``), a = ``dev`` (GPU nodes only) and b = stream (``tid``) for the GPU nodes; and a
    mask over that order: True where a node follows one of its own group (thread or stream).

    Threads and streams are few and their nodes mostly in time order already: a half with one group is checked
    and sorted only when it is not; with more, one sort by start (a few sorted runs) and a stable split by group
    (two groups: a mask; more: a radix sort of small group numbers), instead of one five-key sort of every node.
    """
    n = len(start)
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    if any(len(x) and (x.min() < lo or x.max() > hi) for x in (pid[:nh], dev, tid)):
        a = np.r_[pid[:nh], dev]
        order = np.lexsort((end, start, tid, a, np.arange(n) >= nh))
        ka, kb, kg = a[order], tid[order], order >= nh
        return order, (ka[1:] == ka[:-1]) & (kb[1:] == kb[:-1]) & (kg[1:] == kg[:-1])
    parts, same = [], []
    for first, last, a in ((0, nh, pid[:nh]), (nh, n, dev)):
        if last == first:
            continue
        # ((a - lo) << 32) | (b - lo), in place: both parts lie in [0, 2^32), so the key sorts as (a, b) does
        key = a - lo
        key <<= 32
        key += tid[first:last]
        key -= lo
        s_, e_ = start[first:last], end[first:last]
        if key.min() == key.max():  # one thread / stream
            o = _time_order(np.arange(first, last), start, end) - first
            sm = np.ones(len(o) - 1, bool)
        else:
            k0, k1 = key.min(), key.max()
            is_k1 = key == k1
            if np.count_nonzero(is_k1) + np.count_nonzero(key == k0) == len(key):  # two threads / streams
                code = is_k1.view(np.uint8)
                o = np.argsort(s_, kind="stable")  # by (start, id): a few sorted runs
                m1 = is_k1[o]
                o = np.concatenate([o[~m1], o[m1]])  # then by group, stably
                ko = np.zeros(len(o), np.uint8)
                ko[len(o) - int(np.count_nonzero(is_k1)):] = 1
            else:
                groups = np.sort(pd.unique(key))
                code = np.searchsorted(groups, key).astype(np.uint8 if len(groups) <= 255 else np.int64)
                o = np.argsort(s_, kind="stable")  # by (start, id): a few sorted runs
                o = o[np.argsort(code[o], kind="stable")]  # then by group, stably (radix on small codes)
                ko = code[o]
            so = s_[o]
            sm = ko[1:] == ko[:-1]
            tie = np.flatnonzero((so[1:] == so[:-1]) & sm)  # equal starts in one group must come in end order
            if len(tie) and (e_[o[tie + 1]] < e_[o[tie]]).any():
                o = np.lexsort((e_, s_, code))
                ko = code[o]
                sm = ko[1:] == ko[:-1]
        parts.append(o + first if first else o)
        same.append(sm)
    order = np.concatenate(parts)
    out = same[0] if len(same) == 1 else np.concatenate([same[0], np.zeros(1, bool), same[1]])
    return order, out


def _cross_in_group(ids: np.ndarray, q: np.ndarray, start: np.ndarray, end: np.ndarray, tid: np.ndarray):
    """For the nodes ``q`` of ``ids`` (positions into ``ids``; ``ids`` ascending: a process's threads or a device's
    streams): the node among ``ids`` that ended last before it started, where that node is on another thread /
    stream. Returns (those nodes of ``q``, as node ids; their candidates; the candidates' ends). The caller asks
    only for the nodes whose wait such a candidate could explain and keeps those it does.

    In end order the nodes come in runs of one thread / stream (threads take turns); which run a node's candidate
    lies in is one search among the runs' first ends, so only nodes whose candidate is on another thread are
    searched among all the ends.
    """
    lo = int(ids[0]) if len(ids) else 0
    rng = len(ids) and int(ids[-1]) - lo + 1 == len(ids)  # a range of ids: views, not gathers
    e_i = end[lo: lo + len(ids)] if rng else end[ids]
    eo = np.argsort(e_i, kind="stable")  # nearly sorted runs: timsort
    es = e_i[eo]
    eo = eo + lo if rng else ids[eo]
    te = tid[eo]
    heads = np.flatnonzero(np.r_[True, te[1:] != te[:-1]])  # first position of each run of one thread / stream
    qi = ids[q]
    r = np.searchsorted(es[heads], start[qi], side="left") - 1  # the run of the latest end before each start
    qi = qi[(r >= 0) & (te[heads][np.clip(r, 0, None)] != tid[qi])]
    c = _latest_end_before(eo, es, start[qi])
    return qi, c, end[c]


def _one_value(a: np.ndarray) -> bool:
    """Every element of ``a`` is the same (a process with one thread, a device with one stream)."""
    return len(a) > 0 and a.min() == a.max()


def _inferred_cross(cross, nh, pid, dev, tid, start, end, has_prev, prev_gap, prev_end, launch_end) -> None:
    """Hand-offs between the host threads of one process, producer streams of GPU tasks on one device: fills
    ``cross`` in place. Only nodes that waited can have been handed work (a thread idle for over
    ``HANDOFF_MIN_GAP_NS`` or at its first task, a GPU task that started over ``STREAM_DEP_MAX_NS`` after its
    stream and launch explain), so only those are looked up. ``launch_end``: GPU nodes only, 0 without a launch."""
    n = len(start)
    for on_gpu, kk in ((False, pid[:nh]), (True, dev)):
        lo_ = nh if on_gpu else 0  # host nodes are ids < nh, GPU nodes the rest
        part = slice(lo_, n if on_gpu else nh)
        if not on_gpu:
            wait = ~has_prev[part] | (prev_gap[part] > HANDOFF_MIN_GAP_NS)
        else:
            explained = np.maximum(prev_end[part], launch_end)
            wait = start[part] - explained > STREAM_DEP_MAX_NS
        uk = kk[:1] if len(kk) and kk.min() == kk.max() else np.sort(pd.unique(kk))
        for k in uk:
            if len(uk) == 1:
                ids, q = np.arange(lo_, part.stop), np.flatnonzero(wait)
            else:
                ids = np.flatnonzero(kk == k)
                q = np.flatnonzero(wait[ids])
                ids += lo_
            own = tid[lo_: part.stop] if len(uk) == 1 else tid[ids]  # their threads / streams
            if not len(q) or _one_value(own):  # nobody waited, or one thread / stream: no other to wait for
                continue
            qi, c, cend = _cross_in_group(ids, q, start, end, tid)
            if not on_gpu:
                okc = ~has_prev[qi] | (cend > prev_end[qi])
            else:
                s_i, ex = start[qi], explained[qi - nh]
                okc = (cend > ex) & (s_i - cend <= STREAM_DEP_MAX_NS)
            cross[qi[okc]] = c[okc]


def _position(labels: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index in ``labels`` (unique row labels, -1 for none) of each wanted label; -1 where it is not there."""
    ok = np.flatnonzero(labels >= 0)
    lab = labels[ok]
    if len(lab) == 0:
        return np.full(len(wanted), -1, np.int64)
    top = int(lab.max())
    if top <= 4 * (len(lab) + len(wanted)) + 1024:  # row labels of one frame: a lookup table beats a search
        table = np.full(top + 2, -1, np.int32 if len(labels) < 2**31 else np.int64)  # the last slot: out of range
        table[lab] = ok
        return table[np.where((wanted >= 0) & (wanted <= top), wanted, top + 1)]
    o = np.argsort(lab, kind="stable")
    ok, lab = ok[o], lab[o]
    i = np.clip(np.searchsorted(lab, wanted), 0, len(lab) - 1)
    return np.where(lab[i] == wanted, ok[i], -1)


def _launch_positions(lbl: np.ndarray, rt: slice, act_lbl: np.ndarray, launch_idx: np.ndarray, gpu_idx: np.ndarray,
                      ranged: bool) -> tuple[np.ndarray, np.ndarray]:
    """(host node of each launch call, GPU node - nh of each GPU row; -1 where not a node), from the row labels of
    the host nodes (``lbl``; the runtime calls are the nodes ``rt``, the only ones with labels) and of the GPU rows.
    Where the events' index is a RangeIndex (``ranged``: unique labels >= 0) one lookup table answers both."""
    nh, ng = len(lbl), len(act_lbl)
    lab = lbl[rt]
    top = max(int(x.max()) for x in (lab, act_lbl, launch_idx, gpu_idx, np.zeros(1, np.int64)) if len(x))
    if not ranged or top > 4 * (len(lab) + ng + len(launch_idx)) + 1024:
        return _position(lbl, launch_idx), _position(act_lbl, gpu_idx)
    table = np.full(top + 1, -1, np.int32 if nh + ng < 2**31 else np.int64)  # every label is in [0, top]
    table[lab] = np.arange(rt.start, rt.stop)
    table[act_lbl] = np.arange(nh, nh + ng)
    lp, gp = table[launch_idx], table[gpu_idx]
    lp[lp >= nh] = -1
    gp[gp < nh] = nh - 1  # -1 once shifted
    return lp, gp - nh


def build_graph(views: Views, rank: int, max_steps: int = MAX_STEPS, warmup: "pd.DataFrame | None" = None) -> Graph | None:
    """The dependency graph of ``rank`` (vectorized; no per-event Python). None when the rank has no GPU work.

    Node-length arrays are the graph's own or few: what only GPU nodes have (a launch, a device) is kept on
    GPU-length arrays, and each latency is computed in place in the array the graph keeps (every edit reads the
    measured gap at the index it writes, so no copy of the gaps is needed).
    """
    act = _of_rank(views.gpu_activity, rank)
    if act.empty:
        return None
    ng = len(act)
    cols, nh, rt_rows, rt_names, marker_steps = _host_nodes(views, rank, ng)
    n = nh + ng
    G, H = slice(nh, n), slice(0, nh)
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

    # program / stream order (GPU rows: group by device+stream; host rows: pid+tid)
    order, same = _order_in_groups(nh, pid, tid, dev, start, end)
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

    # launch -> GPU task (what depends on a launch is kept for the GPU nodes only: arrays of length ng)
    launch = np.full(n, -1, np.int64)
    ln = views.launches
    if not ln.empty:
        ln = _of_rank(ln, rank) if "rank" in ln else ln
        ix = views.events.index
        ranged = isinstance(ix, pd.RangeIndex) and ix.start >= 0 and ix.step > 0
        lp, gp = _launch_positions(lbl, rt_rows, act_lbl, ln["launch_idx"].to_numpy(np.int64),
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

    # a launch call whose own GPU work ended before it returned blocked on it (pageable or blocking copy); so did
    # an async copy of pageable memory that spans most of its copy: the driver stages it chunk by chunk and returns
    # once the last chunk is staged, a little before the DMA ends, so its length is the copy's, not host work
    act_kind = _codes(act["kind"])
    is_copy = _kind_in(act_kind, ("memcpy", "memset"))
    own_done = hl & (ge <= launch_end) & (act_lbl >= 0) & is_copy
    if "pageable" in act.columns:
        staged = hl & is_copy & act["pageable"].to_numpy(dtype=bool) & (2 * (launch_end - launch_start) >= ge - gs)
        own_done |= staged
    ntype[lg[own_done]] = BLOCKING
    # a kernel launch that returns only when the GPU frees a slot in its full launch queue (a GPU-bound loop whose
    # host ran ahead by a queue's depth of launches) waits on the GPU like a blocking call: its length is the wait
    # for an earlier task to finish, so faster GPU work shortens it in the replay
    q_full = _queue_full(hl, launch_start, launch_end, gs)
    ntype[lg[q_full]] = BLOCKING

    # typical latencies, from tasks where that edge bound the start (GPU tasks)
    hp, pe, le = has_prev[G], prev_end[G], launch_end
    q_bind = hp & (~hl | (pe >= le))
    l_bind = hl & (~hp | (le > pe))
    d_queue = int(np.median(np.clip(prev_gap[G][q_bind], 0, None))) if q_bind.sum() >= MIN_SAMPLES else DEFAULT_QUEUE_NS
    d_launch = int(np.median(np.clip(lgap[l_bind], 0, None))) if l_bind.sum() >= MIN_SAMPLES else DEFAULT_LAUNCH_NS

    # hand-off between host threads of one process; producer stream for GPU tasks
    cross = np.full(n, -1, np.int64)
    _inferred_cross(cross, nh, pid, dev, tid, start, end, has_prev, prev_gap, prev_end, launch_end)
    inferred = cross[G] >= 0
    _recorded_event_waits(rt_names, pid, tid, lbl, launch, cross, start, end, nh + np.flatnonzero(hl))
    has_cross = cross >= 0
    xi = np.flatnonzero(has_cross)
    cross_lat = np.zeros(n, np.int64)  # the gap from the producer's end; edited in place below
    cross_lat[xi] = start[xi] - end[cross[xi]]
    hc = has_cross[G]
    # an edge binds a GPU task when it ended after everything else the task waited for (prev_end and launch_end
    # are 0 where the task has no such edge)
    x_bind = hc & (inferred | (np.take(end, cross[G], mode="clip") > np.maximum(pe, le)))

    # latencies: the binding edge keeps its gap, the others the typical one (never more than they had); each edit
    # reads the gap at the indices it writes, and the index sets of one array's edits are disjoint
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

    # blocking calls: the last GPU task per stream launched before the call and ended before it returned
    waits: list = [()] * n
    own = np.zeros(n, np.int64)
    wait_on = ntype == BLOCKING
    b_ids = np.flatnonzero(wait_on)
    if len(b_ids):
        per_b: list[list[int]] = [[] for _ in b_ids]
        wmax = np.full(len(b_ids), np.iinfo(np.int64).min)
        for sg in _launched_by_stream(order, same, nh, hl, dev, tid, start, end):
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
        _queue_waits(b_ids, per_b, wmax, lg[q_full], dev[q_full], dev, nh, start, end)
        for j, b in enumerate(b_ids):
            waits[b] = tuple(per_b[j])
        d = end[b_ids] - start[b_ids]
        after = np.where(wmax > np.iinfo(np.int64).min, end[b_ids] - wmax, d)
        own[b_ids] = np.clip(np.minimum(d, after), 0, None)
        wait_on[b_ids] = [len(w) > 0 for w in (waits[b] for b in b_ids)]

    work = np.full(n, -1, np.int8)
    ncol = _codes(act["name"])
    per_name = np.array([_WORK.index(kernel_class_of(c)) for c in ncol[1]] + [-1], dtype=np.int8)
    work[nh:] = np.where(_kind_in(act_kind, ("kernel",)), per_name[np.where(ncol[0] >= 0, ncol[0], len(per_name) - 1)], -1)
    gemm = np.isin(work, [_WORK.index(c) for c in GEMM_CLASSES])

    steps, step_cols = _step_table(start, nh, marker_steps, max_steps)
    g = Graph(rank=rank, ntype=ntype, start=start, end=end, dur=end - start, prev=prev, prev_lat=prev_lat, cross=cross,
              cross_lat=cross_lat, launch=launch, launch_lat=launch_lat, own=own, waits=waits, wait_on=wait_on,
              is_launch=is_launch, gemm=gemm, work=work, steps=steps, window=np.zeros(0, np.int64),
              defaults={"launch": d_launch, "queue": d_queue, "warmup": _warmup_windows(warmup, rank)}, seq=seq)
    if step_cols is not None:
        g.defaults["_step_arrays"] = (steps, step_cols)
    g.window = _window(g, steps)
    return g.freeze()


#: A launch call waits for a full launch queue when it lasts at least this long (a launch costs microseconds)...
QUEUE_FULL_CALL_NS = 200_000
#: ...while at least this many GPU tasks it launched earlier have not started (CUDA queues about a thousand).
QUEUE_FULL_PENDING = 256


def _queue_full(cand: np.ndarray, launch_start: np.ndarray, launch_end: np.ndarray, gs: np.ndarray) -> np.ndarray:
    """Of the GPU tasks ``cand`` (per GPU node), those whose launch call blocked on a full launch queue: a long
    call (``QUEUE_FULL_CALL_NS``) made while ``QUEUE_FULL_PENDING`` tasks launched before it were still waiting
    to start."""
    out = np.zeros(len(cand), bool)
    long_ = cand & (launch_end - launch_start >= QUEUE_FULL_CALL_NS)
    if not long_.any():
        return out
    launched = np.flatnonzero(cand | (launch_start > 0))
    ls = np.sort(launch_start[launched])
    ts = np.sort(gs[launched])
    t = launch_start[long_]
    pending = np.searchsorted(ls, t, side="left") - np.searchsorted(ts, t, side="right")
    out[np.flatnonzero(long_)[pending >= QUEUE_FULL_PENDING]] = True
    return out


def _queue_waits(b_ids: np.ndarray, per_b: list, wmax: np.ndarray, calls: np.ndarray, call_dev: np.ndarray,
                 dev: np.ndarray, nh: int, start: np.ndarray, end: np.ndarray) -> None:
    """A launch that waited for a full queue waits for the GPU task on its device that ended last before it
    returned (the one whose end freed the slot), launched in the trace or queued before it began. Fills
    ``per_b``/``wmax`` in place for the queue-full calls among ``b_ids`` that have no wait yet."""
    if not len(calls):
        return
    pos = {int(b): j for j, b in enumerate(b_ids.tolist())}
    gpu_end = end[nh:]
    for d in np.unique(call_dev):
        on = np.flatnonzero(dev == d)
        if not len(on):
            continue
        o = on[np.argsort(gpu_end[on], kind="stable")]
        ends = gpu_end[o]
        mine = calls[call_dev == d]
        k = np.searchsorted(ends, end[mine], side="right") - 1
        for c, i in zip(mine.tolist(), k.tolist()):
            j = pos.get(c)
            if j is None or per_b[j] or i < 0:
                continue
            t = nh + int(o[i])
            if start[c] < end[t] <= end[c]:
                per_b[j].append(t)
                wmax[j] = max(wmax[j], end[t])


def _launched_by_stream(order: np.ndarray, same: np.ndarray, nh: int, hl: np.ndarray, dev: np.ndarray,
                        tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """The GPU tasks with a launch call, per (device, stream) in stream order (start, end, id), streams in
    ``_key(device, stream)`` order: read off the stream order already built rather than sorted again."""
    n = len(order)
    gt = tid[nh:]
    if len(dev) and (min(dev.min(), gt.min()) < -2**31 or max(dev.max(), gt.max()) >= 2**31):
        gids = nh + np.flatnonzero(hl)  # ids beyond 32 bits: ``_key`` may merge streams, as it always did
        skey = _key(dev[gids - nh], tid[gids])
        return [_time_order(gids[skey == sk], start, end) for sk in np.sort(pd.unique(skey))]
    heads = np.flatnonzero(~same) + 1  # positions in ``order`` where a thread / stream begins (besides 0)
    bounds = np.r_[nh, heads[heads > nh], n]  # the GPU nodes are ordered after every host node
    segs = [order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()) if b > a]
    segs = [sg for sg in (s_[hl[s_ - nh]] for s_ in segs) if len(sg)]
    keys = [int(_key(dev[sg[0] - nh], tid[sg[0]])) for sg in segs]
    return [segs[i] for i in np.argsort(keys, kind="stable")]


def _recorded_event_waits(rt_names, pid, tid, hl, launch, cross, start, end, gl) -> None:
    """GPU-side edges from ``cudaEventRecord`` / ``cudaStreamWaitEvent`` calls, where the trace has them.

    Traces do not say which stream an event was recorded on or which event a wait names; the usual reading is
    used: a record marks the last GPU task its thread launched before it, and a wait makes the next GPU task its
    thread launches depend on the latest record of the process. Edges within one stream are left to stream order.
    Fills ``cross`` in place where no inferred edge is set, or where the recorded producer ends later. ``gl``: the
    GPU nodes with a launch call, ascending.
    """
    is_rec = _name_match(rt_names, EVENT_RECORD, case=True)
    is_wt = _name_match(rt_names, STREAM_WAIT, case=True)
    if not is_rec.any() or not is_wt.any():
        return
    ok = np.flatnonzero(hl >= 0)  # the runtime calls, named by ``rt_names`` in the same order
    rec, wt = ok[is_rec], ok[is_wt]
    lh = launch[gl]
    tkey = _key(pid[lh], tid[lh])  # the launching thread
    o = np.lexsort((start[lh], tkey))
    gl, tkey, lstart = gl[o], tkey[o], start[lh][o]

    def launches_before(q: np.ndarray) -> np.ndarray:
        """For each host call: how many launches of its thread (in thread order) started before or with it."""
        qk = _key(pid[q], tid[q])
        keys = np.r_[tkey, qk]
        ts = np.r_[lstart, start[q]]
        isq = np.r_[np.zeros(len(gl), bool), np.ones(len(q), bool)]
        order = np.lexsort((isq, ts, keys))
        cum = np.cumsum(~isq[order])
        out = np.empty(len(q), np.int64)
        out[order[isq[order]] - len(gl)] = cum[isq[order]]
        return out  # index of the next launch in the sorted arrays; minus one: the last before

    i = launches_before(rec) - 1
    same = (i >= 0) & (tkey[np.clip(i, 0, None)] == _key(pid[rec], tid[rec]))
    rec_task = np.where(same, gl[np.clip(i, 0, None)], -1)
    i = launches_before(wt)
    same = (i < len(gl)) & (tkey[np.clip(i, 0, len(gl) - 1)] == _key(pid[wt], tid[wt]))
    wait_task = np.where(same, gl[np.clip(i, 0, len(gl) - 1)], -1)
    # the latest record of the same process before each wait
    ro = np.lexsort((start[rec], pid[rec]))
    rec, rec_task = rec[ro], rec_task[ro]
    rkey = pid[rec]
    prod = np.full(len(wt), -1, np.int64)
    for p_ in np.unique(pid[wt]):
        lo, hi = np.searchsorted(rkey, p_, "left"), np.searchsorted(rkey, p_, "right")
        if hi == lo:
            continue
        w = np.flatnonzero(pid[wt] == p_)
        j = np.searchsorted(start[rec[lo:hi]], start[wt[w]], side="right") - 1
        prod[w] = np.where(j >= 0, rec_task[lo:hi][np.clip(j, 0, None)], -1)
    cons = wait_task
    m = (prod >= 0) & (cons >= 0)
    prod, cons = prod[m], cons[m]
    # a different stream, and a producer that had ended when the consumer started (else it was not waited for)
    m = (tid[prod] != tid[cons]) & (end[prod] <= start[cons])
    prod, cons = prod[m], cons[m]
    cur = cross[cons]
    take = (cur < 0) | (end[prod] > end[np.clip(cur, 0, None)])
    cross[cons[take]] = prod[take]


def _steps(start: np.ndarray, nh: int, marker_steps: np.ndarray, max_steps: int) -> pd.DataFrame:
    """Step markers (start/end node ids), the middle ``max_steps`` when there are more. The markers are the last
    host nodes (``_host_nodes``): a start node per step, then an end node per step."""
    return _step_table(start, nh, marker_steps, max_steps)[0]


def _step_table(start: np.ndarray, nh: int, marker_steps: np.ndarray, max_steps: int) -> tuple[pd.DataFrame, dict | None]:
    """``_steps``, and its columns as ``_step_arrays`` gives them when the markers are already in order and few
    enough (the arrays the frame was made of; None otherwise, to be read off the frame)."""
    m = len(marker_steps)
    if m == 0:
        return pd.DataFrame(columns=["step", "start_node", "end_node", "t0", "t1"]), None
    a = np.arange(nh - 2 * m, nh - m)
    b = a + m
    t0, t1 = start[a], start[b]
    # int64 columns as one block: half the cost of a frame of separate columns, paid once per rank on tiny ranks too
    st = pd.DataFrame(np.vstack([marker_steps, a, b, t0, t1]).T, columns=["step", "start_node", "end_node", "t0", "t1"])
    cols: dict | None = {"start_node": a, "end_node": b, "t0": t0, "t1": t1}
    if len(t0) > 1 and not bool((t0[1:] > t0[:-1]).all()):  # strictly increasing: already the one sorted order
        st, cols = st.sort_values("t0").reset_index(drop=True), None
    if len(st) > max_steps:
        lo = (len(st) - max_steps) // 2
        st, cols = st.iloc[lo: lo + max_steps].reset_index(drop=True), None
    return st, cols


def _window(g: Graph, steps: pd.DataFrame) -> np.ndarray:
    """Replay events in a topological order: (time, phase) with blocking calls ending in a second event."""
    is_gpu = g.ntype == GPU
    if steps.empty:  # no markers: the GPU's active window, from the first task's launch
        ws = int(min(g.start[is_gpu].min(), g.start[g.launch[is_gpu & (g.launch >= 0)]].min(initial=np.iinfo(np.int64).max)))
        we = int(g.end[is_gpu].max())
    else:
        cols = _step_arrays(g, steps)
        ws, we = int(cols["t0"].min()), int(cols["t1"].max())
    n = len(g.seq)
    nh = n - int(np.count_nonzero(is_gpu))
    if is_gpu[:nh].any():  # not host nodes first (never from build_graph): one mask over every node
        return _window_mixed(g, is_gpu, ws, we)
    # host nodes are ids < nh, GPU nodes (launched by host nodes) the rest: each part on its own slice
    hs = g.start[:nh]
    host_in = (hs >= ws) & (hs <= we)
    gl = g.launch[nh:]
    gs = g.start[nh:]
    gpu_in = np.where(gl >= 0, np.take(host_in, gl, mode="clip"), (gs >= ws) & (gs <= we))
    hid = np.flatnonzero(host_in)
    gid = np.flatnonzero(gpu_in)
    b = hid[g.ntype[hid] == BLOCKING]
    nh_, ng_ = len(hid), len(gid)
    # per event (host starts, GPU starts, blocking ends): its time, and (phase, seq) as one number (seq < n, so
    # phase * n + seq sorts as the pair does), each written in place into its part
    keys_t = np.empty(nh_ + ng_ + len(b), np.int64)
    keys_p = np.empty(len(keys_t), np.int64)
    np.take(hs, hid, out=keys_t[:nh_])
    t_g = keys_t[nh_: nh_ + ng_]
    np.take(gs, gid, out=t_g)
    # GPU tasks never before their launch; at equal times: blocking ends, then host starts, then GPU tasks
    lgi = gl[gid]
    has = lgi >= 0
    t_g[has] = np.maximum(t_g[has], g.start[lgi[has]])
    np.take(g.end, b, out=keys_t[nh_ + ng_:])
    gid += nh
    np.take(g.seq, hid, out=keys_p[:nh_])
    keys_p[:nh_] += n
    np.take(g.seq, gid, out=keys_p[nh_: nh_ + ng_])
    keys_p[nh_: nh_ + ng_] += 2 * n
    np.take(g.seq, b, out=keys_p[nh_ + ng_:])
    return _event_order(np.r_[hid, gid, -1 - b], keys_t, keys_p, n)


def _window_mixed(g: Graph, is_gpu: np.ndarray, ws: int, we: int) -> np.ndarray:
    """``_window`` for node types in any order."""
    host_in = ~is_gpu & (g.start >= ws) & (g.start <= we)
    gpu_in = is_gpu & np.where(g.launch >= 0, np.take(host_in, g.launch, mode="clip"), (g.start >= ws) & (g.start <= we))
    ids = np.flatnonzero(host_in | gpu_in)
    t = g.start[ids]
    gl = is_gpu[ids] & (g.launch[ids] >= 0)
    t[gl] = np.maximum(t[gl], g.start[g.launch[ids][gl]])
    phase = np.where(is_gpu[ids], 2, 1)
    b = ids[g.ntype[ids] == BLOCKING]
    n = len(g.seq)
    return _event_order(np.r_[ids, -1 - b], np.r_[t, g.end[b]], np.r_[phase * n + g.seq[ids], g.seq[b]], n)


def _event_order(ev: np.ndarray, keys_t: np.ndarray, keys_p: np.ndarray, n: int) -> np.ndarray:
    """``ev`` sorted by (keys_t, keys_p); keys_p (phase * n + seq, below 3 n) is unique per event. As one int64
    where the times' span allows: one sort of a few nearly sorted runs instead of a two-key lexsort."""
    if len(ev) == 0:
        return ev
    t0 = int(keys_t.min())
    if int(keys_t.max()) - t0 < (2**62) // (3 * n):
        key = keys_t - t0
        key *= 3 * n
        key += keys_p
        return ev[np.argsort(key, kind="stable")]
    return ev[np.lexsort((keys_p, keys_t))]


# --- replay ----------------------------------------------------------------------------------------------
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


def _step_arrays(g: Graph, steps: pd.DataFrame | None = None) -> dict[str, np.ndarray]:
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
    """(start_node, end_node) of ``g.steps`` as arrays (``_step_arrays``)."""
    cols = _step_arrays(g)
    return cols["start_node"], cols["end_node"]


def _median(x: np.ndarray) -> float:
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
    if st.empty:  # one pseudo-step: first launch (or GPU task) to the end of the last GPU task (``_window``
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


# --- transforms ------------------------------------------------------------------------------------------
def _in(g: Graph, windows: Iterable[tuple[int, int]]) -> np.ndarray:
    """Tasks a windowed edit applies to: those starting in a window, and GPU tasks launched in one."""
    w = np.asarray(list(windows), np.int64).reshape(-1, 2)
    if len(w) == 0:
        return np.zeros(len(g.start), bool)
    cov_s, cov_e = merge_intervals(w[:, 0], w[:, 1])

    def inside(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(cov_s, t, side="right") - 1  # -1 (before every window) reads the last one, then fails i >= 0
        return (i >= 0) & (t < cov_e[i])

    m = inside(g.start)
    gl = (g.ntype == GPU) & (g.launch >= 0)
    m[gl] |= inside(g.start[g.launch[gl]])
    return m


def _where(g: Graph, windows, m: np.ndarray) -> np.ndarray:
    """``m`` limited to the tasks ``windows`` selects (``_in``); ``m`` itself when there are no windows."""
    if windows is not None:
        m &= _in(g, windows)
    return m


def remove_data_wait(g: Graph, windows=None) -> None:
    """Batches are ready when asked for: data-wait ranges take no time (the work after them keeps its own)."""
    g.dur[_where(g, windows, g.ntype == DATA_WAIT)] = 0


def remove_host_sync(g: Graph, windows=None) -> None:
    """The host no longer waits for the GPU at synchronizing calls; the copies they issue still run on the GPU."""
    g.wait_on[_where(g, windows, g.ntype == BLOCKING)] = False


def launch_bound_to_graphs(g: Graph, windows=None) -> None:
    """CUDA-graph model: the launches of a step are replayed without host work between them.

    Host calls other than data waits, blocking calls and step markers cost nothing, and the host time between
    them (the framework's per-op overhead) goes when it is shorter than ``LAUNCH_GAP_NS``; longer host
    stretches are taken to be real host work (Python logic, CPU ops) that a graph would not remove; every GPU task can start a typical launch latency after the (now immediate) launch, and queued tasks
    follow each other at the trace's typical kernel-to-kernel delay. Blocking calls still end where the GPU does.
    """
    h = _where(g, windows, g.ntype == HOST)
    g.dur[h & (g.is_launch | (g.dur <= LAUNCH_GAP_NS))] = 0  # a long cudaMalloc or module load stays
    np.minimum(g.prev_lat, 0, out=g.prev_lat, where=h & (g.prev_lat <= LAUNCH_GAP_NS))
    np.minimum(g.cross_lat, 0, out=g.cross_lat, where=h & (g.cross_lat <= LAUNCH_GAP_NS))
    gp = _where(g, windows, g.ntype == GPU)
    np.minimum(g.launch_lat, g.defaults["launch"], out=g.launch_lat, where=gp)
    np.minimum(g.prev_lat, g.defaults["queue"], out=g.prev_lat, where=gp)


def rnn_to_cudnn(g: Graph, windows=None) -> None:
    """A per-timestep RNN loop becomes one fused call: inside ``windows`` only the GEMM kernels keep their time,
    launched back to back as in ``launch_bound_to_graphs`` (conservative: cuDNN still does the GEMMs)."""
    launch_bound_to_graphs(g, windows)
    g.dur[_where(g, windows, (g.ntype == GPU) & ~g.gemm)] = 0


def remove_warmup(g: Graph, windows=None) -> None:
    """Warm-up is left out: with ``windows`` (ranges given by the caller), the time inside them is cut
    (``cut_time``); without, the ledger's warm-up (``traceinsight.derive.steady``: leading warm-up steps are dropped from
    the steps used, the one-time work inside the others is cut). Applied once: a graph already in steady state
    (``steady_graph``) is left as it is."""
    if windows is not None:
        cut_time(g, windows)
        return
    if g.defaults.get("steady"):
        return
    g.defaults["steady"] = True
    st = g.steps
    if len(st) >= 3:
        keep = ~warmup_mask((st["t1"] - st["t0"]).to_numpy())
        if not keep.all():
            g.steps = st[keep].reset_index(drop=True)
    w = g.defaults.get("warmup")
    if w is not None:
        cut_time(g, w)


def _warmup_windows(w: "pd.DataFrame | None", rank: int) -> np.ndarray:
    """The warm-up regions ``w`` (the ledger's) of ``rank`` as (start, end) rows: one-time work the replay leaves out."""
    if w is None or w.empty:
        return np.zeros((0, 2), np.int64)
    w = w[w["rank"].to_numpy() == rank]
    return np.stack([w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)], axis=1) if len(w) else np.zeros((0, 2), np.int64)


def steady_graph(g: Graph) -> Graph:
    """The graph with its warm-up left out (``remove_warmup``), built once per graph: every what-if is priced on
    the steady state, so one-time work is never part of a predicted saving. The graph itself when it has none."""
    w = g.defaults.get("warmup")
    st = g.steps
    has_steps = len(st) >= 3 and warmup_mask((st["t1"] - st["t0"]).to_numpy()).any()
    if (w is None or not len(w)) and not has_steps:
        return g
    s = g.defaults.get("steady_graph")
    if s is None:
        s = g.copy()
        remove_warmup(s)
        s.window = _window(s, s.steps)
        ns, ne = replay(s)
        s.defaults["base"] = step_times(s, ns, ne)
        g.defaults["steady_graph"] = s
    return s


def cut_time(g: Graph, windows) -> None:
    """The time inside ``windows`` never happened: every task's duration and every edge's latency lose the part of
    them that lies inside a window (host and GPU alike), so work on either side closes up."""
    w = np.asarray(list(windows), np.int64).reshape(-1, 2)
    if len(w) == 0:
        return
    cov = Coverage(w[:, 0], w[:, 1])
    g.dur = np.maximum(g.dur - cov.overlap(g.start, g.end), 0)
    g.own = np.maximum(g.own - cov.overlap(g.end - g.own, g.end), 0)
    for pred, lat, ref in ((g.prev, g.prev_lat, g.end), (g.cross, g.cross_lat, g.end), (g.launch, g.launch_lat, g.start)):
        has = (pred >= 0) & (lat > 0)
        a = ref[pred[has]]
        lat[has] = np.maximum(lat[has] - cov.overlap(a, a + lat[has]), 0)


def warmup_mask(durs: np.ndarray) -> np.ndarray:
    """Leading warm-up steps: the steady-state model's own test (``traceinsight.derive.steady.warmup_steps``)."""
    return warmup_steps(durs)


def typical_gpu_latencies(g: Graph, windows=None) -> None:
    """Validation, not a cause: every GPU task waits only the trace's typical launch / kernel-to-kernel delay
    after its predecessors. Any step time lost is GPU idle that no edge of the graph explains."""
    m = _where(g, windows, g.ntype == GPU)
    d_q, d_l = g.defaults["queue"], g.defaults["launch"]
    ln = np.clip(g.launch, 0, None)
    np.minimum(g.prev_lat, d_q, out=g.prev_lat, where=m)
    np.minimum(g.cross_lat, d_q, out=g.cross_lat, where=m)
    g.launch_lat[m] = np.minimum(g.launch_lat[m], d_l + (g.end[ln] - g.start[ln])[m])


def _all(g: Graph, windows=None) -> None:
    for f in (remove_warmup, remove_data_wait, remove_host_sync, launch_bound_to_graphs):
        f(g, windows)


TRANSFORMS: dict[str, Callable[..., None]] = {
    "none": lambda g, windows=None: None,
    "remove_data_wait": remove_data_wait,
    "remove_host_sync": remove_host_sync,
    "launch_bound_to_graphs": launch_bound_to_graphs,
    "rnn_to_cudnn": rnn_to_cudnn,
    "typical_gpu_latencies": typical_gpu_latencies,
    "remove_warmup": remove_warmup,
    "all": _all,
}

ASSUMPTIONS = {
    "none": "the unmodified graph replayed",
    "remove_data_wait": "data-wait ranges take no time; host work, launches and GPU work keep their measured durations; the GPU may now be the bound",
    "remove_host_sync": "the host no longer waits at synchronizing calls (copies still run); everything else as measured",
    "launch_bound_to_graphs": f"CUDA-graph model: no per-op host overhead (gaps under {LAUNCH_GAP_NS // 1000} us) between launches, typical launch latency, kernels back to back at the trace's kernel-to-kernel delay; syncs and data waits stay",
    "rnn_to_cudnn": "the RNN region keeps only its GEMM kernels, launched back to back (a conservative cuDNN equivalent)",
    "typical_gpu_latencies": "validation: every GPU task waits only the typical launch / kernel-to-kernel delay after its predecessors",
    "remove_warmup": "warm-up (the ledger's one-time work and leading warm-up steps) is left out",
    "all": "data waits, host syncs and host launch overhead all removed, warm-up left out",
}






# --- API -------------------------------------------------------------------------------------------------
def build_graphs(views: Views, warmup: "pd.DataFrame | None") -> list[Graph]:
    """The graphs of every rank with GPU work; ``warmup``: the ledger's warm-up regions (rank, start_ns, end_ns),
    the one-time work the replay prices apart (``Derived.graphs`` passes its ledger's)."""
    ranks = sorted(int(r) for r in pd.unique(views.gpu_activity["rank"])) if not views.gpu_activity.empty else []
    return [gr for gr in (build_graph(views, r, warmup=warmup) for r in ranks) if gr is not None]


def _resolve(transform, windows) -> tuple[Callable[..., None], str, str]:
    """(function, name, assumptions) of a transform given by name, function, or list of them (applied in order)."""
    if isinstance(transform, (list, tuple)):
        parts = [_resolve(*(t if isinstance(t, tuple) else (t, windows))) + ((t[1] if isinstance(t, tuple) else windows),) for t in transform]

        def combined(g: Graph, _windows=None) -> None:
            for fn, _, _, w in parts:
                fn(g, w)

        return combined, "+".join(p[1] for p in parts), "; ".join(p[2] for p in parts)
    if isinstance(transform, str):
        if transform not in TRANSFORMS:
            raise ValueError(f"unknown what-if transform {transform!r}; known: {', '.join(TRANSFORMS)}")
        return TRANSFORMS[transform], transform, ASSUMPTIONS[transform]
    return transform, getattr(transform, "__name__", "custom"), (transform.__doc__ or "").strip().split("\n")[0]


def predict_step_ns(graphs: list[Graph], transform="all", windows=None) -> dict:
    """Median step time with ``transform`` applied, next to the unmodified replay and the measured steps, over
    ``graphs`` (``build_graphs``; an analysis keeps its own, ``Derived.graphs``).

    ``transform``: a name in ``TRANSFORMS``, a function editing a ``Graph`` in place, or a list of names,
    functions and ``(name, windows)`` pairs applied together (e.g. the transforms of the causes found, for
    ``kpis.what_if_all_step_ns``). ``windows``: optional (start_ns, end_ns) ranges (e.g. a finding's instances)
    the edit is limited to.
    """
    fn, name, words = _resolve(transform, windows)
    measured, base, pred, full_b, full_m = [], [], [], [], []
    for g in graphs:
        buf = None
        if "base" not in g.defaults:  # the unmodified replay, once per graph
            ns, ne = buf = replay(g)
            g.defaults["base"] = step_times(g, ns, ne)
            g.defaults["measured"] = step_times(g, g.start, g.end)
        m = g.defaults["measured"]
        full_b.append(g.defaults["base"])
        full_m.append(m)
        s = steady_graph(g)  # priced on the steady state: one-time work is never a saving
        b = s.defaults["base"]
        t = s.copy()
        fn(t, windows)
        if len(t.steps) != len(s.steps):
            t.window = _window(t, t.steps)
            b = b[s.steps["start_node"].isin(t.steps["start_node"]).to_numpy()]
        if len(t.steps) != len(g.steps):
            m = m[g.steps["start_node"].isin(t.steps["start_node"]).to_numpy()]
        ns2, ne2 = replay(t, buf)
        p = step_times(t, ns2, ne2)
        measured.append(m)
        base.append(b)
        pred.append(p)
    if not base:
        return {"step_ns": None, "baseline_step_ns": None, "measured_step_ns": None, "steps_used": 0,
                "transform": name, "assumptions": "no GPU work to replay", "replay_error_pct": None}
    m, b, p = (np.concatenate(x) for x in (measured, base, pred))
    med_m, med_b, med_p = (_median(x) if len(x) else None for x in (m, b, p))
    fb, fm = np.concatenate(full_b), np.concatenate(full_m)
    med_fm = _median(fm) if len(fm) else 0.0
    err = round(100.0 * (_median(fb) - med_fm) / med_fm, 3) if len(fm) and med_fm else None
    if any(steady_graph(gr) is not gr for gr in graphs):
        words += "; priced on the steady state (the ledger's warm-up left out of baseline and prediction)"
    no_steps = all(gr.steps.empty for gr in graphs)
    if no_steps:
        words += "; no step markers: the whole traced window is one step"
    return {
        "step_ns": None if med_p is None else int(round(med_p)),
        "baseline_step_ns": None if med_b is None else int(round(med_b)),
        "measured_step_ns": None if med_m is None else int(round(med_m)),
        "steps_used": int(len(p)),
        "transform": name,
        "assumptions": words,
        "replay_error_pct": err,
    }


def windows_of(instances) -> list[tuple[int, int]] | None:
    """(start_ns, end_ns) pairs from a finding's instances (a list of ``Instance`` or a DataFrame); None if none."""
    if instances is None:
        return None
    if isinstance(instances, pd.DataFrame):
        if instances.empty:
            return None
        return list(zip(instances["start_ns"].astype(np.int64), instances["end_ns"].astype(np.int64)))
    cols = instance_columns(instances)
    return list(zip(cols.start_ns.tolist(), cols.end_ns.tolist())) or None


#: Causes whose edit is limited to the finding's own instances (the syncs that stalled, the RNN region); the
#: others act on every task of their kind.
WINDOWED = {"remove_host_sync", "rnn_to_cudnn"}


def what_if_for(graphs: list[Graph], name: str | None, instances=None) -> dict | None:
    """``Finding.what_if`` for a root-cause finding whose rule declares transform ``name`` (``Rule.what_if``; None
    for symptoms and rules without a model).

    The windowed transforms (``WINDOWED``) edit only the finding's instances (stalling syncs, RNN regions); without
    instances there is nothing to edit and no prediction.
    """
    if name is None:
        return None
    windows = windows_of(instances) if name in WINDOWED else None
    if name in WINDOWED and windows is None:
        return None
    r = predict_step_ns(graphs, name, windows=windows)
    return r if r["step_ns"] is not None else None


def _selected(g: Graph, classes: tuple[str, ...] | None) -> np.ndarray:
    """The GPU nodes a modelled speed-up shortens: kernels of the work ``classes`` (``work_classes``), or every
    GPU task when the finding cannot say which (None)."""
    sel = g.ntype == GPU
    if classes is not None:
        sel = sel & np.isin(g.work, [_WORK.index(c) for c in classes if c in _WORK])
    return sel


def _classes_label(classes: tuple[str, ...] | None) -> str:
    if classes is None:
        return "GPU tasks"
    if tuple(classes) == GEMM_CLASSES:
        return "GEMM/convolution kernels"
    return "/".join(WORK_CLASSES.get(c, c) for c in classes) + " kernels"


def faster_gpu_work(saved_ns: int, gemm_only: bool = False, classes: tuple[str, ...] | None = None) -> Callable[..., None]:
    """A transform for a modelled speed-up of busy work (tensor cores, fuller grids, pinned copies): the GPU tasks
    it names (kernels of the work ``classes`` the rule declares, ``gemm_only`` = the GEMM/convolution classes; else
    every GPU task, when the finding cannot say which) get shorter by one common factor, so that together they lose
    ``saved_ns`` over the whole trace. What the step gets back is then what the critical path gets back: kernels
    that only ever run while the host is the bound give back nothing."""
    classes = GEMM_CLASSES if gemm_only and classes is None else (tuple(classes) if classes is not None else None)

    def faster(g: Graph, windows=None) -> None:
        sel = _selected(g, classes)
        total = float(g.dur[sel].sum())
        if total <= 0:
            return
        factor = 1.0 - min(float(saved_ns) / total, 0.95)
        g.dur[sel] = np.round(g.dur[sel] * factor).astype(g.dur.dtype)

    faster.__doc__ = (
        f"the {_classes_label(classes)} get shorter by one factor, {saved_ns / 1e6:.3g} ms "
        "in all; host work, launches and every wait keep their measured times"
    )
    return faster


def what_if_faster(graphs: list[Graph], saved_ns: int, gemm_only: bool = False, classes: tuple[str, ...] | None = None) -> dict | None:
    """``Finding.what_if`` for a modelled speed-up of busy work (:func:`faster_gpu_work`), or None without steps to
    replay. The factor is taken over every rank's selected GPU time, so the ranks shrink alike."""
    gs = graphs
    if not gs or saved_ns <= 0:
        return None
    classes = GEMM_CLASSES if gemm_only and classes is None else (tuple(classes) if classes is not None else None)
    per_sel = [float(g.dur[_selected(g, classes)].sum()) for g in gs]
    total = sum(per_sel)
    if total <= 0:
        return None
    share = float(saved_ns) / total
    per_rank = [share * t for t in per_sel]
    fns = [(g.ntype, faster_gpu_work(int(ns), classes=classes)) for g, ns in zip(gs, per_rank)]

    def faster(g: Graph, windows=None) -> None:
        # ``g`` is a copy of one of ``gs``: copies share the structure arrays, so its node types name its source
        fn = next((f for ntype, f in fns if ntype is g.ntype), None)
        if fn is not None:
            fn(g, windows)

    faster.__doc__ = fns[0][1].__doc__
    faster.__name__ = "faster_gpu_work"
    r = predict_step_ns(gs, faster)
    return r if r["step_ns"] is not None else None


def grow_batch(factor: float, fixed_below_ns: int) -> Callable[..., None]:
    """A transform for a larger batch (TI030): GPU tasks of at least ``fixed_below_ns`` take ``factor`` times as long
    (their work scales with the batch), shorter ones keep their time (launch-bound: a larger grid in the same
    latency); host work, launches and every wait keep their measured times. A model, not a measurement: a larger
    batch can pick other kernels, and host work per step can grow with it too (data loading)."""

    def grow(g: Graph, windows=None) -> None:
        sel = (g.ntype == GPU) & (g.dur >= fixed_below_ns)
        g.dur[sel] = np.round(g.dur[sel] * float(factor)).astype(g.dur.dtype)

    grow.__doc__ = (f"GPU tasks of {fixed_below_ns / 1e3:g} µs or longer take {factor:.3g}x as long (they scale with the batch); "
                    "shorter, launch-bound ones keep their time; host work, launches and every wait keep their measured times")
    return grow


def what_if_batch(graphs: list[Graph], factor: float, fixed_below_ns: int) -> dict | None:
    """The replay at ``factor`` times the batch (:func:`grow_batch`): ``Finding.what_if`` plus ``per_sample_ratio``
    (time per sample after / before: step after / (factor x step before)) and ``throughput_gain`` (its inverse);
    None without steps to replay."""
    if factor <= 0:
        return None
    r = predict_step_ns(graphs, grow_batch(factor, fixed_below_ns))
    if r["step_ns"] is None or not r["baseline_step_ns"]:
        return None
    if factor >= 1 and r["step_ns"] < r["baseline_step_ns"]:
        r["step_ns"] = r["baseline_step_ns"]  # more work per step never shortens it (a replay's rounding can)
    ratio = float(r["step_ns"]) / (float(factor) * float(r["baseline_step_ns"]))
    r["batch_factor"] = float(factor)
    r["per_sample_ratio"] = ratio
    r["throughput_gain"] = 1.0 / ratio if ratio > 0 else None
    return r

