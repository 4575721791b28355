"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``) -> Timeline, without importing TensorFlow.

The protobuf is decoded with classes built from our own descriptor (``proto/xplane_schema.py``). Decoding has to
touch every event once; everything after that (classification, stat parsing, step numbering) runs on whole
columns. The mapping from planes/lines to timeline kinds lives in ``frame_from_lines`` so the old Chrome-trace JSON
export (``tf_json``), which carries the same planes and lines, shares it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import TraceReadError
from ..timeline import DeviceInfo, Timeline, TraceMeta, assign_steps, build_events, rebase

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
EVENT_STATS = ("correlation_id", "kernel_details", "memcpy_details", "step_num")


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


# ------------------------------------------------------------------------------------------------------------------
# XSpace decoding


def _load_space(path: Path):
    from google.protobuf.message import DecodeError

    from .proto.xplane_schema import messages

    data = path.read_bytes()
    if not data:
        raise TraceReadError(f"{path}: the file is empty")
    try:
        space = messages()["XSpace"].FromString(data)
    except DecodeError as exc:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (truncated or corrupt: {exc})") from None
    except RecursionError:
        raise TraceReadError(f"{path}: not a valid XSpace protobuf (nesting too deep)") from None
    if not len(space.planes):
        raise TraceReadError(f"{path}: the XSpace holds no planes (not a profiler capture, or truncated)")
    if not any(p.name.startswith("/") or p.name == "Task Environment" for p in space.planes):
        raise TraceReadError(f"{path}: protobuf decodes but has no profiler planes; not an xplane.pb")
    return space


def _stat_value(stat, refs: dict[int, str]):
    which = stat.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return refs.get(stat.ref_value)
    return getattr(stat, which)


def _plane_stats(plane, refs: dict[int, str]) -> dict[str, Any]:
    return {refs.get(s.metadata_id, ""): _stat_value(s, refs) for s in plane.stats}


