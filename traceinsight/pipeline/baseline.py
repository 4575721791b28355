"""Findings compared with an earlier JSON report, so a CI gate fails on what a change introduced or made worse,
not on problems the main branch already had.

Findings are matched by fingerprint (rule, key, rank, device, stream: the place, not the numbers). Two traces of
the same model rarely cover the same length of time, so "worse" compares each finding's share of its trace's span,
not its absolute time: a finding is worse when its share grew by at least ``worse_pct`` percent of the old share
and by at least ``worse_points`` percentage points (the second guard keeps noise on tiny findings quiet).
"""

from __future__ import annotations

import json
import math
import re
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceinsight.vocab.errors import ConfigError
from traceinsight.model.finding import Finding
from traceinsight.vocab.units import finite

NEW, WORSE, SAME = "new", "worse", "same"


@dataclass
class Comparison:
    source: str  # the baseline report's path
    status: dict[str, str]  # fingerprint of each current finding -> NEW | WORSE | SAME
    before_pct: dict[str, float]  # fingerprint -> the baseline's share of span, for matched findings
    fixed: list[dict[str, Any]] = field(default_factory=list)  # baseline findings that are gone: code, title, ...
    worse_pct: float = 25.0
    worse_points: float = 1.0
    mfu_before_pct: float | None = None  # the baseline report's efficiency.mfu_pct (None when it had none)
    mfu_after_pct: float | None = None  # this run's

    def of(self, f: Finding) -> str:
        return self.status.get(f.fingerprint, NEW)

    def gating(self, findings: list[Finding]) -> list[Finding]:
        """The findings a gate should act on: new ones and worse ones."""
        return [f for f in findings if self.of(f) in (NEW, WORSE)]

    def counts(self) -> dict[str, int]:
        values = list(self.status.values())
        return {NEW: values.count(NEW), WORSE: values.count(WORSE), SAME: values.count(SAME), "fixed": len(self.fixed)}

    def sentence(self) -> str:
        c = self.counts()
        out = f"compared with the baseline: {c[NEW]} new, {c[WORSE]} worse, {c[SAME]} unchanged, {c['fixed']} fixed"
        if self.mfu_before_pct is not None and self.mfu_after_pct is not None:
            out += f"; MFU {self.mfu_before_pct:.1f}% → {self.mfu_after_pct:.1f}%"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "counts": self.counts(),
            "worse_pct": self.worse_pct,
            "worse_points": self.worse_points,
            "fixed": self.fixed,
            "mfu": {"before_pct": self.mfu_before_pct, "after_pct": self.mfu_after_pct},
        }


#: Largest baseline report read. A real report is well under a megabyte (evidence is capped per finding);
#: anything this big is not one, and parsing it would take memory proportional to its size.
MAX_REPORT_BYTES = 64 * 1024 * 1024
#: JSON report schema versions a baseline may have (render.json_report.SCHEMA_VERSION is one of them).
SCHEMA_VERSIONS = (1,)
#: Findings one baseline may hold; a real report has a few dozen.
MAX_BASELINE_FINDINGS = 100_000
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")


def load_report(path: str | Path, max_bytes: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """A traceinsight JSON report (``analyze -f json``); anything else is a usage error with one line.

    Only a regular file is opened (``/dev/zero``, a pipe or a folder are refused before any read), and at most
    ``max_bytes`` are read, so a hostile baseline cannot exhaust memory.
    """
    p = Path(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):  # before open: opening a FIFO would block
            raise ConfigError(f"baseline {p}: not a regular file")
        with open(p, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"baseline {p}: not a regular file")
            if st.st_size > max_bytes:
                raise ConfigError(f"baseline {p}: {st.st_size:,} bytes is too large for a traceinsight JSON report (limit {max_bytes:,})")
            raw = fh.read(max_bytes + 1)
        if len(raw) > max_bytes:  # grew while being read
            raise ConfigError(f"baseline {p}: too large for a traceinsight JSON report (limit {max_bytes:,} bytes)")
        doc = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"baseline {p}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"baseline {p}: not a regular file") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
        # ValueError covers JSONDecodeError and integers over Python's digit limit; RecursionError deep nesting
        raise ConfigError(f"baseline {p}: not a traceinsight JSON report ({type(exc).__name__}: {str(exc)[:200]})") from None
    hint = "write one with 'traceinsight analyze TRACE -f json -o FILE'"
    if not isinstance(doc, dict) or not isinstance(doc.get("traceinsight_version"), str) or "schema_version" not in doc:
        raise ConfigError(f"baseline {p}: not a traceinsight JSON report (no schema_version / traceinsight_version; {hint})")
    version = doc.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        raise ConfigError(f"baseline {p}: report schema version {str(version)[:20]!r} is not one this traceinsight reads "
                          f"({', '.join(map(str, SCHEMA_VERSIONS))}); {hint}")
    findings = doc.get("findings")
    if not isinstance(findings, list) or len(findings) > MAX_BASELINE_FINDINGS or not all(
        isinstance(f, dict) and isinstance(f.get("fingerprint"), str) and _FINGERPRINT.fullmatch(f["fingerprint"]) for f in findings
    ):
        raise ConfigError(f"baseline {p}: not a traceinsight JSON report (findings with 16-hex-digit fingerprints expected; {hint})")
    for f in findings:  # what is shown of a baseline finding is bounded, whatever the file holds
        for key, limit in (("code", 20), ("title", 300)):
            if key in f:
                v = str(f[key])
                f[key] = v if len(v) <= limit else v[: limit - 1] + "…"
    return doc


def compare(findings: list[Finding], baseline: dict[str, Any], *, source: str = "", worse_pct: float = 25.0,
            worse_points: float = 1.0, mfu_pct: float | None = None) -> Comparison:
    """Classify ``findings`` against a baseline report (as ``load_report`` returns it); ``mfu_pct`` is this run's
    MFU, set beside the baseline's when both reports have one."""
    before: dict[str, dict[str, Any]] = {}
    for f in baseline.get("findings", []):
        before.setdefault(f["fingerprint"], f)
    status: dict[str, str] = {}
    before_pct: dict[str, float] = {}
    for f in findings:
        old = before.get(f.fingerprint)
        if old is None:
            status[f.fingerprint] = NEW
            continue
        was = _pct(old.get("impact_pct_span"))
        before_pct[f.fingerprint] = was
        grew = f.impact_pct_span - was
        worse = grew >= worse_points and f.impact_pct_span >= was * (1 + worse_pct / 100.0)
        status[f.fingerprint] = WORSE if worse else SAME
    now = {f.fingerprint for f in findings}
    fixed = [
        {"code": str(f.get("code", "")), "title": str(f.get("title", "")), "fingerprint": fp,
         "impact_pct_span": _pct(f.get("impact_pct_span"))}
        for fp, f in before.items()
        if fp not in now
    ]
    eff = baseline.get("efficiency") if isinstance(baseline.get("efficiency"), dict) else {}
    before_mfu = eff.get("mfu_pct")
    before_mfu = float(before_mfu) if isinstance(before_mfu, (int, float)) and math.isfinite(before_mfu) else None
    return Comparison(source=source, status=status, before_pct=before_pct, fixed=fixed, worse_pct=worse_pct,
                      worse_points=worse_points, mfu_before_pct=before_mfu, mfu_after_pct=mfu_pct)


_pct = finite  # a finite number from a report field (reports are untrusted files), else 0
