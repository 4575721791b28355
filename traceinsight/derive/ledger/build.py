"""``build_ledger``: a timeline's ledger, from the GPU activity, the host facts and the step markers, one
(rank, device) at a time (``slices``), summed per step and device and per gap in one pass each."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS
from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.patterns import COLLECTIVE, COMPILED_WRAPPER, FRAMEWORK_DISPATCH, UNIFIED_MEMORY
from traceinsight.derive.steady import host_arrays, may_match, step_arrays
from traceinsight.derive.ledger.account import Ledger, Later
from traceinsight.derive.ledger.frames import GAP_INT_COLS, by_device_frame, empty_ledger, first_max_row, gaps_frame, slices_frame, windows_frame
from traceinsight.derive.ledger.host import blocking_parts, data_wait_mask
from traceinsight.derive.ledger.intervals import EMPTY, merged, run_unions, union_of_runs
from traceinsight.derive.ledger.slices import device_slices
from traceinsight.derive.ledger.warmup import warmup_regions

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.views import Views

_HOST_BUSY_KINDS = ("cpu_op", "python", "runtime")


def build_ledger(views: "Views") -> Ledger:
    """The ledger of a timeline (see the package docstring); ``Derived.ledger`` builds it once per analysis."""
    act = views.gpu_activity
    if act.empty:
        return empty_ledger()
    a_rank, a_dev, a_s, a_e, a_cls = _activity(act)
    blocking = blocking_parts(views)
    warm = warmup_regions(views, blocking)
    parts, keys = _device_parts(views, blocking, warm, a_rank, a_dev, a_s, a_e, a_cls)
    if not parts:
        return empty_ledger()
    return _assemble(parts, keys, warm)


def _activity(act: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """The GPU activity's rank, device, start, end and class (0 compute, 1 collective, 2 copy) as arrays, in
    (rank, device) order."""
    is_kernel = kind_mask(act["kind"], ("kernel",))
    coll = is_kernel & name_mask(act["name"], COLLECTIVE)
    a_cls = np.where(coll, 1, np.where(is_kernel, 0, 2)).astype(np.int8)
    a_rank = act["rank"].to_numpy(np.int64)
    a_dev = act["device"].to_numpy(np.int64)
    a_s = act["start_ns"].to_numpy(np.int64)
    a_e = a_s + np.maximum(act["dur_ns"].to_numpy(np.int64), 0)
    if a_rank.min() != a_rank.max() or a_dev.min() != a_dev.max():  # one (rank, device): already in order
        order = np.lexsort((a_dev, a_rank))
        a_rank, a_dev, a_s, a_e, a_cls = a_rank[order], a_dev[order], a_s[order], a_e[order], a_cls[order]
    return a_rank, a_dev, a_s, a_e, a_cls


def _host_busy(ha: dict[str, Any]) -> tuple[Any, bool]:
    """The host-busy rows' union per rank (a function of the rank, as runs), and whether the host holds one rank.

    One mask (the empty rows dropped, as ``merged`` would), each rank's starts and ends taken once and merged in
    place (no frame, no full-length copies: these are most host rows)."""
    h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]
    h_kind = ha["kind"]
    hb = kind_mask(h_kind, _HOST_BUSY_KINDS)
    if may_match(ha["name"], FRAMEWORK_DISPATCH):  # framework dispatch traced as annotations (TF eager, JAX/PjRt) is host work too
        note = kind_mask(h_kind, ("annotation",))
        if note.any():
            hb |= note & name_mask(ha["name"], FRAMEWORK_DISPATCH)
    if may_match(ha["name"], COMPILED_WRAPPER):  # so is compiled code's wrapper (inductor's ``call``, guards)
        note = kind_mask(h_kind, ("annotation",))
        if note.any():
            hb |= note & name_mask(ha["name"], COMPILED_WRAPPER)
    hb &= h_dur > 0
    hb_one_rank = len(h_rank) > 0 and h_rank.min() == h_rank.max()

    def host_busy_runs(rank: int) -> list[tuple[np.ndarray, np.ndarray]]:
        m = hb if hb_one_rank and h_rank[0] == rank else hb & (h_rank == rank)
        s = h_start[m].astype(np.int64, copy=False)
        e = h_dur[m].astype(np.int64, copy=False)
        e += s
        return run_unions(s, e)

    return host_busy_runs, hb_one_rank


def _migrations(views: "Views") -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Unified-memory migrations (``UNIFIED_MEMORY``) that no launch call enqueued: (rank, device, start). None
    without any (one test of the name categories)."""
    act = views.gpu_activity
    if act.empty or not may_match(act["name"], UNIFIED_MEMORY, case=True):  # the same pattern and flags as the mask: one cached test
        return None
    m = name_mask(act["name"], UNIFIED_MEMORY, case=True)
    if not m.any():
        return None
    ln = views.launches
    if not ln.empty:
        m[np.isin(act.index.to_numpy(), ln["gpu_idx"].to_numpy())] = False
    pos = np.flatnonzero(m)
    return (act["rank"].to_numpy()[pos].astype(np.int64), act["device"].to_numpy()[pos].astype(np.int64),
            act["start_ns"].to_numpy()[pos].astype(np.int64))


