"""What each finding saves: one figure, its kind, and its share of the GPU window the finding is about.

A reader checks a report against itself, so every number a format prints about a finding comes from here, once
per run (``assess``, called by the engine after causes are linked and what-ifs attached): the card, the verdict,
the notebook view, Markdown, the terminal and JSON carry the same nanoseconds. Two kinds of figure exist, and
they are never added together:

* **idle** (``KIND_IDLE``): GPU idle the finding claims from the ledger (``verdict.claims_of``): avoidable buckets
  only, on the device where it saves most. A root cause also takes what the symptoms it explains claim of it,
  so a cause and its symptoms name the same time once, under the cause. The headline "est. savings" is the
  union of these claims.
* **modelled** (``KIND_MODELLED``): busy work a change could make faster (tensor cores, fuller grids, pinned
  copies, overlapped communication). Its size rests on an assumed speed-up, so the figure is what the what-if
  replay (``whatif.what_if_faster``) gives the steps back when that work gets faster by the rule's estimate:
  kernels off the step's critical path (the host is the bound) save nothing, and the figure is never the
  headline.
* **none** (``KIND_NONE``): trace-quality findings, which describe the recording.

``Finding.saving_ns`` is that figure (``impact_ns`` stays the rule's own estimate, which the ledger claim is
capped by), ``Finding.share_pct`` its share of the steady-state GPU window (``severity.base_ns``: the window of the finding's
device, warm-up left out), and the severity is graded again on it. One alarm per lost time: a root cause's figure
holds what it explains of its symptoms, and a symptom's figure (and severity) only the part of its idle no cause
explains. A severity below the scale's says why on the card (``metrics["severity_basis"]``: "capped at info:
modelled headroom" for a rule's ``max_severity``, a what-if that gives nothing back, a window that cannot be judged). A finding whose what-if gives the step nothing back is at most info.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from traceinsight.rule_api import Finding, Severity, fmt_ns
from traceinsight.assess.severity import UNGRADED_CATEGORIES, judgement_withheld, level, only_one_time_work, steady_arrays, window_of
from traceinsight.assess.verdict import BUSY_MOST_PCT, KERNEL_GAIN_PCT, claims_of
from traceinsight.vocab import categories
from traceinsight.vocab.buckets import BUSY_BUCKETS, WARMUP_BUCKET

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.derived import Derived

KIND_IDLE, KIND_MODELLED, KIND_NONE = "idle", "modelled", "none"
#: Order of the kinds on the page: measured idle first, modelled speed-ups after, trace quality last.
KIND_ORDER = {KIND_IDLE: 0, KIND_MODELLED: 1, KIND_NONE: 2}
#: Categories whose findings are about busy work (their savings assume a speed-up), unless they explain idle.
BUSY_CATEGORIES = categories.BUSY
#: A what-if that shortens the step by less than this % of it "changes nothing".
NO_CHANGE_PCT = 1.0
#: The what-if's total saving and the claim agree when they differ by at most this share of the larger one...
AGREE_SHARE = 0.25
#: ...or by less than this % of the window (too little to matter on the page).
AGREE_WINDOW_PCT = 1.0


def kind(f: Finding) -> str:
    """The kind of figure a finding carries (set by ``assess``; derived from its category before that)."""
    k = getattr(f, "saving_kind", "")
    if k:
        return k
    if f.category in UNGRADED_CATEGORIES:
        return KIND_NONE
    return KIND_MODELLED if f.category in BUSY_CATEGORIES and not f.explains else KIND_IDLE


def shown_ns(f: Finding) -> int:
    """The figure a report shows for ``f``: its ``saving_ns`` once assessed, else the rule's estimate."""
    return int(f.saving_ns if f.saving_ns is not None else f.impact_ns)


def order(findings: Iterable[Finding]) -> list[Finding]:
    """Root causes and unexplained findings by the figure shown (measured idle first, then modelled speed-ups,
    then trace quality), each followed by the symptoms it explains, largest first."""
    findings = list(findings)
    by_fp = {f.fingerprint: f for f in findings}
    nested = {f.fingerprint for f in findings if f.metrics.get("explained_by") in by_fp}

    def key(f: Finding):
        return (KIND_ORDER.get(kind(f), 3), -shown_ns(f), -f.severity.rank, f.code, f.key)

    out: list[Finding] = []
    for f in sorted((f for f in findings if f.fingerprint not in nested), key=key):
        out.append(f)
        out.extend(sorted((by_fp[fp] for fp in f.explains if fp in nested and by_fp[fp].metrics.get("explained_by") == f.fingerprint), key=key))
    return out


