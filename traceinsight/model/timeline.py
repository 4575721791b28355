"""The one timeline every parser fills and every rule reads.

Parsers differ in everything (JSON vs SQLite vs protobuf, µs vs ns vs ps, absolute vs relative clocks), so the
contract between ingestion and analysis is this module alone: a pandas DataFrame with the columns of
``COLUMNS`` plus a ``TraceMeta``. ``docs/timeline.md`` is the human-readable version of the same contract;
``tests/test_timeline_schema.py`` keeps the two in step.

Conventions (they hold for every source format):

* times are int64 nanoseconds on one clock, 0 = the earliest event of the whole timeline (all ranks);
* ``device`` and ``stream`` are -1 on host rows; GPU rows carry the device index and the stream id;
* ``pid`` of a GPU row is the host process that launched it, so ``(rank, pid, correlation)`` links a
  runtime/driver call to the GPU activity it created (correlation ids repeat across processes in Nsight Systems);
* ``step`` is the profiler step (``ProfilerStep#N``, TF step markers) containing the row's start, -1 outside;
  GPU rows inherit the step of their launch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.vocab.masks import codes_in, first_of_key, join_keys

#: The kinds of rows; order matters only for display.
KINDS: tuple[str, ...] = (
    "kernel",  # a GPU kernel
    "memcpy",  # a GPU copy (any direction)
    "memset",  # a GPU memset
    "gpu_sync",  # a GPU-side synchronization record (kineto cuda_sync, CUPTI synchronization activity)
    "runtime",  # a CUDA/HIP runtime or driver API call on a host thread
    "cpu_op",  # a framework operator on the host (aten::*, TF op)
    "python",  # a Python function frame (with_stack traces)
    "annotation",  # a user range on the host (record_function, NVTX, TraceMe)
    "gpu_annotation",  # a user range projected on a GPU stream
    "step",  # a training/inference step marker (ProfilerStep#N, TF step)
    "other",  # anything kept for completeness (CUPTI overhead, counters ranges, ...)
)

#: Kinds that occupy the GPU (count as "busy").
GPU_ACTIVITY_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")

COPY_KINDS: tuple[str, ...] = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")

#: Required columns and their dtypes. Optional per-source columns are listed in ``OPTIONAL_COLUMNS``.
COLUMNS: dict[str, str] = {
    "kind": "category",
    "name": "category",
    "raw_name": "category",
    "start_ns": "int64",
    "dur_ns": "int64",
    "rank": "int32",
    "pid": "int64",
    "tid": "int64",
    "device": "int32",
    "stream": "int64",
    "correlation": "int64",
    "bytes": "int64",
    "copy_kind": "category",
    "pageable": "bool",
    "step": "int32",
}

#: Columns a source fills when it has the data; absent otherwise (rules must check ``in events``).
OPTIONAL_COLUMNS: dict[str, str] = {
    "category": "category",  # the source's own category string (kineto cat, nsys table, XPlane line)
    "grid": "category",  # "x,y,z"
    "block": "category",  # "x,y,z"
    "registers": "float64",  # registers per thread
    "shared_mem": "float64",  # static + dynamic shared memory per block, bytes
    "occupancy": "float64",  # estimated achieved occupancy, percent
    "input_shapes": "category",  # framework op input shapes, as the source prints them
    "input_types": "category",  # framework op input dtypes, as the source prints them (kineto "Input type")
    "concrete_inputs": "category",  # framework op scalar arguments as recorded (kineto "Concrete Inputs")
    "stack": "category",  # Python/host call stack, innermost last, " <- " separated
    "external_id": "int64",  # framework op id linking ops to launches (kineto External id)
    "thread_name": "category",
    "cbid": "int64",
    "op_flops": "float64",  # FLOPs the source recorded for the row (XLA's per-op cost analysis on XPlane kernels)
    "op_bytes": "float64",  # bytes accessed the source recorded for the row (the same)
}


#: The kinds of memory rows (``Timeline.memory``).
MEMORY_KINDS: tuple[str, ...] = (
    "alloc",  # the allocator handed out a block (delta_bytes > 0)
    "free",  # a block went back to the allocator (delta_bytes < 0)
    "oom",  # an allocation that failed: out of memory (kineto [OutOfMemory])
    "um_fault_cpu",  # unified-memory page faults on the host (pages migrated to the CPU)
    "um_fault_gpu",  # unified-memory page faults on a GPU (pages migrated or mapped to the device)
)

#: The memory table: one row per allocator event or page-fault record, sorted by (rank, device, start_ns).
MEMORY_COLUMNS: dict[str, str] = {
    "kind": "category",  # one of MEMORY_KINDS
    "start_ns": "int64",  # on the events' clock
    "dur_ns": "int64",  # 0, except GPU page-fault groups
    "rank": "int32",
    "device": "int32",  # GPU index; -1 = host memory
    "device_type": "category",  # "cuda", "hip", "cpu", "other"
    "delta_bytes": "int64",  # + allocated, - freed (0 for faults and failed allocations)
    "allocated": "float64",  # bytes in live tensors/blocks after the event; NaN where the source does not say
    "reserved": "float64",  # bytes the caching allocator holds from the device after the event; NaN if unknown
    "address": "int64",  # block address, -1 where unknown
    "count": "int64",  # source records this row stands for (page faults come grouped), else 1
    "pid": "int64",
    "tid": "int64",  # host thread that made the call, -1 where unknown
    "correlation": "int64",  # the runtime call it belongs to (Nsight Systems), -1 otherwise
    "op": "category",  # the framework op (or runtime call) that caused it, when known
    "step": "int32",  # step containing it, -1 outside
}

_MEMORY_DEFAULTS: dict[str, Any] = {"dur_ns": 0, "rank": 0, "device": -1, "delta_bytes": 0, "allocated": np.nan,
                                    "reserved": np.nan, "address": -1, "count": 1, "pid": 0, "tid": -1,
                                    "correlation": -1, "step": -1}


def build_memory(columns: dict[str, Any] | None = None) -> pd.DataFrame:
    """A schema-true memory frame from column arrays (``kind`` and ``start_ns`` required); an empty one for None
    (a copy of one built once: most traces have no memory rows, and building the frame costs more than copying).
    The copy is shallow (a deep one cost ~0.15 ms per timeline, a tenth of loading a tiny rank): the frame has no
    rows, so nothing can be written into the arrays it shares, and a column added or replaced changes the copy only."""
    if not columns:
        global _EMPTY_MEMORY
        if _EMPTY_MEMORY is None:
            _EMPTY_MEMORY = _build_memory({"kind": [], "start_ns": []})
        return _EMPTY_MEMORY.copy(deep=False)
    return _build_memory(columns)


_EMPTY_MEMORY: pd.DataFrame | None = None


def _build_memory(columns: dict[str, Any]) -> pd.DataFrame:
    n = len(columns["start_ns"])
    data: dict[str, Any] = {}
    for col, dtype in MEMORY_COLUMNS.items():
        values = columns.get(col)
        if values is None:
            values = [None] * n if dtype == "category" else np.full(n, _MEMORY_DEFAULTS[col])
        if dtype == "category":
            values = values if isinstance(values, pd.Categorical) else pd.Categorical(values)
        else:
            values = np.asarray(values).astype(dtype, copy=False) if n else np.zeros(0, dtype=dtype)
        data[col] = values
    df = pd.DataFrame(data, copy=False)
    df["kind"] = df["kind"].cat.set_categories(list(MEMORY_KINDS))
    return df


#: Category lists up to this long get a shared, cached dtype (see ``categorical``); longer ones are built each time.
_CACHED_CATEGORIES = 1024
#: The cache holds at most this many dtypes and this many characters of category text (a hostile trace's names
#: can be megabytes long: the cache must never keep more than a bounded amount of them alive).
_CACHED_DTYPES = 4096
_CACHED_CHARS = 1 << 23
_DTYPES: dict[tuple, pd.CategoricalDtype] = {}
_dtype_chars = 0


def code_dtype(n_categories: int) -> type:
    """The integer type pandas stores the codes of ``n_categories`` categories in (int8 under 127, int16, int32):
    codes made in it are kept as they are, where wider ones would be copied down."""
    return np.int8 if n_categories < 127 else np.int16 if n_categories < 32767 else np.int32


def categorical(codes: np.ndarray, categories: "pd.Index | list | tuple") -> pd.Categorical:
    """``pd.Categorical.from_codes(codes, categories=categories, validate=False)`` with the dtype shared between calls
    that give the same categories.

    Building a ``CategoricalDtype`` checks its categories (an Index, uniqueness, missing values): ~70 us each time,
    while the categorical itself costs ~1 us. A tiny rank builds a dozen categoricals whose categories repeat from
    rank to rank (kinds, copy kinds, the same kernel and op names), so they are checked once. A list is taken as
    ``pd.Index(list)`` reads it; an Index keeps its own dtype. Codes are trusted (-1 = missing), as with
    ``validate=False``."""
    if len(categories) > _CACHED_CATEGORIES:
        return pd.Categorical.from_codes(codes, categories=categories, validate=False)
    if isinstance(categories, pd.Index):
        key = (str(categories.dtype), *categories)
    else:
        key = (None, *categories)
    dtype = _DTYPES.get(key)
    if dtype is None:
        global _dtype_chars
        dtype = pd.CategoricalDtype(categories if isinstance(categories, pd.Index) else pd.Index(list(categories)), ordered=False)
        size = sum(len(c) if isinstance(c, str) else 8 for c in key[1:])
        if size <= _CACHED_CHARS:
            if len(_DTYPES) >= _CACHED_DTYPES or _dtype_chars + size > _CACHED_CHARS:  # ever new names: start over
                _DTYPES.clear()
                _dtype_chars = 0
            _DTYPES[key] = dtype
            _dtype_chars += size
    return pd.Categorical.from_codes(codes, dtype=dtype, validate=False)


@dataclass
class DeviceInfo:
    """One GPU as the source describes it; missing fields are None."""

    index: int
    rank: int = 0
    name: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None
    vendor: str | None = None


@dataclass
class TraceMeta:
    """Everything about a trace that is not an event."""

    source_format: str  # the reading format's name (ingest.FORMATS: "pytorch", "nsys", "tensorflow-xplane" ...); ask its record, ingest.input_format
    path: str = ""
    tool: str = ""  # e.g. "PyTorch Profiler (kineto)", "Nsight Systems 2024.6.1"
    tool_version: str | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    ranks: list[int] = field(default_factory=lambda: [0])
    world_size: int | None = None
    start_unix_ns: int | None = None  # absolute time of start_ns == 0, when the source says
    warnings: list[str] = field(default_factory=list)  # trace-quality notes shown to the user
    extra: dict[str, Any] = field(default_factory=dict)  # source-specific facts worth showing

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Timeline:
    """A parsed trace: ``events`` (the schema above) plus ``meta``."""

    events: pd.DataFrame
    meta: TraceMeta
    #: allocator events and page faults (``MEMORY_COLUMNS``); empty when the source recorded none
    memory: pd.DataFrame = field(default_factory=build_memory)
    #: Sampled hardware metrics, when the source has them (Nsight Systems ``--gpu-metrics-devices``): ``start_ns``
    #: (the events' clock), ``device``, ``metric`` (``SM Active``, ``SM Issue``, ``Tensor Active``, ``DRAM Read``,
    #: ``DRAM Write``), ``value`` (% of the hardware's peak throughput). None otherwise.
    samples: pd.DataFrame | None = None

    @property
    def span_ns(self) -> int:
        ev = self.events
        if ev.empty:
            return 0
        start, dur = ev["start_ns"].to_numpy(), ev["dur_ns"].to_numpy()  # arrays: Series arithmetic costs more on a tiny rank
        return int(_largest_sum(start, dur) - start.min())

    def of_kind(self, *kinds: str) -> pd.DataFrame:
        ev = self.events
        return ev[ev["kind"].isin(kinds)]

    def __repr__(self) -> str:
        counts = self.events["kind"].value_counts()
        parts = ", ".join(f"{k}={int(counts[k])}" for k in KINDS if counts.get(k, 0))
        return f"Timeline({self.meta.source_format}, {len(self.events)} events: {parts}; span {self.span_ns / 1e6:.2f} ms)"


#: Rows summed at a time by ``_largest_sum``: a million-row chunk stays in cache, a column of every event is never made.
_SUM_CHUNK = 1 << 20


def _largest_sum(a: np.ndarray, b: np.ndarray) -> int:
    """``(a + b).max()`` (the latest end of the events) a chunk at a time into one reused buffer: on a gigabyte
    trace the whole sum is a 40 MB array of fresh pages made and dropped for one number."""
    if len(a) <= _SUM_CHUNK:
        return int((a + b).max())
    buf = np.empty(_SUM_CHUNK, dtype=np.result_type(a, b))
    return max(int(np.add(a[i:i + _SUM_CHUNK], b[i:i + _SUM_CHUNK], out=buf[:min(_SUM_CHUNK, len(a) - i)]).max())
               for i in range(0, len(a), _SUM_CHUNK))


def build_events(columns: dict[str, Any], optional: dict[str, Any] | None = None) -> pd.DataFrame:
    """Assemble a schema-true events frame from column arrays; missing required columns get their defaults.

    Parsers call this once with whole columns (never per event). ``start_ns`` may be on any clock: callers
    normalise with ``rebase`` after all ranks are in.
    """
    return events_frame(event_columns(columns, optional))


def event_columns(columns: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """The columns ``build_events`` puts in its frame, as a dict of arrays (numpy arrays and ``pd.Categorical``) in
    frame order: each required column in its schema dtype (its default where absent), ``kind`` on the categories
    ``KINDS`` and ``copy_kind`` on ``COPY_KINDS`` first. ``ingest.assemble`` finishes a single file's rows on these
    arrays and builds the frame once (``events_frame``): on a rank of a few dozen events each Series read or
    column write on a frame costs more than the array work behind it."""
    n = len(columns["start_ns"])
    defaults: dict[str, Any] = {
        "rank": 0,
        "pid": 0,
        "tid": 0,
        "device": -1,
        "stream": -1,
        "correlation": -1,
        "bytes": 0,
        "pageable": False,
        "step": -1,
    }
    data: dict[str, Any] = {}
    for col, dtype in COLUMNS.items():
        if col in columns and columns[col] is not None:
            values = columns[col]
        elif col == "raw_name":
            values = columns["name"]
        elif col == "copy_kind":
            values = pd.Categorical([None] * n, categories=list(COPY_KINDS)) if n else []
        else:
            values = np.full(n, defaults[col])
        data[col] = _as_dtype(values, dtype, col)
    for col, values in (optional or {}).items():
        data[col] = _as_dtype(values, OPTIONAL_COLUMNS.get(col, "object"), col)
    kinds = data["kind"]
    if tuple(kinds.categories) != KINDS:  # readers that build kinds from codes already have them
        data["kind"] = kinds.set_categories(list(KINDS))
    have = tuple(data["copy_kind"].categories)
    extra = [c for c in have if c not in COPY_KINDS]
    if have != COPY_KINDS + tuple(extra):
        data["copy_kind"] = data["copy_kind"].set_categories(list(COPY_KINDS) + extra)
    return data


def events_frame(data: dict[str, Any]) -> pd.DataFrame:
    """The events frame of ``event_columns``' arrays (copied into a few 2-D blocks below ``SMALL_FRAME_ROWS``)."""
    # copy=False: keep one block per column instead of consolidating same-dtype columns into a 2-D copy (on a
    # million-row trace that copy is the single most expensive step of building the frame)
    return pd.DataFrame(data, copy=len(data["start_ns"]) < SMALL_FRAME_ROWS)


