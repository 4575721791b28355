"""One severity scale for every rule, from what a finding costs the GPU.

A finding's severity says how much of the run it costs, not which rule found it: the impact (the time fixing it
would give back) as a share of the GPU time it was measured against. Every rule is graded the same way, so a
5 µs stall on a busy GPU can never outrank a 30 % idle gap, and a healthy trace gets no warning.

=============  =====================================================
share          severity
=============  =====================================================
>= 20 %        error
>= 5 %         warning
>= 1 %         info
< 1 %          not reported (unless ``min_impact`` is lowered)
=============  =====================================================

The share is taken of the steady-state GPU window the finding is about (its active window less the warm-up the
time ledger books, as the verdict does): the window of its (rank, device) when it names one, the longest window
of its rank when it names only a rank, and the summed windows of all devices when it names none (findings that
add up over devices). A trace without GPU activity has no window: its findings keep
the severity their rule gave (there is no cost to grade). While a trace-quality finding withholds judgement
(``metrics["withholds_judgement"]``: too little GPU work), or while one-time work fills the window
(``steady.judgement``), performance findings stay at info; so does a finding whose instances lie mostly inside
one-time work while what lies outside it is under half its impact (``steady.one_time_ns``): only one-time
work supports it.

What is not graded: ``trace_quality`` findings (they describe the recording, not the run), rules that declare
``graded = False``, and plugin findings without a cost estimate (impact 0; built-in rules always estimate one). A rule may cap its findings with ``max_severity`` (e.g. modelled headroom rather than time
lost), and a user's ``severity`` override in the configuration beats the scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
import pandas as pd

from traceinsight.model.finding import SCALE, Finding, Severity, level
from traceinsight.vocab import categories
from traceinsight.vocab.buckets import WARMUP_BUCKET

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.derived import Derived

#: Findings costing less than this % of their window are left out of the report unless asked for.
DEFAULT_MIN_IMPACT_PCT = 1.0
#: Categories whose findings describe the trace itself; never graded by cost, never dropped (``categories``).
UNGRADED_CATEGORIES = categories.UNGRADED




def steady_windows(views: "Derived") -> pd.DataFrame:
    """rank, device, window_ns: each device's GPU window less the time the ledger books as warm-up, the same base
    the verdict judges causes on. A run that spends 90 % of its window autotuning is judged on the other 10 %,
    where its fix would show. Empty when the trace has no GPU activity. Built once per analysis (grading and the
    savings both read it); callers do not change it."""
    return views.memo("severity.steady_windows", lambda: _steady_windows(views))


def _steady_windows(views: "Derived") -> pd.DataFrame:
    u = views.utilization[["rank", "device", "window_ns"]]
    if u.empty:
        return u
    rank, device, bucket, ns = views.ledger.device_arrays
    warm = bucket == WARMUP_BUCKET
    u_rank, u_dev = u["rank"].to_numpy(), u["device"].to_numpy()
    w_rank, w_dev, w_ns = rank[warm], device[warm], ns[warm]
    if len({(int(r), int(d)) for r, d in zip(w_rank, w_dev)}) == len(w_rank):
        # one warm-up figure per device at most (as the ledger books it): the left merge on arrays
        return pd.DataFrame({"rank": u_rank, "device": u_dev, "window_ns": _less_warm(u_rank, u_dev, u["window_ns"].to_numpy(), w_rank, w_dev, w_ns)})
    w = pd.DataFrame({"rank": w_rank, "device": w_dev, "warm_ns": w_ns})
    out = u.merge(w, on=["rank", "device"], how="left")
    out["window_ns"] = out["window_ns"].to_numpy(np.int64) - out["warm_ns"].fillna(0).to_numpy(np.int64)
    return out[["rank", "device", "window_ns"]]


def _less_warm(u_rank, u_dev, window, w_rank, w_dev, w_ns) -> np.ndarray:
    """Each device's window less its warm-up (at most one figure per device)."""
    warm_ns = np.zeros(len(u_rank), np.int64)
    for r, d, v in zip(w_rank, w_dev, w_ns):
        warm_ns[(u_rank == r) & (u_dev == d)] = v
    return window.astype(np.int64, copy=False) - warm_ns


