"""PyTorch hook: analyse each profiler trace the moment torch.profiler hands it over.

Lives in its own module (not imported by ``traceinsight/__init__``) so that ``import traceinsight`` stays
torch-free; torch itself is only touched through the profiler object the callback receives.
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["report_handler"]


def report_handler(dir_name: "str | os.PathLike", *, fmt: str = "html", worker_name: str | None = None, **analyze_kwargs: Any) -> Callable[[Any], tuple[Path, Path]]:
    """A drop-in for ``torch.profiler.tensorboard_trace_handler`` that also writes a traceinsight report.

    Each call exports ``<worker>.<ms>.pt.trace.json.gz`` (the name TensorBoard and HTA look for) and the report
    ``<same stem>.traceinsight.<suffix>`` beside it (the format's suffix in ``traceinsight.render.FORMATS``). The paths are returned and appended to ``handler.paths`` because
    ``on_trace_ready`` discards return values. ``analyze_kwargs`` go to ``traceinsight.analyze`` (select, ignore,
    options, rules, ...). A report that fails must not kill the training run, so errors become a text file.
    """
    from traceinsight.render import FORMATS

    out_dir = Path(dir_name)
    ext = FORMATS[fmt].suffix if fmt in FORMATS else fmt

    def handler(prof: Any) -> tuple[Path, Path]:
        from traceinsight.pipeline.engine import analyze
        from traceinsight.render import render

        out_dir.mkdir(parents=True, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stem = f"{worker}.{time.time_ns() // 1_000_000}"
        trace = out_dir / f"{stem}.pt.trace.json.gz"
        raw = out_dir / f"{stem}.pt.trace.json"
        prof.export_chrome_trace(str(raw))  # kineto writes plain JSON; gzip it ourselves (6-10x smaller)
        with open(raw, "rb") as src, gzip.open(trace, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        report = out_dir / f"{stem}.traceinsight.{ext}"
        try:
            out = render(analyze(trace, **analyze_kwargs), fmt)
            report.write_bytes(out) if isinstance(out, bytes) else report.write_text(out, encoding="utf-8")
        except Exception as exc:  # noqa: BLE001 - the profile is worth keeping even when the report is not
            report = out_dir / f"{stem}.traceinsight.error.txt"
            report.write_text(f"traceinsight could not analyse {trace.name}: {type(exc).__name__}: {exc}\n", encoding="utf-8")
        handler.paths.append((trace, report))  # type: ignore[attr-defined]
        return trace, report

    handler.paths = []  # type: ignore[attr-defined]
    return handler
