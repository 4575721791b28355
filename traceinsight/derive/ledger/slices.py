"""One (rank, device)'s slices and gaps: the labelling by precedence of the package docstring, as arrays.

The steps, in order: the busy intervals (``_busy_intervals``), each gap's own bucket from facts about the whole gap
(``_gap_codes``, ``_gap_labels``), the pieces of mixed intervals and cut gaps labelled edge by edge
(``_edge_pieces``), step edges and those pieces put in their places (``_insert_pieces``), and neighbours of equal
(bucket, step) merged into slices (``_slice_heads``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceinsight.vocab.buckets import BUCKETS, BUSY_BUCKETS, WARMUP_BUCKET
from traceinsight.vocab.intervals import run_bounds
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.derive.ledger.intervals import EMPTY, points_inside, merged, overlapping, spans, sweep

_CODE = {b: i for i, b in enumerate(BUCKETS)}


def device_slices(
    s: np.ndarray,
    e: np.ndarray,
    cls: np.ndarray,
    launch_end: tuple[np.ndarray, np.ndarray] | None,
    host: dict[str, Any],
    host_traced: bool,
    steps: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> dict[str, np.ndarray]:
    """Slices and gaps of one (rank, device) as arrays: the labelling by precedence of the module docstring.

    The window is a chain of merged busy intervals and the gaps between them. Most busy intervals hold one class
    of work and most gaps get one bucket from facts about the whole gap (queued work, a sync, a short launch
    gap, no launch), so each becomes one piece at once; only busy intervals that mix classes and gaps that warm-up,
    data wait or partial host activity cut are labelled edge by edge. Step edges cut the pieces, and neighbours
    with equal (bucket, step) merge: the slices are the maximal runs of constant (bucket, step), whatever the
    pieces were.
    """
    n_busy = len(BUSY_BUCKETS)
    s, e, cls, head, us, ue, pos, c_lo, mixed = _busy_intervals(s, e, cls)
    w0, w1 = int(us[0]), int(ue[-1])
    # consecutive merged intervals never touch: gap k lies between interval k and k + 1, and has positive length
    gs, ge = ue[:-1], us[1:]
    n_g = len(gs)
    nl, g_code, share = _gap_codes(launch_end, s, head, gs, ge, host["sync"])
    default = _CODE["idle_untraced" if host_traced else "idle_other"]

    def clip(ab: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.maximum(ab[0], w0), np.minimum(ab[1], w1)
        keep = b > a
        return a[keep], b[keep]

    warm, wait = clip(host["warmup"]), clip(host["data_wait"])
    g_lab, cut, hb = _gap_labels(g_code, gs, ge, warm, wait, share, host["host_busy"], default)

    # pieces in time order: interval k at 2k, gap k at 2k + 1
    el_s = np.empty(2 * len(us) - 1, np.int64)
    el_s[0::2], el_s[1::2] = us, gs
    el_l = np.empty(len(el_s), np.int8)
    el_l[0::2], el_l[1::2] = c_lo, g_lab
    el_g = np.full(len(el_s), -1, np.int32 if n_g < 2**31 else np.int64)  # the gap of each idle piece
    el_g[1::2] = np.arange(n_g)
    # a mixed interval or cut gap stays in as an empty piece: its own pieces start where it starts and come after
    # it, and empty pieces (as points: intervals of zero-length rows only) are skipped below
    xs, xl, xg = _edge_pieces(s, e, cls, head, pos, mixed, cut, gs, ge, g_code, warm, wait, share, hb, default)
    # step edges cut the pieces; a cut takes the bucket and gap of the piece it falls in
    st_s, st_e, st_n = steps
    edges = np.unique(np.concatenate([st_s, st_e])) if len(st_s) else EMPTY
    inner = edges[(edges > w0) & (edges < w1)]
    if len(inner):
        xs.append(inner), xl.append(np.full(len(inner), -1, np.int8)), xg.append(np.full(len(inner), -1, np.int64))
    if xs:
        el_s, el_l, el_g = _insert_pieces(el_s, el_l, el_g, xs, xl, xg)
    idx, step_of_sorted = _slice_heads(el_s, el_l, edges, steps, w1)
    out_s = el_s[idx]
    out_l = el_l[idx]
    ns = np.empty(len(out_s), np.int64)  # a slice ends where the next starts (fresh 10^6-row arrays are what
    np.subtract(out_s[1:], out_s[:-1], out=ns[:-1])  # costs here: each is made once)
    ns[-1] = w1 - out_s[-1]
    # the idle slices by gap (the gap each starts in) and bucket, summed once for all devices in ``build_ledger``
    idle = np.flatnonzero(out_l >= n_busy)  # positions: busy and idle slices alternate, which a mask per take
    per_gap = (el_g[idx[idle]], out_l[idle], ns[idle])  # would walk with a mispredicted branch per row
    return {"step": step_of_sorted(idx), "start": out_s, "ns": ns, "label": out_l, "gs": gs, "ge": ge, "nl": nl, "per_gap": per_gap}


def _busy_intervals(s: np.ndarray, e: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, ...]:
    """The merged busy intervals of one device's GPU rows: the rows in start order (s, e, cls), the first row of
    each interval (``head``), the intervals (us, ue), which rows are non-empty (``pos``), each interval's lowest
    class and whether it mixes classes. Zero-length rows (instant copies, clipped kernels) still bound gaps, as
    in ``views.gaps``."""
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e, cls = s[order], e[order], cls[order]
    run_end = np.maximum.accumulate(e)
    # an interval's end is the running end at its last row: every earlier row ended before the interval began
    # (and e >= s), so the running maximum there is the interval's own largest end
    head, last = run_bounds(s, run_end)
    us, ue = s[head], run_end[last]
    # each interval's classes among its non-empty rows: one class is one piece, several are labelled row by row
    pos = e > s
    all_pos = bool(pos.all())  # the usual case: no zero-length row to leave out
    c_lo = np.minimum.reduceat(cls if all_pos else np.where(pos, cls, 3), head)
    c_hi = np.maximum.reduceat(cls if all_pos else np.where(pos, cls, -1), head)
    empty_iv = c_hi < 0  # only zero-length rows: a point, no piece
    mixed = (c_lo != c_hi) & ~empty_iv
    return s, e, cls, head, us, ue, pos, c_lo, mixed


def _gap_codes(launch_end: tuple[np.ndarray, np.ndarray] | None, s: np.ndarray, head: np.ndarray, gs: np.ndarray, ge: np.ndarray,
               sync: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Each gap's next launch end (NaN: none linked) and its own bucket code from facts about the whole gap (queued
    work, a sync, a short launch gap, no launch), lowest precedence first; -1 where host work (or none) decides.

    A gap that begins inside a blocking call is the sync's for as long as the host was blocked in it (B), not
    beyond: without the sync the host would have reached its next launch B earlier, so a gap longer than B still
    lasts the rest, and that rest is what the host did after the call (host busy, untraced, a late launch), not
    the sync's. The sync's shares of such gaps are returned as intervals (each from its gap's start), the gaps
    keeping the code the rest of them takes; every other sync gap is the sync's whole."""
    n_g = len(gs)
    # the call that enqueued the next work: the earliest-returning launch among activities starting at the gap end
    if launch_end is not None and n_g and len(launch_end[0]):
        ks, kv = launch_end
        if len(ks) == len(s) and np.array_equal(ks, s):
            nl = kv[head[1:]]  # every row has a launch and no two start together: a gap end's key is its row's
        else:
            i = np.searchsorted(ks, ge)
            np.minimum(i, len(ks) - 1, out=i)  # past the last key: the last one, which is below the gap end
            nl = np.where(ks[i] == ge, kv[i], np.nan)
    else:
        nl = np.full(n_g, np.nan)
    linked = ~np.isnan(nl)
    queued = linked & (nl <= gs)
    late = linked & ~queued
    in_sync = points_inside(*sync, gs) & ~queued
    part, share_end = EMPTY, EMPTY
    if in_sync.any():
        at = np.flatnonzero(in_sync)
        k = np.searchsorted(sync[0], gs[at], side="right") - 1  # the blocking call (merged) the gap begins in
        blocked = sync[1][k] - sync[0][k]
        longer = ge[at] - gs[at] > blocked
        part, share_end = at[longer], gs[at[longer]] + blocked[longer]
        in_sync[part] = False
    short = late & ((ge - gs) < LAUNCH_GAP_NS)
    g_code = np.full(n_g, -1, dtype=np.int8)
    g_code[~linked] = _CODE["idle_other"]
    g_code[short] = _CODE["idle_launch_bound"]
    g_code[in_sync] = _CODE["idle_host_sync"]
    g_code[queued] = _CODE["idle_gpu_dependency"]
    return nl, g_code, (gs[part], share_end)


