"""One side of a diff: a JSON report (``analyze -f json``), read from a file or made from a trace on the spot.

Everything the diff needs is read from the report's shape (docs/json-report.md: ``workload``, ``ledger``,
``kpis``, ``summary``, ``findings``), so a saved report of main and a fresh trace of a pull request are compared
by the same code. Each reader below is a small function over that dict: a block another part of the report adds
later (peak memory, MFU) is shown when it is there and skipped when not.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import msgspec
import numpy as np

from traceinsight.vocab.buckets import WARMUP_BUCKET
from traceinsight.vocab.errors import ConfigError
from traceinsight.model.plausible import MAX_GAP_NS

#: Bytes at the head of a file looked at to tell a traceinsight report from a trace.
_HEAD_BYTES = 512
#: No profiled step lasts longer than the longest quiet stretch a capture can hold (``plausible.MAX_GAP_NS``, a day).
MAX_STEP_NS = MAX_GAP_NS
#: Ledger figures (ns) and counts past this hold no real capture's numbers (about 146 years of nanoseconds).
MAX_FIGURE = float(1 << 62)


@dataclass
class Side:
    """A report dict and where it came from."""

    report: dict[str, Any]
    label: str
    analysis: Any = field(default=None, repr=False)  # the Analysis when the side was made from a trace

    @property
    def trace(self) -> dict[str, Any]:
        return self.report.get("trace") or {}

    @property
    def workload(self) -> dict[str, Any] | None:
        w = self.report.get("workload")
        return w if isinstance(w, dict) else None

    @property
    def kpis(self) -> dict[str, Any]:
        return self.report.get("kpis") or {}

    @property
    def verdict(self) -> dict[str, Any]:
        return self.report.get("verdict") or {}


def is_report(path: Path) -> bool:
    """A traceinsight JSON report (not a trace): a regular file whose first key is ``schema_version``."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"schema_version"' in head and b'"traceinsight_version"' in head


def load_side(path: "str | os.PathLike[str]", **analyze_kwargs: Any) -> Side:
    """A report file as it is, anything else analysed (``engine.analyze``) and turned into its report."""
    p = Path(path)
    if is_report(p):
        from traceinsight.pipeline.baseline import load_report

        try:
            doc = load_report(p)
        except ConfigError as exc:  # load_report speaks of a baseline; here the file is one side of a diff
            raise ConfigError(str(exc).removeprefix("baseline ")) from None
        check(doc, str(p))
        return Side(doc, str(p))
    from traceinsight.pipeline.engine import analyze

    return from_analysis(analyze(p, **analyze_kwargs), str(p))


# --- the parts of a report the diff reads, as types: a report file is untrusted input --------------------------
class _Step(msgspec.Struct):
    rank: int
    step: int
    dur_ns: int
    warmup: bool = False


class _Kernel(msgspec.Struct, rename={"class_": "class"}):
    name: str
    class_: str = "other"
    op: str = ""
    count: int = 0
    total_ns: int = 0
    per_step: float = 0.0
    ns_per_step: float = 0.0


class _Op(msgspec.Struct):
    name: str
    per_step: float = 0.0
    gpu_ns_per_step: float = 0.0


class _Shape(msgspec.Struct):
    name: str
    shapes: str = ""
    per_step: float = 0.0


class _Workload(msgspec.Struct):
    steps: list[_Step] = []
    kernels: list[_Kernel] = []
    ops: list[_Op] = []
    shapes: list[_Shape] = []
    batch: Optional[int] = None
    steady_steps: int = 0


class _LedgerRow(msgspec.Struct):
    rank: int = 0
    device: int = 0
    step: int = -1
    window_ns: int = 0
    ns: dict[str, float] = {}


class _Ledger(msgspec.Struct):
    buckets: list[str] = []
    by_device: list[_LedgerRow] = []
    by_step: list[_LedgerRow] = []


class _Device(msgspec.Struct):
    rank: int = 0
    busy_pct: Optional[float] = None


class _Summary(msgspec.Struct):
    devices: list[_Device] = []


class _Report(msgspec.Struct):
    workload: Optional[_Workload] = None
    ledger: _Ledger = msgspec.field(default_factory=_Ledger)
    summary: _Summary = msgspec.field(default_factory=_Summary)
    kpis: dict[str, Any] = {}
    verdict: dict[str, Any] = {}
    trace: dict[str, Any] = {}


def check(doc: dict[str, Any], name: str) -> None:
    """ConfigError (one line, exit 2) when the parts of a report the diff reads have the wrong types or figures no
    capture can hold: a report is untrusted input, checked like a trace (steps > 0 and under a day, times and
    counts not negative, every figure finite), so a forged HEAD cannot pass the gate as "faster"."""
    try:
        rep = msgspec.convert(doc, _Report)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{name}: not a traceinsight JSON report the diff can read ({str(exc)[:200]})") from None
    why = _implausible(rep)
    if why:
        raise ConfigError(f"{name}: not a report of a real capture: {why}")


