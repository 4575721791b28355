"""XPlane lines -> timeline columns: which plane and line an event sits on decides its kind, then names and stats
refine it. Shared by the two TensorFlow readers: the XSpace protobuf (``xplane_space``) and the old Chrome-trace
JSON export (``tf_json``), which carries the same planes and lines. Everything here runs on whole columns, once per
line or once per distinct name, never once per event.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from traceinsight.model.timeline import COPY_KINDS, KINDS, DeviceInfo, TraceMeta

#: Derived per-device lines written by xprof post-processing; they repeat activity that the stream lines carry.
DERIVED_OP_LINES = frozenset(
    {
        "TensorFlow Ops", "TensorFlow Name Scope", "Framework Ops", "Framework Name Scope", "XLA Ops",
        "XLA Modules", "Async XLA Ops", "Source code", "XLA TraceMe",
    }
)
STEPS_LINE = "Steps"
SKIPPED_LINES = frozenset({"_counters_"})

#: Host events xprof itself treats as explicit step markers (``IsExplicitHostStepMarker``), narrowed to the exact
#: names so ``train_function`` (a tf.function, not a step) is not mistaken for one.
HOST_STEP_NAMES = frozenset({"train", "test", "TraceContext", "train_step", "StepMarker"})

_STREAM_RE = re.compile(r"^Stream #(\d+)")
_GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)")
# "<node name>:<OpType>" is how TF names op-execution events (node names have no spaces, op types are identifiers).
_TF_OP_RE = r"^[^\s:]+:[A-Za-z_][A-Za-z0-9_]*$"
_TF_OP_MATCH = re.compile(_TF_OP_RE).match
_NO_STATS_NAMES = frozenset({"MemoryAllocation", "MemoryDeallocation", "ExecutorState::Process",
                             "ExecutorPropagateOutputs", "ThreadpoolListener::StartRegion",
                             "ThreadpoolListener::StopRegion", "ThreadpoolListener::Record"})

_COPY_KIND = {"H2D": "HtoD", "HtoD": "HtoD", "D2H": "DtoH", "DtoH": "DtoH", "D2D": "DtoD", "DtoD": "DtoD",
              "P2P": "PtoP", "PtoP": "PtoP", "H2H": "HtoH"}

#: Stats read per event (everything else stays in the file).
EVENT_STATS = ("correlation_id", "kernel_details", "memcpy_details", "step_num", "flops", "bytes_accessed")
#: XLA's per-op cost (HLO cost analysis) where the profiler wrote it on the device events: stat -> timeline column.
OP_COST_STATS = {"flops": "op_flops", "bytes_accessed": "op_bytes"}


class LineBatch:
    """The events of one line as parallel arrays (``codes`` index a shared name table) plus the line's place."""

    __slots__ = ("plane", "device", "line", "tid", "codes", "start_ns", "dur_ns", "stats")

    def __init__(self, plane: str, device: int, line: str, tid: int, codes: Any,
                 start_ns: Any, dur_ns: Any, stats: dict[str, list] | None = None) -> None:
        self.plane, self.device, self.line, self.tid = plane, device, line, tid
        self.codes = np.asarray(codes, dtype=np.int64)
        self.start_ns = np.asarray(start_ns, dtype=np.int64)
        self.dur_ns = np.asarray(dur_ns, dtype=np.int64)
        self.stats = stats or {}


def plane_kind(name: str) -> tuple[str, int]:
    """("host" | "gpu" | "python" | "skip", device index) for a plane name."""
    m = _GPU_PLANE_RE.match(name)
    if m:
        return "gpu", int(m.group(1))
    if name.startswith("/host:CPU") or name.startswith("/host:CUPTI"):
        return "host", -1
    if name.startswith("/host:python"):
        return "python", -1
    return "skip", -1


def whole_number(v: Any, lo: int = 0, hi: int = 1 << 62) -> int | None:
    """A plane stat as a whole number in [lo, hi), or None: a stat holds any oneof member (text, bytes, NaN, a
    uint64 past int64), and a bad one loses its fact, not the trace."""
    if isinstance(v, float) and np.isfinite(v) and v == int(v):
        v = int(v)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi else None


