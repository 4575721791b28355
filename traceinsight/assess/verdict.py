"""What bounds a run, and what fixing the findings may save: read from the time ledger, shared by every format.

Findings measure overlapping things (an idle gap may *be* a host sync, and sit inside a data wait), so adding
their impacts up overstates the story, and the largest finding is not necessarily the largest cost. Both numbers
come from the ledger (``traceinsight.derive.ledger``) instead, where every nanosecond of each GPU's window sits in
exactly one bucket:

* **The verdict** is the conclusion of the findings (``RULE``). Warm-up is set aside first (it is not steady
  state), and so is every window that cannot be judged. Then the finding whose priced saving is largest (its
  ``saving_ns``: the idle it claims from the ledger, or what the what-if replay gives back for a modelled speed-up,
  the figure its card shows) names the bound when it gives back at least ``MIN_BOUND_PCT`` of the steady state
  and has a fix; a finding that another explains is represented by its cause, and a trace-quality finding never
  forms it; on a GPU busy at least ``BUSY_MOST_PCT`` of its steady state an idle lever must also give back more
  than faster kernels plausibly would (``KERNEL_GAIN_PCT`` of busy time). Otherwise such a GPU is compute-bound
  (copy-bound when copies are at least ``COPY_BOUND_PCT`` of busy time), and a mostly idle GPU whose idle no finding prices gets
  "no finding explains the idle time": a ledger bucket alone never names a bound. Too little GPU work
  (``MIN_GPU_WORK_NS`` and ``MIN_GPU_WORK_ITEMS``) is said as such instead of being judged. ``choose`` is the
  rule on plain numbers; the whole-job verdict (``job.verdict``) applies the same function.
* **Est. savings** is the avoidable idle findings *claim* from the ledger: each finding claims the buckets of its
  category on its rank/device (and inside its instances, when it has them), at most its own impact. Findings
  claiming the same bucket of the same device are taken to explain the same time, so the larger claim counts,
  never the sum. Devices run in parallel, so the wall-clock saving is the largest per-device total. It is
  therefore never more than the avoidable idle, and never more than a device's window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from traceinsight.vocab import buckets, categories
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS, BUSY_BUCKETS, IDLE_COST_BUCKETS, SET_ASIDE_BUCKETS, WARMUP_BUCKET
from traceinsight.model.finding import CATEGORIES, DEFAULT_CATEGORY, Finding
from traceinsight.vocab.masks import kind_mask
from traceinsight.vocab.units import fmt_ns, format_what_if

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.model.analysis import Analysis
    from traceinsight.derive.ledger import Ledger

#: verdict category -> short label used as the verdict headline (the category record, ``vocab.categories``).
LABELS: dict[str, str] = categories.LABELS

#: The category of idle a finding attributes to no kind (GPU idle gaps by what the host did): it claims last.
DEFAULT_IDLE = categories.CATCH_ALL
#: What findings of each rule category (``finding.CATEGORIES``) may claim from the ledger (``buckets.claims``).
CLAIMS: dict[str, tuple[str, ...]] = {c: buckets.claims(c) for c in CATEGORIES}

#: An idle cause (or exposed communication) names the bound when it costs at least this share of the
#: steady-state window: at 5 % a single removable cause is a lever worth a change of code (the "warning" level
#: of the severity scale); below it, what is left is the GPU's own work.
MIN_BOUND_PCT = 5.0
#: Copies are the bound when they are at least half of GPU busy time: then copies, not kernels, are the larger
#: part of what the GPU does, and making kernels faster cannot save more than the smaller, non-copy half.
COPY_BOUND_PCT = 50.0
#: A GPU busy at least this share of its steady state is compute-bound (or copy-bound) unless a finding's priced
#: saving reaches ``MIN_BOUND_PCT``: most of its time is its own work, and the idle sliver left names no bound.
BUSY_MOST_PCT = 50.0
#: On such a GPU an idle lever names the bound only when it gives back more than faster kernels plausibly would:
#: this share of busy time, what a routine change to the kernels (precision, fusion, a newer library) gains. An
#: 86 %-busy pipeline with 6.8 % of launch-bound idle is compute-bound with a minor host gap, not launch-bound.
KERNEL_GAIN_PCT = 10.0
#: Below this much GPU work (kernels, copies, memsets, all devices) a profile says nothing about steady state: one
#: real step is milliseconds of GPU time, while lazy init, launch latency and profiler overhead are of the same
#: order as such a window (a graph capture, a cut profile, a trace of set-up only).
MIN_GPU_WORK_NS = 1_000_000
#: ...and fewer than this many kernels/copies/memsets. Both must hold: 95 short kernels spread over 65 ms with the
#: host waiting for data between them is a clear pattern, and 3 copies of 2 ms are a real copy workload; a handful
#: of kernels with under a millisecond of work is not.
MIN_GPU_WORK_ITEMS = 10


def category(finding: Finding) -> str:
    """The bottleneck category of one finding: the one its rule declares (``Rule.category``)."""
    return finding.category if finding.category in CLAIMS else DEFAULT_CATEGORY


def ledger_of(analysis: "Analysis") -> "Ledger":
    """The analysis' ledger (the engine's; else its derived store's)."""
    return analysis.ledger if analysis.ledger is not None else analysis.views.ledger  # type: ignore[union-attr]


