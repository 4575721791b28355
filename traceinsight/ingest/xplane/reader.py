"""One XSpace file -> timeline columns and metadata: ``space`` decodes, ``lines`` classifies, this adds the facts
about the capture (clock, devices, tool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceinsight.model.timeline import TraceMeta
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.ingest.xplane.sniff import sniff  # noqa: F401  (the package's entry point)
from traceinsight.ingest.xplane.lines import frame_from_table, host_only_warning, whole_number
from traceinsight.ingest.xplane.memory import memory_from_table
from traceinsight.ingest.xplane.space import decode_space, load_space, native_scanner


def read_columns(path: Path, max_bytes: int | None = None, memory: list | None = None) -> tuple[dict[str, Any], dict[str, Any], TraceMeta, bool]:
    """Decode one xplane.pb to timeline columns on its own clock; ``absolute`` = times are ns since the epoch."""
    scan = native_scanner()
    space = load_space(path, scan, max_bytes)
    table, name_table, devices, env, messages = decode_space(space, scan, source=path)
    meta = TraceMeta(source_format="tensorflow-xplane", path=str(path), tool="TensorFlow/XLA profiler (XSpace)")
    meta.devices = sorted(devices, key=lambda d: d.index)
    for m in messages:
        meta.warn(m)
    if space.hostnames:
        meta.extra["hostnames"] = list(space.hostnames)
    start_time = whole_number(env.get("profile_start_time"), 1)  # ns since the epoch; anything else: no clock
    absolute = start_time is not None
    if absolute:
        table = table._replace(start_ns=table.start_ns + start_time)
        stop = whole_number(env.get("profile_stop_time"), start_time)
        if stop is not None:
            meta.extra["profile_duration_ns"] = stop - start_time
    if memory is not None:
        memory.append(memory_from_table(table, name_table))
    columns, optional = frame_from_table(table, name_table, meta)
    tpus = sorted(p[0] for p in space.planes if str(p[0]).startswith("/device:TPU:"))
    if tpus and not meta.devices:
        # a TPU run: its planes are another accelerator's, which no rule here reads; say so rather than call it a
        # capture without a GPU (TI011 words its finding from this)
        meta.extra["tpu_planes"] = len(tpus)
        meta.warn(f"TPU profile: {len(tpus)} /device:TPU planes; traceinsight analyses GPU (CUDA/ROCm) traces, so the TPUs' "
                  "activity is not read and only the host side is shown")
    else:
        warning = host_only_warning(meta.devices, columns["kind"])
        if warning:
            meta.warn(warning)
    if any(d.vendor and str(d.vendor).upper() == "AMD" for d in meta.devices) or any(
        line.startswith("py_xla_execute") for line in table.line
    ):
        meta.tool = "JAX/XLA profiler (XSpace)"
    return columns, optional, meta, absolute




def read(path: Path, progress=None, max_bytes: int | None = None, **options) -> ReadResult:
    if progress:
        progress(f"decoding {path.name}")
    memory: list = []
    columns, optional, meta, absolute = read_columns(path, max_bytes, memory)
    return ReadResult([Rows(columns, optional, memory=memory[0])], meta, epoch=absolute)
