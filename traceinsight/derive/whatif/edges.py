"""The graph's edges: program and stream order, hand-offs between threads and streams (inferred and from
recorded events), launch calls to their GPU tasks, and what blocking calls and full launch queues wait for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.patterns import EVENT_RECORD, STREAM_WAIT
from traceinsight.derive.whatif.graph import HANDOFF_MIN_GAP_NS, STREAM_DEP_MAX_NS
from traceinsight.derive.whatif.nodes import pair_key, latest_end_before
from traceinsight.vocab.masks import coded_match


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


def order_in_groups(nh: int, pid: np.ndarray, tid: np.ndarray, dev: np.ndarray, start: np.ndarray,
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
    c = latest_end_before(eo, es, start[qi])
    return qi, c, end[c]


def _one_value(a: np.ndarray) -> bool:
    """Every element of ``a`` is the same (a process with one thread, a device with one stream)."""
    return len(a) > 0 and a.min() == a.max()


def inferred_cross(cross, nh, pid, dev, tid, start, end, has_prev, prev_gap, prev_end, launch_end) -> None:
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


def launch_positions(lbl: np.ndarray, rt: slice, act_lbl: np.ndarray, launch_idx: np.ndarray, gpu_idx: np.ndarray,
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


#: A launch call waits for a full launch queue when it lasts at least this long (a launch costs microseconds)...
QUEUE_FULL_CALL_NS = 200_000
#: ...while at least this many GPU tasks it launched earlier have not started (CUDA queues about a thousand).
QUEUE_FULL_PENDING = 256


def queue_full(cand: np.ndarray, launch_start: np.ndarray, launch_end: np.ndarray, gs: np.ndarray) -> np.ndarray:
    """Of the GPU tasks ``cand`` (per GPU node), those whose launch call blocked on a full launch queue: a long
    call (``QUEUE_FULL_CALL_NS``) made while ``QUEUE_FULL_PENDING`` tasks launched before it were still waiting
    to start."""
    out = np.zeros(len(cand), bool)
    long_ = cand & (launch_end - launch_start >= QUEUE_FULL_CALL_NS)
    if not long_.any():
        return out
    launched = np.flatnonzero(cand | (launch_start > 0))
    # value sorts of times in nearly time order: a stable sort (timsort) takes the few runs as they come, the
    # default quicksort sorts them again (the sorted values are the same)
    ls = np.sort(launch_start[launched], kind="stable")
    ts = np.sort(gs[launched], kind="stable")
    t = launch_start[long_]
    pending = np.searchsorted(ls, t, side="left") - np.searchsorted(ts, t, side="right")
    out[np.flatnonzero(long_)[pending >= QUEUE_FULL_PENDING]] = True
    return out


def queue_waits(b_ids: np.ndarray, per_b: list, wmax: np.ndarray, calls: np.ndarray, call_dev: np.ndarray,
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


def launched_by_stream(order: np.ndarray, same: np.ndarray, nh: int, hl: np.ndarray, dev: np.ndarray,
                        tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """The GPU tasks with a launch call, per (device, stream) in stream order (start, end, id), streams in
    ``pair_key(device, stream)`` order: read off the stream order already built rather than sorted again."""
    n = len(order)
    gt = tid[nh:]
    if len(dev) and (min(dev.min(), gt.min()) < -2**31 or max(dev.max(), gt.max()) >= 2**31):
        gids = nh + np.flatnonzero(hl)  # ids beyond 32 bits: ``pair_key`` may merge streams, as it always did
        skey = pair_key(dev[gids - nh], tid[gids])
        return [_time_order(gids[skey == sk], start, end) for sk in np.sort(pd.unique(skey))]
    heads = np.flatnonzero(~same) + 1  # positions in ``order`` where a thread / stream begins (besides 0)
    bounds = np.r_[nh, heads[heads > nh], n]  # the GPU nodes are ordered after every host node
    segs = [order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()) if b > a]
    segs = [sg for sg in (s_[hl[s_ - nh]] for s_ in segs) if len(sg)]
    keys = [int(pair_key(dev[sg[0] - nh], tid[sg[0]])) for sg in segs]
    return [segs[i] for i in np.argsort(keys, kind="stable")]


def recorded_event_waits(rt_names, pid, tid, hl, launch, cross, start, end, gl) -> None:
    """GPU-side edges from ``cudaEventRecord`` / ``cudaStreamWaitEvent`` calls, where the trace has them.

    Traces do not say which stream an event was recorded on or which event a wait names; the usual reading is
    used: a record marks the last GPU task its thread launched before it, and a wait makes the next GPU task its
    thread launches depend on the latest record of the process. Edges within one stream are left to stream order.
    Fills ``cross`` in place where no inferred edge is set, or where the recorded producer ends later. ``gl``: the
    GPU nodes with a launch call, ascending.
    """
    is_rec = coded_match(rt_names, EVENT_RECORD, case=True)
    is_wt = coded_match(rt_names, STREAM_WAIT, case=True)
    if not is_rec.any() or not is_wt.any():
        return
    ok = np.flatnonzero(hl >= 0)  # the runtime calls, named by ``rt_names`` in the same order
    rec, wt = ok[is_rec], ok[is_wt]
    lh = launch[gl]
    tkey = pair_key(pid[lh], tid[lh])  # the launching thread
    o = np.lexsort((start[lh], tkey))
    gl, tkey, lstart = gl[o], tkey[o], start[lh][o]

    def launches_before(q: np.ndarray) -> np.ndarray:
        """For each host call: how many launches of its thread (in thread order) started before or with it."""
        qk = pair_key(pid[q], tid[q])
        keys = np.r_[tkey, qk]
        ts = np.r_[lstart, start[q]]
        isq = np.r_[np.zeros(len(gl), bool), np.ones(len(q), bool)]
        order = np.lexsort((isq, ts, keys))
        cum = np.cumsum(~isq[order])
        out = np.empty(len(q), np.int64)
        out[order[isq[order]] - len(gl)] = cum[isq[order]]
        return out  # index of the next launch in the sorted arrays; minus one: the last before

    i = launches_before(rec) - 1
    same = (i >= 0) & (tkey[np.clip(i, 0, None)] == pair_key(pid[rec], tid[rec]))
    rec_task = np.where(same, gl[np.clip(i, 0, None)], -1)
    i = launches_before(wt)
    same = (i < len(gl)) & (tkey[np.clip(i, 0, len(gl) - 1)] == pair_key(pid[wt], tid[wt]))
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
