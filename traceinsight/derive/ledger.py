"""The time ledger: every nanosecond of each GPU's active window in exactly one bucket.

Rules measure overlapping things (an idle gap may *be* a host sync, and also sit inside a data wait), so their
impacts cannot be added up. The ledger is the one account they all draw on: per (rank, device), the window from
the device's first to its last GPU activity (the window of GPU busy %) is cut into slices, each slice gets one
bucket, and the buckets of a device sum exactly to its window (per step: to the step's part of the window).
Findings *claim* slices (``Ledger.claim``), so a saving can never exceed the idle it really causes, and the
verdict reads the largest bucket instead of the largest finding.

Buckets, and how a nanosecond t of device d on rank r is booked (first match wins):

Busy (some stream of d runs; a GPU is idle only when no stream runs):

1. ``compute``: a kernel that is not a collective runs at t.
2. ``communication``: only collective kernels (NCCL/RCCL, ...) run at t. A collective overlapped by compute
   costs no wall time, so only *exposed* communication lands here.
3. ``copy``: only copies/memsets run at t. Copies hidden under kernels are free, so they count as what hides
   them.

Idle (no stream runs). A *gap* is a maximal idle stretch inside the window; the *next work* is the GPU activity
that ends it, and its *launch* the host call that enqueued it (``views.launches``; the earliest call returning
among the activities that start at the gap's end).

4. ``idle_warmup``: t is inside a warm-up region of the rank's host (see ``warmup_regions`` and
   ``traceinsight.derive.steady``): one-time work anywhere in the window, which no steady-state change removes.
5. ``idle_gpu_dependency``: the next work's launch call had returned by the time the gap began: the work was
   queued, so the GPU waited on something of its own (an event, another stream, a copy engine), not on the host.
6. ``idle_data_wait``: the host is inside a data-wait range at t (``enumerate(DataLoader)#...``,
   ``IteratorGetNext``, tf.data ``Iterator::`` on a consumer thread).
7. ``idle_host_sync``: the gap began while the host was blocked in a synchronizing call (explicit syncs,
   blocking copies/memsets, async copies to pageable memory, ``aten::item``-like ops; GPU-side sync records
   where the host side is missing). The queue drained under the blocked host, so the whole gap (beyond data
   wait and warm-up) is the sync's cost, including the time to launch new work after it returns.
8. ``idle_launch_bound``: a gap shorter than ``LAUNCH_GAP_NS`` (100 µs) whose next work was still being
   launched when the GPU ran dry: the host issues work back to back but slower than the GPU runs it.
9. ``idle_other`` (early): the next work has no launch in the trace (sliced trace, unlinked row), so nothing
   says whether host or GPU held it back.
10. ``idle_host_busy``: a longer host-caused gap and traced host work (framework ops, Python frames, runtime
    calls, framework dispatch and compiled code's wrappers traced as ranges: ``FRAMEWORK_DISPATCH``,
    ``COMPILED_WRAPPER``) runs at t: the host was busy with something other than feeding the GPU.
11. ``idle_untraced``: the same, but the host trace shows nothing at t (the rank has host events elsewhere).
12. ``idle_other``: everything else (a rank with no host events at all).

``AVOIDABLE_BUCKETS`` are the idle buckets a host-side change can remove; warm-up, GPU-side dependencies and
unattributed idle are left out of savings.

Steps: a step's window is its host step marker's range ``[start, end)`` clipped to the device window; slices are
cut at step boundaries, and time outside every step is step ``-1``, so summing ``by_step`` over steps gives
``by_device``.

Everything is interval arithmetic on sorted numpy arrays (one loop over (rank, device) pairs, none over events).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, Iterable

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS, WARMUP_BUCKET
from traceinsight.model.finding import Instances, instance_columns
from traceinsight.vocab.intervals import Coverage, applies_to, merge_intervals
from traceinsight.vocab.masks import category_hits, codes_in, kind_mask, name_mask
from traceinsight.vocab.patterns import COLLECTIVE, COPY_CALL, DATA_WAIT_KINDS, DATA_WAIT_PRIMARY, DATA_WAIT_TFDATA, COMPILED_WRAPPER, FRAMEWORK_DISPATCH, SYNC_CALL, SYNC_OP, SYNC_RANGE
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.derive.steady import WARMUP_FIRST_STEP_RATIO, WARMUP_MIN_NS, WARMUP_RATIO, empty_regions, host_arrays, may_match, one_time_regions, step_arrays  # noqa: F401  (the steady-state model's thresholds)

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.views import Views

# The buckets (ids, busy/idle, avoidable, words, colours) are ``traceinsight.vocab.buckets``' table; the launch-gap bound
# is ``traceinsight.vocab.thresholds.LAUNCH_GAP_NS`` (shared with the what-if); the warm-up thresholds and the one-time
# work the ledger books are the steady-state model's (``traceinsight.derive.steady``).
_CODE = {b: i for i, b in enumerate(BUCKETS)}
#: The slices' bucket dtype, made once: a categorical dtype built per ledger (its categories Index validated) cost
#: more than the rest of a small rank's slices frame.
_BUCKET_DTYPE = pd.CategoricalDtype(list(BUCKETS))
#: The int64 columns of the slices, windows and gaps frames, each an Index made once: a frame built on a block
#: with a ready Index costs a third of one whose column names are checked and converted again.
_SLICE_COLS = pd.Index(["rank", "device", "step", "start_ns", "end_ns"])
_WINDOW_COLS = pd.Index(["rank", "device", "start_ns", "end_ns", "window_ns"])
_GAP_INT_COLS = pd.Index(["rank", "device", "start_ns", "end_ns", "dur_ns", *IDLE_BUCKETS])


@cache
def _idle_names() -> Any:
    """The idle bucket names as the array type a column of them gets (inferred once), for ``take`` by code."""
    return pd.Series(np.asarray(IDLE_BUCKETS, dtype=object)).array
_HOST_BUSY_KINDS = ("cpu_op", "python", "runtime")
_DATA_WAIT_KINDS = DATA_WAIT_KINDS
_EMPTY = np.zeros(0, np.int64)


# --- interval primitives (sorted, disjoint [start, end) arrays) --------------------------------------------
def _inside(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t (sorted): is it inside one of the merged intervals (s, e)? Few intervals among many points
    (syncs among 10^5 gaps): each interval's points are found by two searches in t, not each point in them."""
    if len(s) == 0:
        return np.zeros(len(t), dtype=bool)
    if 8 * len(s) < len(t):
        lo = np.searchsorted(t, s, side="left")
        n = np.searchsorted(t, e, side="left") - lo
        out = np.zeros(len(t), dtype=bool)
        out[_spans(lo, np.maximum(n, 0))] = True
        return out
    i = np.searchsorted(s, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = e[i[ok]] > t[ok]
    return out


def _merged(starts: Any, ends: Any) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(starts, np.int64)
    e = np.maximum(np.asarray(ends, np.int64), s)
    keep = e > s
    if not keep.all():  # copies only when some interval is empty (fresh memory is what costs here)
        s, e = s[keep], e[keep]
    return merge_intervals(s, e)


def _run_unions(s: np.ndarray, e: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The union of each sorted run of non-empty intervals (every e > s) whose int64 arrays the caller hands over:
    host rows of several threads come as a few runs in start order, and each run is merged in place (its running
    end computed in ``e`` itself, a group's end read at its last row), so no array of the input's length is
    allocated besides two masks (fresh memory is what costs at 10^6 rows). Many runs: one union of all."""
    if len(s) == 0:
        return []
    down = np.flatnonzero(s[1:] < s[:-1]) + 1 if len(s) > 1 else _EMPTY
    if len(down) > 64:
        return [merge_intervals(s, e)]
    cuts = np.r_[0, down, len(s)]
    out = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        rs, re_ = s[a:b], e[a:b]
        np.maximum.accumulate(re_, out=re_)
        new = np.empty(b - a, dtype=bool)
        new[0] = True
        np.greater(rs[1:], re_[:-1], out=new[1:])
        idx = np.flatnonzero(new)
        last = np.empty(len(idx), np.intp)
        last[:-1] = idx[1:] - 1
        last[-1] = b - a - 1
        # the running end at a group's last row is the group's largest end: every earlier end lies before its start
        out.append((rs[idx], re_[last]))
    return out


def _union_of_runs(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of several merged interval sets.

    Starts and ends are sorted apart (each set is a sorted run of both, so the stable sort only merges runs, and
    no permutation is gathered): the k-th smallest end closes a merged interval exactly when the next start lies
    beyond it, since by then k + 1 intervals have started and k + 1 have ended. Touching intervals merge, as in
    ``merge_intervals``, whose answer this is.
    """
    if len(runs) <= 1:
        return runs[0] if runs else (_EMPTY, _EMPTY)
    s = np.sort(np.concatenate([a for a, _ in runs]), kind="stable")
    e = np.sort(np.concatenate([b for _, b in runs]), kind="stable")
    if len(s) == 0:
        return _EMPTY, _EMPTY
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], e[:-1], out=new[1:])
    idx = np.flatnonzero(new)
    last = np.empty(len(idx), np.intp)
    last[:-1] = idx[1:] - 1
    last[-1] = len(s) - 1
    return s[idx], e[last]


# --- host facts ------------------------------------------------------------------------------------------
def data_wait_mask(host: pd.DataFrame) -> np.ndarray:
    """Host rows that mean "the loop waits for its next batch".

    tf.data's ``Iterator::`` ranges run on producer threads too, where they overlap useful work; they count only
    on a consumer thread (one that holds a primary wait or the step markers).
    """
    if host.empty:
        return np.zeros(0, dtype=bool)
    names = host["name"]
    if not (may_match(names, DATA_WAIT_PRIMARY, case=True) or may_match(names, DATA_WAIT_TFDATA, case=True)):
        return np.zeros(len(host), dtype=bool)  # no name of a wait among the categories (most ranks)
    primary = name_mask(names, DATA_WAIT_PRIMARY, case=True)
    tfdata = name_mask(names, DATA_WAIT_TFDATA, case=True)
    if primary.any() or tfdata.any():  # rare names first, then their kinds
        kind_ok = kind_mask(host["kind"], _DATA_WAIT_KINDS)
        primary &= kind_ok
        tfdata &= kind_ok & ~primary
    if tfdata.any():
        rank = host["rank"].to_numpy().astype(np.int64)
        tid = host["tid"].to_numpy().astype(np.int64)
        consumer = primary | kind_mask(host["kind"], ("step",))
        keys = set(zip(rank[consumer].tolist(), tid[consumer].tolist()))
        idx = np.flatnonzero(tfdata)
        on_consumer = np.fromiter(((r, t) in keys for r, t in zip(rank[idx].tolist(), tid[idx].tolist())), dtype=bool, count=len(idx))
        primary = primary.copy()
        primary[idx[on_consumer]] = True
    return primary


def _is_positions(index: pd.Index) -> bool:
    """Row labels 0, 1, 2, ...: a label is its row's position."""
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def _blocking_parts(views: "Views") -> list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]:
    """Host calls that block until the GPU catches up, as (rank, start_ns, end_ns, reason) arrays per reason, the
    empty ones left out: the ledger needs only the ranges, and frames of them cost more than finding them.

    Synchronizing runtime calls and blocking copies/memsets, ops that sync by nature (``aten::item``, ...), and
    async copies into pageable host memory (the driver runs them synchronously). GPU-side sync records stand in
    only on ranks whose host trace shows no blocking call.
    """
    ev = views.events
    ha = host_arrays(views)
    kind = ha["kind"]
    h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]

    def rows(m: np.ndarray, reason: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        m = np.flatnonzero(m)  # few rows: positions, then three small gathers instead of three full masks
        s = h_start[m].astype(np.int64, copy=False)
        return h_rank[m].astype(np.int64), s, s + h_dur[m], reason

    names = ha["name"]
    # a pattern no category matches gives no rows (an empty part, dropped below): its masks are not built
    parts = [
        rows(name_mask(names, pattern) & kind_mask(kind, kinds), reason)
        for pattern, kinds, reason in ((SYNC_CALL, ("runtime",), "synchronizing call"), (SYNC_OP, ("cpu_op",), "synchronizing op"),
                                       (SYNC_RANGE, ("annotation",), "synchronizing op"))
        if may_match(names, pattern)
    ]
    ln = views.launches
    pageable = ev["pageable"] if "pageable" in ev else None
    if pageable is not None and pageable.dtype == bool and not pageable.to_numpy().any():
        pageable = None  # no row is pageable: no launch copies to pageable memory
    if not ln.empty and pageable is not None:
        idx = ln["gpu_idx"].to_numpy()
        ck_col = ev["copy_kind"]
        if _is_positions(ev.index) and isinstance(ck_col.dtype, pd.CategoricalDtype) and len(idx) and idx.min() >= 0 and idx.max() < len(ev):
            # row labels are positions: the pageable flag first (rarely set), then the copy kind of those rows on
            # its category codes, no 10^5 boxed strings
            m = pageable.to_numpy(dtype=bool)[idx]
            if m.any():
                at = np.flatnonzero(m)
                m[at] = kind_mask(ck_col.take(idx[at]), ("DtoH",))
        else:
            ck = ck_col.reindex(idx).astype(object).to_numpy()
            pg = pageable.reindex(idx).to_numpy(dtype=bool)
            m = (ck == "DtoH") & pg
        if m.any():  # (none: an empty part, dropped below)
            s = ln["launch_start_ns"].to_numpy()[m].astype(np.int64, copy=False)
            parts.append((ln["rank"].to_numpy()[m].astype(np.int64), s, s + ln["launch_dur_ns"].to_numpy()[m], "copy to pageable host memory"))
    parts = [p for p in parts if len(p[0])]
    gs_mask = kind_mask(ev["kind"], ("gpu_sync",))
    if gs_mask.any():
        if parts:
            gs_mask &= ~np.isin(ev["rank"].to_numpy(), np.unique(np.concatenate([p[0] for p in parts])))
        if gs_mask.any():
            s = ev["start_ns"].to_numpy()[gs_mask].astype(np.int64, copy=False)
            parts.append((ev["rank"].to_numpy()[gs_mask].astype(np.int64), s, s + ev["dur_ns"].to_numpy()[gs_mask], "GPU-side sync record"))
    return parts


def warmup_regions(views: "Views", blocking: "list[tuple[np.ndarray, np.ndarray, np.ndarray, str]] | None" = None) -> pd.DataFrame:
    """Host time ranges (rank, start_ns, end_ns, reason) that belong to warm-up, not to steady state.

    Two principles, both about repetition: steady state repeats itself, one-time work does not.

    * A first call that is an outlier: the first occurrence of a framework op or runtime call (by name, per rank)
      lasting at least ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median of its later occurrences: cuDNN
      autotuning inside the first convolution, lazy CUDA/library init inside the first call, JIT compilation.
      Where input shapes are recorded, the same per (name, shapes) for a shape that recurs: autotuning and
      per-shape caches pay once per shape, so every convolution of a first step is its own first call.
      Calls whose time is mostly waiting for the GPU (syncs, copies, ops spent mostly inside blocking or copy
      calls) are left out: their length measures the queue ahead of them, not one-time work.
    * Everything else the steady-state model (``traceinsight.derive.steady.one_time_regions``) recognises wherever it
      sits: first launches that load a kernel's module, named set-up calls (library handles, autotuning, JIT,
      graph capture and instantiation), allocator growth before the second step, a blocking call at the window's
      start, the program's start-up before its first step, and leading warm-up steps.
    """
    cols = ["rank", "start_ns", "end_ns", "reason"]
    host = views.host_events
    parts = []
    if not host.empty:
        ha = host_arrays(views)
        names, kinds = ha["name"], ha["kind"]
        h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]
        cand = _warmup_candidates(names, kinds, h_dur)
        fi = _outlier_first_calls(names, cand, h_rank, h_start, h_dur) if len(cand) else cand  # host positions, in (rank, name) order
        if "input_shapes" in host.columns and len(cand):
            per_shape = _outlier_first_calls_per_shape(names, host["input_shapes"], cand, h_rank, h_start, h_dur)
            if len(per_shape):
                fi = np.concatenate([fi, per_shape[~np.isin(per_shape, fi)]])
        if len(fi):
            s, e = h_start[fi], h_start[fi] + h_dur[fi]
            blk = blocking if blocking is not None else _blocking_parts(views)
            copy_call = np.flatnonzero(name_mask(names, COPY_CALL) & kind_mask(kinds, ("runtime",)))
            b_rank = np.concatenate([p[0] for p in blk] + [h_rank[copy_call].astype(np.int64)])
            b_start = np.concatenate([p[1] for p in blk] + [h_start[copy_call].astype(np.int64)])
            b_end = np.concatenate([p[2] for p in blk] + [(h_start[copy_call] + h_dur[copy_call]).astype(np.int64)])
            blocked = np.zeros(len(fi), np.int64)
            fr = h_rank[fi].astype(np.int64)
            for r in np.unique(fr):
                m = fr == r
                b = b_rank == r
                blocked[m] = Coverage(b_start[b], b_end[b]).overlap(s[m], e[m])
            keep = blocked * 2 < h_dur[fi]
            fi = fi[keep]
            reason = np.asarray(["first call of " + str(n) for n in names.take(fi).to_numpy()], dtype=object)
            parts.append(pd.DataFrame({"rank": h_rank[fi].astype(np.int64), "start_ns": h_start[fi], "end_ns": h_start[fi] + h_dur[fi], "reason": reason}))
    parts.append(one_time_regions(views, blocking if blocking is not None else _blocking_parts(views)))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_regions()
    return pd.concat(parts, ignore_index=True)[cols]


