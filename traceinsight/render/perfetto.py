"""Perfetto / ``chrome://tracing`` export: the trace's own timeline, plus every finding as named slices on a track
of its own, so a finding opens in the viewer people already use, next to the kernels and calls it is about.

The file is Chrome trace-event JSON, gzipped, in the PyTorch Profiler's dialect (``schemaVersion``,
``deviceProperties``, kineto categories, GPU rows on pid = device and tid = stream), so Perfetto UI,
``chrome://tracing`` and traceinsight itself all read it. Times are µs floats relative to the start of the
timeline (``baseTimeNanoseconds`` gives the wall clock when known).

Findings live in one process, "traceinsight findings", sorted above the trace; each finding is a thread named
``<code> <title>`` whose slices are the finding's instances (the gaps, stalls, copies it is about). A finding
without time-stamped instances is one slice over the whole trace: it applies to all of it.

GPU memory, where the trace recorded it, is a counter track ("GPU memory": bytes allocated and reserved) in each
GPU's process, the series the HTML report's memory chart draws.

Size is bounded: at most ``max_events_per_kind`` events of each kind (the earliest ones; the file's
``metadata.traceinsight.truncated`` says, per kind, how many were kept and up to when the kind is complete) and
``max_instances`` slices per finding (the longest of its ``instances``).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.vocab.gpus import parse_cc
from traceinsight.vocab.version import __version__
from traceinsight.model.analysis import Analysis
from traceinsight.model.finding import Finding, instance_columns
from traceinsight.render.common import clean

#: Trace-event categories of the PyTorch Profiler for each timeline kind (what the kineto reader maps back).
CATEGORY = {
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "gpu_sync": "cuda_sync",
    "runtime": "cuda_runtime",
    "cpu_op": "cpu_op",
    "python": "python_function",
    "annotation": "user_annotation",
    "gpu_annotation": "gpu_user_annotation",
    "step": "user_annotation",
    "other": "other",
}
GPU_KINDS = ("kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation")

#: The findings' process id (above any device index or rank offset used below) and their category.
FINDINGS_PID = 2_000_000_000
FINDINGS_PROCESS = "traceinsight findings"
FINDING_CATEGORY = "traceinsight_finding"

MAX_EVENTS_PER_KIND = 50_000
MAX_INSTANCES = 2_000
_RANK_PID_STRIDE = 100_000_000  # ranks > 0 get their host pids shifted by this, so ranks never share a process row


def to_chrome_trace(
    analysis: Analysis, *, max_events_per_kind: int = MAX_EVENTS_PER_KIND, max_instances: int = MAX_INSTANCES
) -> dict[str, Any]:
    """The trace-event document (a dict ready for JSON)."""
    tl = analysis.timeline
    meta = tl.meta
    ranks = sorted({int(r) for r in tl.events["rank"].unique()}) if len(tl.events) else [0]
    events, truncated = _timeline_events(tl.events, max_events_per_kind, multi_rank=len(ranks) > 1)
    finding_events, finding_meta = _finding_events(analysis, max_instances)
    doc: dict[str, Any] = {"schemaVersion": 1}
    doc["deviceProperties"] = [
        {k: v for k, v in {
            "id": d.index, "name": d.name, "numSms": d.sm_count, "totalGlobalMem": d.memory_bytes,
            "computeMajor": _cc(d.compute_capability, 0), "computeMinor": _cc(d.compute_capability, 1),
        }.items() if v is not None}
        for d in meta.devices if d.rank == ranks[0]
    ]  # fmt: skip
    if len(ranks) == 1:
        doc["distributedInfo"] = {"rank": ranks[0], **({"world_size": meta.world_size} if meta.world_size else {})}
    doc["displayTimeUnit"] = "ns"
    if meta.start_unix_ns:
        doc["baseTimeNanoseconds"] = int(meta.start_unix_ns)
    doc["traceName"] = Path(meta.path).name if meta.path else "trace"
    doc["traceEvents"] = finding_events + _process_names(tl.events, multi_rank=len(ranks) > 1) + events
    doc["traceEvents"] += _memory_counters(analysis, multi_rank=len(ranks) > 1)
    doc["metadata"] = {
        "traceinsight": {
            "version": __version__,
            "source": meta.path,
            "source_format": meta.source_format,
            "tool": meta.tool,
            "span_ns": int(tl.span_ns),
            "findings": finding_meta,
            "limits": {"max_events_per_kind": max_events_per_kind, "max_instances_per_finding": max_instances},
            "truncated": truncated,
            "warnings": list(analysis.warnings),
        }
    }
    return doc


def render_bytes(analysis: Analysis, **kwargs: Any) -> bytes:
    """The gzipped JSON file's bytes."""
    raw = msgspec.json.encode(to_chrome_trace(analysis, **kwargs))
    return gzip.compress(raw, compresslevel=6, mtime=0)


