"""The whole-job verdict: which rank, what bound, what it costs the job, in the words of the single-trace verdict.

Read from the job's ledger (each rank's time per step, by bucket) and the cross-rank findings, so every job format
(HTML, Markdown, text, JSON) opens with the same sentence:

* **the bound** is the largest cost of the median rank's step, as ``traceinsight.verdict`` names it for one trace
  (an idle cause or exposed communication when it reaches ``MIN_BOUND_PCT`` of the step, else compute or copies);
* **the rank** is the straggler the others wait for longest (``TI020``), else the rank with the slowest median step;
* **the cost** is the time the other ranks wait for that rank at collectives (its held time), per step and in all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import buckets
from ..buckets import AVOIDABLE_BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS
from ..units import fmt_ns
from ..verdict import COPY_BOUND_PCT, LABELS, MIN_BOUND_PCT

_BUCKET_WORDS = buckets.SENTENCE
BUCKET_CATEGORY = buckets.VERDICT

STRAGGLER_RULE = "TI020"


def job_verdict(ja: Any) -> dict[str, Any]:
    """{"category", "label", "headline", "sentence", "rank", "rank_cost_ns", "bucket"} for a ``JobAnalysis``."""
    j = ja.job
    led = j.ledger
    out: dict[str, Any] = {"category": "no_gpu", "label": LABELS["no_gpu"], "headline": "No GPU activity", "bound": False,
                           "sentence": "No rank has GPU work to judge.", "rank": None, "rank_cost_ns": 0, "bucket": None}
    if led is None or led.empty:
        return out
    wide = led.pivot_table(index="rank", columns="bucket", values="ns", aggfunc="sum", fill_value=0)
    med = wide.median()
    total = float(med.sum())
    if total <= 0:
        return out
    warm = float(med.get("idle_warmup", 0.0))
    steady = max(total - warm, 1.0)
    levers = {b: float(med.get(b, 0.0)) for b in (*IDLE_BUCKETS, "communication") if b != "idle_warmup"}
    lead = max(levers, key=lambda b: (levers[b], b in AVOIDABLE_BUCKETS))
    busy = sum(float(med.get(b, 0.0)) for b in BUSY_BUCKETS)
    copy_share = 100.0 * float(med.get("copy", 0.0)) / busy if busy else 0.0
    if 100.0 * levers[lead] / steady >= MIN_BOUND_PCT:
        bucket = lead
    elif copy_share >= COPY_BOUND_PCT:
        bucket = "copy"
    else:
        bucket = "compute"
    cat = BUCKET_CATEGORY[bucket]
    pct = 100.0 * float(med.get(bucket, 0.0)) / steady
    unit = "step" if j.step_count else "window"
    sentence = (
        f"Across {j.rank_count} ranks the median rank's GPU is busy {100.0 * busy / total:.1f} % of its {unit}; the largest cost is "
        f"{_BUCKET_WORDS[bucket]}: {fmt_ns(med.get(bucket, 0.0))} per {unit}, {pct:.1f} % of it."
    )
    rank, cost, per_step, why = _slowest_rank(ja)
    if rank is not None:
        if cost:
            sentence += f" Rank {rank} holds the job back: the others wait {fmt_ns(per_step)} per {unit} for it at collectives ({fmt_ns(cost)} in all)"
        else:
            sentence += f" Rank {rank} has the slowest median step"
        sentence += f"{why}." if why else "."
    out.update(category=cat, label=LABELS[cat], headline=f"Bound by {LABELS[cat]}" + (f"; rank {rank} is the straggler" if cost else ""),
               bound=True, sentence=sentence, rank=rank, rank_cost_ns=int(cost), bucket=bucket)
    return out


_CAUSE_WORDS = {
    "input_pipeline": "it waits longer for input data",
    "host_sync": "it blocks longer in host syncs",
    "compute": "it has more GPU work (slower kernels or a bigger share of the data)",
    "gpu_idle": "its host is busier (Python, launches, untraced work) and leaves the GPU idle",
}


def _slowest_rank(ja: Any) -> tuple[int | None, int, int, str]:
    """(rank, held ns in all, held ns per step, "; cause" words) of the worst straggler, else the slowest rank."""
    stragglers = sorted((f for f in ja.findings if f.code == STRAGGLER_RULE), key=lambda f: -int(f.impact_ns))
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