def _launch_ends(ln: pd.DataFrame, migrations: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                 ) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Per (rank, device): the GPU starts of its launched work (ascending, distinct) and the end of the
    earliest-returning launch among the activities starting there.

    ``migrations`` (unified-memory migrations no call enqueued) count as launched when they start: the driver
    moves the pages the moment something touches them, so the gap before one was the host's (or the program's)
    doing until then, booked by what the host did, not as idle with no launch linked."""
    launch_end: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if ln.empty and migrations is None:
        return launch_end
    lr = ln["rank"].to_numpy(np.int64)
    ld = ln["device"].to_numpy(np.int64)
    lg = ln["gpu_start_ns"].to_numpy(np.int64)
    lend = (ln["launch_start_ns"].to_numpy() + ln["launch_dur_ns"].to_numpy()).astype(np.int64, copy=False)
    if migrations is not None:
        mr, md, ms = migrations
        lr, ld, lg, lend = np.r_[lr, mr], np.r_[ld, md], np.r_[lg, ms], np.r_[lend, ms]
    # by (rank, device, gpu start); constant keys order nothing: left out on the usual one-device trace
    keys = tuple(k for k in (lg, ld, lr) if k is lg or k.min() != k.max())
    if len(keys) == 1:  # one (rank, device): its columns are constants, only the gpu starts are ordered
        order = np.argsort(lg, kind="stable")
        lg, lend = lg[order], lend[order]
        first = np.ones(len(lg), dtype=bool)
        np.not_equal(lg[1:], lg[:-1], out=first[1:])
    else:
        order = np.lexsort(keys)
        lr, ld, lg, lend = lr[order], ld[order], lg[order], lend[order]
        first = np.ones(len(lg), dtype=bool)
        first[1:] = (lr[1:] != lr[:-1]) | (ld[1:] != ld[:-1]) | (lg[1:] != lg[:-1])
    if not first.all():  # the earliest-returning launch per (rank, device, gpu start)
        at = np.flatnonzero(first)
        lr, ld, lg, lend = lr[at], ld[at], lg[at], np.minimum.reduceat(lend, at)
    bounds = np.flatnonzero(np.r_[True, (lr[1:] != lr[:-1]) | (ld[1:] != ld[:-1]), True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        launch_end[(int(lr[a]), int(ld[a]))] = (lg[a:b], lend[a:b].astype(float))
    return launch_end


def _ranges(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, start, end) of some host ranges, end to end."""
    if not parts:
        return EMPTY, EMPTY, EMPTY
    return tuple(np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False) for k in range(3))  # type: ignore[return-value]


def _by_rank(rse: tuple[np.ndarray, np.ndarray, np.ndarray], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """One rank's part of some (rank, start, end) host ranges, merged."""
    if not len(rse[0]):
        return EMPTY, EMPTY
    m = rse[0] == rank
    return merged(rse[1][m], rse[2][m])


def _device_parts(views: "Views", blocking: list, warm: pd.DataFrame, a_rank: np.ndarray, a_dev: np.ndarray, a_s: np.ndarray,
                  a_e: np.ndarray, a_cls: np.ndarray) -> tuple[list[dict[str, np.ndarray]], list[tuple[int, int]]]:
    """Each (rank, device)'s slices and gaps (``device_slices``), with the host facts of its rank (data waits,
    blocking calls, warm-up, host busy, step markers) made once per rank; and the (rank, device) of each."""
    host = views.host_events
    ha = host_arrays(views)
    h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]
    host_busy_runs, hb_one_rank = _host_busy(ha)
    launch_end = _launch_ends(views.launches, _migrations(views))
    st = views.steps
    # the step markers' columns once; each rank's rows are picked on them (no row selection of the frame per rank)
    sa = None if st.empty else step_arrays(views)
    st_cols = None if sa is None else (sa["rank"], *(sa[c].astype(np.int64, copy=False) for c in ("start_ns", "end_ns", "step")))
    dw = np.flatnonzero(data_wait_mask(host)) if not host.empty else EMPTY
    waits = _ranges([(h_rank[dw], h_start[dw], h_start[dw] + h_dur[dw])])
    blocks = _ranges(blocking)
    warms = _ranges([(warm["rank"].to_numpy(), warm["start_ns"].to_numpy(), warm["end_ns"].to_numpy())]) if len(warm) else (EMPTY, EMPTY, EMPTY)
    host_ranks = set() if host.empty else {int(h_rank[0])} if hb_one_rank else set(host["rank"].unique().tolist())
    parts: list[dict[str, np.ndarray]] = []
    keys: list[tuple[int, int]] = []
    bounds = np.flatnonzero(np.r_[True, (a_rank[1:] != a_rank[:-1]) | (a_dev[1:] != a_dev[:-1]), True])
    facts: dict[str, Any] = {}
    steps = (EMPTY, EMPTY, EMPTY)
    current_rank = None
    for a, b in zip(bounds[:-1], bounds[1:]):
        rank, device = int(a_rank[a]), int(a_dev[a])
        s, e, c = a_s[a:b], a_e[a:b], a_cls[a:b]
        if int(e.max()) <= int(s.min()):
            continue  # only zero-length rows: no window to account for
        if rank != current_rank:
            current_rank = rank
            facts = {
                "data_wait": _by_rank(waits, rank),
                "sync": _by_rank(blocks, rank),
                "warmup": _by_rank(warms, rank),
                # the rank's host-busy union, built only when a gap host work decides needs it, then kept
                "host_busy": cache(lambda r=rank: union_of_runs(host_busy_runs(r))),
            }
            own = None if st_cols is None else np.flatnonzero(st_cols[0] == rank)
            steps = (st_cols[1][own], st_cols[2][own], st_cols[3][own]) if own is not None and len(own) else (EMPTY, EMPTY, EMPTY)
        parts.append(device_slices(s, e, c, launch_end.get((rank, device)), facts, rank in host_ranks, steps))
        keys.append((rank, device))
    return parts, keys