def device_info(index: int, stats: dict[str, Any]) -> DeviceInfo:
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    cc = f"{major}.{minor}" if major is not None and minor is not None else None
    vendor = stats.get("device_vendor") or ("Nvidia" if cc else None)
    name = stats.get("device_type_string") or stats.get("device_name")
    if not name and vendor:
        unit = "CUs" if str(vendor).upper() == "AMD" else "SMs"
        cores = stats.get("core_count")
        name = f"{vendor} GPU (cc {cc}{f', {cores} {unit}' if cores else ''})"
    mem = whole_number(stats.get("memory_size"))
    cores = whole_number(stats.get("core_count"))
    return DeviceInfo(index=index, name=name, sm_count=cores or None,
                      memory_bytes=mem or None, compute_capability=cc,
                      vendor=str(vendor) if vendor else None)


class LineTable(NamedTuple):
    """Decoded lines as whole columns: per line its place, per event its name, times and stats.

    The rows of line i follow those of line i - 1 (``sizes`` = rows per line). ``codes`` index the name table
    (-1: unknown id); ``stats`` maps an EVENT_STATS key that some event carries to an object column (None where
    absent).
    """

    plane: list[str]
    device: list[int]
    line: list[str]
    tid: list[int]
    sizes: np.ndarray
    codes: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    stats: dict[str, np.ndarray]


def table_from_batches(batches: list[LineBatch]) -> LineTable:
    """One LineTable from per-line batches (how tf_json hands its lines over)."""
    sizes = np.array([len(b.codes) for b in batches], dtype=np.int64)
    n = int(sizes.sum())
    stats: dict[str, np.ndarray] = {}
    for key in EVENT_STATS:
        if not any(key in b.stats for b in batches):
            continue
        out = np.empty(n, dtype=object)
        pos = 0
        for b, size in zip(batches, sizes.tolist()):
            col = b.stats.get(key)
            out[pos:pos + size] = col if col is not None else None
            pos += size
        stats[key] = out

    def joined(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)

    return LineTable([b.plane for b in batches], [b.device for b in batches], [b.line for b in batches],
                     [b.tid for b in batches], sizes, joined([b.codes for b in batches]),
                     joined([b.start_ns for b in batches]), joined([b.dur_ns for b in batches]), stats)


def _flags(table: list[str], pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    return np.fromiter((rx.search(x) is not None for x in table), dtype=bool, count=len(table))


_K = {k: np.int8(i) for i, k in enumerate(KINDS)}
_COPY_CODE = {k: i for i, k in enumerate(COPY_KINDS)}
_COPY_RX = re.compile(r"(H2D|D2H|D2D|P2P|HtoD|DtoH|DtoD|PtoP)")
_LINE_COPY_RX = re.compile(r"Memcpy(H2D|D2H|D2D|P2P)")
#: A stream line that carries copies only ("Stream #17(MemcpyD2H)"): its events are copies whatever their names.
#: A stream that also computes ("Stream #14(MemcpyOther,Compute,Memset,MemcpyH2D)", XLA's single stream while it
#: compiles and autotunes) is judged event by event, by name.
_COPY_STREAM = r"^Stream #\d+\((?:Memcpy\w*)(?:,\s*Memcpy\w*)*\)"
# what a line is, which decides how its rows are classified
_L_OTHER, _L_HOST, _L_PYTHON, _L_STREAM, _L_DERIVED, _L_STEPS, _L_GPU_OTHER = range(7)
#: row kind by line class; host and stream rows are then refined by name and stats
_LINE_KIND = np.array([_K["other"], _K["annotation"], _K["python"], _K["kernel"], _K["gpu_annotation"], _K["other"],
                       _K["other"]], dtype=np.int8)


def _distinct_names(name_table: list[str]) -> tuple[np.ndarray, list[str]]:
    """The distinct names in first-seen order ("" for unknown ids last unless seen) and each table row's index
    among them; the extra last row is where code -1 (unknown) goes."""
    names = list(name_table) + [""]
    cats = list(dict.fromkeys(names))
    if len(cats) == len(names):
        return np.arange(len(names), dtype=np.int64), cats
    index = dict(zip(cats, range(len(cats))))
    return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names)), cats