def assess(analysis: "Analysis") -> None:
    """Fill ``analysis.verdict`` and ``analysis.kpis``: the engine calls this once, every format reads the result."""
    cl = claims(analysis)
    analysis.verdict = details(analysis, cl)
    analysis.kpis = headline(analysis, cl)


def claim_buckets(finding: Finding) -> tuple[str, ...]:
    """The ledger buckets a finding may claim: its rule's ``claims`` when it declares some, else its category's."""
    own = finding.claims
    if own:
        return tuple(b for b in own if b in BUCKETS)
    return CLAIMS[category(finding)]


def finding_claims(ledger: Ledger, finding: Finding) -> dict[tuple[int, int, str], int]:
    """What one finding claims: ns per (rank, device, bucket), in total at most its ``impact_ns``.

    Without instances, the claim is the finding's buckets on its rank/device, scaled down evenly when the finding
    says it saves less than they hold (e.g. a sync finding on a device that also idles in other syncs).
    """
    buckets = claim_buckets(finding)
    impact = int(finding.impact_ns)
    if not buckets or impact <= 0 or ledger.slices.empty:
        return {}
    loc = finding.location
    instances = finding.instances or None
    if instances is None:
        # whole buckets on the finding's rank/device: read the per-device totals, no slices needed
        rk, dv, bk, ns = ledger.device_arrays
        m = np.isin(bk, list(buckets)) & (ns > 0)
        if loc.rank is not None:
            m &= rk == loc.rank
        if loc.device is not None:
            m &= dv == loc.device
        items = list(zip(rk[m].tolist(), dv[m].tolist(), bk[m].tolist(), ns[m].tolist()))
    else:
        items = [(r, d, b, v) for (r, d, b), v in ledger.claimed_ns(buckets, rank=loc.rank, device=loc.device, within=instances).items()]
    total = sum(int(v) for *_, v in items)
    if not total:
        return {}
    scale = min(1.0, impact / total)
    return {(int(r), int(d), str(b)): int(v * scale) for r, d, b, v in items}


def _taken(cause: Finding, symptom: Finding, claim: dict[tuple[int, int, str], int]) -> dict[tuple[int, int, str], int]:
    """The part of a symptom's avoidable claim its root cause accounts for: the buckets the cause itself claims
    (a data-loading cause takes the data-wait idle of a gap finding), else the symptom's claim scaled to the share
    the cause explains (``metrics["explained_ns"]``: an RNN fallback explains the launch-bound idle of its loop)."""
    avoid = {k: v for k, v in claim.items() if k[2] in AVOIDABLE_BUCKETS}
    own = set(claim_buckets(cause)) & set(AVOIDABLE_BUCKETS)
    if own:
        return {k: v for k, v in avoid.items() if k[2] in own}
    total = sum(avoid.values())
    if not total:
        return {}
    scale = min(1.0, int(symptom.metrics.get("explained_ns") or 0) / total)
    return {k: int(v * scale) for k, v in avoid.items()}