def steady_arrays(views: "Derived") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``steady_windows`` as its three columns (rank, device, window_ns), kept once per analysis: grading and the
    savings look a window up per finding, and on a small rank reading a frame's columns each time costs more than
    the lookup. Read straight off the utilization and the ledger where each device has one warm-up figure."""
    return views.memo("severity.steady_arrays", lambda: _steady_arrays(views))


def _steady_arrays(views: "Derived") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = views.utilization
    if not len(u):
        return _columns_of(steady_windows(views))
    rank, device, bucket, ns = views.ledger.device_arrays
    warm = bucket == WARMUP_BUCKET
    w_rank, w_dev = rank[warm], device[warm]
    if len({(int(r), int(d)) for r, d in zip(w_rank, w_dev)}) != len(w_rank):
        return _columns_of(steady_windows(views))
    u_rank, u_dev = u["rank"].to_numpy(), u["device"].to_numpy()
    return u_rank, u_dev, _less_warm(u_rank, u_dev, u["window_ns"].to_numpy(), w_rank, w_dev, ns[warm])


def _columns_of(steady: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return steady["rank"].to_numpy(), steady["device"].to_numpy(), steady["window_ns"].to_numpy()


def base_ns(finding: Finding, views: "Derived", steady: pd.DataFrame | None = None) -> int:
    """The steady-state GPU window (``steady_windows``) the finding's impact is measured against; 0 when the trace
    has no GPU activity. ``steady``: that frame, when the caller has one."""
    return window_of(finding, steady_arrays(views) if steady is None else _columns_of(steady))


def window_of(finding: Finding, steady: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    """``base_ns`` on the columns of ``steady_windows`` (``steady_arrays``)."""
    s_rank, s_dev, window = steady
    if not len(window):
        return 0
    loc = finding.location
    sel = np.ones(len(window), dtype=bool)
    if loc.rank is not None:
        sel &= s_rank == loc.rank
    if loc.device is not None:
        sel &= s_dev == loc.device
    if not sel.any():
        sel[:] = True
    if loc.rank is not None or loc.device is not None:
        return int(window[sel].max())
    return int(window[sel].sum())


def share_pct(finding: Finding, views: "Derived", steady: pd.DataFrame | None = None) -> float | None:
    """The impact as % of the finding's window, or None when there is no window to measure against."""
    return _share(finding, steady_arrays(views) if steady is None else _columns_of(steady))


def _share(finding: Finding, steady: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float | None:
    base = window_of(finding, steady)
    if base <= 0:
        return None
    return 100.0 * max(int(finding.impact_ns), 0) / base


def grade(
    findings: Iterable[Finding],
    views: "Derived",
    rules: dict[str, object],
    *,
    min_impact_pct: float = DEFAULT_MIN_IMPACT_PCT,
    overridden: Iterable[str] = (),
) -> list[Finding]:
    """Severity from the scale for each finding; those below ``min_impact_pct`` are dropped.

    ``rules`` maps a code to its rule instance (for ``graded`` / ``max_severity``); ``overridden`` are codes
    whose severity the user set, which keep that severity (they are still dropped when below the floor).
    """
    forced = {c.upper() for c in overridden}
    findings = list(findings)
    withheld = judgement_withheld(findings, views, rules)
    steady = steady_arrays(views)
    out = []
    for f in findings:
        rule = rules.get(f.code)
        if _category(f, rules) in UNGRADED_CATEGORIES or not _graded(rule, f):
            out.append(f)
            continue
        share = _share(f, steady)
        if share is None:
            out.append(f)
            continue
        if share < min_impact_pct:
            continue
        if f.code in forced:
            f.severity = getattr(rule, "severity", f.severity)
        else:
            sev = level(share)
            cap = getattr(rule, "max_severity", None)
            try:
                cap = None if cap is None else Severity.parse(cap)
            except ValueError:
                cap = None
            if cap is not None:
                if sev.rank > cap.rank:
                    sev = cap
            f.severity = sev
        if withheld and f.code not in forced:
            f.severity = Severity.INFO
        elif f.code not in forced and f.severity.rank > Severity.INFO.rank and only_one_time_work(views, f):
            f.severity = Severity.INFO  # what it points at is one-time work (the ledger's warm-up), no steady cost
        out.append(f)
    return out


def judgement_withheld(findings: Iterable[Finding], views: "Derived", rules: dict[str, object]) -> bool:
    """True when nothing in the window is graded above info: a trace-quality finding withholds judgement (too
    little GPU work), or one-time work fills the window (``steady.judgement``: the verdict cannot judge it)."""
    if any(_category(f, rules) in UNGRADED_CATEGORIES and f.metrics.get("withholds_judgement") for f in findings):
        return True
    if views.utilization.empty:
        return False
    return not views.steady["judgeable"]


def only_one_time_work(views: "Derived", finding: Finding) -> bool:
    """Only one-time work supports the finding: most of its instance time lies inside the ledger's warm-up
    (``steady.one_time_ns``), and what lies outside is under half its impact. A finding that already leaves the
    warm-up out of its impact (TI001 on a gap that is mostly warm-up) keeps its grade."""
    from traceinsight.derive.steady import one_time_ns

    if not len(finding.instances or ()):
        return False
    total, once = one_time_ns(views.ledger.warmup, finding.instances)
    return total > 0 and once * 2 >= total and (total - once) * 2 < int(finding.impact_ns)


def _graded(rule: object, finding: Finding) -> bool:
    """Built-in rules are always graded; a plugin is graded when it estimates a cost (impact > 0) unless it says."""
    declared = getattr(rule, "graded", None)
    if declared is not None:
        return bool(declared)
    return int(finding.impact_ns) > 0 or type(rule).__module__.startswith("traceinsight.rules")


def _category(finding: Finding, rules: dict[str, object]) -> str:
    """The finding's category, from its rule when the finding does not carry one."""
    return str(getattr(finding, "category", "") or getattr(rules.get(finding.code), "category", "") or "")
