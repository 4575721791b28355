"""BASE against HEAD: is it the same workload, did the step get faster, and which ledger bucket moved.

The answer is one JSON-able dict (docs/diff-json.md, ``SCHEMA_VERSION``); the renderers draw it. Order of work:

1. **Comparability** (``match.py``): the same framework ops and input shapes per step; when they differ the
   diff says what differs and gives no verdict. GPU, vendor, driver and tool are context, never a refusal.
2. **Step time.** Median and spread per side and the change of the median with a bootstrap interval
   (``stats.shift``); per sample instead of per step when the batch size changed.
3. **Why.** The ledger per bucket in ns per step; kernels, kernel classes and framework ops per step; busy %,
   verdicts, findings new/fixed/worse (``baseline.compare``), numeric KPIs, the what-if check, ranks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..buckets import BUSY_BUCKETS
from ..version import __version__
from ..kernels import CLASSES
from ..units import fmt_ns
from . import side as S
from .match import comparability, context
from .stats import Shift, shift

SCHEMA_VERSION = 1

#: Rows kept in the kernel and op tables (largest |change| first).
MAX_ROWS = 200

FASTER, SLOWER, NO_CHANGE, INCONCLUSIVE, NOT_COMPARABLE = "faster", "slower", "no measurable change", "inconclusive", "not comparable"
#: "No measurable change" means the interval rules out any change larger than this % of the base step; an interval
#: that crosses zero but reaches beyond it says too little (three steps of a noisy run), and is inconclusive.
NO_CHANGE_MARGIN_PCT = 5.0
PASS, FAIL = "pass", "fail"


def compare(base: S.Side, head: S.Side, *, fail_if_slower: float | None = None, same_workload: bool = False) -> dict[str, Any]:
    """The diff of two sides (see the module docstring); ``fail_if_slower`` (%) adds the gate's result.
    ``same_workload``: the user vouches that both run the same model (a fix that rewrote the step, such as
    batching per-tensor ops, changes the op mix the check reads); the check's figures and reasons are kept and
    the document says the comparison rests on the user's word. Step markers must still agree."""
    comp = comparability(base, head)
    if same_workload and not comp["comparable"] and comp.get("in_common_pct") is not None:
        comp = {**comp, "comparable": True, "vouched": True,
                "reasons": ["compared on the user's word (--same-workload): " + (comp["reasons"][0] if comp["reasons"] else "the op mix differs")] + comp["reasons"][1:]}
    a, b = S.step_samples(base), S.step_samples(head)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "traceinsight-diff",
        "traceinsight_version": __version__,
        "base": _side_summary(base, a),
        "head": _side_summary(head, b),
        "context": context(base, head),
        "comparability": comp,
    }
    step = per_sample = None
    basis = "steps"
    if comp["comparable"] and not len(a) and not len(b):  # no step markers on either side: the GPU window, once
        a, b, basis = S.window_sample(base), S.window_sample(head), "gpu_window"
    if comp["comparable"] and len(a) and len(b):
        step = _shift_dict(a, b, shift(a, b))
        step["basis"] = basis
        ba, bb = comp.get("batch_base"), comp.get("batch_head")
        if ba and bb and ba != bb:
            per_sample = _shift_dict(a / ba, b / bb, shift(a / ba, b / bb))
            per_sample.update(basis=basis, batch_base=ba, batch_head=bb)
    out["step"] = step
    out["per_sample"] = per_sample
    out["verdict"] = verdict(comp, per_sample or step)
    out["ledger"] = ledger_diff(base, head)
    out["ledger_steps"] = {"base": S.ledger_steps(base), "head": S.ledger_steps(head)}
    out["sentence"] = sentence(out)
    out["kernels"], out["kernel_classes"] = kernel_diff(base, head)
    out["ops"] = op_diff(base, head)
    out["busy_pct"] = _pair(_steady_busy_pct(base), _steady_busy_pct(head))
    out["kpis"] = kpi_diff(base, head)
    out["findings"] = findings_diff(base, head)
    out["what_if"] = what_if_check(base, head, out)
    out["ranks"] = rank_diff(base, head)
    out["gate"] = gate(out, fail_if_slower) if fail_if_slower is not None else None
    return out