def _implausible(rep: _Report) -> str | None:
    """The first figure of ``rep`` that no capture can hold, as "where is what", or None."""
    def bad(v: float, lo: float = 0.0, hi: float = MAX_FIGURE) -> bool:
        return not (math.isfinite(v) and lo <= v <= hi)

    w = rep.workload
    if w is not None:
        for i, st in enumerate(w.steps):
            if not 0 < st.dur_ns <= MAX_STEP_NS:
                return f"workload.steps[{i}].dur_ns is {st.dur_ns} (a step lasts more than 0 ns and at most a day)"
        for key, rows in (("kernels", w.kernels), ("ops", w.ops), ("shapes", w.shapes)):
            for i, r in enumerate(rows):
                for f in ("count", "total_ns", "per_step", "ns_per_step", "gpu_ns_per_step"):
                    v = getattr(r, f, None)
                    if v is not None and bad(float(v)):
                        return f"workload.{key}[{i}].{f} is {v}"
        if w.batch is not None and not 0 <= w.batch <= MAX_FIGURE:
            return f"workload.batch is {w.batch}"
    for key, rows in (("by_device", rep.ledger.by_device), ("by_step", rep.ledger.by_step)):
        for i, r in enumerate(rows):
            if bad(float(r.window_ns)):
                return f"ledger.{key}[{i}].window_ns is {r.window_ns}"
            for b, v in r.ns.items():
                if bad(float(v), -1.0):  # a bucket's ns; -1 leaves room for rounding
                    return f"ledger.{key}[{i}].ns.{str(b)[:40]} is {v}"
    for i, d in enumerate(rep.summary.devices):
        if d.busy_pct is not None and bad(float(d.busy_pct), 0.0, 100.0 + 1e-6):
            return f"summary.devices[{i}].busy_pct is {d.busy_pct}"
    return None


def from_analysis(analysis: Any, label: str | None = None) -> Side:
    from traceinsight.render.json_report import to_dict

    return Side(to_dict(analysis, max_evidence_rows=0), label or str(analysis.timeline.meta.path), analysis)


# --- readers -----------------------------------------------------------------------------------------------
def steps(side: Side) -> list[dict[str, Any]]:
    w = side.workload
    return [s for s in (w or {}).get("steps", []) if isinstance(s, dict)]


def step_durations(side: Side) -> dict[int, int]:
    """Per steady step number, its time (ns): the slowest rank's, since every rank waits for it at the next
    collective. Warm-up steps are left out (unless there is nothing else)."""
    by_step: dict[int, int] = {}
    st = steps(side)
    keep_warmup = all(s.get("warmup") for s in st)  # only warm-up steps: they are all there is to compare
    for s in st:
        if s.get("warmup") and not keep_warmup:
            continue
        n = int(s["step"])
        by_step[n] = max(by_step.get(n, 0), int(s["dur_ns"]))
    return dict(sorted(by_step.items()))


def step_samples(side: Side) -> np.ndarray:
    """The job's steady-state step times (ns), one per step number (``step_durations``)."""
    return np.array(list(step_durations(side).values()), dtype=float)


def window_sample(side: Side) -> np.ndarray:
    """Without step markers: the longest device window (first to last GPU activity) as the one sample."""
    windows = [int(d.get("window_ns") or 0) for d in (side.report.get("ledger") or {}).get("by_device", []) if isinstance(d, dict)]
    w = max(windows, default=0)
    return np.array([float(w)]) if w > 0 else np.zeros(0)


def rank_samples(side: Side) -> dict[int, np.ndarray]:
    out: dict[int, list[int]] = {}
    for s in steps(side):
        if not s.get("warmup"):
            out.setdefault(int(s["rank"]), []).append(int(s["dur_ns"]))
    return {r: np.array(v, dtype=float) for r, v in sorted(out.items())}


def _steady(side: Side) -> set[tuple[int, int]] | None:
    st = steps(side)
    if not st:
        return None
    return {(int(s["rank"]), int(s["step"])) for s in st if not s.get("warmup")}


def ledger_steps(side: Side) -> list[dict[str, Any]]:
    """Per steady step: ns per bucket and the ledger's window of the step, averaged over the devices that ran in
    it (one GPU's view of a step)."""
    steady = _steady(side)
    rows: dict[int, dict[str, float]] = {}
    devices: dict[int, int] = {}
    window: dict[int, float] = {}
    for r in (side.report.get("ledger") or {}).get("by_step", []):
        step = int(r.get("step", -1))
        if step < 0 or (steady is not None and (int(r.get("rank", 0)), step) not in steady):
            continue
        acc = rows.setdefault(step, {})
        for b, ns in (r.get("ns") or {}).items():
            acc[b] = acc.get(b, 0.0) + float(ns)
        devices[step] = devices.get(step, 0) + 1
        window[step] = window.get(step, 0.0) + float(r.get("window_ns") or 0)
    return [{"step": k, "ns": {b: v / devices[k] for b, v in rows[k].items()}, "window_ns": window[k] / devices[k]} for k in sorted(rows)]