def _assemble(parts: list[dict[str, np.ndarray]], keys: list[tuple[int, int]], warm: pd.DataFrame) -> Ledger:
    """The ledger of the devices' slices and gaps: the slices and windows as int64 blocks, the totals per step and
    device, the gaps with their buckets and cause; frames most analyses never read are built on first read."""
    n_sl = np.array([len(p["start"]) for p in parts])
    n_gp = np.array([len(p["gs"]) for p in parts])
    k_rank = np.array([k[0] for k in keys], np.int64)
    k_dev = np.array([k[1] for k in keys], np.int64)
    one = len(keys) == 1  # the usual trace: per-row device columns are constants, no arrays of them are made
    dev_idx = None if one else np.repeat(np.arange(len(keys)), n_sl)

    def joined(name: str) -> np.ndarray:  # the devices' arrays end to end (one device: its own array)
        return parts[0][name] if one else np.concatenate([p[name] for p in parts])

    def per_row(values: np.ndarray, counts: np.ndarray) -> "np.ndarray | int":
        return int(values[0]) if one else np.repeat(values, counts)

    label = joined("label")
    # the slices' int64 columns as the rows of one block, filled in place: the frame takes it without a copy
    sl_block = np.empty((5, len(label)), np.int64)
    ns = joined("ns")
    sl_block[0], sl_block[1], sl_block[2], sl_block[3] = per_row(k_rank, n_sl), per_row(k_dev, n_sl), joined("step"), joined("start")
    np.add(sl_block[3], ns, out=sl_block[4])
    slices = Later(slices_frame, sl_block, label)
    w_start = np.array([p["start"][0] for p in parts], np.int64)
    w_end = np.array([p["start"][-1] + p["ns"][-1] for p in parts], np.int64)
    w_block = np.empty((5, len(keys)), np.int64)  # the windows' int64 columns as one block, as for the slices
    w_block[0], w_block[1], w_block[2], w_block[3] = k_rank, k_dev, w_start, w_end
    np.subtract(w_end, w_start, out=w_block[4])
    windows = Later(windows_frame, w_block)
    nb = len(BUCKETS)
    u_dev, u_step, smat = _step_totals(sl_block[2], label, ns, dev_idx, len(keys))
    n_grp = len(u_dev)
    # per device: one row per (device, bucket), zeros included; the sum of its steps' rows
    mat = np.zeros((len(keys), nb), np.int64)
    np.add.at(mat, u_dev, smat)
    by_device = Later(by_device_frame, k_rank, k_dev, mat, w_block[4])
    # per (device, step): the same, with the step's part of the window as the base of pct
    by_step = pd.DataFrame(
        {
            "rank": np.repeat(k_rank[u_dev], nb),
            "device": np.repeat(k_dev[u_dev], nb),
            "step": np.repeat(u_step, nb),
            "bucket": np.tile(np.array(BUCKETS, dtype=object), n_grp),
            "ns": smat.ravel(),
            "pct": (100.0 * smat / np.maximum(smat.sum(axis=1), 1)[:, None]).ravel(),
        }
    )
    block, per_gap, cause = _gap_totals(parts, joined("gs"), joined("ge"), n_gp, per_row(k_rank, n_gp), per_row(k_dev, n_gp))
    nl = joined("nl")
    gaps = Later(gaps_frame, block, nl, cause)
    arrays = {
        "slices": {"rank": sl_block[0], "device": sl_block[1], "start": sl_block[3], "end": sl_block[4], "code": label},
        "gaps": {"rank": block[0], "device": block[1], "start": block[2], "end": block[3], "gap_ns": dict(zip(IDLE_BUCKETS, per_gap))},
        "device": (np.repeat(k_rank, nb), np.repeat(k_dev, nb), np.tile(np.array(BUCKETS, dtype=object), len(keys)), mat.ravel()),
        "gap_columns": {"rank": block[0], "device": block[1], "start_ns": block[2], "end_ns": block[3], "dur_ns": block[4],
                        **dict(zip(IDLE_BUCKETS, per_gap)), "next_launch_end_ns": nl,
                        "cause": np.asarray(IDLE_BUCKETS, dtype=object)[cause]},
    }
    out = Ledger(slices=slices, by_device=by_device, by_step=by_step, windows=windows, gaps=gaps, warmup=warm)
    out._arrays = arrays
    return out


