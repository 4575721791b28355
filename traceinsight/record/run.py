"""Run the user's command once with the bootstrap injected, and say what was recorded.

The command runs as given (``python train.py ...``, ``torchrun ... train.py``, any launcher that ends in Python
processes): its standard streams are the terminal's, its exit status is returned as the shell would report it
(128 + N for a signal), and the only change to its environment is a folder put first on PYTHONPATH (holding
``sitecustomize.py``, which chains to the user's own) and one variable with the recording's settings. Signals the
command should see are forwarded; Ctrl-C reaches it from the terminal directly (it is in the same process group),
so this process ignores SIGINT while the command runs rather than deliver it twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from traceinsight.record import boot

#: Where the traces go inside a run folder, and where the processes' status files go (apart: a job folder of rank
#: files must hold rank files only).
TRACE_DIR = "trace"
STATUS_DIR = "status"
BOOT_MODULE = "_traceinsight_record_boot"
#: What was run and recorded, kept beside the trace: the command, its exit status, the window, the notes.
RECORD_JSON = "record.json"
#: Signals passed on to the command while it runs (SIGINT comes from the terminal to the whole group).
FORWARDED = tuple(getattr(signal, s) for s in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH") if hasattr(signal, s))
#: Exit status when the command cannot be started (the shell's "command not found").
EXIT_NOT_FOUND = 127

_SITECUSTOMIZE = f'''"""Written by traceinsight record: installs the step hooks, then runs the sitecustomize this one hides."""
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
try:
    import {BOOT_MODULE}
    {BOOT_MODULE}.install()
finally:
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    _me = _sys.modules.pop("sitecustomize")
    try:
        import sitecustomize  # noqa: F401 - the user's own, if any: what Python would have run without us
    except ModuleNotFoundError as _exc:
        _sys.modules["sitecustomize"] = _me  # the import system expects the module it is running in its place
        if _exc.name != "sitecustomize":
            raise
'''


@dataclass(frozen=True)
class Window:
    """Which steps to record: ``skip`` steps unprofiled (the cold start), ``warmup`` profiled but discarded, then
    ``active`` recorded."""

    skip: int = 5
    warmup: int = 2
    active: int = 5
    marker: str | None = None
    nsys: bool = False
    shapes: bool = True
    memory: bool = True
    stack: bool = False
    stop_after_window: bool = False

    @property
    def first(self) -> int:
        return self.skip + self.warmup + 1

    @property
    def last(self) -> int:
        return self.skip + self.warmup + self.active


@dataclass
class Recorded:
    """One run: its exit status, the statuses its processes wrote, the trace to analyse and what to say."""

    out_dir: Path
    returncode: int
    statuses: list[dict] = field(default_factory=list)
    trace: Path | None = None
    notes: list[str] = field(default_factory=list)
    partial: bool = False


class CommandNotFound(Exception):
    pass


def record(command: list[str], out_dir: Path, window: Window, env_extra: dict[str, str] | None = None) -> Recorded:
    """Run ``command`` with the bootstrap and return what it recorded into ``out_dir``."""
    trace_dir, status_dir = out_dir / TRACE_DIR, out_dir / STATUS_DIR
    for d in (trace_dir, status_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    cfg = {"trace_dir": str(trace_dir.resolve()), "status_dir": str(status_dir.resolve()), "skip": window.skip, "warmup": window.warmup,
           "active": window.active, "marker": window.marker, "nsys": window.nsys, "shapes": window.shapes, "memory": window.memory,
           "stack": window.stack, "stop_after_window": window.stop_after_window}
    if window.nsys:
        command = nsys_command(command, trace_dir)
    boot_dir = Path(tempfile.mkdtemp(prefix="traceinsight-boot-"))
    try:
        shutil.copyfile(boot.__file__, boot_dir / f"{BOOT_MODULE}.py")
        (boot_dir / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
        env = dict(os.environ)
        env.update(env_extra or {})
        env[boot.ENV] = json.dumps(cfg)
        env["PYTHONPATH"] = os.pathsep.join([str(boot_dir), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        rc = _run(command, env)
    finally:
        shutil.rmtree(boot_dir, ignore_errors=True)
    result = Recorded(out_dir=out_dir, returncode=rc, statuses=_statuses(status_dir))
    result.trace = _trace(trace_dir)
    _explain(result, window)
    summary = {"command": command, "exit_code": rc, "window": {"skip": window.skip, "warmup": window.warmup, "active": window.active,
               "first_step": window.first, "last_step": window.last, "step_marker": window.marker, "nsys": window.nsys},
               "trace": None if result.trace is None else str(result.trace.relative_to(out_dir)), "notes": result.notes, "processes": result.statuses}
    (out_dir / RECORD_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return result


def nsys_command(command: list[str], trace_dir: Path) -> list[str]:
    """``nsys profile`` capturing only between the bootstrap's cudaProfilerStart and Stop, exported to SQLite."""
    return ["nsys", "profile", "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--trace=cuda,nvtx,osrt", "--export=sqlite",
            "--force-overwrite=true", "-o", str(trace_dir / "nsys"), *command]