def _line_facts(t: LineTable) -> dict[str, Any]:
    """Line facts, worked out once per distinct line name. Per line: ``idx`` (its name in ``names``, the sorted
    distinct names), ``cls``, ``stream`` (-1: not a stream), ``gpu``. Per name: ``copy`` (a memcpy stream) and
    ``copy_dir`` (a COPY_KINDS index, -1: none)."""
    names, line_idx = np.unique(np.array([x or "" for x in t.line], dtype=object), return_inverse=True)
    lt = [str(x) for x in names]
    stream = np.array([int(m.group(1)) if (m := _STREAM_RE.match(x)) else -1 for x in lt], dtype=np.int64)
    copy_dir = np.array([_COPY_CODE[_COPY_KIND[m.group(1)]] if (m := _LINE_COPY_RX.search(x)) else -1 for x in lt],
                        dtype=np.int64)
    by_name = np.array([_L_DERIVED if x in DERIVED_OP_LINES else _L_STEPS if x == STEPS_LINE else _L_GPU_OTHER
                        for x in lt], dtype=np.int8)
    by_name[stream >= 0] = _L_STREAM
    plane_cls = {"host": _L_HOST, "python": _L_PYTHON}
    cls = np.array([by_name[i] if p == "gpu" else plane_cls.get(p, _L_OTHER)
                    for p, i in zip(t.plane, line_idx.tolist())], dtype=np.int8)
    return {"names": lt, "idx": line_idx, "cls": cls, "stream": np.where(cls == _L_STREAM, stream[line_idx], -1),
            "gpu": np.array([p == "gpu" for p in t.plane], dtype=bool), "copy": _flags(lt, _COPY_STREAM),
            "copy_dir": copy_dir}


def _used(codes: np.ndarray, size: int) -> np.ndarray:
    """Which of ``size`` names occur among ``codes``."""
    return np.bincount(codes, minlength=size) > 0 if len(codes) else np.zeros(size, dtype=bool)


def _name_flags(cats: list[str], used: np.ndarray, test) -> np.ndarray:
    """``test(name)`` for the names in use (False elsewhere): per-name text checks run once per distinct name."""
    out = np.zeros(len(cats), dtype=bool)
    idx = np.flatnonzero(used)
    out[idx] = [bool(test(cats[i])) for i in idx.tolist()]
    return out


def _host_name_kind(x: str) -> np.int8:
    """A host event's kind from its name alone (a correlation id later makes it a runtime call)."""
    if x.startswith("$"):
        return _K["python"]
    if x in ("MemoryAllocation", "MemoryDeallocation"):
        return _K["other"]
    if _TF_OP_MATCH(x) is not None:
        return _K["cpu_op"]
    return _K["annotation"]


