"""Plausibility of a timeline's rows, the same for every format: what no real capture holds is dropped or unlinked,
and a reader warning says how many and why (TI014 reports the dropped ones).

Valid-but-odd traces used to give silent wrong figures: 2,000 overlapping one-millisecond steps in an 11 ms trace
counted as 2,000 steps and fed the what-if; 20,000 steps all named ``ProfilerStep#1`` became one step; one
correlation id shared by 5,000 launches tied every kernel to every launch; two kernels 10^15 ns apart made a
"999,000 s" window. Each check here is one vectorized pass, run once per load after the rows are range-checked
(``timeline.validate``) and before steps are numbered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.masks import has_repeats, join_keys
from traceinsight.model.timeline import SMALL_MATCH, kind_is, take_rows

#: No capture has a stretch this long with no event at all: rows beyond such a gap have corrupt times.
MAX_GAP_NS = 24 * 3600 * 10**9
#: Characters kept of one name (kernel, op, thread, category): real demangled names stay under a few kB, and every
#: regex, demangler and renderer after this point works on names of at most this length.
MAX_NAME_CHARS = 16_384
_NAME_COLUMNS = ("name", "raw_name", "thread_name", "category")
#: Steps overlapping by less than this (or 1 % of the earlier step) are rounding, not overlap.
STEP_OVERLAP_SLACK_NS = 1_000


def check(events: pd.DataFrame, meta) -> pd.DataFrame:
    """``events`` with implausible rows dropped (or unlinked), each kind of problem in one warning on ``meta``."""
    if events.empty:
        return events
    _cap_names(events, meta)
    far = _far_rows(events["start_ns"].to_numpy(), meta)
    if far is not None:
        events = events[~far].reset_index(drop=True)
    overlap = _overlapping_step_rows((events["kind"] == "step").to_numpy(), events["start_ns"].to_numpy(),
                                     events["dur_ns"].to_numpy(), events["rank"].to_numpy(), events["device"].to_numpy(), meta)
    if overlap is not None:
        events = events[~overlap].reset_index(drop=True)
    _shared_correlations(events, meta)
    return events


def check_columns(cols: dict, meta) -> dict:
    """``check`` on the columns of ``timeline.event_columns`` (numpy arrays, and ``pd.Categorical`` for every string
    column) before the frame is built: the same rows, names and warnings, without a frame's fixed costs on a rank of
    a few dozen events. Returns the columns (a new dict when rows were dropped)."""
    if not len(cols["start_ns"]):
        return cols
    cut = 0
    for col in _NAME_COLUMNS:
        capped = _capped_categories(cols[col]) if col in cols else None
        if capped is not None:
            cols[col], n = capped
            cut += n
    if cut:
        meta.warn(_cut_warning(cut))
    far = _far_rows(cols["start_ns"], meta)
    if far is not None:
        cols = take_rows(cols, ~far)
    overlap = _overlapping_step_rows(kind_is(cols["kind"], "step"), cols["start_ns"], cols["dur_ns"], cols["rank"], cols["device"], meta)
    if overlap is not None:
        cols = take_rows(cols, ~overlap)
    corr = _unlinked_correlations(cols["correlation"], kind_is(cols["kind"], "runtime"), cols["rank"], cols["pid"], meta,
                                  bool((cols["device"] >= 0).any()))
    if corr is not None:
        cols["correlation"] = corr
    return cols


def _cut_warning(cut: int) -> str:
    return f"{cut:,} names longer than {MAX_NAME_CHARS:,} characters were cut to that length"


def _capped_categories(values) -> "tuple[pd.Categorical, int] | None":
    """A categorical column with its over-long names cut (with "…") and how many were, or None when none is."""
    cats = values.categories
    if not len(cats) or cats.dtype.kind in "iufcbmM":
        return None
    names = cats.tolist()  # a list iterates faster than a string Index
    long = np.fromiter((isinstance(c, str) and len(c) > MAX_NAME_CHARS for c in names), bool, len(names))
    if not long.any():
        return None
    labels = np.array([c[: MAX_NAME_CHARS - 1] + "…" if lg else c for c, lg in zip(names, long)], dtype=object)
    codes = np.asarray(values.codes)
    return pd.Categorical(np.where(codes >= 0, labels[np.clip(codes, 0, None)], None)), int(long.sum())


def _cap_names(events: pd.DataFrame, meta) -> None:
    """Names longer than MAX_NAME_CHARS cut (with "…"), in place: a 50 MB kernel name costs one pass here instead
    of minutes in every name regex after it."""
    cut = 0
    for col in _NAME_COLUMNS:
        if col not in events:
            continue
        ser = events[col]
        if isinstance(ser.dtype, pd.CategoricalDtype):
            capped = _capped_categories(ser.array)
            if capped is not None:
                events[col], n = capped
                cut += n
        elif ser.dtype == object or pd.api.types.is_string_dtype(ser.dtype):
            lengths = ser.str.len()
            long = (lengths > MAX_NAME_CHARS).to_numpy()
            if long.any():
                cut += int(long.sum())
                events.loc[long, col] = ser[long].str.slice(0, MAX_NAME_CHARS - 1) + "…"
    if cut:
        meta.warn(_cut_warning(cut))


def _far_rows(start: np.ndarray, meta) -> np.ndarray | None:
    """Rows separated from the bulk of the trace by more than MAX_GAP_NS of nothing (a row mask, None for none):
    the largest such cluster (by rows; the earliest on a tie) is the capture, the rest have corrupt times."""
    lo, hi = int(start.min()), int(start.max())
    if hi - lo <= MAX_GAP_NS:
        return None
    order = np.argsort(start, kind="stable")
    s = start[order]
    cut = np.flatnonzero(np.diff(s) > MAX_GAP_NS) + 1
    if not len(cut):
        return None
    bounds = np.concatenate(([0], cut, [len(s)]))
    sizes = np.diff(bounds)
    k = int(np.argmax(sizes))
    keep_lo, keep_hi = int(s[bounds[k]]), int(s[bounds[k + 1] - 1])
    far = (start < keep_lo) | (start > keep_hi)
    meta.warn(f"{int(far.sum()):,} events lie more than {MAX_GAP_NS // (3600 * 10**9)} h from the rest of the trace "
              f"(the rows spanned {(hi - lo) / 3.6e12:,.1f} h, longer than one capture): implausible timestamps, were dropped")
    return far


def _overlapping_step_rows(is_step: np.ndarray, start: np.ndarray, dur: np.ndarray, rank: np.ndarray, device: np.ndarray,
                           meta) -> np.ndarray | None:
    """The step markers that overlap an earlier step of their rank and device (a row mask, None for none)."""
    if is_step.sum() < 2:
        return None
    rows = np.flatnonzero(is_step)
    s = start[rows]
    e = s + dur[rows]
    group = rank[rows].astype(np.int64) * 4096 + (device[rows].astype(np.int64) + 1)
    order = np.lexsort((s, group))
    drop = np.zeros(len(rows), dtype=bool)
    # greedy in start order per group: a step that starts before the last kept step ends (beyond rounding) overlaps it
    g_prev, end_prev, dur_prev = None, 0, 0
    if len(rows) > 200_000:  # a loop over this many markers is itself implausible: keep the cheap check only
        return None
    for i in order.tolist():
        gi = int(group[i])
        if gi != g_prev:
            g_prev, end_prev, dur_prev = gi, int(e[i]), int(e[i] - s[i])
            continue
        slack = max(STEP_OVERLAP_SLACK_NS, dur_prev // 100)
        if int(s[i]) < end_prev - slack:
            drop[i] = True
            continue
        end_prev, dur_prev = int(e[i]), int(e[i] - s[i])
    if not drop.any():
        return None
    meta.warn(f"{int(drop.sum()):,} of {len(rows):,} step markers overlap an earlier step (steps follow one another); "
              "those overlapping were dropped")
    out = np.zeros(len(is_step), dtype=bool)
    out[rows[drop]] = True
    return out


def _shared_correlations(events: pd.DataFrame, meta) -> None:
    """Runtime calls of one process sharing a correlation id (which each launch gets uniquely) are unlinked, with
    the GPU rows carrying that id: a link would tie every such kernel to every such call."""
    new = _unlinked_correlations(events["correlation"].to_numpy(), (events["kind"] == "runtime").to_numpy(),
                                 events["rank"].to_numpy(), events["pid"].to_numpy(), meta,
                                 "device" not in events or bool((events["device"].to_numpy() >= 0).any()))
    if new is not None:
        events["correlation"] = new


def _unlinked_correlations(corr: np.ndarray, is_runtime: np.ndarray, rank: np.ndarray, pid: np.ndarray, meta,
                           gpu_rows: bool = True) -> np.ndarray | None:
    """The correlation column with the shared ids unlinked (-1), or None when no id is shared (``_shared_correlations``).
    Without GPU rows (``gpu_rows`` False: a CPU-only capture, an accelerator whose device rows are not read) no link
    to one is lost, so nothing is reported lost: some runtimes give one id to a command's several calls."""
    runtime = is_runtime & (corr >= 0)
    if runtime.sum() < 2:
        return None
    r_rank, r_pid, r_corr = rank[runtime], pid[runtime], corr[runtime]
    if len(r_corr) <= SMALL_MATCH and len(set(zip(r_rank.tolist(), r_pid.tolist(), r_corr.tolist()))) == len(r_corr):
        return None  # few calls, none sharing an id: told by a set, without numpy's fixed costs
    # one int64 key per call (equal exactly when rank, pid and id are): a repeat is a key counted twice
    key, _ = join_keys([(r_rank, r_rank[:0]), (r_pid, r_pid[:0]), (r_corr, r_corr[:0])])
    if not has_repeats(key):  # the usual case: no id shared
        return None
    _, inv, count = np.unique(key, return_inverse=True, return_counts=True)
    dup = count[inv.reshape(-1)] > 1  # every call of a shared id (``duplicated(keep=False)``)
    if not dup.any():
        return None
    host = pd.DataFrame({"rank": r_rank, "pid": r_pid, "corr": r_corr})
    bad = host[dup]
    n_ids = len(bad.drop_duplicates(["rank", "pid", "corr"]))
    keys = set(zip(bad["rank"].tolist(), bad["corr"].tolist()))
    cand = np.flatnonzero(np.isin(corr, bad["corr"].unique()))
    hit = np.array([(int(rank[i]), int(corr[i])) in keys for i in cand.tolist()], dtype=bool) if len(cand) else np.zeros(0, bool)
    rows = cand[hit]
    new = corr.copy()
    new[rows] = -1
    if gpu_rows:
        meta.warn(f"{int(dup.sum()):,} runtime calls share {n_ids:,} correlation ids (each launch has its own): the links of "
                  f"{len(rows):,} rows through those ids were dropped, so launch and GPU rows are not matched through them")
    return new