def claims_of(led: "Ledger", findings: list[Finding]) -> dict[str, Any]:
    """Every finding's claim, and their union: per (rank, device, bucket) the largest claim counts.

    A root cause's claim includes what it takes of the symptoms it explains (``_taken``), so a cause and its
    symptoms name the same nanoseconds once, under the cause. ``total_ns`` is the wall-clock saving from avoidable
    idle: devices run in parallel, so it is the largest per-device total, not their sum (``gpu_ns`` is the sum, in
    GPU time). ``per_finding`` is each finding's own figure on the same terms: its avoidable claim on the device
    where it saves most; a symptom's is what its cause leaves unexplained (the union above still holds all of it). Busy-time claims (faster kernels, copies, collectives) are listed in ``by_bucket`` but
    left out of the totals: their size rests on a speed-up assumption, not on measured idle.
    """
    own = [finding_claims(led, f) for f in findings]
    by_fp = {f.fingerprint: (f, c) for f, c in zip(findings, own)}
    each = []
    given: dict[str, dict[tuple[int, int, str], int]] = {}  # symptom fingerprint -> what its cause took of it
    for f, c in zip(findings, own):
        c = dict(c)
        for fp in f.explains:
            if fp not in by_fp:
                continue
            s, sc = by_fp[fp]
            taken = _taken(f, s, sc)
            if s.metrics.get("explained_by") == f.fingerprint:
                g = given.setdefault(fp, {})
                for k, v in taken.items():
                    g[k] = max(g.get(k, 0), v)
            for k, v in taken.items():
                if v > c.get(k, 0):
                    c[k] = v
        each.append(c)
    # a symptom keeps only what its cause does not explain: the cause names the rest, once
    each = [
        {k: v - given[f.fingerprint].get(k, 0) for k, v in c.items() if v > given[f.fingerprint].get(k, 0)} if f.fingerprint in given else c
        for f, c in zip(findings, each)
    ]
    each = _one_claim_per_ns(led, findings, each)
    best: dict[tuple[int, int, str], int] = {}
    for c in each:
        for k, v in c.items():
            if k[2] in AVOIDABLE_BUCKETS:  # disjoint claims (``_one_claim_per_ns``): they add up
                best[k] = best.get(k, 0) + v
            elif v > best.get(k, 0):  # busy time: modelled, overlapping estimates, the larger counts
                best[k] = v
    by_bucket: dict[str, int] = {}
    per_device: dict[tuple[int, int], int] = {}
    for (r, d, b), v in best.items():
        by_bucket[b] = by_bucket.get(b, 0) + v
        if b in AVOIDABLE_BUCKETS:
            per_device[(r, d)] = per_device.get((r, d), 0) + v
    return {
        "per_device": per_device,
        "total_ns": max(per_device.values(), default=0),
        "gpu_ns": sum(per_device.values()),
        "by_bucket": by_bucket,
        "per_finding": [_wall_clock(c) for c in each],
        "each": each,
    }


def _one_claim_per_ns(led: "Ledger", findings: list[Finding], each: list[dict[tuple[int, int, str], int]]) -> list[dict[tuple[int, int, str], int]]:
    """Claims on the same bucket of the same device never add up to more than the bucket holds: each nanosecond of
    avoidable idle is claimed once. Findings that name a reason (causes, root causes) claim first, then symptoms
    of a kind (launch overhead, graph breaks), then unattributed idle gaps; among equals the more specific (fewer
    buckets), then the larger; a later finding keeps only what is left of the bucket. Busy-time
    claims (modelled speed-ups) are left as they are: their figure comes from the replay, not from the claim."""
    from traceinsight.assess.causes import CAUSES

    rk, dv, bk, ns = led.device_arrays
    room = {(int(r), int(d), str(b)): int(v) for r, d, b, v in zip(rk.tolist(), dv.tolist(), bk.tolist(), ns.tolist()) if b in AVOIDABLE_BUCKETS}

    def priority(i: int) -> tuple:
        f = findings[i]
        named = f.category in CAUSES or f.root_cause or bool(f.explains)
        generic = category(f) == DEFAULT_IDLE  # idle gaps by what the host did: the catch-all claims last
        return (0 if named else 2 if generic else 1, len(claim_buckets(f)), -sum(each[i].values()), i)

    out: list[dict[tuple[int, int, str], int]] = [dict(c) for c in each]
    for i in sorted(range(len(findings)), key=priority):
        c = out[i]
        for k in list(c):
            if k[2] not in AVOIDABLE_BUCKETS:
                continue
            left = room.get(k, 0)
            take = min(c[k], left)
            room[k] = left - take
            if take > 0:
                c[k] = take
            else:
                del c[k]
    return out


def _wall_clock(claim: dict[tuple[int, int, str], int]) -> int:
    """A claim's avoidable idle on the device where it is largest (devices run in parallel)."""
    dev: dict[tuple[int, int], int] = {}
    for (r, d, b), v in claim.items():
        if b in AVOIDABLE_BUCKETS:
            dev[(r, d)] = dev.get((r, d), 0) + int(v)
    return max(dev.values(), default=0)