def _steady_busy_pct(side: S.Side) -> Any:
    """GPU busy % of the steady state (the window less its warm-up): the figure each report's verdict reads, so a
    whole-program capture's start-up does not hide the change. The whole window's figure when the report books no
    warm-up or its ledger is unreadable (reports are untrusted files)."""
    whole = side.kpis.get("gpu_busy_pct")
    v = side.verdict if isinstance(side.verdict, dict) else {}
    led = v.get("ledger_ns") if isinstance(v.get("ledger_ns"), dict) else {}
    try:
        window = float(v.get("window_ns") or 0)
        warm = float(led.get("idle_warmup") or 0)
        busy = sum(float(led.get(b) or 0) for b in BUSY_BUCKETS)
    except (TypeError, ValueError, OverflowError):  # an integer past float's range is damage too
        return whole
    if not all(math.isfinite(x) for x in (window, warm, busy)) or warm <= 0 or window - warm <= 0 or busy < 0:
        return whole
    return round(min(100.0 * busy / (window - warm), 100.0), 1)


def _pct(value: Any) -> float:
    """A finite number from a report field (reports are untrusted files), else 0."""
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return out if math.isfinite(out) else 0.0


# --- step time ---------------------------------------------------------------------------------------------
def _spread(x: np.ndarray) -> dict[str, Any]:
    if not len(x):
        return {"count": 0, "median_ns": None, "p10_ns": None, "p90_ns": None, "min_ns": None, "max_ns": None}
    p10, med, p90 = np.percentile(x, [10, 50, 90])
    return {"count": int(len(x)), "median_ns": float(med), "p10_ns": float(p10), "p90_ns": float(p90), "min_ns": float(x.min()), "max_ns": float(x.max())}


def _side_summary(side: S.Side, samples: np.ndarray) -> dict[str, Any]:
    v = side.verdict
    w = side.workload or {}
    return {
        "path": side.label,
        "format": side.trace.get("format"),
        "framework": side.trace.get("framework"),
        "steps": _spread(samples),
        "warmup_steps": sum(1 for s in S.steps(side) if s.get("warmup")),
        "batch": w.get("batch"),
        "busy_pct": side.kpis.get("gpu_busy_pct"),
        "verdict": {"category": v.get("category"), "label": v.get("label"), "headline": v.get("headline")},
    }


def _shift_dict(a: np.ndarray, b: np.ndarray, s: Shift) -> dict[str, Any]:
    ref = float(np.median(a)) or 1.0

    def pct(v: float | None) -> float | None:
        return None if v is None else round(max(100.0 * v / ref, -100.0), 2)

    return {
        "base_median_ns": float(np.median(a)),
        "head_median_ns": float(np.median(b)),
        "change_ns": s.estimate,
        "low_ns": None if s.low is None else max(s.low, -float(np.median(a))),  # a step cannot shrink by more than itself
        "high_ns": s.high,
        "change_pct": pct(s.estimate),
        "low_pct": pct(s.low),
        "high_pct": pct(s.high),
        "confidence": s.confidence,
        "method": "median difference, percentile bootstrap (seeded)",
    }


def verdict(comp: dict[str, Any], step: dict[str, Any] | None) -> str:
    """faster / slower (the interval excludes no change), no measurable change (the interval lies within
    ``NO_CHANGE_MARGIN_PCT`` of the base step), inconclusive (no interval: too few steps; or an interval so wide it
    holds both no change and a change larger than the margin), not comparable."""
    if not comp["comparable"]:
        return NOT_COMPARABLE
    if step is None or step["low_ns"] is None:
        return INCONCLUSIVE
    if step["high_ns"] < 0:
        return FASTER
    if step["low_ns"] > 0:
        return SLOWER
    lo, hi = step.get("low_pct"), step.get("high_pct")
    if lo is not None and hi is not None and (lo < -NO_CHANGE_MARGIN_PCT or hi > NO_CHANGE_MARGIN_PCT):
        return INCONCLUSIVE  # the interval holds no change, but also changes that matter: it cannot tell
    return NO_CHANGE