# --- memory rows -------------------------------------------------------------------------------------------------
#: How far above its capacity a device's memory level may read before the row is taken as corrupt: allocator
#: accounting and unified memory can pass the capacity a little; nothing real passes it twice.
CAPACITY_MARGIN = 2.0
#: Bounds where a device's capacity is unknown: no GPU holds 4 TiB, no host 1 PiB.
MAX_GPU_BYTES = 1 << 42
MAX_HOST_BYTES = 1 << 50
#: Largest device index a memory row may name (a host has a few dozen GPUs at most); larger ids are corrupt, and
#: cutting them to fit would charge another device's memory.
MAX_DEVICE_ID = (1 << 15) - 1
#: Page faults one record may group (a GPU fault group covers at most a few million pages of a 4 TiB range).
MAX_FAULTS_PER_ROW = 1 << 32
#: What a reader's own memory checks dropped: a scalar entry of its memory columns, added to ``check_memory``'s count.
DROPPED_KEY = "_dropped"
#: The one warning of ``check_memory`` (TI014 reads "dropped" in it as events lost).
MEMORY_WARNING = ("{n:,} memory events with impossible figures (a level below 0 or above the device's capacity ×{m:g}, a "
                  "size past any device, an unknown operation, a device id no GPU has, a fault count past any range) were dropped")