#: A shape's first call counts as warm-up only when the shape comes back at least this many times after it: the
#: steady state repeats its shapes, so a shape seen once or twice (a variable-length batch) is not set aside, and
#: an autotuning cost paid again for every new shape stays in the steady-state figures, where it belongs.
WARMUP_SHAPE_REPEATS = 2


def _outlier_first_calls_per_shape(names: pd.Series, shapes: pd.Series, cand: np.ndarray, rank: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Positions of candidate rows that are the first call of their (rank, name, input shapes) and an outlier
    against that group's later calls (the same test as ``_outlier_first_calls``).

    Autotuning and per-shape caches (cuDNN's ``benchmark`` search, cuBLAS-Lt heuristics, Triton and XLA
    specialisation) pay once per distinct shape, not once per op name: the first step of a ResNet runs twenty
    convolutions of different shapes, each searching for its algorithm, and only the first of them is the first
    call of ``aten::cudnn_convolution``. Rows without recorded shapes are not looked at here (the name-only pass
    covers them), and a group must come back ``WARMUP_SHAPE_REPEATS`` times after its first call."""
    sh = shapes.cat.codes.to_numpy() if isinstance(shapes.dtype, pd.CategoricalDtype) else pd.factorize(shapes.to_numpy())[0]
    pos = cand[sh[cand] >= 0]  # ``cand``: ascending positions (``_warmup_candidates``)
    if not len(pos):
        return pos
    nm = names.cat.codes.to_numpy()[pos] if isinstance(names.dtype, pd.CategoricalDtype) else pd.factorize(names.to_numpy()[pos])[0]
    key = nm.astype(np.int64) * (int(sh.max()) + 2) + sh[pos].astype(np.int64)
    codes, _ = pd.factorize(key)
    r_codes, r_uniq = pd.factorize(rank[pos])
    # a shape must come back on its own rank: eight ranks each seeing a shape twice do not make it repeat
    codes, uniq = pd.factorize(codes.astype(np.int64) * len(r_uniq) + r_codes)
    counts = np.bincount(codes, minlength=len(uniq))
    keep = counts[codes] > WARMUP_SHAPE_REPEATS
    pos, codes = pos[keep], codes[keep]
    if not len(pos):
        return pos
    groups = pd.Series(pd.Categorical.from_codes(codes, categories=np.arange(len(uniq))))
    fi = _outlier_first_calls(groups, np.arange(len(pos)), rank[pos], start[pos], dur[pos])
    return pos[fi]


def _warmup_candidates(names: pd.Series, kinds: pd.Series, dur: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the host rows warm-up may look at: framework ops and runtime calls, not copies,
    syncs or data waits, and only of names that have a candidate call of at least ``WARMUP_MIN_NS``: a first call
    shorter than that is no warm-up, so the other names' calls are never needed (most rows, tested here only
    through their name)."""
    long = np.flatnonzero(dur >= WARMUP_MIN_NS)
    if not len(long):  # no call is long enough to be warm-up: no name needs testing
        return _EMPTY
    if isinstance(names.dtype, pd.CategoricalDtype) and isinstance(kinds.dtype, pd.CategoricalDtype):
        # on the codes: per kind and per name a table, read for the rows asked about
        n_codes, k_codes = names.cat.codes.to_numpy(), kinds.cat.codes.to_numpy()
        cats = names.cat.categories

        def hits(pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
            rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
            return np.append(category_hits(cats, rx), False)  # a missing name (code -1) reads the last entry

        def kind_table(kind: str) -> np.ndarray:
            return np.append(np.asarray(kinds.cat.categories, dtype=object) == kind, False)

        is_rt, is_op = kind_table("runtime"), kind_table("cpu_op")
        long = long[(is_rt | is_op)[k_codes[long]]]  # the kinds first: long step markers and annotations are no candidates
        if not len(long):
            return _EMPTY
        excluded = hits(SYNC_CALL) | hits(SYNC_OP) | hits(DATA_WAIT_PRIMARY, case=True)
        rt_ok, op_ok = ~(excluded | hits(COPY_CALL)), ~excluded

        def cand(rows: np.ndarray) -> np.ndarray:
            n, k = n_codes[rows], k_codes[rows]
            return (is_rt[k] & rt_ok[n]) | (is_op[k] & op_ok[n])

    else:

        def cand(rows: np.ndarray) -> np.ndarray:
            n, k = names.take(rows), kinds.take(rows)
            is_rt = kind_mask(k, ("runtime",))
            ok = (is_rt & ~name_mask(n, COPY_CALL)) | kind_mask(k, ("cpu_op",))
            ok &= ~(name_mask(n, SYNC_CALL) | name_mask(n, SYNC_OP) | name_mask(n, DATA_WAIT_PRIMARY, case=True))
            return ok

    long = long[cand(long)]
    if not len(long):
        return _EMPTY
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()
        hit = np.zeros(len(names.cat.categories) + 1, dtype=bool)
        hit[codes[long]] = True  # a missing name (code -1) marks the extra last entry
        rows = np.flatnonzero(codes_in(codes, hit[:-1], missing=bool(hit[-1])))
    else:
        rows = np.flatnonzero(names.isin(names.take(long).unique()).to_numpy())
    return rows[np.flatnonzero(cand(rows))]


def _outlier_first_calls(names: pd.Series, cand: np.ndarray, rank: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Positions of the candidate rows (``cand``: a mask, or ascending positions) that are the first call of
    their (rank, name), last at least ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median of the later
    calls; in (rank, name code) order.

    The first call of a group is its earliest start, the first listed among equal starts. Groups are dense
    integers (the name's category code when most rows of one rank are candidates, else a key of rank and name
    code, hashed when its range is large), so nothing is sorted and, with dense candidates on one rank, no
    candidate-sized copy of the columns is made (fresh memory is what costs most at 10^6 rows).
    """
    categorical = isinstance(names.dtype, pd.CategoricalDtype)
    if cand.dtype != bool and 4 * len(cand) > len(names):  # positions of most rows: as a mask (the dense path)
        mask = np.zeros(len(names), dtype=bool)
        mask[cand] = True
        cand = mask
    if cand.dtype == bool and categorical and len(rank) and rank.min() == rank.max() and 4 * np.count_nonzero(cand) > len(cand):
        # one rank: the group of a row is its name code (+1: a missing name is a group too); others in a spare one
        n_groups = len(names.cat.categories) + 2
        group = np.where(cand, names.cat.codes.to_numpy().astype(np.int32) + 1, n_groups - 1)
        pos_start, pos_dur, spare = start, dur, n_groups - 1
        idx = None
    else:
        idx = np.flatnonzero(cand) if cand.dtype == bool else cand
        if not len(idx):
            return idx
        code = names.cat.codes.to_numpy()[idx].astype(np.int64) if categorical else pd.factorize(names.to_numpy()[idx])[0].astype(np.int64)
        # one int64 key for (rank, name code): itself the group when its range is small (a few ranks, names
        # as category codes), else grouped by hashing; no sort of the 10^6 candidates either way. Built in
        # place in the code array (one rank: the code alone)
        rc = code
        rc += 1
        if len(rank) and rank.min() != rank.max():
            r = rank[idx].astype(np.int64)
            r -= r.min()
            r *= int(rc.max()) + 1
            rc += r
        if int(rc.max()) < 4 * len(rc) + 4096:
            group, n_groups = rc, int(rc.max()) + 1
        else:
            group, uniq = pd.factorize(rc)
            n_groups = len(uniq)
        spare = -1
        pos_start, pos_dur = start[idx], dur[idx]
    first_start = np.full(n_groups, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_start, group, pos_start)
    at_first = np.flatnonzero(pos_start == first_start[group])
    g_first, pos = np.unique(group[at_first], return_index=True)
    first_of = at_first[pos]  # per group (ascending group), the position of its first call
    if spare >= 0:
        first_of = first_of[g_first != spare]
    # only groups whose first call is long enough can be warm-up: the median of the rest is needed there only
    long_first = first_of[pos_dur[first_of] >= WARMUP_MIN_NS]
    lf_group = np.zeros(n_groups, dtype=bool)
    lf_group[group[long_first]] = True
    rest = lf_group[group]
    rest[first_of] = False
    if not rest.any():
        return np.zeros(0, np.int64)
    at_rest = np.flatnonzero(rest)  # positions: the rest of a few names' calls are scattered among all rows
    med = pd.Series(pos_dur[at_rest]).groupby(group[at_rest]).median()
    if idx is not None and group is not rc:
        long_first = long_first[np.argsort(rc[long_first])]  # in (rank, name) order (the key itself is in order)
    m_rest = med.reindex(group[long_first]).to_numpy()
    ok = ~np.isnan(m_rest) & (pos_dur[long_first] >= WARMUP_RATIO * np.nan_to_num(m_rest))
    fi = long_first[ok]
    return fi if idx is None else idx[fi]


# --- the ledger ------------------------------------------------------------------------------------------
class _Later:
    """A frame built on first read: ``fn(*args)``, a module-level function and its arrays (so a ledger still pickles)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __call__(self) -> pd.DataFrame:
        return self.fn(*self.args)


class _FrameField:
    """A ``Ledger`` frame given as a frame or as a ``_Later`` that builds it on first read: ``build_ledger`` defers
    the frames most analyses never read (a whole job's ranks read neither the per-device table nor the windows, and
    a small rank paid their fixed cost for nothing). A required field of the dataclass either way."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_frame"

    def __get__(self, obj: Any, objtype: Any = None) -> pd.DataFrame:
        if obj is None:
            raise AttributeError(self.slot)  # no default: the dataclass keeps the field required
        value = obj.__dict__[self.slot]
        if isinstance(value, _Later):
            value = obj.__dict__[self.slot] = value()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class Ledger:
    """Per (rank, device), the device's active window split into buckets (see the module docstring).

    ``slices``: rank, device, step, start_ns, end_ns, bucket (contiguous, disjoint, covering each window).
    ``by_device``: rank, device, bucket, ns, pct (of the window); every bucket listed, zeros included.
    ``by_step``: rank, device, step, bucket, ns, pct (of the step's window on that device); step -1 = outside steps.
    ``windows``: rank, device, start_ns, end_ns, window_ns.
    ``gaps``: one row per idle gap: rank, device, start_ns, end_ns, dur_ns, next_launch_end_ns, the ns of each
    idle bucket inside it, and ``cause`` (the bucket with the most ns).
    ``warmup``: the warm-up regions used (rank, start_ns, end_ns, reason).
    """

    slices: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    by_device: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    by_step: pd.DataFrame
    windows: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    gaps: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    warmup: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: What ``build_ledger`` already holds as arrays (the slices' and gaps' columns, ``device_arrays``), so the
    #: claims do not read them back from its frames (a dozen column reads cost more than a small rank's claim).
    #: None for a ledger made of frames alone (or copied with ``dataclasses.replace``): then they are read from
    #: the frames.
    _arrays: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """No device window (no slices): what ``slices.empty`` says, without building the frame of slices."""
        if self._arrays is not None:
            return not len(self._arrays["slices"]["start"])
        return self.slices.empty

    # --- totals ------------------------------------------------------------------------------------------
    def window_ns(self, rank: int | None = None, device: int | None = None) -> int:
        """The window of one (rank, device), or the sum over the devices matching the filters."""
        w = self.windows
        m = np.ones(len(w), dtype=bool)
        if rank is not None:
            m &= w["rank"].to_numpy() == rank
        if device is not None:
            m &= w["device"].to_numpy() == device
        return int(w.loc[m, "window_ns"].sum())

    def totals(self, rank: int | None = None, device: int | None = None) -> dict[str, int]:
        """ns per bucket (every bucket, in ``BUCKETS`` order), summed over the matching devices."""
        r, dev, bucket, ns = self.device_arrays  # a few rows per device: summed in Python, no frame per call
        m = np.ones(len(r), dtype=bool)
        if rank is not None:
            m &= r == rank
        if device is not None:
            m &= dev == device
        out = dict.fromkeys(BUCKETS, 0)
        for b, n in zip(bucket[m].tolist(), ns[m].tolist()):
            if b in out:
                out[b] += n
        return out

    @cached_property
    def device_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``by_device`` as plain arrays (rank, device, bucket, ns), for callers that filter it many times."""
        if self._arrays is not None:
            return self._arrays["device"]
        d = self.by_device
        return (d["rank"].to_numpy(np.int64), d["device"].to_numpy(np.int64), d["bucket"].astype(str).to_numpy(object), d["ns"].to_numpy(np.int64))

    @cached_property
    def gap_columns(self) -> dict[str, np.ndarray]:
        """``gaps``' columns as arrays (read-only, shared by every caller): rank, device, start_ns, end_ns, dur_ns
        (int64), next_launch_end_ns (float), the ns of each idle bucket (int64) and cause (objects). Taken from
        the arrays ``build_ledger`` made the frame of, else read from the frame once."""
        a = self._arrays
        if a is not None and "gap_columns" in a:
            out = dict(a["gap_columns"])
        else:
            gp = self.gaps
            out = {c: gp[c].to_numpy(np.int64) for c in ("rank", "device", "start_ns", "end_ns", "dur_ns")}
            for b in IDLE_BUCKETS:
                if b in gp:  # a bucket column of a frame made elsewhere may hold NaN: none booked
                    col = gp[b]
                    out[b] = col.to_numpy(np.int64) if isinstance(col.dtype, np.dtype) and col.dtype.kind == "i" else col.fillna(0).to_numpy(np.int64)
            out["next_launch_end_ns"] = gp["next_launch_end_ns"].to_numpy(dtype=float)
            out["cause"] = gp["cause"].to_numpy(dtype=object)
        out = {k: v.view() for k, v in out.items()}  # read-only views: the frames' own arrays stay writeable
        for v in out.values():
            v.flags.writeable = False
        return out

    @cached_property
    def busy_ns(self) -> int:
        t = self.totals()
        return sum(t[b] for b in BUSY_BUCKETS)

    @cached_property
    def avoidable_ns(self) -> int:
        t = self.totals()
        return sum(t[b] for b in AVOIDABLE_BUCKETS)

    # --- claims ------------------------------------------------------------------------------------------
    def claimed(
        self,
        buckets: str | Iterable[str],
        rank: int | None = None,
        device: int | None = None,
        within: Any = None,
    ) -> pd.DataFrame:
        """The slices (rank, device, step, start_ns, end_ns, bucket) in ``buckets``, optionally limited to one
        rank/device and to what the time ranges ``within`` (a finding's instances) point at.

        Busy slices are clipped to the ranges. Idle slices are taken per gap: a range that touches a gap claims
        that gap's slices in ``buckets`` whole, because the ledger already split each gap by cause and the cause
        owns all of its part (a sync that drained the queue owns the idle until new work arrives, not only the
        time it blocked; a stall during which the GPU stayed busy touches no gap and claims nothing).

        ``within`` is a DataFrame with start_ns and end_ns (and optionally rank/device, which then restrict each
        range to its own rank/device), a list of objects with ``start_ns``/``end_ns`` (and optional ``rank``/
        ``device``) such as ``rule_api.Instance``, or a list of (start_ns, end_ns) pairs.
        """
        want = _wanted(buckets)
        sl = self.slices
        bucket = sl["bucket"]
        by_code = isinstance(bucket.dtype, pd.CategoricalDtype) and list(bucket.cat.categories) == list(BUCKETS)
        if by_code:  # the ledger's own frame: compare bucket codes, never strings
            code = bucket.cat.codes.to_numpy()
            m = np.isin(np.arange(len(BUCKETS) + 1), [_CODE[b] for b in want])[code]  # code -1 reads the extra False
            idle_row = code >= len(BUSY_BUCKETS)
        else:
            m = bucket.isin(want).to_numpy().copy()
            idle_row = ~bucket.isin(BUSY_BUCKETS).to_numpy()
        s_rank, s_dev = sl["rank"].to_numpy(), sl["device"].to_numpy()
        if rank is not None:
            m &= s_rank == rank
        if device is not None:
            m &= s_dev == device
        if within is None or not m.any():
            return sl[m].reset_index(drop=True)
        w_s, w_e, w_r, w_d = _within_arrays(within)
        if not len(w_s):
            return sl.iloc[:0].reset_index(drop=True)
        s_start, s_end = sl["start_ns"].to_numpy(), sl["end_ns"].to_numpy()
        pos = np.flatnonzero(m)
        # the chosen slices by (rank, device), each device's rows in frame order (the ledger's frame is already so)
        pr, pd_ = s_rank[pos].astype(np.int64), s_dev[pos].astype(np.int64)
        if len(pos) > 1 and not np.all((pr[1:] > pr[:-1]) | ((pr[1:] == pr[:-1]) & (pd_[1:] >= pd_[:-1]))):
            o = np.lexsort((pd_, pr))
            pos, pr, pd_ = pos[o], pr[o], pd_[o]
        cut = np.flatnonzero(np.r_[True, (pr[1:] != pr[:-1]) | (pd_[1:] != pd_[:-1]), True])
        gaps = self.gaps
        g_rank, g_dev = gaps["rank"].to_numpy(), gaps["device"].to_numpy()
        g_start, g_end = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
        src: list[np.ndarray] = []  # per device: the rows of ``sl`` taken, and their (clipped) start and end
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        for a, b in zip(cut[:-1], cut[1:]):
            r, d = int(pr[a]), int(pd_[a])
            keep = applies_to(len(w_s), w_r, w_d, r, d)
            if not keep.any():
                continue
            s0 = w_s[keep]
            ws, we = _merged(s0, np.maximum(w_e[keep], s0 + 1))  # a point instance is 1 ns
            gpos = pos[a:b]
            idle = idle_row[gpos]
            d_src: list[np.ndarray] = []
            d_s: list[np.ndarray] = []
            d_e: list[np.ndarray] = []
            # busy slices: clipped to the ranges, a piece per range that overlaps
            bpos = gpos[~idle]
            if len(bpos):
                bs, be = s_start[bpos], s_end[bpos]
                lo = np.searchsorted(we, bs, side="right")
                hi = np.searchsorted(ws, be, side="left")
                n = np.maximum(hi - lo, 0)
                if n.sum():
                    rep = np.repeat(np.arange(len(bpos)), n)
                    widx = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
                    ps, pe = np.maximum(bs[rep], ws[widx]), np.minimum(be[rep], we[widx])
                    ok = pe > ps
                    d_src.append(bpos[rep][ok]), d_s.append(ps[ok]), d_e.append(pe[ok])
            # idle slices: whole, when the ranges touch their gap
            ipos = gpos[idle]
            if len(ipos):
                on = (g_rank == r) & (g_dev == d)
                gs, ge = g_start[on], g_end[on]
                i = np.searchsorted(we, gs, side="right")
                touched = (i < len(ws)) & (ws[np.minimum(i, len(ws) - 1)] < ge)
                gid = np.searchsorted(gs, s_start[ipos], side="right") - 1
                ipos = ipos[touched[gid]]
                d_src.append(ipos), d_s.append(s_start[ipos]), d_e.append(s_end[ipos])
            if d_src:
                cp, cs, ce = np.concatenate(d_src), np.concatenate(d_s), np.concatenate(d_e)
                if len(d_src) > 1:  # this device's rows in time order (slices are disjoint: starts are distinct)
                    o = np.argsort(cs, kind="stable")
                    cp, cs, ce = cp[o], cs[o], ce[o]
                src.append(cp), starts.append(cs), ends.append(ce)
        if not src or not sum(len(x) for x in src):
            return sl.iloc[:0].reset_index(drop=True)
        out = sl.iloc[np.concatenate(src)].reset_index(drop=True)
        out["start_ns"] = np.concatenate(starts).astype(s_start.dtype, copy=False)
        out["end_ns"] = np.concatenate(ends).astype(s_end.dtype, copy=False)
        return out

    def claim(self, buckets: str | Iterable[str], rank: int | None = None, device: int | None = None, within: Any = None) -> int:
        """ns of ``buckets`` (on ``rank``/``device``, inside ``within``): what a finding may call its impact."""
        return sum(self.claimed_ns(buckets, rank=rank, device=device, within=within).values())

    def claimed_ns(
        self,
        buckets: str | Iterable[str],
        rank: int | None = None,
        device: int | None = None,
        within: Any = None,
    ) -> dict[tuple[int, int, str], int]:
        """The ns of ``claimed(...)`` per (rank, device, bucket), in (rank, device, bucket name) order, zeros left
        out: what a finding's claim needs, without making the frame of slices.

        Idle slices are claimed per gap, and ``gaps`` already holds each gap's ns per idle bucket (its slices
        summed by the gap they start in, as ``claimed`` takes them), so the ranges are searched among the gaps
        they touch and those gaps' columns summed: nothing proportional to all slices is read per claim. Busy
        slices are clipped to the ranges as in ``claimed``.
        """
        want = _wanted(buckets)
        names = sorted(want)
        if within is None:  # whole buckets: the per-device totals are the sums of the slices
            rk, dv, bk, ns = self.device_arrays
            m = np.isin(bk, names) & (ns > 0)
            if rank is not None:
                m &= rk == rank
            if device is not None:
                m &= dv == device
            got = sorted(zip(rk[m].tolist(), dv[m].tolist(), bk[m].tolist(), ns[m].tolist()))
            return {(r, d, b): v for r, d, b, v in got}
        lay = self._layout
        if lay is None:  # frames not laid out as ``build_ledger`` makes them: sum the frame of slices
            sl = self.claimed(want, rank=rank, device=device, within=within)
            ns_ = (sl["end_ns"] - sl["start_ns"]).groupby([sl["rank"], sl["device"], sl["bucket"].astype(str)], sort=True).sum()
            return {(int(r), int(d), str(b)): int(v) for (r, d, b), v in ns_.items() if v}
        w_s, w_e, w_r, w_d = _within_arrays(within)
        out: dict[tuple[int, int, str], int] = {}
        if not len(w_s):
            return out
        idle = [b for b in names if b in IDLE_BUCKETS]
        busy = [b for b in names if b in BUSY_BUCKETS]
        gap_s, gap_e, gap_ns = lay["gap_start"], lay["gap_end"], lay["gap_ns"]
        s_code, s_start, s_end = lay["code"], lay["start"], lay["end"]
        for r, d, s0, s1, g0, g1 in lay["devices"]:
            if (rank is not None and r != rank) or (device is not None and d != device):
                continue
            keep = applies_to(len(w_s), w_r, w_d, r, d)
            if not keep.any():
                continue
            k_s = w_s[keep]
            ws, we = _merged(k_s, np.maximum(w_e[keep], k_s + 1))  # a point instance is 1 ns
            got: dict[str, int] = {}
            if idle and g1 > g0:
                touched = g0 + _overlapping(gap_s[g0:g1], gap_e[g0:g1], ws, we)
                for b in idle:
                    got[b] = int(gap_ns[b][touched].sum())
            if busy:
                codes = s_code[s0:s1]
                for b in busy:
                    pos = s0 + np.flatnonzero(codes == _CODE[b])
                    got[b] = _clipped_ns(s_start[pos], s_end[pos], ws, we)
            for b in names:
                if got.get(b):
                    out[(r, d, b)] = got[b]
        return out

    @cached_property
    def _layout(self) -> dict[str, Any] | None:
        """Where each (rank, device) sits in ``slices`` and ``gaps``, and their columns as arrays, for
        ``claimed_ns``: ``build_ledger`` writes each device's rows together and in time order, devices in (rank,
        device) order, buckets as codes of ``BUCKETS``. None for frames laid out otherwise."""
        if self._arrays is not None:  # the arrays the frames were built from
            sl_cols, gp_cols = self._arrays["slices"], self._arrays["gaps"]
        else:
            sl, gp = self.slices, self.gaps
            bucket = sl["bucket"]
            if not (isinstance(bucket.dtype, pd.CategoricalDtype) and list(bucket.cat.categories) == list(BUCKETS)):
                return None
            if sl.empty or gp.columns[: 5].tolist() != ["rank", "device", "start_ns", "end_ns", "dur_ns"]:
                return None
            sl_cols = {"rank": sl["rank"].to_numpy(np.int64), "device": sl["device"].to_numpy(np.int64), "start": sl["start_ns"].to_numpy(np.int64),
                       "end": sl["end_ns"].to_numpy(np.int64), "code": bucket.cat.codes.to_numpy()}
            gp_cols = {"rank": gp["rank"].to_numpy(np.int64), "device": gp["device"].to_numpy(np.int64), "start": gp["start_ns"].to_numpy(np.int64),
                       "end": gp["end_ns"].to_numpy(np.int64), "gap_ns": {b: gp[b].to_numpy(np.int64) for b in IDLE_BUCKETS}}
        if not len(sl_cols["start"]):
            return None

        def runs(f: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
            """(rank, device, first row) of each device's run of rows, and the end; None when out of order."""
            r, d, s = f["rank"], f["device"], f["start"]
            if r[0] == r.max() == r.min() and d[0] == d.max() == d.min():  # one device (the usual trace)
                return (r[:1], d[:1], np.array([0, len(r)])) if bool((s[1:] > s[:-1]).all()) else None
            same = (r[1:] == r[:-1]) & (d[1:] == d[:-1])
            ordered = (r[1:] > r[:-1]) | (same & (d[1:] > d[:-1])) | (same & (s[1:] > s[:-1]))
            if not ordered.all():
                return None
            head = np.flatnonzero(np.r_[True, ~same])
            return r[head], d[head], np.r_[head, len(r)]

        s_runs = runs(sl_cols)
        g_runs = runs(gp_cols) if len(gp_cols["start"]) else (_EMPTY, _EMPTY, np.zeros(1, np.int64))
        if s_runs is None or g_runs is None:
            return None
        g_at = {(int(r), int(d)): (int(a), int(b)) for r, d, a, b in zip(*g_runs[:2], g_runs[2][:-1], g_runs[2][1:])}
        devices = []
        for r, d, a, b in zip(s_runs[0].tolist(), s_runs[1].tolist(), s_runs[2][:-1].tolist(), s_runs[2][1:].tolist()):
            devices.append((r, d, a, b, *g_at.pop((r, d), (0, 0))))
        if g_at:  # gaps of a device without slices: not a ledger's frames
            return None
        return {
            "devices": devices,
            "code": sl_cols["code"],
            "start": sl_cols["start"],
            "end": sl_cols["end"],
            "gap_start": gp_cols["start"],
            "gap_end": gp_cols["end"],
            "gap_ns": gp_cols["gap_ns"],
        }

    # --- reports -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form: buckets, then per device and per step ns and % (steps outside markers are step -1)."""
        by_device = []
        for (r, d), g in self.by_device.groupby(["rank", "device"], sort=True):
            win = self.window_ns(int(r), int(d))
            by_device.append(
                {
                    "rank": int(r),
                    "device": int(d),
                    "window_ns": win,
                    "ns": {str(b): int(n) for b, n in zip(g["bucket"], g["ns"])},
                    "pct": {str(b): round(float(p), 3) for b, p in zip(g["bucket"], g["pct"])},
                }
            )
        by_step = []
        for (r, d, s), g in self.by_step.groupby(["rank", "device", "step"], sort=True):
            by_step.append(
                {
                    "rank": int(r),
                    "device": int(d),
                    "step": int(s),
                    "window_ns": int(g["ns"].sum()),
                    "ns": {str(b): int(n) for b, n in zip(g["bucket"], g["ns"]) if n},
                    "pct": {str(b): round(float(p), 3) for b, p in zip(g["bucket"], g["pct"]) if p},
                }
            )
        t = self.totals()
        total = sum(t.values())
        return {
            "buckets": list(BUCKETS),
            "avoidable_buckets": list(AVOIDABLE_BUCKETS),
            "total": {"window_ns": total, "ns": t, "pct": {b: round(100.0 * n / total, 3) if total else 0.0 for b, n in t.items()}},
            "by_device": by_device,
            "by_step": by_step,
        }


def _wanted(buckets: str | Iterable[str]) -> set[str]:
    want = {buckets} if isinstance(buckets, str) else set(buckets)
    unknown = want - set(BUCKETS)
    if unknown:
        raise ValueError(f"unknown ledger bucket(s) {sorted(unknown)}; known: {', '.join(BUCKETS)}")
    return want


def _within_arrays(within: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """start_ns, end_ns (int64), rank and device (float64, NaN for unknown; None when ``within`` has no such
    column) of the time ranges a claim is limited to (see ``Ledger.claimed``)."""
    if isinstance(within, pd.DataFrame):
        r = within["rank"].to_numpy(dtype=float) if "rank" in within else None
        d = within["device"].to_numpy(dtype=float) if "device" in within else None
        return within["start_ns"].to_numpy(np.int64), within["end_ns"].to_numpy(np.int64), r, d
    items = within if isinstance(within, (list, Instances)) else list(within)
    if isinstance(items, Instances) or (items and not any(isinstance(it, (tuple, list)) for it in items)):
        # instance-like objects: columns straight from attributes (an ``Instances`` holds them already)
        c = instance_columns(items)
        return c.start_ns, c.end_ns, c.rank, c.device
    if not items:
        return _EMPTY, _EMPTY, None, None

    def opt(item: Any, name: str) -> float:
        v = None if isinstance(item, (tuple, list)) else getattr(item, name, None)
        return np.nan if v is None else float(v)

    s = np.array([int(it[0]) if isinstance(it, (tuple, list)) else int(it.start_ns) for it in items], np.int64)
    e = np.array([int(it[1]) if isinstance(it, (tuple, list)) else int(it.end_ns) for it in items], np.int64)
    return s, e, np.array([opt(it, "rank") for it in items], float), np.array([opt(it, "device") for it in items], float)


def _clipped_ns(s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray) -> int:
    """The total length of the intervals (s, e) (disjoint, sorted) inside the merged ranges (ws, we)."""
    lo = np.searchsorted(we, s, side="right")  # the ranges overlapping interval i lie in [lo, hi)
    hi = np.searchsorted(ws, e, side="left")
    n = np.maximum(hi - lo, 0)
    if not n.any():
        return 0
    rep = np.repeat(np.arange(len(s)), n)
    widx = _spans(lo, n)
    piece = np.minimum(e[rep], we[widx]) - np.maximum(s[rep], ws[widx])
    return int(piece[piece > 0].sum())


def _spans(lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The positions lo[i], lo[i] + 1, ..., lo[i] + n[i] - 1 of every i, concatenated."""
    total = int(n.sum())
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)


def _overlapping(a: np.ndarray, b: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Positions (ascending, each once) of the intervals of the merged set (a, b) that overlap one of the merged
    intervals (g0, g1); the smaller set is searched in the larger."""
    if len(a) == 0 or len(g0) == 0:
        return _EMPTY
    if len(g0) < len(a):
        lo = np.searchsorted(b, g0, side="right")  # the first interval ending after each gap starts ...
        hi = np.searchsorted(a, g1, side="left")  # ... to the last starting before it ends
        lo[1:] = np.maximum(lo[1:], hi[:-1])  # an interval spanning several gaps is taken at the first
        return _spans(lo, np.maximum(hi - lo, 0))
    i = np.searchsorted(g1, a, side="right")  # the first gap ending after each interval starts
    ok = i < len(g0)
    ok[ok] = g0[i[ok]] < b[ok]
    return np.flatnonzero(ok)


def _sweep(sets: list[tuple[int, np.ndarray, np.ndarray]], default: int) -> tuple[np.ndarray, np.ndarray]:
    """The segments between consecutive distinct edges of ``sets`` (code, starts, ends; merged, highest precedence
    first) and the code of the first set covering each (``default`` where none does): (edges, codes)."""
    p = np.unique(np.concatenate([x for _, a, b in sets for x in (a, b)] or [_EMPTY]))
    left = p[:-1]
    label = np.full(len(left), default, dtype=np.int8)
    for code, a, b in reversed(sets):
        label[_inside(a, b, left)] = code
    return p, label


def _device_slices(
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
    # merged busy intervals with the group of each row; zero-length rows (instant copies, clipped kernels) still
    # bound gaps, as in ``views.gaps``
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e, cls = s[order], e[order], cls[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    head = np.flatnonzero(new)
    # an interval's end is the running end at its last row: every earlier row ended before the interval began
    # (and e >= s), so the running maximum there is the interval's own largest end
    last = np.empty(len(head), np.intp)
    last[:-1] = head[1:] - 1
    last[-1] = len(s) - 1
    us, ue = s[head], run_end[last]
    w0, w1 = int(us[0]), int(ue[-1])
    # consecutive merged intervals never touch: gap k lies between interval k and k + 1, and has positive length
    gs, ge = ue[:-1], us[1:]
    n_g = len(gs)
    # each interval's classes among its non-empty rows: one class is one piece, several are labelled row by row
    pos = e > s
    all_pos = bool(pos.all())  # the usual case: no zero-length row to leave out
    c_lo = np.minimum.reduceat(cls if all_pos else np.where(pos, cls, 3), head)
    c_hi = np.maximum.reduceat(cls if all_pos else np.where(pos, cls, -1), head)
    empty_iv = c_hi < 0  # only zero-length rows: a point, no piece
    mixed = (c_lo != c_hi) & ~empty_iv

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
    sync = _inside(*host["sync"], gs) & ~queued
    short = late & ((ge - gs) < LAUNCH_GAP_NS)
    # a gap's own bucket, lowest precedence first; -1: host work (or none) decides, point by point
    g_code = np.full(n_g, -1, dtype=np.int8)
    g_code[~linked] = _CODE["idle_other"]
    g_code[short] = _CODE["idle_launch_bound"]
    g_code[sync] = _CODE["idle_host_sync"]
    g_code[queued] = _CODE["idle_gpu_dependency"]
    default = _CODE["idle_untraced" if host_traced else "idle_other"]

    def clip(ab: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.maximum(ab[0], w0), np.minimum(ab[1], w1)
        keep = b > a
        return a[keep], b[keep]

    warm, wait = clip(host["warmup"]), clip(host["data_wait"])
    # gaps that warm-up or data wait touch are labelled edge by edge
    cut = np.zeros(n_g, dtype=bool)
    for a, b in (warm, wait):
        cut[_overlapping(gs, ge, a, b)] = True
    # gaps the host decides: host busy covers them whole, not at all, or in part (then edge by edge)
    free = np.flatnonzero(g_code < 0)
    g_lab = g_code.copy()  # the bucket of a gap that is one piece
    hb = host["host_busy"]() if len(free) else (_EMPTY, _EMPTY)
    if len(free):
        g_lab[free] = default
        if len(hb[0]):
            i = np.searchsorted(hb[1], gs[free], side="right")  # the first busy range ending after the gap starts
            j = np.minimum(i, len(hb[0]) - 1)
            touch = (i < len(hb[0])) & (hb[0][j] < ge[free])
            whole = touch & (hb[0][j] <= gs[free]) & (hb[1][j] >= ge[free])
            g_lab[free[whole]] = _CODE["idle_host_busy"]
            cut[free[touch & ~whole]] = True

    # pieces in time order: interval k at 2k, gap k at 2k + 1
    el_s = np.empty(2 * len(us) - 1, np.int64)
    el_s[0::2], el_s[1::2] = us, gs
    el_l = np.empty(len(el_s), np.int8)
    el_l[0::2], el_l[1::2] = c_lo, g_lab
    el_g = np.full(len(el_s), -1, np.int32 if n_g < 2**31 else np.int64)  # the gap of each idle piece
    el_g[1::2] = np.arange(n_g)
    # a mixed interval or cut gap stays in as an empty piece: its own pieces start where it starts and come after
    # it, and empty pieces (as points: intervals of zero-length rows only) are skipped below

    # the pieces of mixed intervals and cut gaps, edge by edge
    xs: list[np.ndarray] = []
    xl: list[np.ndarray] = []
    xg: list[np.ndarray] = []
    if mixed.any():
        mk = np.flatnonzero(mixed)
        rows = _spans(head[mk], np.diff(np.r_[head, len(s)])[mk])  # the rows of the mixed intervals
        rows = rows[pos[rows]]
        rs, re_, rc = s[rows], e[rows], cls[rows]
        p, label = _sweep([(k, *_merged(rs[rc == k], re_[rc == k])) for k in range(n_busy)], -1)
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
                take = _overlapping(hb[0], hb[1], cs, ce)
                sets.append((_CODE[code], hb[0][take], hb[1][take]))
            else:
                sets.append((_CODE[code], cs[cc == _CODE[code]], ce[cc == _CODE[code]]))
        sets.append((default, cs, ce))  # the rest of a cut gap
        p, label = _sweep(sets, -1)
        left = p[:-1]
        inside = _inside(cs, ce, left)  # only what lies in a cut gap: the sets reach beyond them
        left, label = left[inside], label[inside]
        xs.append(left), xl.append(label), xg.append(ci[np.searchsorted(cs, left, side="right") - 1])
    # step edges cut the pieces; a cut takes the bucket and gap of the piece it falls in
    st_s, st_e, st_n = steps
    edges = np.unique(np.concatenate([st_s, st_e])) if len(st_s) else _EMPTY
    inner = edges[(edges > w0) & (edges < w1)]
    if len(inner):
        xs.append(inner), xl.append(np.full(len(inner), -1, np.int8)), xg.append(np.full(len(inner), -1, np.int64))
    if xs:
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
        val, first = np.full(1, -1, np.int64), _EMPTY

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
    idx = np.flatnonzero(change)
    out_s = el_s[idx]
    out_l = el_l[idx]
    ns = np.empty(len(out_s), np.int64)  # a slice ends where the next starts (fresh 10^6-row arrays are what
    np.subtract(out_s[1:], out_s[:-1], out=ns[:-1])  # costs here: each is made once)
    ns[-1] = w1 - out_s[-1]
    # the idle slices by gap (the gap each starts in) and bucket, summed once for all devices in ``build_ledger``
    idle = np.flatnonzero(out_l >= n_busy)  # positions: busy and idle slices alternate, which a mask per take
    per_gap = (el_g[idx[idle]], out_l[idle], ns[idle])  # would walk with a mispredicted branch per row
    return {"step": step_of_sorted(idx), "start": out_s, "ns": ns, "label": out_l, "gs": gs, "ge": ge, "nl": nl, "per_gap": per_gap}


def build_ledger(views: "Views") -> Ledger:
    """The ledger of a timeline (see the module docstring); ``Derived.ledger`` builds it once per analysis."""
    act = views.gpu_activity
    if act.empty:
        return _empty_ledger()
    is_kernel = kind_mask(act["kind"], ("kernel",))
    coll = is_kernel & name_mask(act["name"], COLLECTIVE)
    a_cls = np.where(coll, 1, np.where(is_kernel, 0, 2)).astype(np.int8)
    a_rank = act["rank"].to_numpy(np.int64)
    a_dev = act["device"].to_numpy(np.int64)
    a_s = act["start_ns"].to_numpy(np.int64)
    a_e = a_s + np.maximum(act["dur_ns"].to_numpy(np.int64), 0)

    host = views.host_events
    blocking = _blocking_parts(views)
    warm = warmup_regions(views, blocking)
    # host-busy rows: one mask (the empty ones dropped, as ``_merged`` would), each rank's starts and ends taken
    # once and merged in place (no frame, no full-length copies: these are most host rows)
    ha = host_arrays(views)
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
        return _run_unions(s, e)

    ln = views.launches
    launch_end: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if not ln.empty:
        lr = ln["rank"].to_numpy(np.int64)
        ld = ln["device"].to_numpy(np.int64)
        lg = ln["gpu_start_ns"].to_numpy(np.int64)
        lend = (ln["launch_start_ns"].to_numpy() + ln["launch_dur_ns"].to_numpy()).astype(np.int64, copy=False)
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
    st = views.steps
    # the step markers' columns once; each rank's rows are picked on them (no row selection of the frame per rank)
    sa = None if st.empty else step_arrays(views)
    st_cols = None if sa is None else (sa["rank"], *(sa[c].astype(np.int64, copy=False) for c in ("start_ns", "end_ns", "step")))

    def ranges(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rank, start, end) of some host ranges, end to end."""
        if not parts:
            return _EMPTY, _EMPTY, _EMPTY
        return tuple(np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False) for k in range(3))  # type: ignore[return-value]

    dw = np.flatnonzero(data_wait_mask(host)) if not host.empty else _EMPTY
    waits = ranges([(h_rank[dw], h_start[dw], h_start[dw] + h_dur[dw])])
    blocks = ranges(blocking)
    warms = ranges([(warm["rank"].to_numpy(), warm["start_ns"].to_numpy(), warm["end_ns"].to_numpy())]) if len(warm) else (_EMPTY, _EMPTY, _EMPTY)

    def by_rank(rse: tuple[np.ndarray, np.ndarray, np.ndarray], rank: int) -> tuple[np.ndarray, np.ndarray]:
        if not len(rse[0]):
            return _EMPTY, _EMPTY
        m = rse[0] == rank
        return _merged(rse[1][m], rse[2][m])

    host_ranks = set() if host.empty else {int(h_rank[0])} if hb_one_rank else set(host["rank"].unique().tolist())
    parts: list[dict[str, np.ndarray]] = []
    keys: list[tuple[int, int]] = []
    if a_rank.min() != a_rank.max() or a_dev.min() != a_dev.max():  # one (rank, device): already in order
        order = np.lexsort((a_dev, a_rank))
        a_rank, a_dev, a_s, a_e, a_cls = a_rank[order], a_dev[order], a_s[order], a_e[order], a_cls[order]
    bounds = np.flatnonzero(np.r_[True, (a_rank[1:] != a_rank[:-1]) | (a_dev[1:] != a_dev[:-1]), True])
    facts: dict[str, Any] = {}
    steps = (_EMPTY, _EMPTY, _EMPTY)
    current_rank = None
    for a, b in zip(bounds[:-1], bounds[1:]):
        rank, device = int(a_rank[a]), int(a_dev[a])
        s, e, c = a_s[a:b], a_e[a:b], a_cls[a:b]
        if int(e.max()) <= int(s.min()):
            continue  # only zero-length rows: no window to account for
        if rank != current_rank:
            current_rank = rank
            facts = {
                "data_wait": by_rank(waits, rank),
                "sync": by_rank(blocks, rank),
                "warmup": by_rank(warms, rank),
                # the rank's host-busy union, built only when a gap host work decides needs it, then kept
                "host_busy": cache(lambda r=rank: _union_of_runs(host_busy_runs(r))),
            }
            own = None if st_cols is None else np.flatnonzero(st_cols[0] == rank)
            steps = (st_cols[1][own], st_cols[2][own], st_cols[3][own]) if own is not None and len(own) else (_EMPTY, _EMPTY, _EMPTY)
        parts.append(_device_slices(s, e, c, launch_end.get((rank, device)), facts, rank in host_ranks, steps))
        keys.append((rank, device))
    if not parts:
        return _empty_ledger()
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
    step = sl_block[2]
    slices = _Later(_slices_frame, sl_block, label)
    w_start = np.array([p["start"][0] for p in parts], np.int64)
    w_end = np.array([p["start"][-1] + p["ns"][-1] for p in parts], np.int64)
    w_block = np.empty((5, len(keys)), np.int64)  # the windows' int64 columns as one block, as for the slices
    w_block[0], w_block[1], w_block[2], w_block[3] = k_rank, k_dev, w_start, w_end
    np.subtract(w_end, w_start, out=w_block[4])
    windows = _Later(_windows_frame, w_block)
    nb = len(BUCKETS)
    # per (device, step): ns per bucket; groups of (device, step) in lexicographic order of one int64 key. When
    # the keys span a small range (a few devices, step numbers close together) a table of present keys ranks
    # them; else one sort and a neighbour test (a 2-D ``np.unique(axis=1)`` sorts rows as records, much slower)
    s_lo = int(step.min()) if len(step) else 0
    span = int(step.max()) - s_lo + 1 if len(step) else 1
    ck = step - s_lo
    if not one:
        ck += dev_idx * span
    if len(keys) * span <= 4 * len(ck) + 4096:
        present = np.zeros(len(keys) * span, dtype=bool)
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
    smat = smat.reshape(n_grp, nb)
    # per device: one row per (device, bucket), zeros included; the sum of its steps' rows
    mat = np.zeros((len(keys), nb), np.int64)
    np.add.at(mat, u_dev, smat)
    by_device = _Later(_by_device_frame, k_rank, k_dev, mat, w_block[4])
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
    gs, ge = joined("gs"), joined("ge")
    n_g = len(gs)
    # the frame's int64 columns as the rows of one block, filled in place: the frame takes it without a copy
    block = np.empty((len(_GAP_INT_COLS), n_g), np.int64)
    block[0], block[1], block[2], block[3] = per_row(k_rank, n_gp), per_row(k_dev, n_gp), gs, ge
    np.subtract(ge, gs, out=block[4])
    per_gap = block[5:]
    per_gap[:] = 0
    first_gap = np.cumsum(n_gp) - n_gp  # each device's first row
    # the cause of a gap: its bucket with the most ns, the first in ``IDLE_BUCKETS`` order on a tie (argmax).
    # Most gaps hold one idle slice, whose bucket it is; only gaps of several slices compare their sums
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
        cause[several] = _first_max_row(per_gap[:, several])
    nl = joined("nl")
    gaps = _Later(_gaps_frame, block, nl, cause)
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


def _slices_frame(sl_block: np.ndarray, label: np.ndarray) -> pd.DataFrame:
    """``Ledger.slices`` of ``build_ledger``'s int64 block (rank, device, step, start_ns, end_ns) and bucket codes."""
    slices = pd.DataFrame(sl_block.T, columns=_SLICE_COLS, copy=False)
    slices.insert(5, "bucket", pd.Categorical.from_codes(label, dtype=_BUCKET_DTYPE))
    return slices


def _gaps_frame(block: np.ndarray, next_launch_end_ns: np.ndarray, cause: np.ndarray) -> pd.DataFrame:
    """``Ledger.gaps`` of ``build_ledger``'s int64 block (rank, device, start_ns, end_ns, dur_ns, the idle buckets),
    the next launch's end and each gap's cause (codes of ``IDLE_BUCKETS``)."""
    gaps = pd.DataFrame(block.T, columns=_GAP_INT_COLS, copy=False)
    gaps.insert(5, "next_launch_end_ns", next_launch_end_ns)
    # the names as the column's own array type (inferred once from the bucket names) taken by index: no 10^5
    # strings to check one by one
    gaps["cause"] = _idle_names().take(cause) if len(cause) else np.zeros(0, dtype=object)
    return gaps


def _windows_frame(w_block: np.ndarray) -> pd.DataFrame:
    """``Ledger.windows`` of the int64 block (rank, device, start_ns, end_ns, window_ns) ``build_ledger`` made."""
    return pd.DataFrame(w_block.T, columns=_WINDOW_COLS, copy=False)


def _by_device_frame(k_rank: np.ndarray, k_dev: np.ndarray, mat: np.ndarray, window_ns: np.ndarray) -> pd.DataFrame:
    """``Ledger.by_device``: one row per (device, bucket), zeros included, from the ns per device and bucket."""
    nb = len(BUCKETS)
    return pd.DataFrame(
        {
            "rank": np.repeat(k_rank, nb),
            "device": np.repeat(k_dev, nb),
            "bucket": np.tile(np.array(BUCKETS, dtype=object), len(k_rank)),
            "ns": mat.ravel(),
            "pct": (100.0 * mat / np.maximum(window_ns, 1)[:, None]).ravel(),
        }
    )


def _first_max_row(m: np.ndarray) -> np.ndarray:
    """``m.argmax(axis=0)`` (the first row holding each column's maximum) of a few long rows, a row at a time:
    numpy's argmax across rows of a C-ordered block walks it column by column."""
    best = m[0].copy()
    arg = np.zeros(m.shape[1], np.intp)
    more = np.empty(m.shape[1], dtype=bool)
    for k in range(1, m.shape[0]):
        np.greater(m[k], best, out=more)  # strictly: ties keep the first row, as argmax does
        np.copyto(arg, k, where=more)
        np.maximum(best, m[k], out=best)
    return arg


def _empty_ledger() -> Ledger:
    def frame(cols: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})

    return Ledger(
        slices=frame({"rank": "int64", "device": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64", "bucket": "object"}),
        by_device=frame({"rank": "int64", "device": "int64", "bucket": "object", "ns": "int64", "pct": "float64"}),
        by_step=frame({"rank": "int64", "device": "int64", "step": "int64", "bucket": "object", "ns": "int64", "pct": "float64"}),
        windows=frame({"rank": "int64", "device": "int64", "start_ns": "int64", "end_ns": "int64", "window_ns": "int64"}),
        gaps=frame({"rank": "int64", "device": "int64", "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64", "next_launch_end_ns": "float64", "cause": "object"}),
        warmup=frame({"rank": "int64", "start_ns": "int64", "end_ns": "int64", "reason": "object"}),
    )