def _decode_line(line, kind: str, device: int, md_ids: np.ndarray, md_offset: int, refs: dict[int, str],
                 wanted: dict[int, str], scan_all: bool, probe_ids: np.ndarray) -> LineBatch:
    events = line.events
    n = len(events)
    raw = np.array([(e.metadata_id, e.offset_ps, e.duration_ps) for e in events], dtype=np.int64).reshape(n, 3)
    mids = raw[:, 0]
    pos = np.searchsorted(md_ids, mids)
    pos = np.minimum(pos, max(len(md_ids) - 1, 0))
    codes = np.where(md_ids[pos] == mids, pos + md_offset, -1) if len(md_ids) else np.full(n, -1)
    stats: dict[str, list] = {}
    if wanted:
        if scan_all:
            todo = range(n)
        else:
            # Stats are costly to walk in Python; events of one name carry the same stat keys, so probe the first
            # and last event of each name and walk only the names that carry a stat we use.
            cand = np.isin(mids, probe_ids)
            if not cand.any():
                return LineBatch(kind, device, line.name or line.display_name, line.id, codes,
                                 (line.timestamp_ns * 1000 + raw[:, 1]) // 1000, (raw[:, 2] + 500) // 1000, stats)
            cidx = np.flatnonzero(cand)
            uniq, first = np.unique(mids[cidx], return_index=True)
            _, last_rev = np.unique(mids[cidx][::-1], return_index=True)
            first = cidx[first]
            last = cidx[len(cidx) - 1 - last_rev]
            hit = [m for m, a, b in zip(uniq.tolist(), first.tolist(), last.tolist())
                   if any(s.metadata_id in wanted for s in events[a].stats)
                   or any(s.metadata_id in wanted for s in events[b].stats)]
            todo = np.flatnonzero(np.isin(mids, hit)).tolist() if hit else []
        for i in todo:
            for s in events[i].stats:
                key = wanted.get(s.metadata_id)
                if key is not None:
                    col = stats.get(key)
                    if col is None:
                        col = stats[key] = [None] * n
                    col[i] = _stat_value(s, refs)
    start = (line.timestamp_ns * 1000 + raw[:, 1]) // 1000
    dur = (raw[:, 2] + 500) // 1000
    return LineBatch(kind, device, line.name or line.display_name, line.id, codes, start, dur, stats)


def decode_space(space) -> tuple[list[LineBatch], list[str], list[DeviceInfo], dict[str, Any], list[str]]:
    """Lines (as batches), the name table, devices, task-environment facts and the XSpace's own warnings."""
    batches: list[LineBatch] = []
    name_table: list[str] = []
    devices: list[DeviceInfo] = []
    env: dict[str, Any] = {}
    for plane in space.planes:
        refs = {k: v.name for k, v in plane.stat_metadata.items()}
        if plane.name == "Task Environment":
            env.update(_plane_stats(plane, refs))
            continue
        kind, device = plane_kind(plane.name)
        if kind == "skip":
            continue
        if kind == "gpu":
            devices.append(_device_info(device, _plane_stats(plane, refs)))
        md = sorted((k, v.name) for k, v in plane.event_metadata.items())
        md_ids = np.array([k for k, _ in md], dtype=np.int64)
        md_offset = len(name_table)
        md_names = [v for _, v in md]
        name_table.extend(md_names)
        # events that can carry a launch correlation or a step number: not TF ops, not allocator records
        probe_ids = md_ids[[not (_TF_OP_MATCH(x) or x in _NO_STATS_NAMES) for x in md_names]] if len(md) else md_ids
        wanted = {k: v for k, v in refs.items() if v in EVENT_STATS}
        for line in plane.lines:
            lname = line.name or line.display_name
            if not len(line.events) or lname in SKIPPED_LINES:
                continue
            derived = lname in DERIVED_OP_LINES or lname == STEPS_LINE
            line_wanted = {} if (kind == "gpu" and derived) else wanted
            scan_all = kind == "gpu" and not derived
            batches.append(_decode_line(line, kind, device, md_ids, md_offset, refs, line_wanted, scan_all, probe_ids))
    messages = [f"profiler error: {e}" for e in space.errors] + [f"profiler warning: {w}" for w in space.warnings]
    return batches, name_table, devices, env, messages


def _device_info(index: int, stats: dict[str, Any]) -> DeviceInfo:
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    cc = f"{major}.{minor}" if major is not None and minor is not None else None
    vendor = stats.get("device_vendor") or ("Nvidia" if cc else None)
    name = stats.get("device_type_string") or stats.get("device_name")
    if not name and vendor:
        unit = "CUs" if str(vendor).upper() == "AMD" else "SMs"
        cores = stats.get("core_count")
        name = f"{vendor} GPU (cc {cc}{f', {cores} {unit}' if cores else ''})"
    mem = stats.get("memory_size")
    cores = stats.get("core_count")
    return DeviceInfo(index=index, name=name, sm_count=int(cores) if cores else None,
                      memory_bytes=int(mem) if mem else None, compute_capability=cc,
                      vendor=str(vendor) if vendor else None)


# ------------------------------------------------------------------------------------------------------------------
# Plane/line -> timeline kinds (shared with tf_json)


def _flags(table: list[str], pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    return np.fromiter((rx.search(x) is not None for x in table), dtype=bool, count=len(table))


def frame_from_lines(batches: list[LineBatch], name_table: list[str], meta: TraceMeta) -> tuple[dict[str, Any], dict[str, Any]]:
    """Columns for ``build_events`` from decoded lines; classification runs per line and per distinct name."""
    if not batches:
        return {"kind": [], "name": [], "start_ns": [], "dur_ns": []}, {}
    sizes = np.array([len(b.codes) for b in batches], dtype=np.int64)
    n = int(sizes.sum())
    # distinct names: the table may repeat a name across planes
    table_codes, categories = pd.factorize(pd.Index(list(name_table) + [""], dtype=object))
    raw_codes = np.concatenate([b.codes for b in batches])
    codes = table_codes[np.where(raw_codes < 0, len(name_table), raw_codes)]
    cats = [str(x) for x in categories]
    start = np.concatenate([b.start_ns for b in batches])
    dur = np.concatenate([b.dur_ns for b in batches])

    def per_line(values, dtype=None) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype=dtype), sizes)

    plane = per_line([b.plane for b in batches], dtype=object)
    device = per_line([b.device for b in batches]).astype(np.int32)
    line_table, line_idx = np.unique(np.array([b.line or "" for b in batches], dtype=object), return_inverse=True)
    line_codes = per_line(line_idx)
    tid = per_line([b.tid for b in batches]).astype(np.int64)

    def stat(key: str) -> np.ndarray | None:
        if not any(key in b.stats for b in batches):
            return None
        out = np.empty(n, dtype=object)
        pos = 0
        for b, size in zip(batches, sizes):
            col = b.stats.get(key)
            out[pos:pos + size] = col if col is not None else None
            pos += size
        return out

    corr_raw = stat("correlation_id")
    corr = np.full(n, -1, dtype=np.int64)
    if corr_raw is not None:
        has = pd.notna(corr_raw)
        corr[has] = pd.to_numeric(pd.Series(corr_raw[has]), errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    kdetails = stat("kernel_details")
    mdetails = stat("memcpy_details")
    step_num = stat("step_num")

    # line-level facts
    lt = [str(x) for x in line_table]
    l_stream = np.array([int(m.group(1)) if (m := _STREAM_RE.match(x)) else -1 for x in lt], dtype=np.int64)
    l_copy = _flags(lt, r"^Stream #\d+.*Memcpy")
    l_copy_dir = np.array([(_COPY_KIND.get(m.group(1)) if (m := re.search(r"Memcpy(H2D|D2H|D2D|P2P)", x)) else None)
                           for x in lt], dtype=object)
    l_steps = np.array([x == STEPS_LINE for x in lt], dtype=bool)
    l_derived = np.array([x in DERIVED_OP_LINES for x in lt], dtype=bool)
    stream = l_stream[line_codes]

    is_gpu = plane == "gpu"
    is_host = plane == "host"
    is_stream = is_gpu & (stream >= 0)
    is_steps_line = is_gpu & l_steps[line_codes]
    is_derived = is_gpu & l_derived[line_codes]

    # name-level facts
    low = [x.lower() for x in cats]
    u_memcpy = np.array(["memcpy" in x for x in low], dtype=bool)
    u_memset = np.array(["memset" in x for x in low], dtype=bool)
    u_tfop = np.array([_TF_OP_MATCH(x) is not None for x in cats], dtype=bool)
    u_python = np.array([x.startswith("$") for x in cats], dtype=bool)
    u_memory = np.array([x in ("MemoryAllocation", "MemoryDeallocation") for x in cats], dtype=bool)
    u_hoststep = np.array([x in HOST_STEP_NAMES for x in cats], dtype=bool)
    u_trainlike = np.array([x.startswith(("train", "test")) and "/" not in x for x in cats], dtype=bool)
    copy_rx = re.compile(r"(H2D|D2H|D2D|P2P|HtoD|DtoH|DtoD|PtoP)")
    u_copy_dir = np.array([(_COPY_KIND.get(m.group(1)) if c and (m := copy_rx.search(x)) else None)
                           for x, c in zip(cats, u_memcpy)], dtype=object)

    kind_codes = {k: i for i, k in enumerate(("other", "annotation", "cpu_op", "python", "runtime", "kernel", "memcpy",
                                              "memset", "gpu_annotation", "step"))}
    kind = np.zeros(n, dtype=np.int8)
    kind[is_host] = kind_codes["annotation"]
    kind[is_host & u_tfop[codes]] = kind_codes["cpu_op"]
    kind[is_host & u_memory[codes]] = kind_codes["other"]
    kind[(is_host & u_python[codes]) | (plane == "python")] = kind_codes["python"]
    kind[is_host & (corr >= 0)] = kind_codes["runtime"]
    kind[is_stream] = kind_codes["kernel"]
    is_copy = is_stream & (u_memcpy[codes] | l_copy[line_codes])
    kind[is_copy] = kind_codes["memcpy"]
    kind[is_stream & u_memset[codes]] = kind_codes["memset"]
    kind[is_derived] = kind_codes["gpu_annotation"]

    if step_num is not None:
        has_num = pd.notna(step_num)
        host_marker = is_host & (u_hoststep[codes] | (has_num & u_trainlike[codes]))
    else:
        has_num = np.zeros(n, dtype=bool)
        host_marker = is_host & u_hoststep[codes]

    out_cats = list(cats)
    name_codes = codes.copy()
    keep = None
    if is_steps_line.any():
        # the device "Steps" line (present when the capture grouped GPU work): one row per step id across GPUs
        idx = np.flatnonzero(is_steps_line)
        sdf = pd.DataFrame({"i": idx, "c": codes[idx], "s": start[idx], "e": start[idx] + dur[idx]})
        agg = sdf.groupby("c", sort=False).agg(i=("i", "first"), s=("s", "min"), e=("e", "max"))
        keep = np.ones(n, dtype=bool)
        keep[idx] = False
        first = agg["i"].to_numpy()
        keep[first] = True
        start, dur = start.copy(), dur.copy()
        start[first] = agg["s"].to_numpy()
        dur[first] = (agg["e"] - agg["s"]).to_numpy()
        kind[first] = kind_codes["step"]
        for i in first:
            out_cats.append(f"Step {cats[codes[i]]}")
            name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "device Steps line"
    elif host_marker.any():
        idx = np.flatnonzero(host_marker)
        kind[idx] = kind_codes["step"]
        for i in idx:
            nm = cats[codes[i]]
            if has_num[i]:
                out_cats.append(f"{nm} {int(step_num[i])}")
                name_codes[i] = len(out_cats) - 1
        meta.extra["step_source"] = "host step markers"
    else:
        meta.warn("no step markers in the capture (Keras 3 and JAX emit none unless asked); per-step metrics are unavailable")

    copy_kind = np.full(n, None, dtype=object)
    if is_copy.any():
        ci = np.flatnonzero(is_copy)
        ck = u_copy_dir[codes[ci]]
        miss = pd.isna(ck)
        ck[miss] = l_copy_dir[line_codes[ci[miss]]]
        ck[pd.isna(ck)] = "other"
        copy_kind[ci] = ck
    nbytes = np.zeros(n, dtype=np.int64)
    if mdetails is not None:
        has_md = pd.notna(mdetails)
        sizes_ = pd.Series(mdetails[has_md], dtype=object).astype(str).str.extract(r"size:(\d+)", expand=False)
        nbytes[has_md] = pd.to_numeric(sizes_, errors="coerce").fillna(0).astype(np.int64).to_numpy()

    kinds_order = list(kind_codes)
    is_step = kind == kind_codes["step"]
    device = np.where(is_gpu & ~is_step, device, -1).astype(np.int32)
    columns = {
        "kind": pd.Categorical.from_codes(kind, categories=kinds_order),
        "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(out_cats).unique())
        if len(set(out_cats)) == len(out_cats) else pd.Categorical(np.array(out_cats, dtype=object)[name_codes]),
        "raw_name": pd.Categorical.from_codes(codes, categories=cats),
        "start_ns": start,
        "dur_ns": np.maximum(dur, 0),
        "pid": np.zeros(n, dtype=np.int64),  # one process per XSpace: GPU rows join host launches on correlation
        "tid": np.where(is_stream, stream, tid),
        "device": device,
        "stream": np.where(is_stream, stream, -1),
        "correlation": np.where(is_gpu | (kind == kind_codes["runtime"]), corr, -1),
        "bytes": nbytes,
        "copy_kind": pd.Categorical(copy_kind, categories=["HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other"]),
    }
    line_cat = pd.Categorical.from_codes(line_codes, categories=lt) if len(set(lt)) == len(lt) else pd.Categorical(
        np.array(lt, dtype=object)[line_codes])
    optional: dict[str, Any] = {"category": line_cat, "thread_name": line_cat}
    if kdetails is not None:
        kd_mask = pd.notna(kdetails) & (kind == kind_codes["kernel"])
        if kd_mask.any():
            optional.update(_kernel_details(kdetails, kd_mask))
    if keep is not None:
        columns = {k: v[keep] for k, v in columns.items()}
        optional = {k: v[keep] for k, v in optional.items()}
    return columns, optional


def _kernel_details(raw: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Split "regs:38 shm:0 grid:160,1,1 block:1024,1,1" (and the newer static/dynamic_shared form) into columns."""
    n = len(raw)
    s = pd.Series(raw[mask]).astype(str)
    # parse each distinct string once
    uniq = pd.Series(s.unique())
    regs = pd.to_numeric(uniq.str.extract(r"regs:(\d+)", expand=False), errors="coerce")
    shm = pd.to_numeric(uniq.str.extract(r"(?:^|\s)shm:(\d+)", expand=False), errors="coerce")
    ss = pd.to_numeric(uniq.str.extract(r"static_shared:(\d+)", expand=False), errors="coerce")
    ds = pd.to_numeric(uniq.str.extract(r"dynamic_shared:(\d+)", expand=False), errors="coerce")
    shared = shm.where(shm.notna(), ss.fillna(0) + ds.fillna(0)).where(shm.notna() | ss.notna() | ds.notna())
    grid = uniq.str.extract(r"grid:([\d,]+)", expand=False)
    block = uniq.str.extract(r"block:([\d,]+)", expand=False)
    occ = pd.to_numeric(uniq.str.extract(r"occ_pct:([\d.]+)", expand=False), errors="coerce")
    pos = pd.Index(uniq).get_indexer(s)
    out: dict[str, np.ndarray] = {}
    for col, values in (("registers", regs), ("shared_mem", shared), ("occupancy", occ)):
        arr = np.full(n, np.nan)
        arr[mask] = values.to_numpy(dtype=float)[pos]
        if not np.isnan(arr).all():
            out[col] = arr
    for col, values in (("grid", grid), ("block", block)):
        arr = np.full(n, None, dtype=object)
        arr[mask] = values.to_numpy(dtype=object)[pos]
        out[col] = arr
    return out


def finish(columns: dict[str, Any], optional: dict[str, Any], meta: TraceMeta, *, absolute: bool) -> Timeline:
    """Build, rebase, assign steps: the last stage every TF reader shares."""
    events = build_events(columns, optional)
    origin = rebase(events)
    if absolute:
        meta.start_unix_ns = origin
    assign_steps(events)
    return Timeline(events, meta)


def host_only_warning(devices: list[DeviceInfo], kinds: np.ndarray) -> str | None:
    if not devices:
        return ("host-only capture: no /device:GPU planes (CUPTI was not loaded or the run had no GPU); "
                "GPU metrics are unavailable")
    if not np.isin(kinds, ["kernel", "memcpy", "memset"]).any():
        return "the capture has GPU planes but no GPU activity (CUPTI may have failed to trace kernels)"
    return None


def read_columns(path: Path) -> tuple[dict[str, Any], dict[str, Any], TraceMeta, bool]:
    """Decode one xplane.pb to timeline columns on its own clock; ``absolute`` = times are ns since the epoch."""
    space = _load_space(path)
    batches, name_table, devices, env, messages = decode_space(space)
    meta = TraceMeta(source_format="tensorflow-xplane", path=str(path), tool="TensorFlow/XLA profiler (XSpace)")
    meta.devices = sorted(devices, key=lambda d: d.index)
    for m in messages:
        meta.warn(m)
    if len(space.hostnames):
        meta.extra["hostnames"] = list(space.hostnames)
    start_time = env.get("profile_start_time")
    absolute = bool(start_time)
    if absolute:
        for b in batches:
            b.start_ns = b.start_ns + int(start_time)
        stop = env.get("profile_stop_time")
        if stop:
            meta.extra["profile_duration_ns"] = int(stop) - int(start_time)
    columns, optional = frame_from_lines(batches, name_table, meta)
    warning = host_only_warning(meta.devices, np.asarray(columns["kind"], dtype=object))
    if warning:
        meta.warn(warning)
    if any(d.vendor and str(d.vendor).upper() == "AMD" for d in meta.devices) or any(
        b.line.startswith("py_xla_execute") for b in batches
    ):
        meta.tool = "JAX/XLA profiler (XSpace)"
    return columns, optional, meta, absolute


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name
    if name.endswith(".xplane.pb"):
        return True
    # content check: XSpace starts with field 1 (planes, length-delimited) whose XPlane holds a plane name
    return head[:1] == b"\x0a" and (b"/host:CPU" in head or b"/device:" in head or b"Task Environment" in head)


def read(path: Path, progress=None, **options) -> Timeline:
    if progress:
        progress(f"decoding {path.name}")
    columns, optional, meta, absolute = read_columns(path)
    return finish(columns, optional, meta, absolute=absolute)