def assess(findings: list[Finding], views: "Derived", rules: dict[str, object], overridden: Iterable[str] = ()) -> list[Finding]:
    """Set each finding's figure, kind, share and severity (see the module docstring); return them in page order.
    A finding whose figure comes out small (a modelled speed-up off the critical path) stays, graded info, with
    the reason in ``metrics["saving_basis"]``: the rule saw something real, it just does not shorten the step."""
    if not findings:
        return findings
    forced = {c.upper() for c in overridden}
    led = views.ledger
    cl = claims_of(led, findings)
    steady = steady_arrays(views)
    n_steps = max(int(views.step_count), 1)
    withheld = judgement_withheld(findings, views, rules)
    for f, idle_ns in zip(findings, cl["per_finding"]):
        k = kind(f)
        if k == KIND_NONE:
            figure = int(f.impact_ns)
        elif k == KIND_IDLE:
            figure = int(idle_ns)
        else:
            figure = _modelled(f, views, n_steps, rules.get(f.code))
        if withheld and k != KIND_NONE:  # the verdict cannot judge this window: no saving is drawn from it
            figure = 0
            f.metrics["saving_basis"] = "this window cannot be judged (one-time work or too little GPU work fills it), so no saving is drawn from it"
        f.saving_kind = k
        f.saving_ns = int(figure)
        base = window_of(f, steady)
        f.share_pct = None if base <= 0 or k == KIND_NONE else round(100.0 * figure / base, 3)
        if k == KIND_IDLE and f.what_if:
            _compare(f, n_steps)
    by_fp = {f.fingerprint: f for f in findings}
    shares = _busy_shares(led)
    for f in findings:
        rule = rules.get(f.code)
        if f.saving_kind == KIND_NONE or f.code in forced:
            continue
        if not _graded(rule, f):
            if f.severity.rank > Severity.INFO.rank:
                f.metrics.setdefault("severity_basis", f"the rule's own grade ({f.severity.value}): a risk to the run, not "
                                                       "time measured on the timeline, so the common scale does not grade it")
            continue
        if f.share_pct is None:
            continue
        share = f.share_pct
        cause = by_fp.get(f.metrics.get("explained_by") or "")
        if cause is not None:  # a symptom: its figure is already what its cause leaves unexplained
            f.metrics["severity_basis"] = f"graded on the {fmt_ns(f.saving_ns)} that {cause.code} does not explain ({share:.1f} % of the GPU window)"
        graded = level(share)
        sev = _capped(graded, rule)
        if sev is not graded:  # the cap is the rule's, and the card says so
            why = "modelled headroom, not time the GPU lost" if f.saving_kind == KIND_MODELLED else "the rule's max_severity"
            f.metrics["severity_basis"] = (
                f"capped at {sev.value}: {why} ({share:.1f} % of the GPU window would grade {graded.value}; "
                f"raise the rule's max_severity to gate on it)"
            )
        if _changes_nothing(f.what_if) and sev.rank > Severity.INFO.rank:
            sev = Severity.INFO
            f.metrics["what_if_note"] = "the replay gives the step nothing back, so this is not a warning"
            f.metrics["severity_basis"] = f"kept at info: the replay gives the step nothing back ({share:.1f} % of the GPU window claimed)"
        busy_pct = _busy_pct_of(f, shares)
        if (sev.rank > Severity.INFO.rank and f.saving_kind == KIND_IDLE and busy_pct is not None and busy_pct >= BUSY_MOST_PCT
                and share <= KERNEL_GAIN_PCT / 100.0 * busy_pct):
            sev = Severity.INFO  # the verdict's own rule: on a mostly busy GPU this idle is less than faster kernels give
            f.metrics["severity_basis"] = (
                f"kept at info: the GPU is busy {busy_pct:.1f} % of its steady state, and this idle ({share:.1f} %) is less than "
                f"faster kernels would plausibly give back ({KERNEL_GAIN_PCT:g} % of busy time, the verdict's rule)"
            )
        if sev.rank > Severity.INFO.rank and only_one_time_work(views, f):
            sev = Severity.INFO  # only one-time work supports the finding
            f.metrics["severity_basis"] = "kept at info: only one-time work (the ledger's warm-up) supports it"
        f.severity = sev
        declared = getattr(type(rule), "severity", None) if rule is not None else None
        if isinstance(declared, Severity) and declared is not f.severity and "severity_basis" not in f.metrics:
            why = f.metrics.get("what_if_note") or f"{share:.1f} % of the GPU window"
            f.metrics["severity_basis"] = f"graded {f.severity.value} on the common scale: {why}; declared {declared.value}"
    if withheld:  # nothing in this window is judged: every performance finding says so at info
        for f in findings:
            if f.saving_kind != KIND_NONE and f.code not in forced and f.severity.rank > Severity.INFO.rank:
                f.severity = Severity.INFO
                f.metrics["severity_basis"] = "kept at info: this window cannot be judged (see the verdict)"
    # one alarm per lost time: a cause is graded on its own figure (which holds what it explains of its symptoms),
    # a symptom on what its cause leaves unexplained, so neither repeats the other's time
    for f in findings:
        _quote_figure(f, by_fp.get(f.metrics.get("explained_by") or ""))
    return order(findings)


