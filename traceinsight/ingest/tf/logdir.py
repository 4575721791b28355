"""A TensorBoard logdir: find the profile run, pick its per-host files, load them as ranks.

Users point at whatever folder they have (the logdir root, ``train/``, ``plugins/profile`` or one run folder), so
the search walks down to ``plugins/profile/<run>/``. Run folder names are timestamps (``YYYY_MM_DD_HH_MM_SS``) and
sort chronologically, which is why "newest" is the lexicographic maximum.
"""

from __future__ import annotations

import gc
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab.fence import why_outside
from traceinsight.model.timeline import TraceMeta
from traceinsight.ingest import xplane
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.ingest.tf import trace_json
from traceinsight.ingest.tf.sniff import JSON_SUFFIX, XPLANE_SUFFIX, has_profile_files





def find_runs(root: Path) -> list[Path]:
    """Run folders under ``root`` (or ``root`` itself when it is one), oldest first."""
    if has_profile_files(root):
        return [root]
    runs = [p.parent for p in root.rglob(f"*{XPLANE_SUFFIX}")] + [p.parent for p in root.rglob(f"*{JSON_SUFFIX}")]
    uniq = sorted(set(runs), key=lambda p: (p.name, str(p)))
    return uniq




def _inside(files: list[Path], logdir: Path, refused: list[str]) -> list[Path]:
    """The host files that lead nowhere outside the allowed roots (``fence``: the logdir given, or the MCP
    server's roots); the others are named in ``refused``."""
    out = []
    for f in files:
        why = why_outside(f, logdir, "logdir")
        if why:
            refused.append(f"{f.name}: {why}")
        else:
            out.append(f)
    return out


def read(path: Path, progress=None, run: str | None = None, max_bytes: int | None = None, **options) -> ReadResult:
    runs = find_runs(path)
    if not runs:
        raise TraceReadError(f"{path}: no plugins/profile/<run>/ with *.xplane.pb or *.trace.json.gz under this folder")
    warnings: list[str] = []
    if run is not None:
        chosen = [r for r in runs if r.name == run or str(r).endswith(run)]
        if not chosen:
            names = ", ".join(sorted({r.name for r in runs}))
            raise TraceReadError(f"{path}: no profile run named {run!r}; runs: {names}")
        chosen_run = chosen[-1]
    else:
        chosen_run = runs[-1]
        if len(runs) > 1:
            warnings.append(f"{len(runs)} runs found, read newest {chosen_run.name}; use --run to pick another")
    refused: list[str] = []
    files = _inside(sorted(p for p in chosen_run.iterdir() if p.name.endswith(XPLANE_SUFFIX)), path, refused)
    is_xplane = bool(files)
    read_columns = _xplane_with_memory
    if not files:
        files = _inside(sorted(p for p in chosen_run.iterdir() if p.name.endswith(JSON_SUFFIX)), path, refused)
        read_columns = trace_json.read_columns
    if refused:
        warnings.append(f"{len(refused)} host file(s) dropped: " + "; ".join(refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5 else ""))
    if not files:
        raise TraceReadError(f"{path}: no host file of run {chosen_run.name} can be read ({refused[0] if refused else 'none left'})")
    parts: list[Rows] = []
    metas: list[TraceMeta] = []
    absolute = True
    if progress:
        progress(f"reading {len(files)} host file{'s' if len(files) > 1 else ''} of run {chosen_run.name}")
    for rank, (columns, optional, meta, abs_, *memory) in enumerate(_read_all(read_columns, files, max_bytes, RANK_POOL)):
        parts.append(Rows(columns, optional, rank=rank, memory=memory[0] if memory else None))
        metas.append(meta)
        absolute = absolute and abs_
    if len(files) > 1 and not absolute:
        warnings.append("hosts have no common clock (no Task Environment plane): ranks are aligned at their own start")
        for part in parts:
            part.own_clock = True
    meta = metas[0]
    # the format of the files read (docs/timeline.md); where they came from goes in extra
    meta.source_format = "tensorflow-xplane" if is_xplane else "tensorflow-json"
    meta.path = str(path)
    meta.extra["logdir"] = str(path)
    meta.extra["run_dir"] = str(chosen_run)
    meta.ranks = list(range(len(files)))
    meta.world_size = len(files) if len(files) > 1 else None
    meta.start_unix_ns = None
    meta.devices = [d for m_rank, m in enumerate(metas) for d in _with_rank(m.devices, m_rank)]
    meta.extra["run"] = chosen_run.name
    meta.extra["hosts"] = [f.name[: -len(XPLANE_SUFFIX if is_xplane else JSON_SUFFIX)] for f in files]
    for m in metas[1:]:
        for w in m.warnings:
            meta.warn(w)
    for w in warnings:
        meta.warn(w)
    return ReadResult(parts, meta, epoch=absolute)


#: How the host files of a run are read: "threads", "processes" or "serial". Measured in bench/README.md ("TensorBoard
#: runs"): the C walker releases the GIL for its event walk, but that is a small part of a file's load (most is
#: building columns, which holds the GIL), so threads gain little, and processes pay start-up and pickling.
RANK_POOL = "serial"


def _xplane_with_memory(path: Path, max_bytes: int | None) -> tuple:
    """``xplane.read_columns`` plus the file's memory rows (a module-level function, so process pools can send it)."""
    memory: list = []
    return (*xplane.read_columns(path, max_bytes, memory), memory[0])


def _read_all(read_columns, files: list[Path], max_bytes: int | None, pool: str) -> list[tuple]:
    workers = min(len(files), os.cpu_count() or 1)
    if workers <= 1 or pool == "serial":
        return [read_columns(f, max_bytes) for f in files]
    executor = ThreadPoolExecutor if pool == "threads" else ProcessPoolExecutor
    gc_was_on = gc.isenabled()
    gc.disable()  # once for all threads
    try:
        with executor(max_workers=workers) as ex:
            return list(ex.map(read_columns, files, [max_bytes] * len(files)))
    finally:
        if gc_was_on:
            gc.enable()


def _with_rank(devices, rank):
    for d in devices:
        d.rank = rank
        yield d
