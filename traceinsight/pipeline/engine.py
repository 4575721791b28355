"""The run: pick and configure rules, load the trace, check every rule over it, assess, collect the Analysis.

``analyze`` is the one orchestration path; the command line is a thin layer over it. ``run`` makes the one derived
store of the timeline (``derived.Derived``), checks every rule on it, grades, links causes, runs each root cause's
what-if (the transform its rule declares), adds framework advice and the verdict, and returns the ``Analysis``
(``analysis.py``) the renderers read. Configuration lives in ``config.py``, rule discovery in ``plugins.py``.
"""

from __future__ import annotations

import re
import os
import time
from typing import Any, Callable, Iterable

from traceinsight.assess import advice, savings
from traceinsight.model.analysis import Analysis
from traceinsight.assess.causes import attach_what_if, link as link_causes
from traceinsight.pipeline.config import Config, check_rule_timeout, check_efficiency, check_worse_by
from traceinsight.derive.derived import Derived
from traceinsight.vocab.errors import ConfigError
from traceinsight.derive.framework import detect_framework
from traceinsight.pipeline.plugins import RuleSet, discover
from traceinsight.rule_api import Context, Finding, Rule, Severity
from traceinsight.pipeline.rule_guard import DEFAULT_RULE_TIMEOUT_S, RuleFailure, describe, origin_of, run_guarded
from traceinsight.assess.severity import DEFAULT_MIN_IMPACT_PCT, grade
from traceinsight.derive.summary import summarize
from traceinsight.model.timeline import Timeline
from traceinsight.assess.verdict import assess


def closest_code(code: str, known: Iterable[str]) -> str | None:
    """The known rule code a typo most likely meant: a code of the same shape (letters and number of digits) with
    the nearest number first (TI015 -> TI014), else the most similar string (TI0022 -> TI002); None when nothing
    is close."""
    up = code.strip().upper()
    known = sorted(known)
    m = re.fullmatch(r"([A-Z]+)(\d+)", up)
    if m:
        same = [
            (k, int(km.group(2)))
            for k in known
            if (km := re.fullmatch(r"([A-Z]+)(\d+)", k)) and km.group(1) == m.group(1) and len(km.group(2)) == len(m.group(2))
        ]
        if same:
            want = int(m.group(2))
            best = min(same, key=lambda kn: (abs(kn[1] - want), kn[1]))
            if abs(best[1] - want) <= 2:
                return best[0]
    import difflib  # only for a code that matches none

    close = difflib.get_close_matches(up, known, n=1, cutoff=0.5)
    return close[0] if close else None


def _check_codes(known: Iterable[str], config: Config) -> None:
    """Every code or prefix the configuration names must match a rule: a typo must not pass a CI gate."""
    known = sorted(known)
    named = [("--select", c, True) for c in config.select] + [("--ignore", c, True) for c in config.ignore]
    named += [("--set", c, False) for c in [*config.options, *config.severity]]  # options need a whole code
    for where, code, prefix_ok in named:
        up = code.strip().upper()
        if not up or (up in known) or (prefix_ok and any(k.startswith(up) for k in known)):
            continue
        close = closest_code(up, known)
        hint = f"did you mean {close}?" if close else f"known: {', '.join(known)}"
        raise ConfigError(f"{where} {code}: no rule has this code; {hint} (see 'traceinsight rules')")


def instantiate(ruleset: RuleSet, config: Config) -> list[Rule]:
    """Selected rules with their options applied; an unknown code or a bad option is a usage error (exit 2)."""
    _check_codes(ruleset.rules, config)
    out = []
    for code, cls in sorted(ruleset.rules.items()):
        if not config.selected(code):
            continue
        try:
            rule = cls(**config.options.get(code, {}))
            if code in config.severity:
                rule.severity = Severity.parse(config.severity[code])  # type: ignore[misc]
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a plugin's own __init__ that raises or exits
            ruleset.failures.append(RuleFailure(code, origin_of(cls), f"could not be created: {describe(exc)}"))
            continue
        out.append(rule)
    return out