def _quote_figure(f: Finding, cause: "Finding | None") -> None:
    """Make the message quote the card's figure (``saving_ns``) where the rule wrote its own estimate: a modelled
    speed-up's "est. X" becomes the replay's figure with the estimate beside it, and a message that states another
    figure says which one the card shows. A symptom's message says how much of it its cause explains."""
    if f.saving_kind == KIND_NONE or f.saving_ns is None:
        return
    fig, est = fmt_ns(int(f.saving_ns)), fmt_ns(int(f.impact_ns))
    if fig == est:
        return
    msg = f.message or ""
    if f.saving_kind == KIND_MODELLED:
        for lead in ("est. ", "save about ", "save "):
            if lead + est in msg:
                f.message = msg.replace(lead + est, f"{lead}{fig} by the what-if replay ({est} at face value)", 1)
                return
        f.message = msg.rstrip() + f" The what-if replay prices it at {fig} (the card's figure; {est} at face value)."
    elif cause is not None:
        f.message = msg.rstrip() + f" {cause.code} explains the rest; {fig} of it is this finding's own (the card's figure)."
    elif int(f.saving_ns) > int(f.impact_ns) and f.explains:
        f.message = (msg.rstrip() + f" The card's figure, {fig}, is the idle it claims on the ledger, more than its own estimate of "
                     f"{est}: it holds the idle of the symptoms it explains too.")
    else:
        f.message = msg.rstrip() + f" The card's figure, {fig}, is the idle it claims on the ledger (at most its own estimate of {est})."


def _graded(rule: object, f: Finding) -> bool:
    """Whether the common scale grades ``f``: the finding's own word (``metrics["graded"]``: a rule whose findings
    are risks, not time, grades the ones that are only a time cost), else the rule's ``graded``, else by cost."""
    if isinstance(f.metrics.get("graded"), bool):
        return f.metrics["graded"]
    declared = getattr(rule, "graded", None)
    if declared is not None:
        return bool(declared)
    return int(f.impact_ns) > 0 or type(rule).__module__.startswith("traceinsight.rules")


def _capped(sev: Severity, rule: object) -> Severity:
    cap = getattr(rule, "max_severity", None)
    try:
        cap = None if cap is None else Severity.parse(cap)
    except ValueError:
        cap = None
    return cap if cap is not None and sev.rank > cap.rank else sev


def _changes_nothing(what_if: dict | None) -> bool:
    if not what_if or not what_if.get("baseline_step_ns") or what_if.get("step_ns") is None:
        return False
    b, p = float(what_if["baseline_step_ns"]), float(what_if["step_ns"])
    return b - p < b * NO_CHANGE_PCT / 100.0


def speeds_up(rule: object) -> tuple[str, ...] | None:
    """The work classes (``work_classes.CLASSES``) a rule's modelled speed-up makes faster, as the rule declares
    them (``Rule.speeds_up``); None (every GPU task) when it declares none or something unreadable."""
    declared = getattr(rule, "speeds_up", None)
    if isinstance(declared, str):
        declared = (declared,)
    if not isinstance(declared, tuple) or not declared or not all(isinstance(c, str) for c in declared):
        return None
    return declared