def claims(analysis: "Analysis") -> dict[str, Any]:
    """``claims_of`` the analysis' findings on its ledger."""
    return claims_of(ledger_of(analysis), list(analysis.findings))


def headline(analysis: "Analysis", cl: dict[str, Any] | None = None) -> dict[str, Any]:
    """The KPI numbers every format shows: one function, so HTML, Markdown and JSON carry equal values. ``cl``:
    ``claims(analysis)`` when the caller has it."""
    s = analysis.summary
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in analysis.findings:
        counts[f.severity.value] += 1
    led = ledger_of(analysis)
    cl = cl if cl is not None else claims(analysis)
    window = int(led.windows["window_ns"].max()) if len(led.windows) else 0
    # a window that cannot be judged claims nothing: what a trace-quality finding explains is no avoidable idle
    judged = cannot_judge(analysis) is None
    # the headline names savings worth a change of code: the idle the findings claim together on a device counts
    # when it reaches MIN_BOUND_PCT of that device's steady state (the bar a bound must clear), a modelled
    # speed-up when its own share does; below it the page shows the findings' own figures, not a headline
    rk, dv, bk, ns = led.device_arrays
    steady_of: dict[tuple[int, int], int] = {}
    for r, d, b, v in zip(rk.tolist(), dv.tolist(), bk.tolist(), ns.tolist()):
        if b not in SET_ASIDE_BUCKETS:
            steady_of[(int(r), int(d))] = steady_of.get((int(r), int(d)), 0) + int(v)
    worth = {k: v for k, v in cl.get("per_device", {}).items() if steady_of.get(k, 0) > 0 and 100.0 * v / steady_of[k] >= MIN_BOUND_PCT}
    judged = judged and bool(worth)
    saved = min(max(worth.values(), default=0), window) if judged else 0
    busy = s.gpu_busy_pct
    return {
        "span_ns": int(s.span_ns),
        # the longest device window (first to last GPU activity): what GPU busy % is of, said beside it when it is
        # a sliver of the span (11 µs of work in a 34 ms capture reads "100 %" otherwise)
        "gpu_window_ns": int(window),
        "gpu_busy_pct": None if busy is None else round(float(busy), 1),
        # the same of the steady state (the window less the ledger's warm-up), the figure the verdict reads; None
        # when no warm-up was set aside (then it is gpu_busy_pct)
        "steady_busy_pct": _steady_busy_pct(led),
        "findings": len(analysis.findings),
        "findings_by_severity": counts,
        # the union of the avoidable idle findings claim from the ledger, on the device that saves most: never
        # the sum of overlapping findings, never more than that idle, never more than a device's window
        "est_savings_ns": int(saved),
        "est_savings_gpu_ns": int(sum(worth.values())) if judged else 0,
        "largest_saving_ns": int(min(max(cl["per_finding"], default=0), saved)) if judged else 0,
        # modelled speed-ups of busy work are their own kind of estimate: the largest one, never added to the above
        "modelled_speedup_ns": int(max((int(f.saving_ns or 0) for f in analysis.findings
                                        if f.saving_kind == "modelled" and (f.share_pct or 0.0) >= MIN_BOUND_PCT), default=0))
        if cannot_judge(analysis) is None else 0,
        "avoidable_idle_ns": int(led.avoidable_ns),
        "steps": int(s.steps.get("count", 0)),
        "mean_step_ns": float(s.steps["mean_ns"]) if s.steps else None,
    }


def _steady_busy_pct(led: "Ledger") -> float | None:
    totals = led.totals()
    warm = int(totals.get(WARMUP_BUCKET, 0))
    steady = sum(totals.values()) - warm
    if warm <= 0 or steady <= 0:
        return None
    return round(100.0 * sum(totals[b] for b in BUSY_BUCKETS) / steady, 1)


