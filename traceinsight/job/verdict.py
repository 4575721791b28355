"""The whole-job verdict: which rank, what bound, what it costs the job, in the words of the single-trace verdict.

Read from the job's ledger (each rank's time per step, by bucket) and the cross-rank findings, so every job format
(HTML, Markdown, text, JSON) opens with the same sentence:

* **the bound** follows the single-trace rule (``traceinsight.assess.verdict.choose``): the per-rank finding whose priced
  saving is largest at the median over ranks names it when it gives back ``MIN_BOUND_PCT`` of the steady step,
  else a mostly busy median rank is compute- (or copy-) bound, else no finding explains the idle;
* **the rank** is the straggler the others wait for longest (``TI020``), else the rank with the slowest median step;
* **the cost** is the time the other ranks wait for that rank at collectives (its held time), per step and in all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceinsight.vocab import buckets, categories
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUSY_BUCKETS, IDLE_COST_BUCKETS, WARMUP_BUCKET
from traceinsight.vocab.units import fmt_ns
from traceinsight.assess.verdict import LABELS, MIN_BOUND_PCT, RULE, choose

_BUCKET_WORDS = buckets.SENTENCE
BUCKET_CATEGORY = buckets.VERDICT


def job_verdict(ja: Any) -> dict[str, Any]:
    """{"category", "label", "headline", "sentence", "rank", "rank_cost_ns", "bucket"} for a ``JobAnalysis``."""
    j = ja.job
    led = j.ledger
    out: dict[str, Any] = {"category": "no_gpu", "label": LABELS["no_gpu"], "headline": categories.BY_ID["no_gpu"].headline, "bound": False,
                           "sentence": "No rank has GPU work to judge.", "rank": None, "rank_cost_ns": 0, "bucket": None}
    if led is None or led.empty:
        return out
    wide = led.pivot_table(index="rank", columns="bucket", values="ns", aggfunc="sum", fill_value=0)
    med = wide.median()
    total = float(med.sum())
    if total <= 0:
        return out
    warm = float(med.get(WARMUP_BUCKET, 0.0))
    steady = max(total - warm, 1.0)
    busy = sum(float(med.get(b, 0.0)) for b in BUSY_BUCKETS)
    busy_pct = median_busy_pct(wide)
    unit = "step" if j.step_count else "window"
    # the same rule as one trace's verdict (``verdict.choose``), on the median rank: the lever is the per-rank
    # finding whose priced saving (its card's figure, as a share of its rank's steady window) is largest at the
    # median over ranks (a rank without it counts 0)
    levers = _median_levers(ja, {b: float(med.get(b, 0.0)) for b in med.index})
    choice, at = choose({b: int(med.get(b, 0.0)) for b in med.index}, [(pct, bucket) for pct, bucket, _ in levers])
    if choice == "lever":
        pct, bucket, code = levers[at]
        lead = f"the lever that gives back most on the median rank is {code}: {pct:.1f} % of its steady {unit}"
    elif choice in ("compute", "copy"):
        bucket = choice
        best = f"the largest, {levers[0][2]}, gives back {levers[0][0]:.1f} %" if levers else "none gives any back"
        lead = f"no finding names a bound ({best}), so the GPU's own work bounds the job"
    else:
        idle = {b: float(med.get(b, 0.0)) for b in IDLE_COST_BUCKETS}
        bucket = max(idle, key=lambda b: idle[b])
        lead = f"most of its idle is {_BUCKET_WORDS[bucket]}, but no finding explains {MIN_BOUND_PCT:.0f} % of it with a fix"
    cat = "unexplained" if choice == "unexplained" else BUCKET_CATEGORY[bucket]
    pct_b = 100.0 * float(med.get(bucket, 0.0)) / steady
    sentence = (
        f"Across {j.rank_count} ranks the median rank's GPU is busy {busy_pct:.1f} % of its {unit}; {lead} "
        f"({_BUCKET_WORDS[bucket]}: {fmt_ns(med.get(bucket, 0.0))} per {unit}, {pct_b:.1f} % of it)."
    )
    mixed = j.mixed_runs
    rank, cost, per_step, why = (None, 0, 0, "") if mixed else _slowest_rank(ja)
    if mixed:  # ranks of different runs: no rank holds the others back, and the "median rank" is a summary only
        sentence = (f"The rank files look like different runs ({mixed}): each rank is judged on its own (below), "
                    "and nothing is compared across them. ") + sentence
    if rank is not None:
        if cost:
            sentence += f" Rank {rank} holds the job back: the others wait {fmt_ns(per_step)} per {unit} for it at collectives ({fmt_ns(cost)} in all)"
        else:
            sentence += f" Rank {rank} has the slowest median step"
        sentence += f"{why}." if why else "."
    bound = categories.BY_ID[cat].bound
    head = f"Bound by {LABELS[cat]}" if bound else categories.BY_ID[cat].headline
    out.update(category=cat, label=LABELS[cat], headline=head + (f"; rank {rank} is the straggler" if cost else ""),
               bound=bound, sentence=sentence, rank=rank, rank_cost_ns=int(cost), bucket=bucket, rule=RULE)
    return out


def median_busy_pct(wide: "pd.DataFrame") -> float:
    """The median over ranks of each rank's busy share of its ledger (rank x bucket ns): the one "median GPU busy"
    the job verdict and the job report's headline both quote (a ratio of bucket medians would be a third figure)."""
    cols = [b for b in BUSY_BUCKETS if b in wide.columns]
    total = wide.sum(axis=1).clip(lower=1)
    return float(np.median(100.0 * wide[cols].sum(axis=1) / total)) if len(wide) else 0.0