def _run(command: list[str], env: dict[str, str]) -> int:
    try:
        proc = subprocess.Popen(command, env=env)
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandNotFound(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
    previous = {}

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc


def _statuses(status_dir: Path) -> list[dict]:
    out = []
    for p in sorted(status_dir.glob("*.status")):
        try:
            out.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return out


def _trace(trace_dir: Path) -> Path | None:
    """What to analyse: the one trace file, the folder of rank files (a job), a TensorFlow/JAX logdir, or nsys's."""
    torch_files = sorted(trace_dir.glob("*.pt.trace.json.gz"))
    if len(torch_files) == 1:
        return torch_files[0]
    if len(torch_files) > 1:
        return trace_dir
    nsys = [p for p in (trace_dir / "nsys.sqlite", trace_dir / "nsys.nsys-rep") if p.exists()]
    if nsys:
        return nsys[0]
    logdirs = sorted(p for p in trace_dir.iterdir() if p.is_dir() and any(p.rglob("*.xplane.pb")))
    return logdirs[0] if logdirs else None


def _explain(r: Recorded, w: Window) -> None:
    """The lines that tell the user which steps were recorded, or why none were."""
    seen = [s for s in r.statuses if s.get("steps_seen")]
    if not seen and r.returncode:
        r.notes.append(f"the program {_ended(r.returncode)} before its first step (its own output above says why): nothing recorded")
        return
    if not seen:
        how = f"calls of {w.marker}" if w.marker else "optimizer steps, outermost forward calls or Keras batches"
        r.notes.append(f"no steps seen: the command made no {how}; "
                       "name the function that runs one step with --step-marker MODULE:FUNCTION")
        return
    for s in seen:
        who = f"{s['name']}: " if len(seen) > 1 else ""
        by = {"optimizer": "optimizer steps", "forward": "forward calls of the outermost module", "keras": "Keras training batches",
              "marker": f"calls of {w.marker}"}.get(s.get("driver"), "steps")
        n = s["steps_seen"]
        if s.get("window") is None or (not s.get("recorded") and not s.get("trace")):
            r.notes.append(f"{who}the program ended after {n} step(s) ({by}), before the recording window "
                           f"(steps {w.first}-{w.last}): nothing recorded; lower --skip/--warmup or let it run longer")
            r.partial = True
        elif not s.get("complete"):
            r.notes.append(f"{who}the program ended after {n} step(s) ({by}), inside the recording window (steps {w.first}-{w.last}): "
                           f"{s.get('recorded', 0)} of {w.active} step(s) recorded; analysing what it has")
            r.partial = True
        else:
            r.notes.append(f"{who}recorded steps {s['window'][0]}-{s['window'][1]} ({by}; {w.skip} skipped, {w.warmup} warm-up); "
                           f"{n} step(s) seen in all")
    if any(s.get("gpu") is False for s in seen) and r.trace is not None:
        r.notes.append("no GPU was visible to the program: the trace holds host activity only, and the report judges no GPU "
                       "(time per step still compares: --sweep with --device cpu,gpu on a GPU machine)")


def _ended(rc: int) -> str:
    """"exited with status 1", or "was ended by SIGTERM" for 128 + a signal's number."""
    if rc > 128:
        try:
            return f"was ended by {signal.Signals(rc - 128).name}"
        except ValueError:
            pass
    return f"exited with status {rc}"