def run(
    timeline: Timeline,
    rules: list[Rule],
    *,
    extra_warnings: Iterable[str] = (),
    min_impact: float = DEFAULT_MIN_IMPACT_PCT,
    severity_overrides: Iterable[str] = (),
    rule_failures: Iterable[RuleFailure] = (),
    rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S,
    with_summary: bool = True,
    efficiency: Any = None,
) -> Analysis:
    """Run ``rules`` over ``timeline``. ``with_summary=False`` skips the single-trace report's summary (the job
    path's map step summarises ranks its own way), leaving ``analysis.summary`` None."""
    views = Derived(timeline, efficiency=efficiency)
    findings: list[Finding] = []
    warnings = list(extra_warnings)
    failures = list(rule_failures)
    timings: dict[str, float] = {}
    for rule in rules:
        t0 = time.perf_counter()
        found, failure = run_guarded(rule, lambda rule=rule: rule.check(Context(timeline, views, rule)), rule_timeout)
        if failure is not None:  # one broken rule must not hide the others, nor pass silently
            failures.append(failure)
        timings[rule.code] = time.perf_counter() - t0
        for f in found:
            if rule.severity != type(rule).severity and f.severity == type(rule).severity:
                f.severity = rule.severity
        findings.extend(found)
    findings = grade(findings, views, {r.code: r for r in rules}, min_impact_pct=min_impact, overridden=severity_overrides)
    findings.sort(key=lambda f: (-f.impact_ns, -f.severity.rank, f.code))
    findings = link_causes(findings)
    attach_what_if(findings, views, {r.code: type(r).what_if for r in rules})
    findings = savings.assess(findings, views, {r.code: r for r in rules}, severity_overrides)
    framework = detect_framework(timeline)
    advice.apply(findings, framework, timeline.meta)
    analysis = Analysis(
        timeline=timeline,
        summary=summarize(timeline, views.views) if with_summary else None,  # type: ignore[arg-type]
        findings=findings,
        warnings=[*(f.line() for f in failures), *warnings],
        rule_failures=failures,
        rules_run=[r.code for r in rules],
        timings=timings,
        views=views,
        ledger=views.ledger,
        framework=framework,
    )
    if with_summary:  # the verdict reads the summary; the job's map step needs neither
        assess(analysis)
        if savings.lead_with_verdict(analysis):  # the verdict's finding first: verdict and KPIs read again on that order
            assess(analysis)
    return analysis


def with_step_range(timeline: Timeline, name: str) -> Timeline:
    """The timeline with the ranges named ``name`` as its steps (a copy of the frame). An unknown name raises
    ``ConfigError`` (a usage error) naming the repeated ranges the trace does have."""
    from traceinsight.vocab.errors import ConfigError
    from traceinsight.model.steps import candidates, choose, mark
    from traceinsight.model.timeline import assign_steps

    events = timeline.events.copy()
    picked = choose(events, name)
    if picked is None:
        have = ", ".join(sorted(set(candidates(events)["name"]))[:10]) or "none"
        raise ConfigError(f"--step-range: no range named {name!r} in the trace (repeated user ranges: {have})")
    mark(events, picked["marker"], replace=True)
    assign_steps(events)
    meta = _own_meta(timeline)
    meta.extra["steps_source"] = picked
    return Timeline(events=events, meta=meta)


def within(timeline: Timeline, *, steps=None, range_name: str | None = None, window_ms=None) -> Timeline:
    """The timeline cut to the chosen window (``steps.window_of``); a choice that selects nothing raises
    ``ConfigError`` (a usage error). The window is noted in ``meta.extra["window"]`` and ``meta.warnings``."""
    from traceinsight.vocab.errors import ConfigError
    from traceinsight.model.steps import crop, window_of

    try:
        lo, hi, what = window_of(timeline.events, steps=steps, range_name=range_name, window_ms=window_ms)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    events = crop(timeline.events, lo, hi)
    meta = _own_meta(timeline)
    meta.extra["window"] = {"start_ns": lo, "end_ns": hi, "chosen": what}
    meta.warn(f"analysed only {what}: {lo / 1e6:.3f}-{hi / 1e6:.3f} ms of the trace")
    return Timeline(events=events, meta=meta)


def _own_meta(timeline: Timeline):
    """A copy of the timeline's meta that can be changed without touching the caller's timeline."""
    import dataclasses

    m = timeline.meta
    return dataclasses.replace(m, extra=dict(m.extra), warnings=list(m.warnings))