def _whole_numbers(raw: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A stat read as a whole number per row: (has a usable value, the value as int64; 0 where not).

    Stats hold any oneof member, so a value can be text that is no number, NaN, infinite or past int64: such a
    value counts as absent (that event loses the stat), never as a wrapped-around number or a rejected trace."""
    ok = np.zeros(n, dtype=bool)
    out = np.zeros(n, dtype=np.int64)
    if raw is None:
        return ok, out
    present = np.flatnonzero(pd.notna(raw))
    if not len(present):
        return ok, out
    values = pd.to_numeric(pd.Series(raw[present], dtype=object), errors="coerce").to_numpy()
    if values.dtype.kind in "iu":
        good = values <= np.iinfo(np.int64).max if values.dtype.kind == "u" else np.ones(len(values), dtype=bool)
        ints = values.astype(np.int64)
    else:
        f = values.astype(np.float64)
        good = np.isfinite(f) & (np.abs(f) < 2.0 ** 63)
        ints = np.where(good, f, 0).astype(np.int64)
    ok[present] = good
    out[present[good]] = ints[good]
    return ok, out


def _correlations(raw: np.ndarray | None, n: int) -> np.ndarray:
    """Correlation ids; -1 where absent, unreadable or negative (such an event links to nothing)."""
    ok, value = _whole_numbers(raw, n)
    return np.where(ok & (value >= 0), value, -1)


def _op_cost(raw: np.ndarray, on: np.ndarray) -> np.ndarray:
    """A per-op cost stat (FLOPs, bytes) as float64 on the rows ``on``, NaN elsewhere and where it is not a
    non-negative finite number (a stat holds any oneof member; traces are untrusted)."""
    vals = np.array(pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce"), dtype=np.float64)  # a copy: written below
    bad = ~np.isfinite(vals) | (vals < 0) | (vals > 1e21) | ~on
    vals[bad] = np.nan
    return vals


def _memcpy_bytes(raw: np.ndarray | None, n: int) -> np.ndarray:
    """``size:<n>`` of memcpy_details; each distinct text is parsed once."""
    nbytes = np.zeros(n, dtype=np.int64)
    if raw is None:
        return nbytes
    has = pd.notna(raw)
    if has.any():
        pos, uniq = pd.factorize(pd.Series(raw[has], dtype=object).astype(str))
        sizes = pd.Series(uniq).str.extract(r"size:(\d+)", expand=False)
        nbytes[has] = pd.to_numeric(sizes, errors="coerce").fillna(0).astype(np.int64).to_numpy()[pos]
    return nbytes


def frame_from_lines(batches: list[LineBatch], name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events`` from decoded lines (see ``frame_from_table``)."""
    if not batches:
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    return frame_from_table(table_from_batches(batches), name_table, meta)


def frame_from_table(t: LineTable, name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events``: classification runs per line and per distinct name, then on whole columns."""
    if not len(t.sizes):
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    table_codes, cats = _distinct_names(name_table)
    lf = _line_facts(t)
    # code -1 (unknown id) takes the last entry: the "" row
    t, steps = _collapse_steps(t._replace(codes=table_codes[t.codes]), lf["cls"])
    codes, n = t.codes, len(t.codes)
    cls = np.repeat(lf["cls"], t.sizes)
    line_codes = np.repeat(lf["idx"], t.sizes)
    corr = _correlations(t.stats.get("correlation_id"), n)

    kind = _LINE_KIND[cls]
    host = np.flatnonzero(cls == _L_HOST)
    if len(host):
        hc = codes[host]
        host_kind = np.zeros(len(cats), dtype=np.int8)
        used = np.flatnonzero(_used(hc, len(cats)))
        host_kind[used] = [_host_name_kind(cats[i]) for i in used.tolist()]
        kind[host] = np.where(corr[host] >= 0, _K["runtime"], host_kind[hc])
    stream_rows = np.flatnonzero(cls == _L_STREAM)
    copy_rows = stream_rows[:0]
    if len(stream_rows):
        sc = codes[stream_rows]
        used = _used(sc, len(cats))
        u_memcpy = _name_flags(cats, used, lambda x: "memcpy" in x.lower())
        u_memset = _name_flags(cats, used, lambda x: "memset" in x.lower())
        is_copy = u_memcpy[sc] | lf["copy"][line_codes[stream_rows]]
        kind[stream_rows] = np.where(u_memset[sc], _K["memset"], np.where(is_copy, _K["memcpy"], _K["kernel"]))
        copy_rows = stream_rows[is_copy]
    name_codes, out_cats = _steps(t, steps, codes, cats, kind, host, meta)

    is_gpu = np.repeat(lf["gpu"], t.sizes)
    is_step = kind == _K["step"]
    columns = {
        "kind": pd.Categorical.from_codes(kind, categories=list(KINDS)),
        "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(out_cats).unique())
        if len(set(out_cats)) == len(out_cats) else pd.Categorical(np.array(out_cats, dtype=object)[name_codes]),
        "raw_name": pd.Categorical.from_codes(codes, categories=cats),
        "start_ns": t.start_ns,
        "dur_ns": np.maximum(t.dur_ns, 0),
        "pid": np.zeros(n, dtype=np.int64),  # one process per XSpace: GPU rows join host launches on correlation
        "tid": np.repeat(np.where(lf["stream"] >= 0, lf["stream"], np.asarray(t.tid, dtype=np.int64)), t.sizes),
        "device": np.where(is_gpu & ~is_step, np.repeat(np.asarray(t.device, dtype=np.int32), t.sizes), -1)
        .astype(np.int32),
        "stream": np.repeat(lf["stream"], t.sizes),
        "correlation": np.where(is_gpu | (kind == _K["runtime"]), corr, -1),
        "bytes": _memcpy_bytes(t.stats.get("memcpy_details"), n),
        "copy_kind": pd.Categorical.from_codes(_copy_codes(codes, cats, copy_rows, lf, line_codes, n),
                                               categories=list(COPY_KINDS)),
    }
    line_cat = pd.Categorical.from_codes(line_codes, categories=lf["names"])
    optional: dict[str, Any] = {"category": line_cat, "thread_name": line_cat}
    for stat, col in OP_COST_STATS.items():
        raw = t.stats.get(stat)
        if raw is not None:
            vals = _op_cost(raw, kind == _K["kernel"])
            if np.isfinite(vals).any():
                optional[col] = vals
    kdetails = t.stats.get("kernel_details")
    if kdetails is not None:
        kd_mask = pd.notna(kdetails) & (kind == _K["kernel"])
        if kd_mask.any():
            optional.update(_kernel_details(kdetails, kd_mask))
    return columns, optional


def _copy_codes(codes: np.ndarray, cats: list[str], copy_rows: np.ndarray, lf: dict, line_codes: np.ndarray,
                n: int) -> np.ndarray:
    """COPY_KINDS index per row (-1: not a copy): the direction in the name, else in the line name, else other."""
    out = np.full(n, -1, dtype=np.int8)
    if not len(copy_rows):
        return out
    u_dir = np.full(len(cats), -1, dtype=np.int64)
    used = np.flatnonzero(_used(codes[copy_rows], len(cats)))
    u_dir[used] = [_COPY_CODE[_COPY_KIND[m.group(1)]] if "memcpy" in x.lower() and (m := _COPY_RX.search(x)) else -1
                   for x in (cats[i] for i in used.tolist())]
    ck = u_dir[codes[copy_rows]]
    ck = np.where(ck >= 0, ck, lf["copy_dir"][line_codes[copy_rows]])
    out[copy_rows] = np.where(ck >= 0, ck, _COPY_CODE["other"])
    return out


def _collapse_steps(t: LineTable, line_cls: np.ndarray) -> tuple[LineTable, np.ndarray | None]:
    """The device "Steps" lines (one per GPU, present when the capture grouped GPU work) as one row per step name,
    at its first row, spanning the step on every GPU; the other rows of those lines go. Also returns those rows."""
    bounds = np.r_[0, np.cumsum(t.sizes)]
    lines = np.flatnonzero(line_cls == _L_STEPS)
    if not len(lines):
        return t, None
    rows = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in lines.tolist()])
    c, s = t.codes[rows], t.start_ns[rows]
    e = s + t.dur_ns[rows]
    _, first_pos, inv = np.unique(c, return_index=True, return_inverse=True)
    lo = np.full(len(first_pos), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(first_pos), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, s)
    np.maximum.at(hi, inv, e)
    order = np.argsort(first_pos, kind="stable")  # steps in order of first appearance
    first = rows[first_pos[order]]
    drop = np.setdiff1d(rows, first)  # sorted
    start, dur = np.delete(t.start_ns, drop), np.delete(t.dur_ns, drop)
    first = first - np.searchsorted(drop, first)  # their rows once the others are gone
    start[first] = lo[order]
    dur[first] = hi[order] - lo[order]
    line_of = np.searchsorted(bounds, drop, side="right") - 1
    sizes = t.sizes - np.bincount(line_of, minlength=len(t.sizes))
    stats = {k: np.delete(v, drop) for k, v in t.stats.items()}
    return t._replace(sizes=sizes, codes=np.delete(t.codes, drop), start_ns=start, dur_ns=dur, stats=stats), first


def _steps(t: LineTable, steps: np.ndarray | None, codes: np.ndarray, cats: list[str], kind: np.ndarray,
           host: np.ndarray, meta: TraceMeta) -> tuple[np.ndarray, list[str]]:
    """Step rows: sets their kind (in place) and names them; returns the name codes and names.

    Steps come from the device Steps line (``steps``: its rows) where there is one; otherwise from the host events
    xprof treats as step markers.
    """
    name_codes, out_cats = codes.copy(), list(cats)
    if steps is not None:
        kind[steps] = _K["step"]
        for i in steps.tolist():
            out_cats.append(f"Step {cats[codes[i]]}")
            name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "device Steps line"
        return name_codes, out_cats
    step_num = t.stats.get("step_num")
    hc = codes[host]
    used = _used(hc, len(cats))
    marker = _name_flags(cats, used, lambda x: x in HOST_STEP_NAMES)[hc]
    has_num, step_num = _whole_numbers(step_num, len(codes))
    if has_num.any():
        trainlike = _name_flags(cats, used, lambda x: x.startswith(("train", "test")) and "/" not in x)
        marker |= has_num[host] & trainlike[hc]
    if marker.any():
        idx = host[marker]
        kind[idx] = _K["step"]
        for i in idx.tolist():
            if has_num[i]:
                out_cats.append(f"{cats[codes[i]]} {int(step_num[i])}")
                name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "host step markers"
    else:
        meta.warn("no step markers in the capture (Keras 3 and JAX emit none unless asked); per-step metrics are unavailable")
    return name_codes, out_cats


_KD_FIELDS = {name: re.compile(rx) for name, rx in (
    ("regs", r"regs:(\d+)"), ("shm", r"(?:^|\s)shm:(\d+)"), ("static", r"static_shared:(\d+)"),
    ("dynamic", r"dynamic_shared:(\d+)"), ("occ", r"occ_pct:([\d.]+)"), ("grid", r"grid:([\d,]+)"),
    ("block", r"block:([\d,]+)"))}


def _kd_number(text: str | None) -> float:
    """A matched number as ``pd.to_numeric(errors="coerce")`` reads it: NaN when absent, non-ASCII or malformed."""
    if text is None or not text.isascii():
        return np.nan
    try:
        return float(text)
    except ValueError:
        return np.nan


def _kd_parse(text: str) -> tuple:
    """(registers, shared memory, occupancy, grid, block) of one kernel_details string; NaN where absent."""
    found = {}
    for name, rx in _KD_FIELDS.items():
        m = rx.search(text)
        found[name] = m.group(1) if m else None
    shm, static, dynamic = (_kd_number(found[k]) for k in ("shm", "static", "dynamic"))
    if np.isnan(shm) and not (np.isnan(static) and np.isnan(dynamic)):
        shm = np.nan_to_num(static) + np.nan_to_num(dynamic)
    return (_kd_number(found["regs"]), shm, _kd_number(found["occ"]),
            found["grid"] if found["grid"] is not None else np.nan,
            found["block"] if found["block"] is not None else np.nan)


def _kernel_details(raw: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """Split "regs:38 shm:0 grid:160,1,1 block:1024,1,1" (and the newer static/dynamic_shared form) into columns."""
    n = len(raw)
    # parse each distinct string once
    pos, uniq = pd.factorize(pd.Series(raw[mask]).astype(str))
    parsed = list(zip(*map(_kd_parse, uniq))) if len(uniq) else [()] * 5
    out: dict[str, Any] = {}
    for col, values in zip(("registers", "shared_mem", "occupancy"), parsed[:3]):
        arr = np.full(n, np.nan)
        arr[mask] = np.array(values, dtype=float)[pos]
        if not np.isnan(arr).all():
            out[col] = arr
    for col, values in zip(("grid", "block"), parsed[3:]):
        # the Categorical the timeline stores, built from the distinct strings instead of one object per row
        distinct = pd.Categorical(np.array(list(values) + [None], dtype=object)[:-1])
        codes = np.full(n, -1, dtype=distinct.codes.dtype)
        codes[mask] = distinct.codes[pos]
        out[col] = pd.Categorical.from_codes(codes, dtype=distinct.dtype)
    return out


def host_only_warning(devices: list[DeviceInfo], kinds: Any) -> str | None:
    """``kinds``: the kind column (array or Categorical: a Categorical is checked on its codes, not per row)."""
    if not devices:
        return ("host-only capture: no /device:GPU planes (CUPTI was not loaded or the run had no GPU); "
                "GPU metrics are unavailable")
    if not pd.Series(kinds, copy=False).isin(["kernel", "memcpy", "memset"]).any():
        return "the capture has GPU planes but no GPU activity (CUPTI may have failed to trace kernels)"
    return None