def details(analysis: "Analysis", cl: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict with its reasoning: category, label, headline, sentence, the ledger totals behind it. ``cl``:
    ``claims(analysis)`` when the caller has it."""
    led = ledger_of(analysis)
    totals = led.totals()
    window = sum(totals.values())
    busy = sum(totals[b] for b in BUSY_BUCKETS)
    cl = cl if cl is not None else claims(analysis)
    impact_by_cat: dict[str, int] = {}
    for f in analysis.findings:
        c = category(f)
        impact_by_cat[c] = impact_by_cat.get(c, 0) + int(f.impact_ns)
    base: dict[str, Any] = {
        "ledger_ns": totals,
        "window_ns": int(window),
        "claimed_ns_by_bucket": cl["by_bucket"],
        "impact_ns_by_category": {c: int(v) for c, v in sorted(impact_by_cat.items(), key=lambda kv: -kv[1])},
    }
    if window == 0:
        return {**base, **_verdict("no_gpu", None, 0, 0, "The trace has no GPU kernels or copies, so there is nothing on the GPU to explain.")}
    warm = totals[WARMUP_BUCKET]
    cannot = cannot_judge(analysis)
    if cannot is not None:
        why, sentence = cannot
        bucket = WARMUP_BUCKET if why == "warmup" else None
        return {**base, **_verdict("cannot_judge", bucket, warm if bucket else busy, window, sentence), "why": why,
                "record_better": _record_better(analysis)}

    steady = window - warm
    n_dev = len(led.windows)
    subject = f"the {n_dev} GPUs are" if n_dev > 1 else "the GPU is"
    windows = "their windows" if n_dev > 1 else "its window"
    busy_pct = 100.0 * busy / window

    mix = _busy_mix(totals, busy)
    prefix = (
        f"{fmt_ns(warm)} of {windows} ({100.0 * warm / window:.0f} %) is warm-up and left out; in the steady state {subject} busy "
        f"{100.0 * busy / steady:.1f} % of the time ({mix})"
    )
    of = "the steady state" if warm >= window / 100 else windows
    if warm < window / 100:  # under 1 %: not worth a word, though still left out of the shares
        prefix = f"{subject[0].upper()}{subject[1:]} busy {busy_pct:.1f} % of {windows} ({mix})"
    ranked = levers(analysis, cl)
    choice, at = choose(totals, [(lv["pct"], lv["bucket"]) for lv in ranked])
    rule = _one_step(analysis) + f" (the rule: {RULE})"
    if choice == "lever":
        lv = ranked[at]
        f, bucket = lv["finding"], lv["bucket"]
        cause = f if lv["symptom_bucket"] else None
        what = (f"{buckets.SENTENCE[bucket]} holds {fmt_ns(totals[bucket])} ({100.0 * totals[bucket] / steady:.1f} % of {of})"
                if bucket in AVOIDABLE_BUCKETS else _busy_words(f))
        sentence = (
            f"{prefix}; the lever that gives back most is {f.code} ({f.title}): {fmt_ns(lv['ns'])}, {lv['pct']:.1f} % of {of}"
            f"{_if_fixed(f)}; {what}{_host_work(f, bucket)}{rule}."
        )
        return {**base, **_verdict(buckets.VERDICT[bucket], bucket, totals[bucket], steady, sentence, f, cause, lv["ns"], lv["pct"])}
    runner = f"the largest, {ranked[0]['finding'].code}, gives back {ranked[0]['pct']:.1f} %" if ranked else "none gives any back"
    if choice != "unexplained" and ranked and ranked[0]["pct"] >= MIN_BOUND_PCT:  # an idle lever under the compute headroom
        runner += f", less than faster kernels would ({KERNEL_GAIN_PCT:.0f} % of busy time)"
    idle = {b: totals[b] for b in IDLE_COST_BUCKETS}
    top_idle = max(idle, key=lambda b: idle[b])
    if choice == "copy":
        copy_share = 100.0 * totals["copy"] / busy if busy else 0.0
        sentence = (
            f"{prefix}; no finding names a bound ({runner}) and copies are {copy_share:.0f} % of GPU busy time "
            f"({fmt_ns(totals['copy'])}{_link_rate(analysis)}): the GPU mostly moves data, so {_copy_lever(analysis)} save more than "
            f"faster kernels{rule}."
        )
        return {**base, **_verdict("copy", "copy", totals["copy"], steady, sentence)}
    if choice == "compute":
        largest = f"; the largest idle: {buckets.SENTENCE[top_idle]}, {100.0 * idle[top_idle] / steady:.1f} %" if idle[top_idle] else ""
        sentence = (
            f"{prefix}; no finding names a bound ({runner}{largest}): the GPU is busy most of the time, so speed-ups now come from faster kernels "
            f"(precision, fusion, batch size), not from feeding the GPU{rule}."
        )
        return {**base, **_verdict("compute", "compute", totals["compute"], steady, sentence)}
    sentence = (
        f"{prefix}; it is idle {100.0 * (steady - busy) / steady:.1f} % of {of}, most of it {buckets.SENTENCE[top_idle]} "
        f"({fmt_ns(idle[top_idle])}), but no finding explains {MIN_BOUND_PCT:.0f} % of it with a fix ({runner}), so no lever is named: "
        f"read the timeline's longest gaps{rule}."
    )
    return {**base, **_verdict("unexplained", top_idle, idle[top_idle], steady, sentence)}


#: The verdict's rule, in the words every verdict sentence and the docs quote.
RULE = (
    f"the bound is the finding that gives back most (idle it claims, or its modelled speed-up as the replay prices it) when "
    f"that is at least {MIN_BOUND_PCT:.0f} % of the steady state; a GPU busy {BUSY_MOST_PCT:.0f} % of it or more is "
    f"compute-bound unless an idle lever gives back more than {KERNEL_GAIN_PCT:.0f} % of its busy time"
)


def choose(totals: dict[str, int], ranked: list[tuple[float, str]]) -> tuple[str, int | None]:
    """The verdict's rule on plain numbers, shared by the single-trace and the whole-job verdict. ``ranked``: the
    levers as (share % of the steady state, bucket), largest priced saving first. Returns ``("lever", i)`` for the
    first lever that gives back at least ``MIN_BOUND_PCT`` and, on a GPU busy at least ``BUSY_MOST_PCT`` of its
    steady state, is a busy-work lever or an idle lever larger than the compute headroom (``KERNEL_GAIN_PCT`` of busy
    time: what faster kernels would plausibly give back); else ``("copy" | "compute", None)`` on a mostly busy GPU
    (copies when they are at least ``COPY_BOUND_PCT`` of busy time), else ``("unexplained", None)``: idle that no
    finding prices never names a bound."""
    steady = sum(v for b, v in totals.items() if b not in SET_ASIDE_BUCKETS)
    busy = sum(totals.get(b, 0) for b in BUSY_BUCKETS)
    busy_pct = 100.0 * busy / steady if steady > 0 else 0.0
    most = busy_pct >= BUSY_MOST_PCT
    headroom = KERNEL_GAIN_PCT / 100.0 * busy_pct if most else 0.0
    for i, (pct, bucket) in enumerate(ranked):
        if pct >= MIN_BOUND_PCT and (bucket in BUSY_BUCKETS or pct > headroom):
            return "lever", i
    if most:
        return ("copy" if busy and 100.0 * totals.get("copy", 0) / busy >= COPY_BOUND_PCT else "compute"), None
    return "unexplained", None


def levers(analysis: "Analysis", cl: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings that can form the verdict, largest priced saving first: each one (a symptom with what its
    cause leaves unexplained), not about the recording (trace quality: what it explains is never a cost), with a fix and a saving above 0
    (``Finding.saving_ns``: the idle it claims, or what the replay gives back for a modelled speed-up, the same
    figure its card shows). Each: ``finding``, ``ns``, ``pct`` (of its steady-state window, ``share_pct``),
    ``bucket`` (the ledger bucket it names: the avoidable idle it claims most, else its busy kind) and
    ``symptom_bucket`` (the bucket is its symptoms' kind of time, not its own: it is named as the root cause)."""
    out = []
    for i, f in enumerate(analysis.findings):
        ns = int(f.saving_ns if f.saving_ns is not None else 0)
        if ns <= 0 or categories.about_recording(f.category) or not f.fixes:
            continue
        claim = cl["each"][i] if i < len(cl["each"]) else {}
        idle: dict[str, int] = {}
        for (_, _, b), v in claim.items():
            if b in AVOIDABLE_BUCKETS:
                idle[b] = idle.get(b, 0) + int(v)
        if getattr(f, "saving_kind", "") == "modelled" or not idle:
            bucket = category(f) if category(f) in BUSY_BUCKETS else "compute"
        else:
            bucket = max(idle, key=lambda b: idle[b])
        pct = float(f.share_pct) if f.share_pct is not None else 0.0
        out.append({"finding": f, "ns": ns, "pct": pct, "bucket": bucket,
                    # named as the root cause when the bucket is its symptoms' kind of time, or when a root cause of the
                    # generic idle category (it claims any idle, e.g. an allocator that does not cache) leads: the
                    # bucket's words alone ("host/Python overhead") would hide the lever
                    "symptom_bucket": bucket in AVOIDABLE_BUCKETS and (bucket not in claim_buckets(f)
                                                                       or (bool(f.root_cause) and category(f) == DEFAULT_IDLE))})
    out.sort(key=lambda lv: (-lv["ns"], -lv["pct"], lv["finding"].code))
    return out


def _one_step(analysis: "Analysis") -> str:
    """"; one step recorded: ..." when every rank's window holds a single step marker: the verdict then rests on one
    step, which nothing shows the run repeats (TensorBoard's callback profiles batch 2 by default, with its own
    summary writing in it), so the sentence says so and how to record more."""
    views = analysis.views
    st = views.steps if views is not None else None
    if st is None or st.empty or int(st.groupby("rank").size().max()) != 1:
        return ""
    return ("; only one step was recorded, so nothing shows the rest of the run repeats it: record several steady "
            "steps to confirm it")


def _busy_words(f: Finding) -> str:
    return "a modelled speed-up of busy work (the replay with that work faster), not idle time"


def _busy_mix(totals: dict[str, int], busy: int) -> str:
    parts = [
        f"{100.0 * totals[b] / busy:.0f} % {name}"
        for b, name in (("compute", "compute"), ("copy", "copies"), ("communication", "exposed communication"))
        if busy and totals[b] * 200 > busy  # shares up to 0.5 % are noise in a sentence (and would read "0 %")
    ]
    return "of which " + ", ".join(parts) if parts else "no work"


def _host_work(f: Finding, bucket: str) -> str:
    """For host-caused idle, what the host was visibly doing in the longest gap (the finding's evidence), so the
    verdict names work to act on (eager dispatch, a Python frame) instead of only "the host". The gap is the
    longest of the bucket's own cause where the evidence names causes: a sync gap's or an unlinked gap's host
    activity is not what the named bucket's idle was spent on (a rule's finer name for the bucket's idle is kept)."""
    if bucket not in ("idle_host_busy", "idle_untraced"):
        return ""
    ev = f.evidence
    if ev is None or ev.empty or "host_activity" not in ev.columns:
        return ""
    if "cause" in ev.columns:
        # rows of another bucket's cause are left out; a rule's finer name for this bucket's idle (the optimizer
        # step, CPU work) is no bucket's words and stays
        other = {w for b, w in buckets.CAUSE.items() if b != bucket}
        ev = ev[~ev["cause"].astype(str).isin(other).to_numpy()]
        if ev.empty:
            return ""
    if "warmup_us" in ev.columns and "duration_us" in ev.columns:
        # a gap that is mostly warm-up shows what the host did while warming up, not in the steady state
        ev = ev[2 * ev["warmup_us"].fillna(0).to_numpy(float) < ev["duration_us"].to_numpy(float)]
        if ev.empty:
            return ""
    what = str(ev["host_activity"].iloc[0])
    if not what or what.endswith("(nothing traced)"):
        return ""
    return f"; in the longest gap the host was in {what[:160]}"


def _link_rate(analysis: "Analysis") -> str:
    """"; host<->device at 9 GB/s over the host link": how fast the copies that cross PCIe/NVLink-C2C moved data
    (the efficiency view's copy row, when the view can be built: its rate only adds a figure to the sentence)."""
    views = analysis.views
    if views is None:
        return ""
    try:
        eff = views.efficiency
    except Exception:  # the efficiency view is optional here
        return ""
    row = next((r for r in eff.class_rows if r["cls"] == "copy"), None)
    rate = row.get("link_gbs") if row is not None else None
    return f"; host↔device at {rate:.1f} GB/s over the host link" if rate else ""


def _copy_lever(analysis: "Analysis") -> str:
    """What to do about a copy-bound window, from what the copies already are: pinned memory is advised only where
    some copies are pageable; when none is, moving less data (or overlapping it) is what is left."""
    views = analysis.views
    if views is not None:
        act = views.gpu_activity
        copies = ~kind_mask(act["kind"], ("kernel",))  # on the kind's codes
        if copies.any() and not act["pageable"].to_numpy()[copies].any():
            return ("moving less data (keep it on the GPU between steps, send smaller dtypes, fuse the work that needs "
                    "it) or overlapping the transfers with compute (the copies are already from pinned memory)")
    return "fewer, larger, pinned or overlapped transfers"


def _if_fixed(f: Finding) -> str:
    """", if fixed: step 176.3 -> 118.6 ms (-33 %)" when the finding carries a what-if prediction that moves the
    step by at least 1 %: "1.11 -> 1.11 ms (+0 %)" in a headline reads as a promise; the finding's card still shows
    the replay and why it gives back little."""
    w = f.what_if or {}
    step, base = w.get("step_ns"), w.get("baseline_step_ns")
    if isinstance(step, (int, float)) and isinstance(base, (int, float)) and base > 0 and step > 0.99 * base:  # within 1 % of the step, or no shorter
        return ""
    text = format_what_if(f.what_if)
    return f"; if fixed: {text}" if text else ""


def cannot_judge(analysis: "Analysis") -> tuple[str, str] | None:
    """(why, sentence) when the window cannot be judged, else None. ``why``: ``too_little_gpu_work`` (under
    ``MIN_GPU_WORK_NS`` and ``MIN_GPU_WORK_ITEMS``), ``graph_capture`` or another trace-quality finding that
    withholds judgement (TI012), or ``warmup`` (the steady-state model, ``steady.judgement``: one-time work fills
    the window). What a trace-quality finding explains never forms the verdict: such a window gets this one."""
    led = ledger_of(analysis)
    totals = led.totals()
    window = sum(totals.values())
    if window == 0:
        return None
    busy = sum(totals[b] for b in BUSY_BUCKETS)
    counts = analysis.summary.event_counts
    n_work = sum(int(counts.get(k, 0)) for k in ("kernel", "memcpy", "memset"))
    if busy < MIN_GPU_WORK_NS and n_work < MIN_GPU_WORK_ITEMS:
        kernels = int(analysis.summary.kernel_count)
        return "too_little_gpu_work", (
            f"The GPU did only {fmt_ns(busy)} of work ({kernels} kernels) in a {fmt_ns(window)} window: too little to say "
            "what bounds the run (a graph capture, a cut profile, or set-up only). Performance findings are kept at info."
        )
    held = next((f for f in analysis.findings if categories.about_recording(f.category) and f.metrics.get("withholds_judgement")), None)
    if held is not None:
        why = "graph_capture" if held.metrics.get("graph_capture") else "too_little_gpu_work"
        return why, f"{held.code}: {held.title}. The window's busy % and gaps describe that, not a workload in steady state; performance findings are kept at info."
    views = analysis.views
    if views is None:  # an Analysis built by hand: the steady-state model reads a store with a ledger
        from traceinsight.derive.derived import Derived

        views = Derived(analysis.timeline)
    j = views.steady
    if j["judgeable"]:
        return None
    reason = j["reason"][0].upper() + j["reason"][1:]
    return "warmup", (
        f"{reason} ({fmt_ns(j['warmup_ns'])} of {fmt_ns(j['window_ns'])} is one-time work, set aside): the window shows start-up, "
        "not the steady state. Performance findings are kept at info."
    )


def _record_better(analysis: "Analysis") -> str:
    """How to record a steady-state window for this trace's profiler and framework."""
    from traceinsight.derive.framework import detect_framework
    from traceinsight.derive.steady import record_better

    tl = analysis.timeline
    return record_better(tl.meta.source_format, detect_framework(tl))


def _verdict(
    cat: str, bucket: str | None, ns: int, base_ns: int, sentence: str, by: Finding | None = None, cause: Finding | None = None,
    lever_ns: int | None = None, lever_pct: float | None = None,
) -> dict[str, Any]:
    bound = categories.BY_ID[cat].bound
    headline = f"Bound by {LABELS[cat]}" if bound else categories.BY_ID[cat].headline
    if bound and cause is not None:
        headline += f" (root cause: {cause.code})"  # the symptom's bucket names the bound, the cause leads the fix
    return {
        "category": cat,
        "label": LABELS[cat],
        "headline": headline,
        "bound": bound,
        "sentence": sentence,
        "bucket": bucket,
        "bucket_ns": int(ns),
        "bucket_pct": round(100.0 * ns / base_ns, 3) if base_ns else 0.0,
        # the lever: the finding whose priced saving forms the verdict (``levers``), with that saving, the same
        # figure its card shows (None: no finding formed it)
        "lever": None if by is None else by.code,
        "lever_ns": None if lever_ns is None else int(lever_ns),
        "lever_pct": None if lever_pct is None else round(float(lever_pct), 3),
        "rule": RULE,
        "claimed_by": None if by is None else by.fingerprint,
        "root_cause": None if cause is None else cause.fingerprint,
    }