#: Below this many rows the events frame is built with a copy, which groups same-dtype columns into a few 2-D
#: blocks: every later take and copy of the frame (the views take rows of it five times) then handles a dozen
#: blocks instead of two dozen. Above it the copy itself would be the cost (first-touch page faults).
SMALL_FRAME_ROWS = 10_000


def _as_dtype(values: Any, dtype: str, col: str) -> Any:
    if dtype == "category":
        if isinstance(values, pd.Categorical):
            return values
        return pd.Categorical(values)  # a categorical Series keeps its categories and codes
    arr = np.asarray(values)
    if dtype == "bool":
        return arr.astype(bool, copy=False) if arr.size else np.zeros(0, dtype=bool)
    if arr.dtype.kind == "f" and dtype.startswith("int"):
        arr = np.nan_to_num(arr, nan=-1 if col in ("correlation", "device", "stream", "step") else 0)
    return arr.astype(dtype, copy=False) if arr.size else np.zeros(0, dtype=dtype)


#: The largest |time| or duration a row may carry, in ns (about 146 years): every start, end and span computed from
#: rows inside it fits in int64, so no analysis can wrap around into a negative span or an absurd percentage.
TIME_LIMIT_NS = 1 << 62


def validate(events: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """The rows an analysis can place: those with a negative duration, or a time or duration past
    ``TIME_LIMIT_NS``, are dropped and counted in a warning (a reader that range-checks its input leaves none)."""
    if events.empty:
        return events
    bad = _unplaceable(events["start_ns"].to_numpy(), events["dur_ns"].to_numpy(), meta)
    return events if bad is None else events[~bad].reset_index(drop=True)


def validate_columns(cols: dict[str, Any], meta: TraceMeta) -> dict[str, Any]:
    """``validate`` on the columns of ``event_columns``: the same rows kept, the same warning."""
    if not len(cols["start_ns"]):
        return cols
    bad = _unplaceable(cols["start_ns"], cols["dur_ns"], meta)
    return cols if bad is None else take_rows(cols, ~bad)


def _unplaceable(start: np.ndarray, dur: np.ndarray, meta: TraceMeta) -> np.ndarray | None:
    bad = (dur < 0) | (dur > TIME_LIMIT_NS) | (start > TIME_LIMIT_NS) | (start < -TIME_LIMIT_NS)
    if not bad.any():
        return None
    meta.warn(f"{int(bad.sum()):,} events with a negative duration or a time out of range were dropped")
    return bad


def take_rows(cols: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    """The rows in ``keep`` of every column (categoricals keep their categories, as a frame's row take does)."""
    return {k: v[keep] for k, v in cols.items()}


def kind_is(kind: pd.Categorical, *names: str) -> np.ndarray:
    """Row mask: the ``kind`` column (a categorical) is one of ``names``; through the categories, never a string per row.
    On the shared dtype of ``KINDS`` (``categorical``) the lookup table of ``names`` is built once."""
    if kind.dtype is _kinds_dtype():
        lut = _KIND_LUTS.get(names)
        if lut is None:
            lut = _KIND_LUTS[names] = np.array([c in names for c in KINDS] + [False], dtype=bool)
    else:
        lut = np.array([c in names for c in kind.categories] + [False], dtype=bool)
    return codes_in(kind.codes, lut[:-1])


_KIND_LUTS: dict[tuple[str, ...], np.ndarray] = {}


def _kinds_dtype() -> pd.CategoricalDtype | None:
    """The shared dtype of ``KINDS`` (None until a kind column was built with ``categorical``)."""
    return _DTYPES.get((None, *KINDS))


def rebase(events: pd.DataFrame) -> int:
    """Shift ``start_ns`` so the earliest event is at 0 (in place); returns the offset that was subtracted."""
    if events.empty:
        return 0
    origin = int(events["start_ns"].min())
    if origin:
        events["start_ns"] -= origin
    return origin


def rebase_columns(cols: dict[str, Any]) -> int:
    """``rebase`` on the columns of ``event_columns`` (``start_ns`` replaced, not written in place)."""
    start = cols["start_ns"]
    if not len(start):
        return 0
    origin = int(start.min())
    if origin:
        cols["start_ns"] = start - origin
    return origin


def assign_steps(events: pd.DataFrame, meta: "TraceMeta | None" = None) -> None:
    """Fill ``step`` from the ``step`` rows (in place), then let GPU rows inherit their launch's step.

    Vectorized: for each rank, a searchsorted of every row's start into the sorted step starts, then a check
    that the row starts before that step's end. A rank whose step markers repeat a number (20,000 markers all named
    ``ProfilerStep#1``) has its steps numbered in time order instead, with a warning on ``meta``: otherwise they
    would read as one step.
    """
    names = events["name"]
    events["step"] = _steps_of((events["kind"] == "step").to_numpy(), names.array if isinstance(names.dtype, pd.CategoricalDtype) else names,
                               events["rank"].to_numpy(), events["start_ns"].to_numpy(), events["dur_ns"].to_numpy(), meta)
    inherit_from_launch(events, "step")


def assign_steps_columns(cols: dict[str, Any], meta: "TraceMeta | None" = None) -> None:
    """``assign_steps`` on the columns of ``event_columns`` (``step`` replaced): the same steps and warnings."""
    is_step = kind_is(cols["kind"], "step")
    cols["step"] = steps = _steps_of(is_step, cols["name"], cols["rank"], cols["start_ns"], cols["dur_ns"], meta)
    gpu = cols["device"] >= 0
    corr = cols["correlation"]
    found = _launch_rows(gpu, corr, kind_is(cols["kind"], "runtime"), [cols["rank"], cols["pid"], corr])
    if found is not None:
        src, dst = found
        steps[dst] = steps[src]


def _steps_of(is_step: np.ndarray, names: Any, ev_rank: np.ndarray, ev_start: np.ndarray, ev_dur: np.ndarray,
              meta: "TraceMeta | None") -> np.ndarray:
    """The ``step`` column (int32, -1 outside every step) from the step rows; ``names``: the name column, a
    categorical (read through its categories) or a Series."""
    sidx = np.flatnonzero(is_step)
    out = np.full(len(is_step), -1, dtype=np.int32)
    if len(sidx):
        s_rank = ev_rank[sidx]
        s_start_all = ev_start[sidx]
        s_end_all = s_start_all + ev_dur[sidx]
        if isinstance(names, pd.Categorical):  # the step rows' names through the categories (no Series take)
            labels = np.append(np.asarray(names.categories, dtype=object), "nan")[names.codes[sidx]]
            numbers = _step_numbers(np.array([str(c) for c in labels], dtype=object))
        else:
            numbers = _step_numbers(names.iloc[sidx].astype(str).to_numpy())
        one_rank = bool((s_rank == s_rank[0]).all()) and bool((ev_rank == s_rank[0]).all())
        for rank in (s_rank[:1] if one_rank else pd.unique(s_rank)):  # ranks in order of their first step row
            own = np.flatnonzero(s_rank == rank)
            order = np.argsort(s_start_all[own], kind="stable")
            s_start = s_start_all[own][order]
            s_end = s_end_all[own][order]
            s_num = numbers[own][order]
            repeats = len(s_num) - len(np.unique(s_num))
            if repeats:
                s_num = np.arange(len(s_num), dtype=np.int32)
                if meta is not None:
                    meta.warn(f"{repeats:,} of {len(s_num):,} step markers on rank {rank} repeat an earlier step's number; "
                              "steps were numbered in time order (0, 1, ...)")
            mask = slice(None) if one_rank else ev_rank == rank  # every row is on the one rank: no mask to build
            out[mask] = steps_at(s_start, s_end, s_num, ev_start[mask])
    return out


def steps_at(s_start: np.ndarray, s_end: np.ndarray, s_num: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time, the number (``s_num``) of the step that holds it: the last of the steps (sorted by start) starting
    at or before it, if that one has not ended; -1 otherwise. Read through the step tables (a few hundred rows,
    cached) for every time, never through a masked gather of millions."""
    if not len(s_start):
        return np.full(len(times), -1, dtype=np.int32)
    pos = np.searchsorted(s_start, times, side="right")  # 1 + the last step starting at or before
    before = pos == 0
    pos -= 1
    pos[before] = 0
    vals = s_num.astype(np.int32, copy=False)[pos]
    vals[before | (times >= s_end[pos])] = -1
    return vals


_STEP_NUMBER = re.compile(r"(\d+)\s*$")


def _step_numbers(names: np.ndarray) -> np.ndarray:
    """The number at the end of each step name; a name without one gets its position. Names are tested with one
    regex search each (a handful of markers per rank); digits past the plain ASCII ones or too long for an int32
    go through pandas, whose conversion decides what they become."""
    found = [_STEP_NUMBER.search(str(n)) for n in names]
    if all(m is None or (m.group(1).isascii() and len(m.group(1)) <= 9) for m in found):
        return np.array([int(m.group(1)) if m else i for i, m in enumerate(found)], dtype=np.int32)
    nums = pd.Series(names).str.extract(r"(\d+)\s*$", expand=False)
    fallback = pd.Series(np.arange(len(names)))
    return pd.to_numeric(nums, errors="coerce").fillna(fallback).astype(np.int32).to_numpy()


def inherit_from_launch(events: pd.DataFrame, column: str) -> None:
    """Copy ``column`` from each runtime call to the GPU rows it launched (matched on rank, pid, correlation; the
    first call of a key when it repeats). The match is a sort of one int64 key per row, not a frame merge: on a
    rank of a few dozen events a merge's fixed cost was a tenth of the whole analysis."""
    gpu = events["device"].to_numpy() >= 0
    corr = events["correlation"].to_numpy()
    host = (~gpu) & (corr >= 0) & (events["kind"] == "runtime").to_numpy()
    if not gpu.any() or not host.any():
        return
    if not (gpu & (corr >= 0)).any():
        return
    key_cols = ["rank", "pid", "correlation"]
    cols = [events[c].to_numpy() for c in key_cols]
    if not all(c.dtype.kind in "iu" for c in cols):  # keys that are not integers: the frame merge
        src_f = events.loc[host, key_cols + [column]].drop_duplicates(key_cols)
        dst_f = events.loc[gpu & (corr >= 0), key_cols].reset_index()
        merged = dst_f.merge(src_f, on=key_cols, how="inner")
        if not merged.empty:
            events.loc[merged["index"].to_numpy(), column] = merged[column].to_numpy()
        return
    found = _launch_rows(gpu, corr, (events["kind"] == "runtime").to_numpy(), cols)
    if found is None:
        return
    src, dst = found
    current = events[column]
    values = current.to_numpy()[src]
    if isinstance(current.dtype, np.dtype):  # a new column array, written in place (a .loc write costs more on small frames)
        out = current.to_numpy().copy()
        out[dst] = values
        events[column] = out
    else:
        events.loc[events.index[dst], column] = values


def step_times(events: pd.DataFrame, start: np.ndarray | None = None) -> np.ndarray:
    """Per row, the time that places it in a step (``assign_steps``): for a GPU row its launching call's start where
    it has one (GPU work inherits its launch's step), else the row's own start. ``start``: the start column as
    int64, when the caller has it."""
    start = events["start_ns"].to_numpy(np.int64) if start is None else start
    gpu = events["device"].to_numpy() >= 0
    keys = [events[c].to_numpy() for c in ("rank", "pid", "correlation")]
    if not gpu.any() or not all(k.dtype.kind in "iu" for k in keys):
        return start
    found = _launch_rows(gpu, keys[2], (events["kind"] == "runtime").to_numpy(), keys)
    if found is None:
        return start
    out = start.copy()
    out[found[1]] = start[found[0]]
    return out


def _launch_rows(gpu: np.ndarray, corr: np.ndarray, is_runtime: np.ndarray, keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(launching call, GPU row) row pairs matched on integer ``keys`` (rank, pid, correlation): each GPU row with
    a correlation id and the first runtime call of its key. None when no GPU row has a launch."""
    host = (~gpu) & (corr >= 0) & is_runtime
    if not gpu.any() or not host.any():
        return None
    src = np.flatnonzero(host)
    dst = np.flatnonzero(gpu & (corr >= 0))
    if not len(dst):
        return None
    if len(src) + len(dst) <= SMALL_MATCH:
        return _launch_rows_small(src, dst, keys)
    k_src, k_dst = join_keys([(c[src], c[dst]) for c in keys])
    first = first_of_key(k_src, k_dst)  # each key's first call, as drop_duplicates keeps
    hit = first >= 0
    if not hit.any():
        return None
    return src[first[hit]], dst[hit]


#: Up to this many rows a match of keys is a Python dict of key tuples: numpy's fixed cost per call (a key build,
#: a sort, a search) is larger than the work below it.
SMALL_MATCH = 256


def _launch_rows_small(src: np.ndarray, dst: np.ndarray, keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """``_launch_rows`` on few rows: each key's first call from a dict, the GPU rows in order."""
    first: dict[tuple, int] = {}
    for i, k in zip(src.tolist(), zip(*(c[src].tolist() for c in keys))):
        first.setdefault(k, i)
    pairs = [(first[k], j) for j, k in zip(dst.tolist(), zip(*(c[dst].tolist() for c in keys))) if k in first]
    if not pairs:
        return None
    return np.array([a for a, _ in pairs], dtype=np.int64), np.array([b for _, b in pairs], dtype=np.int64)