def _median_levers(ja: Any, med: dict[str, float]) -> list[tuple[float, str, str]]:
    """(median share %, bucket, code) per rule code among the ranks' findings that can form a verdict (a fix, a
    saving above 0, not trace quality), largest first: each rank's figure is its finding's ``share_pct`` (the card's
    saving over the rank's steady window); a rank without the finding counts 0."""
    per_code: dict[str, list[float]] = {}
    kinds: dict[str, tuple[str, str]] = {}
    ranks = [s for s in ja.job.summaries]
    for s in ranks:
        best: dict[str, float] = {}
        for f in s.findings:
            if categories.about_recording(f.get("category")) or not f.get("fixes") or not (f.get("saving_ns") or 0) > 0:
                continue
            code = str(f.get("code"))
            best[code] = max(best.get(code, 0.0), float(f.get("share_pct") or 0.0))
            kinds.setdefault(code, (str(f.get("saving_kind") or ""), str(f.get("category") or "")))
        for code, v in best.items():
            per_code.setdefault(code, []).append(v)
    out = []
    for code, vals in per_code.items():
        vals = vals + [0.0] * (len(ranks) - len(vals))
        kind, category = kinds[code]
        if kind == "modelled" or categories.is_busy(category):
            bucket = categories.BY_ID[category].claims[0] if categories.is_busy(category) else "compute"
        else:
            own = [b for b in buckets.claims(category) if b in AVOIDABLE_BUCKETS] or list(AVOIDABLE_BUCKETS)
            bucket = max(own, key=lambda b: med.get(b, 0.0))
        out.append((float(np.median(vals)), bucket, code))
    out.sort(key=lambda t: (-t[0], t[2]))
    return out


#: Why the straggler is slow, per the category of its cause (``Category.job_words``).
_CAUSE_WORDS = {c.id: c.job_words for c in categories.TABLE if c.job_words}


def _slowest_rank(ja: Any) -> tuple[int | None, int, int, str]:
    """(rank, held ns in all, held ns per step, "; cause" words) of the worst straggler, else the slowest rank."""
    late = set(ja.late_rank_rules)  # the rules that declare ``names_late_rank``
    stragglers = sorted((f for f in ja.findings if f.code in late), key=lambda f: -int(f.impact_ns))
    if stragglers:
        f = stragglers[0]
        cause = f.metrics.get("cause")
        why = f": {_CAUSE_WORDS[cause]}" if cause in _CAUSE_WORDS else ""
        return int(f.metrics["rank"]), int(f.impact_ns), int(f.metrics.get("held_per_step_ns", f.impact_ns)), why
    st = ja.job.steps
    st = st[st["step"] >= 0] if len(st) else st
    if len(st) == 0 or ja.job.rank_count < 2:
        return None, 0, 0, ""
    med = st.groupby("rank")["dur_ns"].median()
    if float(med.max()) <= float(np.median(med.to_numpy())) * 1.02:  # within 2 %: no rank stands out
        return None, 0, 0, ""
    return int(med.idxmax()), 0, 0, ""