def _ms(ns: float | None, signed: bool = False) -> str:
    if ns is None:
        return "n/a"
    return ("+" if signed and ns > 0 else "") + fmt_ns(ns)


def sentence(d: dict[str, Any]) -> str:
    """One line: the verdict, the change with its interval, and the buckets that moved most."""
    v = d["verdict"]
    if v == NOT_COMPARABLE:
        reasons = d["comparability"]["reasons"]
        return "Not comparable: " + (reasons[0] if reasons else "the workloads differ")
    s = d["per_sample"] or d["step"]
    if s is None:
        return "No step time to compare: " + "; ".join(d["comparability"]["reasons"] or ["no steady-state steps"])
    unit = "per sample" if d["per_sample"] else ("step" if s.get("basis") != "gpu_window" else "GPU window")
    head = f"{v.capitalize()}: {unit} {_ms(s['change_ns'], True)} ({s['change_pct']:+.1f}%"
    head += f", {int(s['confidence'] * 100)}% CI {_ms(s['low_ns'], True)} to {_ms(s['high_ns'], True)})" if s["low_ns"] is not None else ", too few steps for an interval)"
    moved = [r for r in d["ledger"] if abs(r["change_ns"]) >= 0.05 * max(abs(d["step"]["change_ns"]) if d["step"] else 0.0, 1e5)][:3]
    if moved:
        head += ": " + ", ".join(f"{_label(r['bucket'])} {_ms(r['change_ns'], True)}" for r in moved)
    return head


def _label(bucket: str) -> str:
    return bucket.removeprefix("idle_").replace("_", " ")


# --- why ----------------------------------------------------------------------------------------------------
def ledger_diff(base: S.Side, head: S.Side) -> list[dict[str, Any]]:
    """Per bucket: ns per step before and after and the change, largest |change| first."""
    a, b = S.ledger_per_step(base), S.ledger_per_step(head)
    order = S.buckets(base) or S.buckets(head) or sorted(set(a) | set(b))
    rows = [
        {"bucket": k, "base_ns_per_step": a.get(k, 0.0), "head_ns_per_step": b.get(k, 0.0), "change_ns": b.get(k, 0.0) - a.get(k, 0.0)}
        for k in dict.fromkeys([*order, *a, *b])
        if a.get(k, 0.0) or b.get(k, 0.0)
    ]
    return sorted(rows, key=lambda r: -abs(r["change_ns"]))