def _gap_labels(g_code: np.ndarray, gs: np.ndarray, ge: np.ndarray, warm: tuple[np.ndarray, np.ndarray], wait: tuple[np.ndarray, np.ndarray],
                share: tuple[np.ndarray, np.ndarray], host_busy: Any, default: int) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The bucket of each gap that is one piece, which gaps are cut (labelled edge by edge: warm-up, data wait or a
    sync's share (``_gap_codes``) touch them, or host busy covers them in part) and the rank's host-busy union when
    it was needed."""
    n_g = len(gs)
    # gaps that warm-up, data wait or a sync's share touch are labelled edge by edge
    cut = np.zeros(n_g, dtype=bool)
    for a, b in (warm, wait, share):
        cut[overlapping(gs, ge, a, b)] = True
    # gaps the host decides: host busy covers them whole, not at all, or in part (then edge by edge)
    free = np.flatnonzero(g_code < 0)
    g_lab = g_code.copy()  # the bucket of a gap that is one piece
    hb = host_busy() if len(free) else (EMPTY, EMPTY)
    if len(free):
        g_lab[free] = default
        if len(hb[0]):
            i = np.searchsorted(hb[1], gs[free], side="right")  # the first busy range ending after the gap starts
            j = np.minimum(i, len(hb[0]) - 1)
            touch = (i < len(hb[0])) & (hb[0][j] < ge[free])
            whole = touch & (hb[0][j] <= gs[free]) & (hb[1][j] >= ge[free])
            g_lab[free[whole]] = _CODE["idle_host_busy"]
            cut[free[touch & ~whole]] = True
    return g_lab, cut, hb


def _edge_pieces(s: np.ndarray, e: np.ndarray, cls: np.ndarray, head: np.ndarray, pos: np.ndarray, mixed: np.ndarray, cut: np.ndarray,
                 gs: np.ndarray, ge: np.ndarray, g_code: np.ndarray, warm: tuple[np.ndarray, np.ndarray], wait: tuple[np.ndarray, np.ndarray],
                 share: tuple[np.ndarray, np.ndarray], hb: tuple[np.ndarray, np.ndarray],
                 default: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The pieces of mixed intervals and cut gaps, edge by edge: (starts, labels, gaps) lists, one entry each. A
    sync holds its whole gaps and its shares of the others (``share``, from ``_gap_codes``)."""
    n_busy = len(BUSY_BUCKETS)
    xs: list[np.ndarray] = []
    xl: list[np.ndarray] = []
    xg: list[np.ndarray] = []
    if mixed.any():
        mk = np.flatnonzero(mixed)
        rows = spans(head[mk], np.diff(np.r_[head, len(s)])[mk])  # the rows of the mixed intervals
        rows = rows[pos[rows]]
        rs, re_, rc = s[rows], e[rows], cls[rows]
        p, label = sweep([(k, *merged(rs[rc == k], re_[rc == k])) for k in range(n_busy)], -1)
        inside = label >= 0
        xs.append(p[:-1][inside]), xl.append(label[inside]), xg.append(np.full(int(inside.sum()), -1, np.int64))
    if cut.any():
        ci = np.flatnonzero(cut)
        cs, ce, cc = gs[ci], ge[ci], g_code[ci]
        sets = [(_CODE[WARMUP_BUCKET], *warm)]
        for code in ("idle_gpu_dependency", "data_wait", "idle_host_sync", "idle_launch_bound", "idle_other", "idle_host_busy"):
            if code == "data_wait":
                sets.append((_CODE["idle_data_wait"], *wait))
            elif code == "idle_host_busy":
                take = overlapping(hb[0], hb[1], cs, ce)
                sets.append((_CODE[code], hb[0][take], hb[1][take]))
            elif code == "idle_host_sync":
                whole = cc == _CODE[code]
                a, b = np.concatenate([cs[whole], share[0]]), np.concatenate([ce[whole], share[1]])
                o = np.argsort(a, kind="stable")
                sets.append((_CODE[code], a[o], b[o]))
            else:
                sets.append((_CODE[code], cs[cc == _CODE[code]], ce[cc == _CODE[code]]))
        sets.append((default, cs, ce))  # the rest of a cut gap
        p, label = sweep(sets, -1)
        left = p[:-1]
        inside = points_inside(cs, ce, left)  # only what lies in a cut gap: the sets reach beyond them
        left, label = left[inside], label[inside]
        xs.append(left), xl.append(label), xg.append(ci[np.searchsorted(cs, left, side="right") - 1])
    return xs, xl, xg


def _insert_pieces(el_s: np.ndarray, el_l: np.ndarray, el_g: np.ndarray, xs: list[np.ndarray], xl: list[np.ndarray],
                   xg: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces with the extra ones (edge-by-edge pieces, step cuts: label -1) put in their places; a cut takes
    the bucket and gap of the piece it falls in."""
    x_s, x_l, x_g = np.concatenate(xs), np.concatenate(xl), np.concatenate(xg)
    o = np.argsort(x_s, kind="stable")  # pieces before cuts at equal times: a cut takes the piece starting there
    x_s, x_l, x_g = x_s[o], x_l[o], x_g[o]
    # each lands after the pieces starting at or before it: its place among all is that count plus its own rank
    at = np.searchsorted(el_s, x_s, side="right") + np.arange(len(x_s))
    old = np.ones(len(el_s) + len(x_s), dtype=bool)
    old[at] = False
    grown = []
    for a, x in ((el_s, x_s), (el_l, x_l), (el_g, x_g)):
        out = np.empty(len(old), a.dtype)
        out[old], out[at] = a, x
        grown.append(out)
    el_s, el_l, el_g = grown
    q = at[x_l < 0]  # the cuts; one right after another takes what the first of them takes
    if len(q):
        run = np.r_[True, q[1:] != q[:-1] + 1]
        src = q[run][np.cumsum(run) - 1] - 1
        el_l[q], el_g[q] = el_l[src], el_g[src]
    return el_s, el_l, el_g


def _slice_heads(el_s: np.ndarray, el_l: np.ndarray, edges: np.ndarray, steps: tuple[np.ndarray, np.ndarray, np.ndarray],
                 w1: int) -> tuple[np.ndarray, Any]:
    """The pieces that start a slice (a maximal run of equal (bucket, step), empty pieces skipped), and the step
    of ascending pieces (a function of their positions)."""
    st_s, st_e, st_n = steps
    # empty pieces (left-out ones, points, pieces a cut starts with; a piece ends where the next starts) are
    # skipped when neighbours merge below, not copied out
    full = np.empty(len(el_s), dtype=bool)
    np.greater(el_s[1:], el_s[:-1], out=full[:-1])
    full[-1] = el_s[-1] < w1

    # the step of a piece: the latest-starting marker that contains its start, -1 outside. It is constant between
    # step edges, so it is kept per edge and read for the pieces asked about (no array of it per piece)
    if len(edges):
        i = np.searchsorted(st_s, edges, side="right") - 1
        ok = i >= 0
        ok[ok] = st_e[i[ok]] > edges[ok]
        val = np.r_[-1, np.where(ok, st_n[np.maximum(i, 0)], -1)].astype(np.int64)
        first = np.searchsorted(el_s, edges, side="left")  # the first piece at or after each edge
    else:
        val, first = np.full(1, -1, np.int64), EMPTY

    def step_of(k: np.ndarray) -> np.ndarray:
        return val[np.searchsorted(first, k, side="right")]

    def step_of_sorted(k: np.ndarray) -> np.ndarray:  # ``step_of`` of ascending pieces: runs between edges
        return np.repeat(val, np.diff(np.r_[0, np.searchsorted(k, first, side="left"), len(k)]))

    # merge neighbours with equal (bucket, step): the step changes only at a piece where an edge lands
    change = np.empty(len(el_s), dtype=bool)
    change[0] = True
    np.not_equal(el_l[1:], el_l[:-1], out=change[1:])
    at_edge = np.unique(first[(first > 0) & (first < len(el_s))])
    if len(at_edge):
        change[at_edge] |= step_of(at_edge) != step_of(at_edge - 1)
    # after a run of empty pieces, compare with the piece before the run
    z = np.flatnonzero(~full)
    if len(z):
        change[z] = False
        last = np.r_[z[1:] != z[:-1] + 1, True]  # the last empty piece of each run
        first_z = np.r_[True, last[:-1]]
        nxt, prev = z[last] + 1, z[first_z] - 1
        ok = nxt < len(el_s)  # an empty run at the very end is followed by nothing
        nxt, prev = nxt[ok], prev[ok]
        has_prev = prev >= 0
        ch = np.ones(len(nxt), dtype=bool)
        n_, p_ = nxt[has_prev], prev[has_prev]
        ch[has_prev] = (el_l[n_] != el_l[p_]) | (step_of(n_) != step_of(p_))
        change[nxt] = ch
    return np.flatnonzero(change), step_of_sorted
