"""The steps and user ranges as every report shows them: which marker made the steps and why, their spread and
outlier, and user ranges projected onto the GPU. The figures are derived data (``traceinsight.derive.steptable.report``,
kept in the analysis' store); this module only words them."""

from __future__ import annotations

from typing import Any

from traceinsight.vocab.units import fmt_ns


def step_report(analysis: Any) -> dict:
    """The analysis' steps and user ranges (``traceinsight.derive.steptable.report``, kept in its store): read, never built
    here. The store hands over its views and its ledger's per-step frame; an analysis made without the engine's
    store (``views`` None) has no steps to show."""
    from traceinsight.derive.steptable import report

    store, source = analysis.views, analysis.timeline.meta.extra.get("steps_source")
    if store is None:
        return report(None, None, source)
    return report(store.views, lambda: store.ledger.by_step, source)


def spread_sentence(steps: dict) -> str:
    """"6 steps (train_iteration, picked automatically: ...): median 1.00 ms, p10-p90 ..., min-max ...; step 3 is 4.0x ..."."""
    src = steps["source"]
    if not steps["count"]:
        return f"No steps: {src['why']}."
    sp = steps["spread"]
    how = {"profiler": "the profiler's markers", "auto": "picked automatically", "chosen": "chosen with --step-range",
           "optimizer": "found from the optimizer's calls"}.get(src["how"], src["how"])
    said = how if src["how"] == "profiler" else f"{how}; {src['why']}"  # the profiler's markers need no second reason
    text = (f"{steps['count']} steps from {src['marker']} ({said}). Steady steps ({sp['steps']}): median {fmt_ns(sp['median_ns'])}, "
            f"p10-p90 {fmt_ns(sp['p10_ns'])}-{fmt_ns(sp['p90_ns'])}, min-max {fmt_ns(sp['min_ns'])}-{fmt_ns(sp['max_ns'])}")
    o = steps.get("outlier")
    if o:
        text += f"; step {o['step']} ({o['name']}) is {o['x_median']}x the median"
        if o["cause_ns"] > 0:
            text += f", mostly more {o['cause'].replace('_', ' ')} (+{fmt_ns(o['cause_ns'])})"
        else:  # no ledger bucket grew (a CPU-only trace has no GPU window): the extra time is the host's alone
            text += ", with no more GPU time than the others (the extra time is on the host)"
    return text + "."


def steps_markdown(rep: dict, esc) -> list[str]:
    """Markdown lines: the steps sentence, then the per-range table (when there are user ranges)."""
    out = ["**Steps:** " + esc(spread_sentence(rep["steps"]), 700), ""]
    if rep["ranges"]:
        out += ["| user range | count | host time | GPU time launched inside | GPU ops |", "|---|---:|---:|---:|---:|"]
        for r in rep["ranges"][:12]:
            out.append(f"| {esc(r['name'], 80)} | {r['count']} | {fmt_ns(r['host_ns'])} | {fmt_ns(r['gpu_ns'])} | {r['gpu_ops']} |")
        out.append("")
    return out