def _modelled(f: Finding, views: "Derived", n_steps: int, rule: object = None) -> int:
    """A modelled speed-up's figure: what the replay gives back over the window's steps, at most the rule's
    estimate; the rule's estimate when there is nothing to replay (said on the finding). The replay shortens the
    kernels of the work classes the rule declares it speeds up (``speeds_up``), else every GPU task."""
    estimate = int(f.impact_ns)
    if estimate <= 0:
        return 0
    from traceinsight.derive.whatif import what_if_faster

    try:
        w = what_if_faster(views.graphs, estimate, classes=speeds_up(rule))
    except Exception as exc:  # a model failure must not take the analysis down; say so on the finding
        f.metrics["what_if_error"] = f"{type(exc).__name__}: {exc}"
        w = None
    if w is None or not w.get("baseline_step_ns"):
        f.metrics["saving_basis"] = "the rule's estimate (no steps to replay it on)"
        return estimate
    if f.what_if is None:
        f.what_if = w
    gain = max(float(w["baseline_step_ns"]) - float(w["step_ns"]), 0.0)
    figure = int(min(estimate, round(gain * n_steps)))
    f.metrics["saving_basis"] = (
        f"the replay with this work {fmt_ns(estimate)} faster gives back {fmt_ns(gain)} per step × {n_steps} step(s)"
        + ("" if figure >= estimate * (1 - AGREE_SHARE) else ": the rest of the speed-up is off the step's critical path (the GPU would wait longer instead)")
    )
    return figure


def _compare(f: Finding, n_steps: int) -> None:
    """Put the what-if's total (per-step gain × the window's steps) next to the claim, and say why they differ."""
    w = f.what_if
    if not w or not w.get("baseline_step_ns") or w.get("step_ns") is None:
        return
    gain = max(float(w["baseline_step_ns"]) - float(w["step_ns"]), 0.0)
    total = int(round(gain * n_steps))
    w["saving_ns"] = total
    w["steps_in_window"] = n_steps
    claim = shown_ns(f)
    big = max(total, claim)
    window = float(w["baseline_step_ns"]) * n_steps
    agrees = abs(total - claim) <= AGREE_SHARE * big or abs(total - claim) < window * AGREE_WINDOW_PCT / 100.0
    w["agrees"] = bool(agrees)
    if agrees:
        w["why"] = ""
    elif total > claim:
        w["why"] = (
            f"the replay gives back {fmt_ns(total)} over {n_steps} step(s), more than the {fmt_ns(claim)} of idle this finding claims: "
            "the change also removes host time that idle of other causes waited on, and the work after it moves earlier"
        )
    else:
        w["why"] = (
            f"the replay gives back {fmt_ns(total)} over {n_steps} step(s), less than the {fmt_ns(claim)} of idle this finding claims: "
            "part of that idle overlaps other costs the step still waits for (they stay in the replay)"
        )


def lead_with_verdict(analysis) -> bool:
    """Put the finding the verdict names (its root cause, else the finding that claims its bucket) and its symptoms
    first, so the verdict's sentence and the first card tell the same story; the rest keep the figure's order."""
    from traceinsight.assess.verdict import details

    v = getattr(analysis, "verdict", None) or details(analysis)
    named = v.get("root_cause") or v.get("claimed_by")
    if not named:
        return False
    fs = analysis.findings
    head = next((f for f in fs if f.fingerprint == named), None)
    cause = next((f for f in fs if head is not None and f.fingerprint == head.metrics.get("explained_by")), None)
    head = cause or head  # a symptom's own part names the bound: its cause's group leads, the symptom inside it
    if head is None or fs[0] is head:
        return False
    group = [head, *(f for f in fs if f.metrics.get("explained_by") == head.fingerprint)]
    ids = {id(f) for f in group}
    analysis.findings = group + [f for f in fs if id(f) not in ids]
    return True


def _busy_shares(led: object) -> dict[tuple[int, int], tuple[float, float]]:
    """Per (rank, device): (busy ns, steady ns) of the ledger, warm-up set aside — read once per analysis."""
    rank, device, bucket, ns = led.device_arrays  # type: ignore[attr-defined]
    steady = bucket != WARMUP_BUCKET
    busy = steady & np.isin(bucket, list(BUSY_BUCKETS))
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for key in set(zip(rank.tolist(), device.tolist())):  # a few rows per device
        on = (rank == key[0]) & (device == key[1])
        out[(int(key[0]), int(key[1]))] = (float(ns[on & busy].sum()), float(ns[on & steady].sum()))
    return out


def _busy_pct_of(f: Finding, shares: dict[tuple[int, int], tuple[float, float]]) -> float | None:
    """The busy share of the steady state of the finding's device (of all devices when it names none): the figure
    the verdict's rule reads to decide whether an idle lever beats faster kernels."""
    loc = f.location
    picked = [v for (r, d), v in shares.items() if (loc.rank is None or r == loc.rank) and (loc.device is None or d == loc.device)]
    total = sum(v[1] for v in picked)
    return 100.0 * sum(v[0] for v in picked) / total if total > 0 else None