def memory_limits(device: np.ndarray, rank: np.ndarray, devices) -> np.ndarray:
    """Per memory row, the highest level it may read: its device's capacity × ``CAPACITY_MARGIN`` where the trace
    gives one (bounded by ``MAX_GPU_BYTES``), else ``MAX_GPU_BYTES`` for a GPU and ``MAX_HOST_BYTES`` for the host."""
    limit = np.where(device >= 0, float(MAX_GPU_BYTES), float(MAX_HOST_BYTES))
    for d in devices:
        cap = d.memory_bytes
        if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0:
            limit[(rank == d.rank) & (device == d.index)] = min(float(cap) * CAPACITY_MARGIN, float(MAX_GPU_BYTES))
    return limit


def check_memory(mem: pd.DataFrame, meta, dropped: int = 0) -> pd.DataFrame:
    """``mem`` (the memory table, rows as the readers gave them) without rows no capture can hold: a level
    (``allocated``, ``reserved``) below 0 or above its device's limit (``memory_limits``), infinite or NaN where
    the source gave one; a size (``delta_bytes``) past that limit (a failed request, ``oom``, may ask for more);
    a fault count outside 1..``MAX_FAULTS_PER_ROW``. One warning counts them with ``dropped`` (what the readers'
    own checks left out), so TI014 reports it; a bad row never rejects the trace."""
    if len(mem):
        device = mem["device"].to_numpy()
        limit = memory_limits(device, mem["rank"].to_numpy(), meta.devices)
        bad = np.zeros(len(mem), dtype=bool)
        with np.errstate(invalid="ignore"):
            for col in ("allocated", "reserved"):
                v = mem[col].to_numpy(dtype=np.float64)
                bad |= ~np.isnan(v) & ~((v >= 0) & (v <= limit))
            size = np.abs(mem["delta_bytes"].to_numpy().astype(np.float64))
            bad |= (size > limit) & (mem["kind"] != "oom").to_numpy()
        count = mem["count"].to_numpy()
        bad |= (count < 0) | (count > MAX_FAULTS_PER_ROW)
        if bad.any():
            dropped += int(bad.sum())
            mem = mem[~bad].reset_index(drop=True)
    if dropped:
        meta.warn(MEMORY_WARNING.format(n=dropped, m=CAPACITY_MARGIN))
    return mem


def mixed_runs(world_sizes, device_names) -> str:
    """Why rank files read as one job seem not to be one ("" when nothing says so): they declare different world
    sizes, or ran on different GPU models. A logdir that kept an old run beside the new one is common, and analysed
    as one job it invents an imbalance, a straggler and collective waits between programs that never ran
    together. ``world_sizes``: each file's declared size (None: undeclared); ``device_names``: each file's GPU
    names."""
    sizes = sorted({int(w) for w in world_sizes if w})
    gpus = sorted({str(n) for names in device_names for n in names if n})
    why = []
    if len(sizes) > 1:
        why.append("world sizes " + ", ".join(str(w) for w in sizes))
    if len(gpus) > 1:
        why.append("GPUs " + ", ".join(gpus[:3]) + (" and more" if len(gpus) > 3 else ""))
    return "; ".join(why)


def mixed_runs_warning(where: str, why: str) -> str:
    """The one wording of ``mixed_runs``' warning, for the timeline of a folder and for the job report."""
    return (f"{where}the rank files look like different runs ({why}): the ranks are reported one by one, and no "
            "cross-rank figure (imbalance, stragglers, collective waits) is drawn from work that did not run together")