def ledger_per_step(side: Side) -> dict[str, float]:
    """ns per bucket in the mean steady step (per device)."""
    st = ledger_steps(side)
    out: dict[str, float] = {}
    for s in st:
        for b, v in s["ns"].items():
            out[b] = out.get(b, 0.0) + v
    return {b: v / len(st) for b, v in out.items()} if st else {}


def buckets(side: Side) -> list[str]:
    return list((side.report.get("ledger") or {}).get("buckets") or [])


def devices(side: Side) -> list[dict[str, Any]]:
    return [d for d in side.trace.get("devices") or [] if isinstance(d, dict)]


def rank_busy(side: Side) -> dict[int, float]:
    """GPU busy % per rank (the mean over its devices)."""
    acc: dict[int, list[float]] = {}
    for d in (side.report.get("summary") or {}).get("devices") or []:
        if isinstance(d, dict) and d.get("busy_pct") is not None:
            acc.setdefault(int(d.get("rank", 0)), []).append(float(d["busy_pct"]))
    return {r: float(np.mean(v)) for r, v in sorted(acc.items())}


#: Report blocks whose top-level numbers are compared as they are, when a report carries them (named ``block.key``).
EXTRA_BLOCKS = ("memory", "efficiency", "mfu")


def numeric_kpis(side: Side) -> dict[str, float]:
    """Every number among the KPIs and the top-level numbers of ``EXTRA_BLOCKS`` (peak memory, MFU and whatever
    later reports add), by name."""
    out = {}
    sources = [("", side.kpis)] + [(f"{b}.", side.report.get(b)) for b in EXTRA_BLOCKS]
    for prefix, block in sources:
        if not isinstance(block, dict):
            continue
        for k, v in block.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[prefix + str(k)] = float(v)
    out.update(peak_memory(side))
    return out


def peak_memory(side: Side) -> dict[str, float]:
    """Peak GPU memory over the devices of the report's ``memory`` block (largest peak, smallest headroom)."""
    devices = [d for d in ((side.report.get("memory") or {}).get("devices") or []) if isinstance(d, dict)] if isinstance(side.report.get("memory"), dict) else []
    out: dict[str, float] = {}
    for key, pick in (("peak_allocated_bytes", max), ("peak_reserved_bytes", max), ("headroom_bytes", min)):
        vals = [float(d[key]) for d in devices if isinstance(d.get(key), (int, float)) and not isinstance(d.get(key), bool) and math.isfinite(d[key])]
        if vals:
            out[f"memory.{key}"] = pick(vals)
    return out


def repeats(side: Side) -> list[dict[str, Any]]:
    """The report's repeated regions (``workload.repeats``: compiled regions, graph replays, repeated user ranges),
    each ``kind``, ``name`` and ``dur_ns`` (one per occurrence); [] for a report without them."""
    out = []
    rows = (side.workload or {}).get("repeats")
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("dur_ns"), list):
            continue
        durs = [float(x) for x in r["dur_ns"] if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0]
        if durs:
            out.append({"kind": str(r.get("kind", "")), "name": str(r.get("name", "")), "dur_ns": durs})
    return out


def mfu_coverage_pct(side: Side) -> float | None:
    """Share (%) of the matrix-unit GPU time (GEMM, convolution, attention) whose FLOPs the efficiency view could
    count from recorded shapes: the part of the time an MFU figure speaks for. None without the block."""
    from traceinsight.vocab.work_classes import MATRIX_CLASSES

    eff = side.report.get("efficiency")
    if not isinstance(eff, dict) or not isinstance(eff.get("classes"), list):
        return None
    rows = [c for c in eff["classes"] if isinstance(c, dict) and c.get("cls") in MATRIX_CLASSES]
    try:
        total = sum(float(c.get("time_ns") or 0) for c in rows)
        covered = sum(float(c.get("modelled_ns") or 0) for c in rows)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(total) or total <= 0 or not math.isfinite(covered):
        return None
    return round(min(100.0, max(0.0, 100.0 * covered / total)), 1)


def warmup_share_pct(side: Side) -> float | None:
    """Share (%) of the report's window booked as warm-up (one-time work: compilation, autotuning, first calls)."""
    v = side.verdict if isinstance(side.verdict, dict) else {}
    led = v.get("ledger_ns") if isinstance(v.get("ledger_ns"), dict) else {}
    try:
        window = float(v.get("window_ns") or 0)
        warm = float(led.get(WARMUP_BUCKET) or 0)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(window) and math.isfinite(warm)) or window <= 0:
        return None
    return round(min(100.0, max(0.0, 100.0 * warm / window)), 1)