def _stats(k: dict[str, Any] | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {"count": int(k.get("count", 0)), "total_ns": int(k.get("total_ns", 0)), "per_step": float(k.get("per_step", 0.0)), "ns_per_step": float(k.get("ns_per_step", 0.0))}


def kernel_diff(base: S.Side, head: S.Side) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Kernels per name (new, vanished, or matched across names through their framework op and class) and per class."""
    ka = {k["name"]: k for k in (base.workload or {}).get("kernels", [])}
    kb = {k["name"]: k for k in (head.workload or {}).get("kernels", [])}
    rows = []
    for name in dict.fromkeys([*ka, *kb]):
        x, y = ka.get(name), kb.get(name)
        ref = x or y
        rows.append({
            "name": name, "class": ref.get("class", "other"), "op": ref.get("op", ""),
            "base": _stats(x), "head": _stats(y),
            "change_ns_per_step": (y or {}).get("ns_per_step", 0.0) - (x or {}).get("ns_per_step", 0.0),
            "status": "same" if x and y else ("vanished" if x else "new"), "matched_with": [],
        })
    # names that differ but do the same work: the same framework op and class on both sides (cuBLAS vs hipBLASLt)
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"new": [], "vanished": []})
    for r in rows:
        if r["status"] in ("new", "vanished") and r["op"]:
            groups[(r["op"], r["class"])][r["status"]].append(r)
    for g in groups.values():
        if g["new"] and g["vanished"]:
            for r in g["new"]:
                r["status"], r["matched_with"] = "matched", [v["name"] for v in g["vanished"]]
            for r in g["vanished"]:
                r["status"], r["matched_with"] = "matched", [n["name"] for n in g["new"]]
    rows.sort(key=lambda r: (-abs(r["change_ns_per_step"]), r["name"]))
    classes = []
    for c in CLASSES:
        sa = [k for k in ka.values() if k.get("class") == c]
        sb = [k for k in kb.values() if k.get("class") == c]
        if not sa and not sb:
            continue
        na, nb = sum(k.get("ns_per_step", 0.0) for k in sa), sum(k.get("ns_per_step", 0.0) for k in sb)
        classes.append({"class": c, "base_ns_per_step": na, "head_ns_per_step": nb, "change_ns_per_step": nb - na,
                        "base_per_step": sum(k.get("per_step", 0.0) for k in sa), "head_per_step": sum(k.get("per_step", 0.0) for k in sb)})
    classes.sort(key=lambda r: -abs(r["change_ns_per_step"]))
    return rows[:MAX_ROWS], classes


def op_diff(base: S.Side, head: S.Side) -> list[dict[str, Any]]:
    """Top-level framework ops: count and GPU time per step, largest |change| first (vendor-neutral)."""
    oa = {o["name"]: o for o in (base.workload or {}).get("ops", [])}
    ob = {o["name"]: o for o in (head.workload or {}).get("ops", [])}
    rows = []
    for name in dict.fromkeys([*oa, *ob]):
        x, y = oa.get(name) or {}, ob.get(name) or {}
        rows.append({
            "name": name, "base_per_step": x.get("per_step"), "head_per_step": y.get("per_step"),
            "base_gpu_ns_per_step": x.get("gpu_ns_per_step"), "head_gpu_ns_per_step": y.get("gpu_ns_per_step"),
            "change_gpu_ns_per_step": float(y.get("gpu_ns_per_step") or 0.0) - float(x.get("gpu_ns_per_step") or 0.0),
            "status": "same" if x and y else ("vanished" if x else "new"),
        })
    rows.sort(key=lambda r: (-abs(r["change_gpu_ns_per_step"]), r["name"]))
    return rows[:MAX_ROWS]


def _pair(a: Any, b: Any) -> dict[str, Any]:
    num = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return {"base": a, "head": b, "change": (b - a) if num else None}


def kpi_diff(base: S.Side, head: S.Side) -> list[dict[str, Any]]:
    """Every numeric KPI both reports hold (peak memory, MFU and the like included when a report carries them)."""
    a, b = S.numeric_kpis(base), S.numeric_kpis(head)
    return [{"name": k, **_pair(a[k], b[k])} for k in a if k in b]


def findings_diff(base: S.Side, head: S.Side) -> dict[str, Any]:
    """Findings new / worse / unchanged / fixed, by fingerprint, as ``--baseline`` decides them."""
    from ..baseline import NEW, SAME, WORSE, compare as compare_findings

    fs = [
        SimpleNamespace(fingerprint=str(f.get("fingerprint")), impact_pct_span=_pct(f.get("impact_pct_span")), code=str(f.get("code", "")), title=str(f.get("title", "")), severity=str(f.get("severity", "")))
        for f in head.report.get("findings", [])
        if isinstance(f, dict)
    ]
    c = compare_findings(fs, base.report)  # type: ignore[arg-type]

    def brief(f: Any) -> dict[str, Any]:
        return {"code": f.code, "title": f.title, "severity": f.severity, "fingerprint": f.fingerprint, "impact_pct_span": round(f.impact_pct_span, 3),
                "base_impact_pct_span": c.before_pct.get(f.fingerprint)}

    return {
        "new": [brief(f) for f in fs if c.of(f) == NEW],
        "worse": [brief(f) for f in fs if c.of(f) == WORSE],
        "same": [brief(f) for f in fs if c.of(f) == SAME],
        "fixed": c.fixed,
        "counts": c.counts(),
    }


def what_if_check(base: S.Side, head: S.Side, d: dict[str, Any]) -> list[dict[str, Any]]:
    """For each BASE finding with a what-if that HEAD fixed (gone, or its share of the span halved): the step
    time BASE predicted for the fix against the step time HEAD measured."""
    if d["step"] is None or d["step"].get("basis") != "steps":
        return []
    now = {f.get("fingerprint"): _pct(f.get("impact_pct_span")) for f in head.report.get("findings", []) if isinstance(f, dict)}
    out = []
    for f in base.report.get("findings", []):
        w = f.get("what_if") if isinstance(f, dict) else None
        if not isinstance(w, dict) or not _pct(w.get("step_ns")):
            continue
        was = _pct(f.get("impact_pct_span"))
        fp = f.get("fingerprint")
        if fp in now and now[fp] > was / 2:
            continue
        measured = d["step"]["head_median_ns"]
        predicted = float(w["step_ns"])
        out.append({
            "code": str(f.get("code", "")), "title": str(f.get("title", "")), "transform": None if w.get("transform") is None else str(w.get("transform")),
            "status": "fixed" if fp not in now else "reduced",
            "base_step_ns": _pct(w.get("baseline_step_ns")) or d["step"]["base_median_ns"],
            "predicted_step_ns": predicted, "measured_step_ns": measured,
            "error_pct": round(100.0 * (measured - predicted) / predicted, 1),  # predicted > 0: checked above
        })
    return out


def rank_diff(base: S.Side, head: S.Side) -> dict[str, Any] | None:
    """Per rank: median step and busy % before and after, and the straggler (the slowest rank) on each side."""
    ra, rb = S.rank_samples(base), S.rank_samples(head)
    if len(ra) < 2 and len(rb) < 2:
        return None
    ba, bb = S.rank_busy(base), S.rank_busy(head)
    rows = []
    for r in sorted(set(ra) | set(rb)):
        ma = float(np.median(ra[r])) if r in ra else None
        mb = float(np.median(rb[r])) if r in rb else None
        rows.append({"rank": r, "base_median_ns": ma, "head_median_ns": mb,
                     "change_pct": round(100.0 * (mb - ma) / ma, 2) if ma and mb is not None else None,
                     "base_busy_pct": ba.get(r), "head_busy_pct": bb.get(r)})
    return {"rows": rows, "straggler_base": straggler(ra), "straggler_head": straggler(rb)}


#: A rank is a straggler when its median step is this much (%) over the median of the ranks' medians.
STRAGGLER_PCT = 5.0


def straggler(samples: dict[int, np.ndarray]) -> dict[str, Any] | None:
    if len(samples) < 2:
        return None
    med = {r: float(np.median(v)) for r, v in samples.items()}
    typical = float(np.median(list(med.values())))
    r = max(med, key=lambda k: (med[k], -k))
    excess = 100.0 * (med[r] - typical) / typical if typical else 0.0
    return {"rank": r, "excess_pct": round(excess, 2), "is_straggler": excess >= STRAGGLER_PCT}


# --- gate ---------------------------------------------------------------------------------------------------
def gate(d: dict[str, Any], pct: float) -> dict[str, Any]:
    """``--fail-if-slower PCT``: fail when the change is over PCT % and its interval excludes no change;
    inconclusive when it is over PCT % but within the noise (or there is no interval); pass otherwise."""
    if d["verdict"] == NOT_COMPARABLE:
        return {"fail_if_slower_pct": pct, "result": NOT_COMPARABLE}
    s = d["per_sample"] or d["step"]
    if s is None:
        return {"fail_if_slower_pct": pct, "result": INCONCLUSIVE}
    if s["change_pct"] is None or s["change_pct"] <= pct:
        return {"fail_if_slower_pct": pct, "result": PASS}
    if s["low_ns"] is not None and s["low_ns"] > 0:
        return {"fail_if_slower_pct": pct, "result": FAIL}
    return {"fail_if_slower_pct": pct, "result": INCONCLUSIVE}