def _mfu(analysis: Analysis) -> float | None:
    """This run's MFU for the baseline comparison (None when FLOPs or the peak are unknown)."""
    try:
        return analysis.views.efficiency.mfu_pct
    except Exception:  # the comparison of findings must not depend on the optional efficiency model
        return None


def analyze(
    trace: "str | os.PathLike | Timeline",
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    options: dict[str, dict[str, Any]] | None = None,
    rules: Iterable[str | os.PathLike] = (),
    extra_rules: Iterable[type[Rule]] = (),
    config: Config | None = None,
    baseline: "str | os.PathLike | None" = None,
    worse_by: float = 25.0,
    trace_format: str | None = None,
    run_name: str | None = None,
    progress: Callable[[str], None] | None = None,
    min_impact: float | None = None,
    step_range: str | None = None,
    steps: "str | tuple[int | None, int | None] | None" = None,
    range_name: str | None = None,
    window_ms: "str | tuple[float | None, float | None] | None" = None,
    rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S,
    max_bytes: int | None = None,
    efficiency: Any = None,
) -> Analysis:
    """Load (if given a path) and analyse a trace with the built-in, installed and given rules.

    ``select`` / ``ignore`` take rule codes or prefixes (they replace the config's when given); ``options`` maps a
    code to option overrides (``"severity"`` included); ``rules`` are local .py files or folders; ``extra_rules``
    are Rule classes defined in the caller's code; ``config`` a ``Config`` (e.g. ``Config.from_pyproject(path)``),
    never modified. ``baseline`` is an earlier JSON report: ``analysis.baseline`` then tells which findings are
    new or worse (worse: share of the span grew by ``worse_by`` percent). ``trace_format`` forces the reader,
    ``run_name`` picks a TensorBoard profile run, ``progress`` receives reading progress messages. ``min_impact``
    (% of the GPU window; default the config's, 1) leaves out findings that cost less; 0 reports everything.
    ``step_range`` names the user range (NVTX, ``record_function``, TraceMe) whose instances are the steps, in place
    of the profiler's markers or the automatic choice (``traceinsight.model.steps``). ``steps`` ("3:8": steps 3 through
    8), ``range_name`` (first to last instance of a user range) and ``window_ms`` ("120:480", ms on the trace's
    clock) choose the window to analyse; the trace is cut to it before any rule runs.
    ``rule_timeout`` (seconds, 0 or None: no limit) stops a rule that runs longer. A rule that fails to load, raises,
    returns malformed findings or times out is listed in ``analysis.rule_failures`` (and its warnings).
    ``max_bytes`` is the size ceiling of the trace or what it inflates to (default: half the available memory).
    ``efficiency`` is an ``efficiency.EfficiencySettings`` (dense peak TFLOP/s and GB/s overrides, model FLOPs per
    step for traces without shapes).

    Rules are chosen and configured before the trace is read, so a usage error costs no load time.
    """
    cfg = (config or Config()).with_overrides(select=select, ignore=ignore, options=options, min_impact=min_impact)
    worse_by = check_worse_by(worse_by)
    rule_timeout = check_rule_timeout(rule_timeout)
    efficiency = check_efficiency(efficiency)
    ruleset = discover([*cfg.rule_paths, *rules])
    for cls in extra_rules:
        ruleset.add(cls, "analyze(extra_rules=...)")
    selected = instantiate(ruleset, cfg)
    if isinstance(trace, Timeline):
        timeline = trace
    else:
        from traceinsight.ingest import load

        timeline = load(trace, format=trace_format, progress=progress, max_bytes=max_bytes, **({"run": run_name} if run_name else {}))
    if step_range is not None:
        timeline = with_step_range(timeline, step_range)
    if steps is not None or range_name is not None or window_ms is not None:
        timeline = within(timeline, steps=steps, range_name=range_name, window_ms=window_ms)
    analysis = run(
        timeline, selected, extra_warnings=[*cfg.warnings, *ruleset.warnings], min_impact=cfg.min_impact, severity_overrides=cfg.severity,
        rule_failures=ruleset.failures, rule_timeout=rule_timeout,
        efficiency=efficiency,
    )
    if baseline is not None:
        from traceinsight.pipeline.baseline import compare, load_report

        analysis.baseline = compare(analysis.findings, load_report(baseline), source=str(baseline), worse_pct=worse_by,
                                    mfu_pct=_mfu(analysis))
    return analysis
