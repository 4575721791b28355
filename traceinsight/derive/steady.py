"""The steady-state model: which parts of a window are one-time work, and whether enough steady state is left.

Steady state repeats itself; one-time work does not. A profile of the first iterations of a fresh process, a
graph capture, an un-warmed test or a window that opens while the host is still blocked on earlier work holds
time that no change to the loop removes. This module says what that time is, for the time ledger
(``traceinsight.derive.ledger``), which books it in the warm-up bucket (``buckets.WARMUP_BUCKET``, its one home: the
verdict, TI001, TI013, the severity scale and the what-if replay all read the ledger's warm-up), and, given the
ledger, whether the rest can be judged. It sits below the ledger: what it reads of the ledger it gets as arguments.

One-time work, wherever it sits in the window (``one_time_regions``; the ledger adds the first-call outliers it
measures itself, see ``ledger.warmup_regions``):

* **First launch of a kernel** whose launch call is far slower than the rank's usual launch call (at least
  ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median launch): lazy module loading (CUDA_MODULE_LOADING=LAZY,
  ROCm code-object loads) makes the first launch of each kernel take 10-600 ms, scattered through a first forward.
* **Named one-time calls** (``ONE_TIME_CALL``): module/library loading, context creation, library handles and
  autotuning (``cudnnCreate``, ``cublasCreate``, ``cudnnFind*``), JIT compilation (nvrtc, Inductor/Triton/XLA/
  nvFuser compile ranges), graph capture and instantiation (``cudaStreamBeginCapture`` to ``EndCapture``,
  ``cudaGraphInstantiate``).
* **Allocator growth**: ``cudaMalloc``-like calls before the rank's second step (a caching allocator grows in the
  first pass and then reuses its pool); without steps, those before the rank's first synchronising free (a
  caching allocator keeps what it freed: mallocs after a free are a pool that does not cache, not growth).
* **A blocking call at the window's start**: a synchronizing call or blocking copy that begins before the rank's
  first traced launch waits on work queued before the window opened.
* **JIT compilation inside an op** (``JIT_FUSION_OP``: TorchScript's fusers, nvFuser): a fuser op's call far
  longer than its other calls (or its only one) with the GPU idle under it, with or without steps.
* **Set-up before the first kernel**, on a rank without steps: idle gaps before its first kernel's launch far
  longer than the idle gaps after it (imports, model construction, the first data).
* **Warm-up steps** (``warmup_steps``): leading steps each at least ``WARMUP_FIRST_STEP_RATIO`` times the median
  of the steps after them (allocator growth, autotuning and compilation land in the first steps).

``judgement`` then says whether the window can be judged: not when warm-up is most of it and fewer than
``MIN_STEADY_STEPS`` steps lie outside it (without steps: when what is left holds under ``MIN_STEADY_BUSY_NS`` of
GPU work), or when what is left is shorter than ``MIN_STEADY_NS``. Such a window
gets the verdict "cannot judge this window" with the way to record a better one (``record_better``), and no
performance finding above info.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import re

import numpy as np
import pandas as pd

from traceinsight.ingest import input_format
from traceinsight.model.finding import as_instances, instance_columns
from traceinsight.vocab.buckets import BUSY_BUCKETS, WARMUP_BUCKET
from traceinsight.vocab.intervals import Coverage, merge_intervals, pair_opens
from traceinsight.vocab.masks import category_hits, coded, kind_mask, name_mask
from traceinsight.vocab.patterns import ALLOC_CALL, CAPTURE_BEGIN, CAPTURE_END, IMPLICIT_SYNC_CALL, JIT_FUSION_OP, ONE_TIME_CALL, RECOMPILE_CALL, START_UP_CALL  # noqa: F401  (the steady-state model's vocabulary)

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ledger import Ledger
    from traceinsight.derive.views import Views

#: A one-time cost must last at least this long to count (below it, one-time costs are noise).
WARMUP_MIN_NS = 1_000_000
#: ...and be this many times the median of the repeated calls it is compared with: autotuning, lazy module
#: loading and JIT compilation make a first call orders of magnitude slower, far beyond the spread of steady calls.
WARMUP_RATIO = 10.0
#: A leading step this many times longer than the median of the steps after it is warm-up (needs 2 after it).
WARMUP_FIRST_STEP_RATIO = 2.0
#: The window cannot be judged when warm-up is at least this % of it and fewer than ``MIN_STEADY_STEPS`` steps
#: lie outside warm-up: what is left is a fragment between one-time work, nothing shows it repeats.
MAX_WARMUP_PCT = 50.0
MIN_STEADY_STEPS = 2
#: ...or when the window less its warm-up is shorter than this: one real step is milliseconds.
MIN_STEADY_NS = 1_000_000
#: Without step markers, repetition cannot be counted: a window mostly warm-up is judged only when what is left
#: holds at least this much GPU work (a few real steps' worth), else it is a fragment of a first pass.
MIN_STEADY_BUSY_NS = 5_000_000

#: An allocator does not cache when memory it handed back to the driver (a synchronising free) is allocated again
#: (a malloc right after the free) at least this many times per step, in at least ``MIN_REALLOC_STEPS`` steps
#: (without steps: that many times both together): a caching allocator would have served it from the block it
#: kept; a flush under pressure, or ``empty_cache()`` once per step, does so at most once per step. The steady
#: model then books no malloc after the frees as growth, and TI032 reports the calls (``rulelib.uncached_allocator``).
MIN_REALLOCS_PER_STEP = 3
MIN_REALLOC_STEPS = 2

_COLS = ["rank", "start_ns", "end_ns", "reason"]


_EMPTY_REGIONS = pd.DataFrame({c: pd.Series(dtype="int64" if c != "reason" else "object") for c in _COLS})


def host_arrays(views: "Views") -> dict[str, Any]:
    """The host rows' ``rank``, ``start_ns`` and ``dur_ns`` as arrays and their ``name`` and ``kind`` columns, read
    once per analysis (kept in the views' memo): the ledger and this model ask for them in half a dozen places, and
    each read of a frame column builds a Series."""

    def build() -> dict[str, Any]:
        host = views.host_events
        return {"rank": host["rank"].to_numpy(), "start_ns": host["start_ns"].to_numpy(), "dur_ns": host["dur_ns"].to_numpy(),
                "name": host["name"], "kind": host["kind"]}

    return views.memo("steady.host_arrays", build)


def step_arrays(views: "Views") -> dict[str, np.ndarray]:
    """The step markers' ``rank``, ``start_ns``, ``dur_ns``, ``end_ns`` and ``step`` as arrays, read once per analysis
    (kept like ``host_arrays``): the ledger and this model both walk the steps per rank."""

    def build() -> dict[str, np.ndarray]:
        st = views.steps
        return {c: st[c].to_numpy() for c in ("rank", "start_ns", "dur_ns", "end_ns", "step") if c in st}  # (a stand-in frame may lack some)

    return views.memo("steady.step_arrays", build)


def may_match(names: pd.Series, pattern: "str | re.Pattern[str]", case: bool = False) -> bool:
    """Could some row of ``names`` match ``pattern`` (``name_mask``'s rules)? False only when the column is
    categorical and no category matches: then ``name_mask`` is all False, and the ledger and the steady-state
    model skip the masks and selections built on it (most patterns name rare calls that a rank never makes, and a
    mask costs a pass over the rows besides its fixed cost). One regex search per category, kept per categories."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return len(names) > 0
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    return bool(category_hits(names.cat.categories, rx).any()) and len(names) > 0


def empty_regions() -> pd.DataFrame:
    """A frame of no regions (a copy of one built once: building it costs more than copying it)."""
    return _EMPTY_REGIONS.copy()


def warmup_steps(durs: np.ndarray) -> np.ndarray:
    """Leading steps (in time order) each at least ``WARMUP_FIRST_STEP_RATIO`` times the median of the steps
    after it, as a mask; the first step that is not stops the run. Needs two later steps to compare with."""
    d = np.asarray(durs, dtype=float)
    out = np.zeros(len(d), dtype=bool)
    for i in range(max(len(d) - 2, 0)):
        if d[i] >= WARMUP_FIRST_STEP_RATIO * float(np.median(d[i + 1 :])) and d[i] >= WARMUP_MIN_NS:
            out[i] = True
        else:
            break
    return out


def one_time_regions(views: "Views", blocking: "list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]") -> pd.DataFrame:
    """Host ranges (rank, start_ns, end_ns, reason) of one-time work found by name, by first launch, by allocator
    growth, at the window's start, and warm-up steps (see the module docstring). ``blocking``: the ledger's
    blocking calls, as (rank, start, end, reason) arrays."""
    host = views.host_events
    parts: list[pd.DataFrame] = []
    steps = views.steps
    second_step: dict[int, int] = {}
    if not host.empty:  # the host columns read once for both passes below
        ha = host_arrays(views)
        names, kinds, rank, start_col, dur_col = ha["name"], ha["kind"], ha["rank"], ha["start_ns"], ha["dur_ns"]
    if not steps.empty:
        # per rank on the step arrays (``groupby("rank", sort=True)`` then ``sort_values("start_ns")`` in each, the
        # same quicksort): a groupby's fixed cost was most of this function on a rank of a few steps
        sa = step_arrays(views)
        s_rank, s_start, s_dur = sa["rank"], sa["start_ns"], sa["dur_ns"]
        # per rank, when the program's own work (runtime calls, framework ops) begins: not the profiler's range
        # around the window (asked only where a rank has the steps that need it)
        first_work: dict[int, int] | None = None
        for r in np.unique(s_rank):
            own = np.flatnonzero(s_rank == r)
            st = np.sort(s_start[own])
            second_step[int(r)] = int(st[1]) if len(st) > 1 else int(np.iinfo(np.int64).max)
            own = own[np.argsort(s_start[own], kind="quicksort")]
            if first_work is None and len(st) >= MIN_STEADY_STEPS:
                first_work = {}
                if not host.empty:
                    work = kind_mask(kinds, ("runtime", "cpu_op"))
                    if work.any():
                        w_rank, w_start = rank[work], start_col[work]
                        if w_rank.min() == w_rank.max():  # one rank (a rank's own trace): no sort of its rows' ranks
                            first_work = {int(w_rank[0]): int(w_start.min())}
                        else:
                            first_work = {int(r): int(w_start[w_rank == r].min()) for r in np.unique(w_rank)}
            first_host = first_work.get(int(r)) if first_work is not None else None
            if len(st) >= MIN_STEADY_STEPS and first_host is not None and first_host < int(st[0]):
                # before the loop's first step the program starts up (imports, model set-up, data loading's first
                # fill): none of it repeats, whatever the calls are named (a whole-program Nsight capture)
                parts.append(pd.DataFrame({"rank": [int(r)], "start_ns": [first_host], "end_ns": [int(st[0])],
                                           "reason": ["before the first step (program start-up)"]}))
            w = warmup_steps(s_dur[own])
            if w.any():
                d = steps.iloc[own[w]]
                parts.append(pd.DataFrame({"rank": int(r), "start_ns": d["start_ns"].to_numpy(np.int64), "end_ns": d["end_ns"].to_numpy(np.int64),
                                           "reason": [f"warm-up step ({n})" for n in d["name"]]}))
    if not host.empty:
        start, dur = start_col.astype(np.int64, copy=False), dur_col.astype(np.int64, copy=False)
        # Python frames are left out: their names are file paths (``vllm/compilation/decorators.py(367): __call__``
        # wraps every compiled forward), so a word in the path says nothing about what the call does
        if may_match(names, ONE_TIME_CALL):
            kinds_ok = kind_mask(kinds, ("runtime", "cpu_op", "annotation", "other"))
            named = np.flatnonzero(kinds_ok & name_mask(names, ONE_TIME_CALL) & (dur > 0))
        else:
            named = np.zeros(0, np.intp)
        if len(named) and second_step:  # a compile after the second step began recompiles in the steady state
            late = steady_recompiles(views, named)
            named = named[~late]
        if len(named) and second_step:  # a set-up call every steady step makes is per-step work, not set-up
            named = named[~_recurring(named, names, rank, start, views.steps, second_step)]
        if len(named):
            parts.append(pd.DataFrame({"rank": rank[named].astype(np.int64), "start_ns": start[named], "end_ns": start[named] + dur[named],
                                       "reason": ["one-time set-up: " + str(n) for n in names.take(named)]}))
        capture, allocs = may_match(names, CAPTURE_BEGIN), may_match(names, ALLOC_CALL)
        rt = kind_mask(kinds, ("runtime",)) if capture or allocs else None
        begin = np.flatnonzero(rt & name_mask(names, CAPTURE_BEGIN)) if capture else np.zeros(0, np.intp)
        if len(begin):
            end = np.flatnonzero(rt & name_mask(names, CAPTURE_END))
            b, e = pair_opens(rank, host["tid"].to_numpy(), start, begin, end)
            if len(b):
                parts.append(pd.DataFrame({"rank": rank[b].astype(np.int64), "start_ns": start[b].astype(np.int64),
                                           "end_ns": (start[e] + dur[e]).astype(np.int64),
                                           "reason": "graph capture (launches recorded, not run)"}))
        alloc = np.flatnonzero(rt & name_mask(names, ALLOC_CALL) & (dur > 0)) if allocs else np.zeros(0, np.intp)
        if len(alloc):
            # without steps, on a rank whose allocator does not cache (a malloc right after a synchronising free
            # at least ``MIN_REALLOCS_PER_STEP * MIN_REALLOC_STEPS`` times), growth ends at the first free after
            # its first malloc: a caching allocator grows and keeps its blocks (``cudaFree(0)`` before any malloc
            # creates the context), so mallocs after the frees are the pool not caching, not growth
            first_free: dict[int, int] = {}
            no_steps = [int(r) for r in np.unique(rank[alloc]) if int(r) not in second_step]
            if no_steps and may_match(names, IMPLICIT_SYNC_CALL):
                fr = np.flatnonzero(rt & name_mask(names, IMPLICIT_SYNC_CALL))
                for r in no_steps:
                    a_s = np.sort(start[alloc][rank[alloc] == r])
                    f_s = np.sort(start[fr][rank[fr] == r])
                    f_s = f_s[f_s > a_s[0]] if len(a_s) else f_s[:0]
                    if not len(f_s):
                        continue
                    # a malloc whose previous allocator call was a free: merge both kinds in time order
                    t = np.r_[a_s, f_s]
                    is_free = np.r_[np.zeros(len(a_s), bool), np.ones(len(f_s), bool)][np.argsort(t, kind="stable")]
                    if int((is_free[:-1] & ~is_free[1:]).sum()) >= MIN_REALLOCS_PER_STEP * MIN_REALLOC_STEPS:
                        first_free[r] = int(f_s[0])
            limit = np.array([second_step.get(int(r), first_free.get(int(r), np.iinfo(np.int64).max)) for r in rank[alloc]], np.int64)
            alloc = alloc[start[alloc] < limit]
            if len(alloc):
                parts.append(pd.DataFrame({"rank": rank[alloc].astype(np.int64), "start_ns": start[alloc], "end_ns": start[alloc] + dur[alloc],
                                           "reason": "allocator growth: " + names.take(alloc).astype(str).to_numpy(object)}))
        parts.extend(_jit_fusion_compiles(views, names, kinds, rank, start, dur))
    ln = views.launches
    if not ln.empty:
        parts.extend(_first_launches(ln))
        parts.extend(_opening_blocks(ln, blocking, views))
        parts.extend(_set_up_before_first_kernel(views, ln, second_step))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_regions()
    out = pd.concat(parts, ignore_index=True)[_COLS]
    out["rank"] = out["rank"].astype(np.int64)
    out["start_ns"] = out["start_ns"].astype(np.int64)
    out["end_ns"] = out["end_ns"].astype(np.int64)
    return out


def _recurring(rows: np.ndarray, names: pd.Series, rank: np.ndarray, start: np.ndarray, steps: pd.DataFrame,
               second_step: dict[int, int]) -> np.ndarray:
    """Per host row at ``rows`` (calls named as one-time set-up): True for those after their rank's second step
    began whose name is still called in each of the rank's last ``MIN_STEADY_STEPS`` steps. Such a name is per-step
    work (MIOpen asks ``hipGetDeviceProperties`` for every convolution): none of its later calls is set-up, and
    booking them as warm-up would stretch the warm-up over the whole window (the memory view's steady state begins
    after the last warm-up region). Set-up that thins out stays one-time: lazy module loading spread over the first
    steps, a new shape's first run in one later step."""
    out = np.zeros(len(rows), dtype=bool)
    r_of, t_of = rank[rows].astype(np.int64), start[rows].astype(np.int64)
    codes = np.asarray(coded(names)[0])[rows].astype(np.int64)  # equal names, equal codes
    s_rank, s_start = steps["rank"].to_numpy(), steps["start_ns"].to_numpy(np.int64)
    for r, second in second_step.items():
        late = np.flatnonzero((r_of == r) & (t_of >= second))
        if not len(late):
            continue
        st = np.sort(s_start[s_rank == r])
        step_of = np.searchsorted(st, t_of[late], side="right") - 1
        last = step_of >= len(st) - MIN_STEADY_STEPS  # in one of the rank's last steps
        pairs = np.unique(np.c_[codes[late][last], step_of[last]], axis=0)  # (name, step) once each
        names_u, per_name = np.unique(pairs[:, 0], return_counts=True)
        recurring = names_u[per_name >= MIN_STEADY_STEPS]
        out[late] = np.isin(codes[late], recurring)
    return out


def steady_recompiles(views: "Views", rows: "np.ndarray | None" = None) -> np.ndarray:
    """For the host rows at ``rows`` (positions in ``views.host_events``; default all), whether each is a
    compilation or autotuning range (``RECOMPILE_CALL``) that begins after its rank's second step began: a
    recompile in the steady state. All False on a trace without steps (nothing says where steady state starts)."""
    host = views.host_events
    rows = np.arange(len(host)) if rows is None else np.asarray(rows)
    out = np.zeros(len(rows), dtype=bool)
    st = views.steps
    if st.empty or not len(rows):
        return out
    second = {}
    for r, g in st.groupby("rank", sort=False):
        ss = np.sort(g["start_ns"].to_numpy(np.int64))
        if len(ss) > 1:
            second[int(r)] = int(ss[1])
    if not second:
        return out
    names = host["name"].take(rows)
    # Python frames are left out, as in ``one_time_regions``: their names are file paths, and a path that says
    # "compile" (``torch/_compile.py(42): inner``, the ``_disable_dynamo`` wrapper around every optimizer step of an
    # eager model) says nothing about what the frame does
    hit = name_mask(names, RECOMPILE_CALL) & kind_mask(host["kind"].take(rows), ("runtime", "cpu_op", "annotation", "other"))
    rank = host["rank"].to_numpy()[rows]
    start = host["start_ns"].to_numpy(np.int64)[rows]
    limit = np.full(len(rows), np.iinfo(np.int64).max, np.int64)  # per rank, not per row: a million host rows
    for r, at in second.items():
        limit[rank == r] = at
    return hit & (start >= limit)


def _gpu_busy_in(views: "Views", r: int, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e) on rank ``r``: the ns some GPU of the rank was busy in it."""
    b = views.busy
    if b.empty:
        return np.zeros(len(s), np.int64)
    own = b[b["rank"].to_numpy() == r]
    a, z = merge_intervals(own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64))
    return Coverage(a, z).overlap(np.asarray(s, np.int64), np.asarray(e, np.int64))


def _jit_fusion_compiles(views: "Views", names: pd.Series, kinds: pd.Series, rank: np.ndarray, start: np.ndarray,
                         dur: np.ndarray) -> list[pd.DataFrame]:
    """Calls of a JIT fuser's op (``JIT_FUSION_OP``) that compiled inside it: at least ``WARMUP_MIN_NS`` long, at least
    ``WARMUP_RATIO`` times the median of the other calls of that op on the rank (or its only call), and with the GPU
    busy for less than half of it (compiling is host work; a fused op that runs long on the GPU is no compile).
    With or without steps: a compile that runs on a later step than its first is one-time all the same, because
    the same op's other calls run fast (one that recompiles every step is not an outlier and stays)."""
    if not may_match(names, JIT_FUSION_OP):
        return []
    rows = np.flatnonzero(kind_mask(kinds, ("cpu_op", "annotation")) & name_mask(names, JIT_FUSION_OP) & (dur > 0))
    if not len(rows):
        return []
    nm = names.take(rows).astype(str).to_numpy()
    out = []
    f = pd.DataFrame({"row": rows, "rank": rank[rows].astype(np.int64), "name": nm, "dur": dur[rows].astype(np.int64)})
    for (r, n), g in f.groupby(["rank", "name"], sort=True):
        d = g["dur"].to_numpy()
        long = np.flatnonzero(d >= WARMUP_MIN_NS)
        keep = []
        for i in long:
            others = np.delete(d, i)
            if not len(others) or d[i] >= WARMUP_RATIO * float(np.median(others)):
                keep.append(int(g["row"].iloc[i]))
        if not keep:
            continue
        k = np.asarray(keep)
        s0, e0 = start[k].astype(np.int64), (start[k] + dur[k]).astype(np.int64)
        host_only = _gpu_busy_in(views, int(r), s0, e0) * 2 < (e0 - s0)
        if host_only.any():
            out.append(pd.DataFrame({"rank": int(r), "start_ns": s0[host_only], "end_ns": e0[host_only],
                                     "reason": f"JIT compilation inside {_short(str(n))} (one-time)"}))
    return out


def _set_up_before_first_kernel(views: "Views", ln: pd.DataFrame, second_step: dict[int, int]) -> list[pd.DataFrame]:
    """On a rank without steps, idle gaps before its first kernel's launch (copies or memsets may run before it)
    that are far longer than the gaps after it: the program sets up (imports, model construction, data loading's
    first fill) before any of its work runs, once. A gap counts, up to the first launch, when it lasts at least
    ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median idle gap after the first kernel; short gaps between a
    run of copies (weights uploaded with a sync after each) are like the later ones and stay in the steady state."""
    kern = kind_mask(ln["kind"], ("kernel",))
    if not kern.any():
        return []
    gaps = views.gaps
    if gaps.empty:
        return []
    out = []
    lr, ls = ln["rank"].to_numpy(np.int64)[kern], ln["launch_start_ns"].to_numpy(np.int64)[kern]
    lg = ln["gpu_start_ns"].to_numpy(np.int64)[kern]
    g_rank, g_start, g_end = gaps["rank"].to_numpy(), gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    for r in np.unique(lr):
        r = int(r)
        if r in second_step:
            continue
        own = lr == r
        first_launch, first_kernel = int(ls[own].min()), int(lg[own].min())
        mine = g_rank == r
        head = np.flatnonzero(mine & (g_start < first_launch))
        if not len(head):
            continue
        later = (g_end - g_start)[mine & (g_start >= first_kernel)]
        floor = max(WARMUP_MIN_NS, WARMUP_RATIO * float(np.median(later)) if len(later) else 0.0)
        s0, e0 = g_start[head], np.minimum(g_end[head], first_launch)
        keep = (e0 - s0) >= floor
        if keep.any():
            out.append(pd.DataFrame({"rank": r, "start_ns": s0[keep], "end_ns": e0[keep],
                                     "reason": "set-up before the first kernel (program start-up)"}))
    return out


def _first_launches(ln: pd.DataFrame) -> list[pd.DataFrame]:
    """The first launch of each kernel name whose launch call lasted at least ``WARMUP_MIN_NS`` and
    ``WARMUP_RATIO`` times the rank's median launch call: the driver loaded the kernel's module then."""
    dur = ln["launch_dur_ns"].to_numpy(np.int64)
    long = np.flatnonzero(dur >= WARMUP_MIN_NS)
    if not len(long):
        return []
    rank = ln["rank"].to_numpy(np.int64)
    start = ln["launch_start_ns"].to_numpy(np.int64)
    is_k = kind_mask(ln["kind"], ("kernel",))
    out = []
    for r in np.unique(rank[long]):
        on = rank == r
        med = float(np.median(dur[on & is_k])) if (on & is_k).any() else float(np.median(dur[on]))
        cand = long[(rank[long] == r) & is_k[long] & (dur[long] >= WARMUP_RATIO * med)]
        if not len(cand):
            continue
        gn = ln["gpu_name"]
        key = gn.cat.codes.to_numpy() if isinstance(gn.dtype, pd.CategoricalDtype) else pd.factorize(gn)[0]
        pool = np.flatnonzero(on & is_k & np.isin(key, np.unique(key[cand])))
        pool = pool[np.argsort(start[pool], kind="stable")]
        k_first, at = np.unique(key[pool], return_index=True)  # each name's earliest launch
        first = dict(zip(k_first.tolist(), pool[at].tolist()))
        gname = {int(i): str(gn.iloc[int(i)]) for i in cand}
        keep = np.array([i for i in cand.tolist() if first.get(int(key[i])) == i], dtype=np.int64)
        if len(keep):
            out.append(pd.DataFrame({"rank": int(r), "start_ns": start[keep], "end_ns": start[keep] + dur[keep],
                                     "reason": [f"first launch of {_short(gname[i])} (module load)" for i in keep]}))
    return out


def _opening_blocks(ln: pd.DataFrame, blocking: "list[tuple[np.ndarray, np.ndarray, np.ndarray, str]]", views: "Views | None" = None) -> list[pd.DataFrame]:
    """Blocking calls that wait on work queued before the window opened, not on anything the window shows: those
    that begin before (or are) the rank's first traced launch, and, at the head of the rank's run (before its first
    step ends; without steps, before a tenth of its launches), those of at least ``WARMUP_MIN_NS`` during most of
    which the rank's GPUs run nothing traced and that are ``WARMUP_RATIO`` times the rank's other blocking calls of
    the same kind (none repeats it in the steady state). A call that blocks while no traced work runs waits on work the trace
    does not hold: a profile that starts while the GPU is still busy with what the program queued before it."""
    if not blocking:
        return []
    rank = ln["rank"].to_numpy(np.int64)
    start = ln["launch_start_ns"].to_numpy(np.int64)
    first = pd.Series(start).groupby(rank).min()
    head = _head_ends(ln, views) if views is not None else None
    out = []
    for b_rank, b_start, b_end, reason in blocking:
        b_rank, b_start, b_end = np.asarray(b_rank, np.int64), np.asarray(b_start, np.int64), np.asarray(b_end, np.int64)
        f = first.reindex(b_rank).to_numpy()
        known = ~np.isnan(f) & (b_end > b_start)
        m = known & (b_start <= np.nan_to_num(f))
        if head is not None:
            h = head.reindex(b_rank).to_numpy()
            late = known & ~m & ~np.isnan(h) & (b_start < np.nan_to_num(h)) & (b_end - b_start >= WARMUP_MIN_NS)
            for i in np.flatnonzero(late):
                # one-time only when nothing like it repeats: a blocking call of the same kind on the rank that
                # lasts as long in the steady state is the loop's own (a sync every step), not the window's start
                others = (b_rank == b_rank[i]) & (np.arange(len(b_rank)) != i)
                dur = b_end - b_start
                if others.any() and dur[i] < WARMUP_RATIO * float(np.median(dur[others])):
                    continue
                act = views.gpu_activity
                a = act[act["rank"].to_numpy() == b_rank[i]]
                s, e = a["start_ns"].to_numpy(np.int64), a["start_ns"].to_numpy(np.int64) + a["dur_ns"].to_numpy(np.int64)
                o = (e > b_start[i]) & (s < b_end[i])
                ms, me = merge_intervals(np.maximum(s[o], b_start[i]), np.minimum(e[o], b_end[i]))
                if int((me - ms).sum()) * 2 < int(b_end[i] - b_start[i]):
                    m[i] = True
        if m.any():
            out.append(pd.DataFrame({"rank": b_rank[m], "start_ns": b_start[m], "end_ns": b_end[m],
                                     "reason": f"{reason} at the window's start, waiting on work queued before the window"}))
    return out


def _head_ends(ln: pd.DataFrame, views: "Views") -> pd.Series:
    """Per rank, where the head of its run ends: its first step's end, else (no steps) its launch a tenth of the
    way in."""
    st = views.steps
    if len(st):
        return st.groupby("rank")["end_ns"].min()
    rank = ln["rank"].to_numpy(np.int64)
    out = {}
    for r in np.unique(rank):
        s = np.sort(ln["launch_start_ns"].to_numpy(np.int64)[rank == r], kind="stable")  # in launch order but for a few: timsort
        out[int(r)] = int(s[min(len(s) - 1, max(len(s) // 10, 1))])
    return pd.Series(out, dtype="int64")


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


# --- can this window be judged? -----------------------------------------------------------------------------
def mostly_warmup(regions: pd.DataFrame, rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per step (``rank``, ``start``, ``end``): do warm-up ``regions`` (the ledger's: rank, start_ns, end_ns) of its rank
    cover (their union) at least half of it? Such a step is start-up, not the loop that repeats: the steady-state steps are the
    others, and every figure over "the steady steps" (the count here, MFU) leaves these out."""
    out = np.zeros(len(start), dtype=bool)
    if regions is None or not len(regions) or not len(start):
        return out
    w_rank = regions["rank"].to_numpy()
    ws_all, we_all = regions["start_ns"].to_numpy(np.int64), regions["end_ns"].to_numpy(np.int64)
    for r in np.unique(rank):
        on = np.flatnonzero(rank == r)
        w = w_rank == r
        if not w.any():
            continue
        s, e = start[on], end[on]
        out[on] = Coverage(ws_all[w], we_all[w]).overlap(s, e) * 2 >= np.maximum(e - s, 1)
    return out


def judgement(ledger: "Ledger", steps: pd.DataFrame) -> dict:
    """Whether the window holds enough steady state to judge: ``judgeable``, ``reason`` (None, or a sentence),
    ``window_ns``, ``warmup_ns``, ``steady_ns``, ``steady_steps`` (steps outside warm-up, per rank the fewest).
    ``ledger``: the window's time ledger (its totals and warm-up regions); ``steps``: the views' step markers.
    The analysis' store keeps the answer (``Derived.steady``)."""
    led = ledger
    t = led.totals()
    window = int(sum(t.values()))
    warm = int(t.get(WARMUP_BUCKET, 0))
    steady = window - warm
    busy = int(sum(t.get(b, 0) for b in BUSY_BUCKETS))
    st = steps
    n_steady = 0
    if not st.empty:
        clean = ~mostly_warmup(led.warmup, st["rank"].to_numpy(), st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64))
        n_steady = int(pd.Series(clean).groupby(st["rank"].to_numpy()).sum().min())
    reason = None
    if window > 0:
        share = 100.0 * warm / window
        if warm and steady < MIN_STEADY_NS:
            reason = f"one-time work fills {share:.0f} % of the window and less than {MIN_STEADY_NS / 1e6:.0f} ms of steady state is left"
        elif share >= MAX_WARMUP_PCT and not st.empty and n_steady < MIN_STEADY_STEPS:
            reason = (f"one-time work (module loading, set-up, compilation, allocator growth) fills {share:.0f} % of the window and "
                      + ("no step outside it" if n_steady == 0 else f"only {n_steady} step outside it")
                      + " shows the rest repeats")
        elif share >= MAX_WARMUP_PCT and st.empty and busy < MIN_STEADY_BUSY_NS:
            reason = (f"one-time work (module loading, set-up, compilation, allocator growth) fills {share:.0f} % of the window, "
                      f"and the rest holds only {busy / 1e6:.2f} ms of GPU work and no step markers")
    return {"judgeable": reason is None, "reason": reason, "window_ns": window, "warmup_ns": warm, "steady_ns": steady, "steady_steps": n_steady}


#: How to record a window of steady state, per framework; a profiler with its own way (Nsight Systems' capture
#: range) says it in its format's record (``InputFormat.record_steady``), and "any" stands where neither is known.
RECORD_BETTER = {
    "pytorch": ("Record steady-state steps: wrap the loop in torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, "
                "warmup=2, active=3), ...) and call prof.step() once per iteration, so the first iterations (module loading, "
                "cuDNN/cuBLAS set-up, allocator growth, compilation, graph capture) run before recording starts."),
    "tensorflow": ("Record steady-state steps: start tf.profiler.experimental.start(logdir) after a few steps (or "
                   "TensorBoard(profile_batch=(10, 15))), and mark steps with tf.profiler.experimental.Trace('train', step_num=step, _r=1)."),
    "jax": ("Record steady-state steps: run a few steps (compilation happens in the first) and call jax.block_until_ready, then "
            "jax.profiler.start_trace(logdir) around the next steps, with jax.profiler.StepTraceAnnotation('train', step_num=step)."),
    "any": ("Record steady-state steps: start recording after the first iterations (module loading, library set-up, allocator "
            "growth and compilation happen there) and mark each step with a named range, so the window shows the loop that repeats."),
}


def record_better(source_format: str, framework: str) -> str:
    """The exact way to record a better window for this trace's profiler and framework: the profiler's own way where
    its format has one, else the framework's, else that of the framework whose profiler writes the format."""
    fmt = input_format(source_format)
    if fmt.record_steady:
        return fmt.record_steady
    for name in (framework, *fmt.frameworks):
        if name in RECORD_BETTER:
            return RECORD_BETTER[name]
    return RECORD_BETTER["any"]


def one_time_ns(regions: "pd.DataFrame | None", instances) -> tuple[int, int]:
    """(instance time, the part of it inside the warm-up ``regions`` (the ledger's: rank, start_ns, end_ns) of the
    instance's rank (all ranks' regions when the instance names none)): what of a finding's evidence is one-time work."""
    cols = instance_columns(as_instances(instances) if isinstance(instances, pd.DataFrame) else instances)
    if not len(cols.start_ns):
        return 0, 0
    s, e = cols.start_ns.astype(np.int64), np.maximum(cols.end_ns.astype(np.int64), cols.start_ns.astype(np.int64))
    total = int((e - s).sum())
    if regions is None or regions.empty or total <= 0:
        return total, 0
    r_rank = regions["rank"].to_numpy(np.int64)
    inside = 0
    rank = cols.rank
    known = ~np.isnan(rank)
    for r in np.unique(rank[known]).astype(np.int64).tolist() + ([None] if (~known).any() else []):
        m = ~known if r is None else known & (rank == r)
        w = regions if r is None else regions[r_rank == r]
        if w.empty:
            continue
        a, b = merge_intervals(w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64))
        inside += int(Coverage(a, b).overlap(s[m], e[m]).sum())
    return total, inside