def write(analysis: Analysis, path: str | Path, **kwargs: Any) -> Path:
    """Writes the ``.json.gz`` file (open it at https://ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.write_bytes(render_bytes(analysis, **kwargs))
    return path


# --- the trace's own events ---------------------------------------------------------------------------------
def _timeline_events(ev: pd.DataFrame, cap: int, *, multi_rank: bool) -> tuple[list[dict], dict[str, dict]]:
    truncated: dict[str, dict] = {}
    if ev.empty:
        return [], truncated
    kind = ev["kind"].astype(str).to_numpy()
    keep = np.zeros(len(ev), dtype=bool)
    order = np.argsort(ev["start_ns"].to_numpy(), kind="stable")
    for k in np.unique(kind):
        rows = order[kind[order] == k]
        keep[rows[:cap]] = True
        if len(rows) > cap:
            last = ev["start_ns"].to_numpy()[rows[cap - 1]]
            truncated[k] = {"kept": int(cap), "of": int(len(rows)), "complete_until_ns": int(last)}
    sel = ev[keep]
    k = kind[keep]
    gpu = np.isin(k, GPU_KINDS)
    rank = sel["rank"].to_numpy(dtype=np.int64)
    device = sel["device"].to_numpy(dtype=np.int64)
    pid = np.where(gpu, device + (rank * 1000 if multi_rank else 0), sel["pid"].to_numpy(dtype=np.int64) + (rank * _RANK_PID_STRIDE if multi_rank else 0))
    tid = np.where(gpu, sel["stream"].to_numpy(dtype=np.int64), sel["tid"].to_numpy(dtype=np.int64))
    ts = np.round(sel["start_ns"].to_numpy(dtype=np.int64) / 1e3, 3)
    dur = np.round(sel["dur_ns"].to_numpy(dtype=np.int64) / 1e3, 3)
    cat = pd.Series(k).map(CATEGORY).fillna("other").tolist()
    names = sel["name"].astype(str).tolist()
    corr = sel["correlation"].to_numpy(dtype=np.int64)
    nbytes = sel["bytes"].to_numpy(dtype=np.int64)
    # Plain Python values once (tolist), then one small dict per event: bounded by the per-kind cap.
    args_cols = {
        "device": np.where(gpu, device, -1).tolist(),
        "stream": np.where(gpu, tid, -1).tolist(),
        "correlation": corr.tolist(),
        "bytes": nbytes.tolist(),
        "rank": rank.tolist() if multi_rank else [-1] * len(sel),
    }
    args = [
        {key: v for key, v in zip(("device", "stream", "correlation", "rank"), (d, st, c, r)) if v >= 0} | ({"bytes": b} if b else {})
        for d, st, c, b, r in zip(args_cols["device"], args_cols["stream"], args_cols["correlation"], args_cols["bytes"], args_cols["rank"])
    ]
    out = [
        {"ph": "X", "cat": c, "name": n, "pid": p, "tid": t, "ts": s, "dur": d, "args": a}
        for c, n, p, t, s, d, a in zip(cat, names, pid.tolist(), tid.tolist(), ts.tolist(), dur.tolist(), args)
    ]
    return out, truncated


def _process_names(ev: pd.DataFrame, *, multi_rank: bool) -> list[dict]:
    """Metadata rows naming each process (host or GPU) and GPU stream, as the viewers show them."""
    out = []
    if ev.empty:
        return out
    kind = ev["kind"].astype(str)
    gpu = kind.isin(GPU_KINDS).to_numpy()
    for (rank, device), streams in ev[gpu].groupby(["rank", "device"], observed=True)["stream"]:
        pid = int(device) + (int(rank) * 1000 if multi_rank else 0)
        label = f"rank {rank} GPU {device}" if multi_rank else f"GPU {device}"
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        for s in sorted(set(streams.tolist())):
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(s), "args": {"name": f"stream {s}"}})
    for (rank, pid), _ in ev[~gpu].groupby(["rank", "pid"], observed=True):
        p = int(pid) + (int(rank) * _RANK_PID_STRIDE if multi_rank else 0)
        label = f"rank {rank} host pid {pid}" if multi_rank else f"host pid {pid}"
        out.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": label}})
    return out


def _memory_counters(analysis: Analysis, *, multi_rank: bool) -> list[dict]:
    """GPU memory as a counter track ("GPU memory", bytes allocated and reserved) in each GPU's process: the
    series the HTML chart draws (at most ``memory.MAX_POINTS`` per GPU, peaks kept)."""
    out: list[dict] = []
    for d in analysis.views.memory.devices:
        pid = int(d.device) + (int(d.rank) * 1000 if multi_rank else 0)
        s = d.series
        t = (s["start_ns"].to_numpy(dtype=np.int64) / 1e3).tolist()
        cols = [(c, s[c].to_numpy(dtype=float)) for c in ("allocated", "reserved") if np.isfinite(s[c].to_numpy(dtype=float)).any()]
        for i, ts in enumerate(t):
            args = {c: float(v[i]) for c, v in cols if np.isfinite(v[i])}
            if args:
                out.append({"ph": "C", "name": "GPU memory", "pid": pid, "tid": 0, "ts": ts, "args": args})
    return out


# --- findings -------------------------------------------------------------------------------------------------
def instances_of(finding: Finding, span_ns: int) -> pd.DataFrame:
    """start_ns, end_ns, rank, device, label of each of a finding's instances (``Finding.instances``).

    A finding without instances is about a place, not a moment: one slice over its location's window when it
    has one, else over the whole trace.
    """
    inst = finding.instances
    if inst:
        c = instance_columns(inst)
        return pd.DataFrame({
            "start_ns": c.start_ns.tolist(),
            "end_ns": np.maximum(c.end_ns, c.start_ns).tolist(),
            "rank": [None if r != r else int(r) for r in c.rank.tolist()],
            "device": [None if d != d else int(d) for d in c.device.tolist()],
            "label": [c.labels[k] or "" for k in c.label_code.tolist()],
        })  # fmt: skip
    loc = finding.location
    start = loc.start_ns if loc.start_ns is not None else 0
    end = loc.end_ns if loc.end_ns is not None else span_ns
    label = "" if loc.start_ns is not None else "whole trace"
    return pd.DataFrame({"start_ns": [int(start)], "end_ns": [int(max(end, start))], "rank": [loc.rank], "device": [loc.device], "label": [label]})


def _finding_events(analysis: Analysis, cap: int) -> tuple[list[dict], list[dict]]:
    span = int(analysis.timeline.span_ns)
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": FINDINGS_PID, "tid": 0, "args": {"name": FINDINGS_PROCESS}},
        {"ph": "M", "name": "process_sort_index", "pid": FINDINGS_PID, "tid": 0, "args": {"sort_index": -1}},
    ]
    meta = []
    for n, f in enumerate(analysis.findings, 1):
        track = f"{f.code} {clean(f.title, 120)}"
        events.append({"ph": "M", "name": "thread_name", "pid": FINDINGS_PID, "tid": n, "args": {"name": track}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": FINDINGS_PID, "tid": n, "args": {"sort_index": n}})
        inst = instances_of(f, span)
        total = len(inst)
        if total > cap:
            inst = inst.assign(_d=inst["end_ns"] - inst["start_ns"]).nlargest(cap, "_d").sort_values("start_ns")
        common = {"code": f.code, "severity": f.severity.value, "fingerprint": f.fingerprint}
        for j, row in enumerate(inst.itertuples(index=False)):  # bounded by max_instances
            args = dict(common)
            if j == 0:
                args.update(title=clean(f.title, 300), message=clean(f.message, 2000), impact_ms=round(f.impact_ns / 1e6, 3))
            for col in ("rank", "device"):
                v = getattr(row, col)
                if v is not None and not (isinstance(v, float) and np.isnan(v)):
                    args[col] = int(v)
            label = clean(row.label, 120) if row.label else ""
            if label:
                args["label"] = label
            events.append({
                "ph": "X", "cat": FINDING_CATEGORY, "name": f"{f.code} {label or clean(f.title, 120)}",
                "pid": FINDINGS_PID, "tid": n, "ts": round(int(row.start_ns) / 1e3, 3),
                "dur": round(max(int(row.end_ns) - int(row.start_ns), 0) / 1e3, 3), "args": args,
            })  # fmt: skip
        meta.append({
            "code": f.code, "title": f.title, "severity": f.severity.value, "fingerprint": f.fingerprint,
            "track": track, "tid": n, "instances": int(total), "instances_written": int(min(total, cap)),
            "impact_ns": int(f.impact_ns),
        })  # fmt: skip
    return events, meta


def _cc(cc: str | None, i: int) -> int | None:
    """Major (``i`` = 0) or minor (1) of a compute capability, by ``gpus.parse_cc`` (the one parser)."""
    parsed = parse_cc(cc)
    return None if parsed is None else parsed[i]