def _step_totals(step: np.ndarray, label: np.ndarray, ns: np.ndarray, dev_idx: np.ndarray | None, n_dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (device, step): ns per bucket, as (device index, step, matrix of groups by buckets).

    Groups of (device, step) in lexicographic order of one int64 key. When the keys span a small range (a few
    devices, step numbers close together) a table of present keys ranks them; else one sort and a neighbour test
    (a 2-D ``np.unique(axis=1)`` sorts rows as records, much slower)."""
    nb = len(BUCKETS)
    one = dev_idx is None
    s_lo = int(step.min()) if len(step) else 0
    span = int(step.max()) - s_lo + 1 if len(step) else 1
    ck = step - s_lo
    if not one:
        ck += dev_idx * span
    if n_dev * span <= 4 * len(ck) + 4096:
        present = np.zeros(n_dev * span, dtype=bool)
        present[ck] = True
        heads = np.flatnonzero(present)
        rank_of = np.cumsum(present) - 1
        inv = rank_of[ck]
        u_dev, u_step = heads // span, heads % span + s_lo
    else:
        order = np.argsort(ck, kind="stable")
        sk = ck[order]
        first = np.r_[True, sk[1:] != sk[:-1]]
        inv = np.empty(len(ck), np.int64)
        inv[order] = np.cumsum(first) - 1
        head = order[first]
        u_dev, u_step = (np.zeros(len(head), np.int64) if one else dev_idx[head]), step[head]
    n_grp = len(u_dev)
    inv *= nb
    inv += label
    smat = np.zeros(n_grp * nb, np.int64)
    np.add.at(smat, inv, ns)  # flat indices: numpy's fast path
    return u_dev, u_step, smat.reshape(n_grp, nb)


def _gap_totals(parts: list[dict[str, np.ndarray]], gs: np.ndarray, ge: np.ndarray, n_gp: np.ndarray, g_rank: "np.ndarray | int",
                g_dev: "np.ndarray | int") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gaps' int64 block (rank, device, start, end, dur, the ns of each idle bucket), those bucket rows, and
    each gap's cause: its bucket with the most ns, the first in ``IDLE_BUCKETS`` order on a tie (argmax). Most gaps
    hold one idle slice, whose bucket it is; only gaps of several slices compare their sums."""
    n_g = len(gs)
    # the frame's int64 columns as the rows of one block, filled in place: the frame takes it without a copy
    block = np.empty((len(GAP_INT_COLS), n_g), np.int64)
    block[0], block[1], block[2], block[3] = g_rank, g_dev, gs, ge
    np.subtract(ge, gs, out=block[4])
    per_gap = block[5:]
    per_gap[:] = 0
    first_gap = np.cumsum(n_gp) - n_gp  # each device's first row
    cause = np.zeros(n_g, np.intp)
    pieces = np.zeros(n_g, np.intp)
    for j, p in enumerate(parts):
        gid, bucket, ns_ = p["per_gap"]
        if len(gid):
            g = gid + first_gap[j]
            flat = bucket.astype(np.int64)  # the flat index (bucket row, gap column), built in one array
            flat -= len(BUSY_BUCKETS)
            cause[g] = flat
            pieces += np.bincount(g, minlength=n_g)
            flat *= n_g
            flat += g
            np.add.at(per_gap.reshape(-1), flat, ns_)  # flat indices: numpy's fast path
    several = np.flatnonzero(pieces != 1)
    if len(several):
        cause[several] = first_max_row(per_gap[:, several])
    return block, per_gap, cause
