"""BASE against HEAD: is it the same workload, did the step get faster, and which ledger bucket moved.

The answer is one JSON-able dict (docs/diff-json.md, ``SCHEMA_VERSION``); the renderers draw it. Order of work:

1. **Comparability** (``match.py``): the same framework ops and input shapes per step; when they differ the
   diff says what differs and gives no verdict. GPU, vendor, driver and tool are context, never a refusal.
2. **Samples.** Steady steps; when they are too few for an interval (or absent), the occurrences of a region
   both sides repeat (a compiled region, a graph replay, a repeated user range: ``workload.repeats``); without
   either, each side's GPU window once. Per sample instead of per step when the batch size changed.
3. **Evidence** (``stats``): the Hodges–Lehmann shift of the samples with its Mann–Whitney interval, the same
   test per ledger bucket over the steps, outlier steps named with the bucket that made them slow, and what the
   sample counts can detect. The decision rule is docs/diff.md's: faster/slower when the step shift is
   significant, or when the buckets that moved significantly (Holm) account for the step's change.
4. **Why.** The ledger per bucket in ns per step; kernels (paired across names only within a class and a
   launching op, at a similar time), kernel classes and framework ops per step; busy %, verdicts, findings
   new/fixed/worse (``baseline.compare``), the figures both reports carry, the what-if check, ranks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np

from traceinsight.vocab.buckets import BUSY_BUCKETS, WARMUP_BUCKET
from traceinsight.vocab.version import __version__
from traceinsight.vocab.kernels import CLASSES
from traceinsight.vocab.units import fmt_ns
from traceinsight.delta import side as S
from traceinsight.delta.match import comparability, context
from traceinsight.delta.stats import CONFIDENCE, Shift, interval_possible, power, shift
from traceinsight.vocab.units import finite

SCHEMA_VERSION = 2

#: Rows kept in the kernel and op tables (largest |change| first).
MAX_ROWS = 200

FASTER, SLOWER, NO_CHANGE, INCONCLUSIVE, NOT_COMPARABLE = "faster", "slower", "no measurable change", "inconclusive", "not comparable"
#: "No measurable change" means the interval rules out any change larger than this % of the base step; an interval
#: that crosses zero but reaches beyond it says too little (three steps of a noisy run), and is inconclusive.
NO_CHANGE_MARGIN_PCT = 5.0
PASS, FAIL = "pass", "fail"

#: A bucket is tested as a cause of the step's change when its shift is at least this share of the step's.
CANDIDATE_SHARE = 0.2
#: The buckets that moved account for the step's change when their net shift is this many times it (low, high).
ACCOUNT_RANGE = (0.5, 2.0)
#: A step's ledger sees the whole step when its window covers at least this share of the step's time; the
#: trace's first step often starts before the GPU's first activity, and its data wait falls outside the ledger.
MIN_COVERAGE = 0.9
#: An outlier sample lies further from its side's median than this many robust standard deviations (1.4826 ×
#: median absolute deviation) and more than ``OUTLIER_MIN_PCT`` % of the median; at most ``MAX_OUTLIERS`` a side.
OUTLIER_SD = 3.0
OUTLIER_MIN_PCT = 5.0
MAX_OUTLIERS = 3
#: Words for the kinds of repeated regions (``workload.REPEAT_KINDS``).
REPEAT_WORDS = {"compiled_region": "compiled region", "graph_replay": "graph replay", "user_range": "user range"}


def compare(base: S.Side, head: S.Side, *, fail_if_slower: float | None = None, same_workload: bool = False) -> dict[str, Any]:
    """The diff of two sides (see the module docstring); ``fail_if_slower`` (%) adds the gate's result.
    ``same_workload``: the user vouches that both run the same model (a fix that rewrote the step, such as
    batching per-tensor ops, changes the op mix the check reads); the check's figures and reasons are kept and
    the document says the comparison rests on the user's word. Step markers must still agree."""
    comp = comparability(base, head)
    if same_workload and not comp["comparable"] and comp.get("in_common_pct") is not None:
        comp = {**comp, "comparable": True, "vouched": True,
                "reasons": ["compared on the user's word (--same-workload): " + (comp["reasons"][0] if comp["reasons"] else "the op mix differs")] + comp["reasons"][1:]}
    a_steps, b_steps = S.step_durations(base), S.step_durations(head)
    a, b = np.array(list(a_steps.values()), dtype=float), np.array(list(b_steps.values()), dtype=float)
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
    samples: dict[str, Any] = {"basis": "steps", "name": None, "base_count": int(len(a)), "head_count": int(len(b)), "note": None}
    if comp["comparable"] and not interval_possible(len(a), len(b)):
        rep = common_repeats(base, head)
        if rep is not None and (interval_possible(len(rep[2]), len(rep[3])) or not len(a) or not len(b)):
            kind, name, ra, rb = rep
            unit = "steps" if len(a) or len(b) else "step markers"
            why = f"{len(a)} and {len(b)} steps are too few for an interval" if len(a) and len(b) else f"no {unit}"
            samples = {"basis": kind, "name": name, "base_count": int(len(ra)), "head_count": int(len(rb)),
                       "note": f"{why}; the {REPEAT_WORDS.get(kind, kind)} \u201c{name}\u201d runs {len(ra)} and {len(rb)} times: each run is a sample "
                               + ("(its GPU time, first kernel to last)" if _has_gpu_work(base) and _has_gpu_work(head) else
                                  "(its host duration: a trace without GPU activity has no kernels to time it by)")}
            a, b = ra, rb
    if comp["comparable"] and not len(a) and not len(b):  # no step markers on either side: the GPU window, once
        a, b = S.window_sample(base), S.window_sample(head)
        samples = {"basis": "gpu_window", "name": None, "base_count": int(len(a)), "head_count": int(len(b)),
                   "note": "no step markers or repeated regions: each side's GPU window is its one sample (no interval)"}
    basis = samples["basis"]
    scale_a = scale_b = 1.0
    if comp["comparable"] and len(a) and len(b):
        step = _shift_dict(a, b, shift(a, b))
        step["basis"] = basis
        ba, bb = comp.get("batch_base"), comp.get("batch_head")
        if ba and bb and ba != bb:
            scale_a, scale_b = float(ba), float(bb)
            per_sample = _shift_dict(a / ba, b / bb, shift(a / ba, b / bb))
            per_sample.update(basis=basis, batch_base=ba, batch_head=bb)
    out["step"] = step
    out["per_sample"] = per_sample
    out["samples"] = samples
    decisive = per_sample or step
    evidence = None
    if decisive is not None and basis == "steps":
        evidence = bucket_evidence(base, head, a_steps, b_steps, decisive["change_ns"], scale_a, scale_b)
    out["evidence"] = evidence
    out["outliers"] = outliers(base, head, a, b, basis, a_steps, b_steps) if decisive is not None else []
    pw = power(a / scale_a, b / scale_b) if decisive is not None and len(a) and len(b) else None
    out["power"] = None if pw is None else power_dict(pw, basis)
    out["verdict"] = verdict(comp, decisive, evidence)
    out["decided_by"] = _decided_by(out["verdict"], decisive, evidence)
    out["ledger"] = ledger_diff(base, head, evidence)
    out["ledger_steps"] = {"base": S.ledger_steps(base), "head": S.ledger_steps(head)}
    out["sentence"] = sentence(out)
    out["kernels"], out["kernel_classes"] = kernel_diff(base, head)
    out["ops"] = op_diff(base, head)
    out["busy_pct"] = _pair(_steady_busy_pct(base), _steady_busy_pct(head))
    out["kpis"] = kpi_diff(base, head)
    out["what_if"], out["what_if_note"] = what_if_check(base, head, out)
    out["findings"] = findings_diff(base, head)
    out["ranks"] = rank_diff(base, head)
    out["gate"] = gate(out, fail_if_slower) if fail_if_slower is not None else None
    return out


#: A repeated region stands in for the steps only when its runs hold at least this share of the steps' time (or of
#: the GPU window without steps) on both sides: the samples must be most of the work, not an optimizer call.
MIN_REPEAT_SHARE = 0.5


def _covers(side: S.Side, durs: list[float]) -> bool:
    steps = S.step_samples(side)
    whole = float(steps.sum()) if len(steps) else float(S.window_sample(side).sum())
    return whole <= 0 or sum(durs) >= MIN_REPEAT_SHARE * whole


def _has_gpu_work(side: S.Side) -> bool:
    """Whether the side's report saw GPU activity (its repeated regions are then timed by their kernels)."""
    busy = side.kpis.get("gpu_busy_pct")
    return isinstance(busy, (int, float)) and not isinstance(busy, bool) and math.isfinite(busy) and busy > 0


def common_repeats(base: S.Side, head: S.Side) -> tuple[str, str, np.ndarray, np.ndarray] | None:
    """The repeated region both sides run, as samples: the first kind (compiled region, graph replay, user range)
    they share a name of that holds most of the time (``MIN_REPEAT_SHARE``), the name with the most occurrences on
    the sparser side."""
    ra = {(r["kind"], r["name"]): r["dur_ns"] for r in S.repeats(base)}
    rb = {(r["kind"], r["name"]): r["dur_ns"] for r in S.repeats(head)}
    both = [k for k in ra if k in rb and _covers(base, ra[k]) and _covers(head, rb[k])]
    if not both:
        return None
    order = {k: i for i, k in enumerate(REPEAT_WORDS)}
    kind, name = min(both, key=lambda k: (order.get(k[0], len(order)), -min(len(ra[k]), len(rb[k])), k[1]))
    return kind, name, np.array(ra[(kind, name)], dtype=float), np.array(rb[(kind, name)], dtype=float)


def _steady_busy_pct(side: S.Side) -> Any:
    """GPU busy % of the steady state (the window less its warm-up): the figure each report's verdict reads, so a
    whole-program capture's start-up does not hide the change. The whole window's figure when the report books no
    warm-up or its ledger is unreadable (reports are untrusted files)."""
    whole = side.kpis.get("gpu_busy_pct")
    v = side.verdict if isinstance(side.verdict, dict) else {}
    led = v.get("ledger_ns") if isinstance(v.get("ledger_ns"), dict) else {}
    try:
        window = float(v.get("window_ns") or 0)
        warm = float(led.get(WARMUP_BUCKET) or 0)
        busy = sum(float(led.get(b) or 0) for b in BUSY_BUCKETS)
    except (TypeError, ValueError, OverflowError):  # an integer past float's range is damage too
        return whole
    if not all(math.isfinite(x) for x in (window, warm, busy)) or warm <= 0 or window - warm <= 0 or busy < 0:
        return whole
    return round(min(100.0 * busy / (window - warm), 100.0), 1)


_pct = finite  # a finite number from a report field (reports are untrusted files), else 0


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
        "p_value": None if s.p_value is None else round(s.p_value, 5),
        "separated": s.separated,
        "base_count": int(len(a)),
        "head_count": int(len(b)),
        "method": "Hodges-Lehmann shift, Mann-Whitney interval, exact rank test",
    }


def verdict(comp: dict[str, Any], step: dict[str, Any] | None, evidence: dict[str, Any] | None = None) -> str:
    """faster / slower: the step interval excludes no change, or the ledger buckets that moved significantly
    account for the step's change (``bucket_evidence``); no measurable change: the interval lies within
    ``NO_CHANGE_MARGIN_PCT`` of the base step; inconclusive: no interval (too few samples) and no bucket
    evidence, or an interval so wide it holds both no change and a change larger than the margin."""
    if not comp["comparable"]:
        return NOT_COMPARABLE
    if step is None:
        return INCONCLUSIVE
    if step["high_ns"] is not None and step["high_ns"] < 0:
        return FASTER
    if step["low_ns"] is not None and step["low_ns"] > 0:
        return SLOWER
    if evidence and evidence.get("accounts") and step["change_ns"]:
        return FASTER if step["change_ns"] < 0 else SLOWER
    if step["low_ns"] is None and step.get("separated") and one_sided_floor(step) <= 1.0 - CONFIDENCE:
        return FASTER if step["separated"] < 0 else SLOWER
    if step["low_ns"] is None:
        return INCONCLUSIVE
    lo, hi = step.get("low_pct"), step.get("high_pct")
    if lo is not None and hi is not None and (lo < -NO_CHANGE_MARGIN_PCT or hi > NO_CHANGE_MARGIN_PCT):
        return INCONCLUSIVE  # the interval holds no change, but also changes that matter: it cannot tell
    return NO_CHANGE


def one_sided_floor(step: dict[str, Any]) -> float:
    """The one-sided exact p-value of a complete separation: 1 / C(n+m, n), the chance that every sample of one
    side lands below every sample of the other when nothing changed (3 and 3 steps: 1/20)."""
    n, m = int(step.get("base_count") or 0), int(step.get("head_count") or 0)
    return 1.0 / math.comb(n + m, n) if n and m else 1.0


def _decided_by(v: str, step: dict[str, Any] | None, evidence: dict[str, Any] | None) -> str | None:
    """``step`` (the interval), ``buckets`` (the ledger), or ``separation`` (too few samples for an interval, but
    every sample of one side beyond every sample of the other: the most that few samples can show)."""
    if v not in (FASTER, SLOWER) or step is None:
        return None
    if (step["high_ns"] is not None and step["high_ns"] < 0) or (step["low_ns"] is not None and step["low_ns"] > 0):
        return "step"
    if evidence and evidence.get("accounts"):
        return "buckets"
    return "separation"


# --- evidence per step and bucket ----------------------------------------------------------------------------
def _kept_ledger(side: S.Side, durations: dict[int, int], who: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The steps whose ledger sees the whole step, and a note per step left out (its ledger window covers less
    than ``MIN_COVERAGE`` of it: the time outside, often the first step's data wait, is in no bucket)."""
    kept, clipped = [], []
    for r in S.ledger_steps(side):
        dur = durations.get(r["step"])
        if dur is None:
            continue
        cover = r.get("window_ns", 0.0) / dur if dur > 0 else 1.0
        if r.get("window_ns") and cover < MIN_COVERAGE:
            clipped.append({"side": who, "step": r["step"], "dur_ns": float(dur), "window_ns": float(r["window_ns"]), "coverage_pct": round(100 * cover, 1)})
        else:
            kept.append(r)
    return kept, clipped


def bucket_evidence(base: S.Side, head: S.Side, a_steps: dict[int, int], b_steps: dict[int, int], step_change: float,
                    scale_a: float = 1.0, scale_b: float = 1.0) -> dict[str, Any]:
    """Each ledger bucket tested over the steps like the step time (Hodges–Lehmann shift, rank test). Buckets whose
    shift is at least ``CANDIDATE_SHARE`` of the step's are the candidates; those the rank test separates, with
    Holm's correction over the candidates, *moved*; they *account* for the step's change when their net shift has
    its sign and lies within ``ACCOUNT_RANGE`` times it. Steps whose ledger does not see the whole step are left
    out (``clipped``)."""
    ka, ca = _kept_ledger(base, a_steps, "base")
    kb, cb = _kept_ledger(head, b_steps, "head")
    res: dict[str, Any] = {"base_steps": len(ka), "head_steps": len(kb), "clipped": ca + cb, "buckets": [], "moved": [],
                           "net_moved_ns": 0.0, "accounts": False, "alpha": round(1.0 - CONFIDENCE, 4)}
    if not ka or not kb or not interval_possible(len(ka), len(kb)) and len(ka) + len(kb) < 4:
        return res
    order = S.buckets(base) or S.buckets(head)
    names = list(dict.fromkeys([*order, *(k for r in ka + kb for k in r["ns"])]))
    rows = []
    for bk in names:
        x = np.array([float(r["ns"].get(bk, 0.0)) for r in ka]) / scale_a
        y = np.array([float(r["ns"].get(bk, 0.0)) for r in kb]) / scale_b
        if not x.any() and not y.any():
            continue
        t = shift(x, y)
        lower = float(np.mean(np.subtract.outer(y, x) < 0))
        rows.append({"bucket": bk, "base_median_ns": float(np.median(x)), "head_median_ns": float(np.median(y)),
                     "base_min_ns": float(x.min()), "base_max_ns": float(x.max()), "head_min_ns": float(y.min()), "head_max_ns": float(y.max()),
                     "shift_ns": t.estimate, "low_ns": t.low, "high_ns": t.high, "p_value": round(t.p_value, 5) if t.p_value is not None else None,
                     "separated": t.separated, "head_lower_pairs_pct": round(100 * lower, 1), "candidate": False, "moved": False})
    cands = [r for r in rows if step_change and abs(r["shift_ns"]) >= CANDIDATE_SHARE * abs(step_change) and r["p_value"] is not None]
    for r in cands:
        r["candidate"] = True
    alpha = 1.0 - CONFIDENCE
    for i, r in enumerate(sorted(cands, key=lambda r: (r["p_value"], -abs(r["shift_ns"])))):  # Holm: step down while each passes
        if r["p_value"] > alpha / (len(cands) - i):
            break
        r["moved"] = True
    rows.sort(key=lambda r: -abs(r["shift_ns"]))
    moved = [r["bucket"] for r in rows if r["moved"]]
    net = float(sum(r["shift_ns"] for r in rows if r["moved"]))
    ratio = net / step_change if step_change else 0.0
    res.update(buckets=rows, moved=moved, net_moved_ns=net, accounts=bool(moved) and ACCOUNT_RANGE[0] <= ratio <= ACCOUNT_RANGE[1])
    return res


def outliers(base: S.Side, head: S.Side, a: np.ndarray, b: np.ndarray, basis: str, a_steps: dict[int, int], b_steps: dict[int, int]) -> list[dict[str, Any]]:
    """Samples far from their side's median (``OUTLIER_SD`` robust SDs and ``OUTLIER_MIN_PCT`` %), each with the
    ledger bucket that differs most from the side's typical step (steps only) and the time its ledger missed."""
    out = []
    for who, side, x, durations in (("base", base, a, a_steps), ("head", head, b, b_steps)):
        if len(x) < 3:
            continue
        med = float(np.median(x))
        sd = 1.4826 * float(np.median(np.abs(x - med)))
        limit = max(OUTLIER_SD * sd, OUTLIER_MIN_PCT / 100 * abs(med))
        far = np.flatnonzero(np.abs(x - med) > limit)
        far = far[np.argsort(-np.abs(x[far] - med), kind="stable")][:MAX_OUTLIERS]
        keys = list(durations) if basis == "steps" else list(range(1, len(x) + 1))
        ledger = {r["step"]: r for r in S.ledger_steps(side)} if basis == "steps" else {}
        typical: dict[str, float] = {}
        if ledger:
            for bk in {k for r in ledger.values() for k in r["ns"]}:
                typical[bk] = float(np.median([r["ns"].get(bk, 0.0) for r in ledger.values()]))
        for i in far.tolist():
            key = keys[i] if i < len(keys) else i + 1
            row = {"side": who, "basis": basis, "sample": int(key), "dur_ns": float(x[i]), "excess_ns": float(x[i] - med),
                   "bucket": None, "bucket_excess_ns": None, "outside_ledger_ns": None}
            r = ledger.get(key)
            if r is not None:
                sign = 1.0 if x[i] > med else -1.0
                diffs = {bk: r["ns"].get(bk, 0.0) - typical.get(bk, 0.0) for bk in typical}
                if diffs:
                    bk = max(diffs, key=lambda k: (sign * diffs[k], k))
                    if sign * diffs[bk] > 0:
                        row.update(bucket=bk, bucket_excess_ns=float(diffs[bk]))
                if r.get("window_ns") and r["window_ns"] < MIN_COVERAGE * x[i]:
                    row["outside_ledger_ns"] = float(x[i] - r["window_ns"])
            out.append(row)
    return out


def power_dict(p: Any, basis: str) -> dict[str, Any]:
    unit = "steps" if basis == "steps" else "samples"
    if p.detectable_pct is None:
        said = (f"with {p.n_base} and {p.n_head} {unit} no change can be told from noise (a 95% interval needs at least "
                f"4 and 4, or 3 and 5); record \u2265 {p.steps_for_target} {unit} a side to detect 5%")
    else:
        said = (f"with {p.n_base} and {p.n_head} {unit} (spread {p.spread_pct:.1f}% of the BASE median), changes under "
                f"{p.detectable_pct:.1f}% cannot be told from noise; record \u2265 {p.steps_for_target} {unit} a side to detect 5%")
    return {"n_base": p.n_base, "n_head": p.n_head, "spread_pct": p.spread_pct, "detectable_pct": p.detectable_pct,
            "steps_for_5pct": p.steps_for_target, "sentence": said}


def _ms(ns: float | None, signed: bool = False) -> str:
    if ns is None:
        return "n/a"
    return ("+" if signed and ns > 0 else "") + fmt_ns(ns)


def _unit(d: dict[str, Any]) -> str:
    basis = d["samples"]["basis"] if d.get("samples") else "steps"
    what = "step" if basis == "steps" else ("GPU window" if basis == "gpu_window" else REPEAT_WORDS.get(basis, "sample"))
    return f"per sample ({what} / batch)" if d["per_sample"] else what


def _separation(r: dict[str, Any], unit: str) -> str:
    lab = _label(r["bucket"])
    if r["separated"]:
        hi, lo = ("BASE", "HEAD") if r["separated"] < 0 else ("HEAD", "BASE")
        rng = {"BASE": (r["base_min_ns"], r["base_max_ns"]), "HEAD": (r["head_min_ns"], r["head_max_ns"])}
        return (f"every {hi} {unit}'s {lab} ({_ms(rng[hi][0])}\u2013{_ms(rng[hi][1])}) is above every {lo} {unit}'s "
                f"({_ms(rng[lo][0])}\u2013{_ms(rng[lo][1])})")
    share = r["head_lower_pairs_pct"] if r["shift_ns"] < 0 else 100 - r["head_lower_pairs_pct"]
    return f"HEAD's {lab} is {'lower' if r['shift_ns'] < 0 else 'higher'} in {share:.0f}% of the {unit} pairs"


def outlier_words(o: dict[str, Any]) -> str:
    what = "step" if o["basis"] == "steps" else "run"
    text = f"{o['side'].upper()} {what} {o['sample']} ({_ms(o['excess_ns'], True)} vs its side's median"
    if o.get("bucket"):
        text += f": {_label(o['bucket'])} {_ms(o['bucket_excess_ns'], True)}"
    if o.get("outside_ledger_ns"):
        text += f", {_ms(o['outside_ledger_ns'])} outside the ledger's window"
    return text + ")"


def sentence(d: dict[str, Any]) -> str:
    """One line: the verdict, the change with its interval, what decided it (the buckets that moved, and how
    consistently), and the outliers."""
    v = d["verdict"]
    if v == NOT_COMPARABLE:
        reasons = d["comparability"]["reasons"]
        return "Not comparable: " + (reasons[0] if reasons else "the workloads differ")
    s = d["per_sample"] or d["step"]
    if s is None:
        return "No step time to compare: " + "; ".join(d["comparability"]["reasons"] or ["no steady-state steps"])
    unit = _unit(d)
    basis = (d.get("samples") or {}).get("basis", "steps")
    noun = {"steps": "step", "gpu_window": "sample"}.get(basis, "run")
    ci = f"{int(s['confidence'] * 100)}% CI {_ms(s['low_ns'], True)} to {_ms(s['high_ns'], True)}" if s["low_ns"] is not None else None
    head = f"{v.capitalize()}: {unit} {_ms(s['change_ns'], True)} ({s['change_pct']:+.1f}%"
    ev = d.get("evidence") or {}
    if d.get("decided_by") == "buckets":
        head += ")"
        moved = [r for r in ev["buckets"] if r["moved"]]
        head += "; decided by the ledger: " + "; ".join(f"{_label(r['bucket'])} {_ms(r['shift_ns'], True)} per {noun}, {_separation(r, noun)} (p = {r['p_value']:.3g})" for r in moved)
        head += "; the step times alone do not settle it (" + (ci or "too few for an interval") + ")"
    elif d.get("decided_by") == "separation":
        slow, fast = ("BASE", "HEAD") if s["separated"] < 0 else ("HEAD", "BASE")
        head += (f"); too few {noun}s for an interval, but every {slow} {noun} is slower than every {fast} {noun}: the most "
                 f"{s['base_count']} and {s['head_count']} {noun}s can show (one-sided p = {one_sided_floor(s):.2g})")
    else:
        head += f", {ci})" if ci else f", too few {noun}s for an interval)"
        moved_rows = [r for r in d["ledger"] if abs(r["change_ns"]) >= 0.05 * max(abs(d["step"]["change_ns"]) if d["step"] else 0.0, 1e5)][:3]
        if moved_rows and (d.get("samples") or {}).get("basis", "steps") == "steps":
            head += ": " + ", ".join(f"{_label(r['bucket'])} {_ms(r['change_ns'], True)}" for r in moved_rows)
    if d.get("outliers"):
        head += "; outlier" + ("s" if len(d["outliers"]) > 1 else "") + ": " + ", ".join(outlier_words(o) for o in d["outliers"])
    return head


def _label(bucket: str) -> str:
    return bucket.removeprefix("idle_").replace("_", " ")


# --- why ----------------------------------------------------------------------------------------------------
def ledger_diff(base: S.Side, head: S.Side, evidence: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per bucket: ns per step before and after (means over the steady steps) and the change, largest |change|
    first, with the bucket's test over the steps (``shift_ns``, ``p_value``, ``moved``) where there is one."""
    a, b = S.ledger_per_step(base), S.ledger_per_step(head)
    order = S.buckets(base) or S.buckets(head) or sorted(set(a) | set(b))
    tests = {r["bucket"]: r for r in (evidence or {}).get("buckets", [])}
    rows = []
    for k in dict.fromkeys([*order, *a, *b]):
        if not (a.get(k, 0.0) or b.get(k, 0.0)):
            continue
        t = tests.get(k)
        rows.append({"bucket": k, "base_ns_per_step": a.get(k, 0.0), "head_ns_per_step": b.get(k, 0.0), "change_ns": b.get(k, 0.0) - a.get(k, 0.0),
                     "shift_ns": None if t is None else t["shift_ns"], "p_value": None if t is None else t["p_value"],
                     "moved": bool(t and t["moved"])})
    return sorted(rows, key=lambda r: -abs(r["change_ns"]))


def _stats(k: dict[str, Any] | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {"count": int(k.get("count", 0)), "total_ns": int(k.get("total_ns", 0)), "per_step": float(k.get("per_step", 0.0)), "ns_per_step": float(k.get("ns_per_step", 0.0))}


#: "Renamed": a kernel found on one side only pairs with one found on the other side only when both do the same
#: kind of work (class) for the same framework op and take a similar time (the smaller at least this share of the
#: larger); anything else is removed + new.
RENAME_MIN_RATIO = 0.5


def _class_of(k: dict[str, Any]) -> str:
    """The kernel's class by the shared classifier (``kernels``, the efficiency view's patterns), so a report
    written before a pattern was added (SageAttention's ``sage_fwd`` read as "other") compares by today's rule; a
    name the patterns do not know keeps the report's class, and copies and memsets the class their kind gave them."""
    from traceinsight.vocab.kernels import classify

    given = str(k.get("class") or "other")
    if given == "copy":
        return given
    by_name = classify(str(k.get("name", "")))
    return by_name if by_name != "other" or given not in CLASSES else given


def kernel_diff(base: S.Side, head: S.Side) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Kernels per name (same, new, vanished, or matched: renamed, see ``RENAME_MIN_RATIO``) and per class."""
    ka = {k["name"]: dict(k, **{"class": _class_of(k)}) for k in (base.workload or {}).get("kernels", [])}
    kb = {k["name"]: dict(k, **{"class": _class_of(k)}) for k in (head.workload or {}).get("kernels", [])}
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
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"new": [], "vanished": []})
    for r in rows:
        if r["status"] in ("new", "vanished") and r["op"]:
            groups[(r["op"], r["class"])][r["status"]].append(r)
    for g in groups.values():
        pairs = []
        for v in g["vanished"]:
            for n in g["new"]:
                tv, tn = float((v["base"] or {}).get("ns_per_step", 0.0)), float((n["head"] or {}).get("ns_per_step", 0.0))
                ratio = min(tv, tn) / max(tv, tn) if max(tv, tn) > 0 else 1.0
                if ratio >= RENAME_MIN_RATIO:
                    pairs.append((-ratio, v["name"], n["name"], v, n))
        used: set[str] = set()
        for _, _, _, v, n in sorted(pairs, key=lambda p: p[:3]):  # the closest times first, names break ties
            if v["name"] in used or n["name"] in used:
                continue
            used.update((v["name"], n["name"]))
            v["status"], v["matched_with"] = "matched", [n["name"]]
            n["status"], n["matched_with"] = "matched", [v["name"]]
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


#: Figures both reports may carry: name -> (label, unit). Units: ``ns`` (a time), ``pct``, ``count``, ``bytes``,
#: ``flop``. A name not listed is labelled from its key and its unit read off its suffix.
FIGURES: dict[str, tuple[str, str]] = {
    "span_ns": ("trace span", "ns"),
    "gpu_busy_pct": ("GPU busy (whole window)", "pct"),
    "steady_busy_pct": ("GPU busy (steady state)", "pct"),
    "findings": ("findings", "count"),
    "steps": ("steps in the trace", "count"),
    "mean_step_ns": ("mean step", "ns"),
    "est_savings_ns": ("estimated saving (all findings)", "ns"),
    "est_savings_gpu_ns": ("estimated GPU-time saving", "ns"),
    "largest_saving_ns": ("largest single saving", "ns"),
    "modelled_speedup_ns": ("what-if speed-up, modelled", "ns"),
    "avoidable_idle_ns": ("avoidable GPU idle", "ns"),
    "efficiency.gpu_time_ns": ("GPU kernel time, whole capture", "ns"),
    "efficiency.model_flops": ("model FLOPs, whole capture", "flop"),
    "efficiency.mfu_pct": ("MFU", "pct"),
    "memory.um_page_faults": ("unified-memory page faults", "count"),
    "memory.allocator_calls": ("allocator calls", "count"),
    "memory.peak_allocated_bytes": ("peak memory allocated", "bytes"),
    "memory.peak_reserved_bytes": ("peak memory reserved", "bytes"),
    "memory.headroom_bytes": ("memory headroom (smallest)", "bytes"),
}
_SUFFIX_UNITS = (("_ns", "ns"), ("_pct", "pct"), ("_bytes", "bytes"), ("_flops", "flop"))


def figure_label(name: str) -> tuple[str, str]:
    if name in FIGURES:
        return FIGURES[name]
    unit = next((u for suffix, u in _SUFFIX_UNITS if name.endswith(suffix)), "number")
    key = name
    for suffix, _ in _SUFFIX_UNITS:
        key = key.removesuffix(suffix)
    return key.replace(".", ": ").replace("_", " "), unit


def kpi_diff(base: S.Side, head: S.Side) -> list[dict[str, Any]]:
    """Every numeric figure both reports hold (peak memory, MFU and the like included when a report carries them),
    each with a human ``label`` and its ``unit``; MFU with the share of matrix-unit time its FLOPs cover."""
    a, b = S.numeric_kpis(base), S.numeric_kpis(head)
    rows = []
    for k in a:
        if k not in b:
            continue
        label, unit = figure_label(k)
        row = {"name": k, "label": label, "unit": unit, **_pair(a[k], b[k]), "note": None}
        if k == "efficiency.mfu_pct":
            ca, cb = S.mfu_coverage_pct(base), S.mfu_coverage_pct(head)
            row["base_coverage_pct"], row["head_coverage_pct"] = ca, cb
            if ca is not None and cb is not None and min(ca, cb) >= 99.5:
                row["note"] = "counted FLOPs cover all of the GEMM/convolution/attention time"
            elif ca is not None or cb is not None:
                row["note"] = (f"counted FLOPs cover {'?' if ca is None else f'{ca:.0f}'}% (BASE) and {'?' if cb is None else f'{cb:.0f}'}% (HEAD) "
                               "of the GEMM/convolution/attention time: the MFU speaks for that part only")
        rows.append(row)
    return rows


def findings_diff(base: S.Side, head: S.Side) -> dict[str, Any]:
    """Findings new / worse / unchanged / fixed, by fingerprint, as ``--baseline`` decides them."""
    from traceinsight.pipeline.baseline import NEW, SAME, WORSE, compare as compare_findings

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


def what_if_check(base: S.Side, head: S.Side, d: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """For each BASE finding with a what-if that HEAD fixed (gone, or its share of the span halved): the step
    time BASE predicted for the fix against the step time HEAD measured. A prediction is for BASE's step, so it
    is checked only where HEAD runs the same work per step: per step with the same batch, per sample when only the
    batch changed (the prediction divided by BASE's batch, against HEAD's step divided by its own), and left out,
    with the reason, when the samples are not steps or the op mix differs (compared on the user's word)."""
    now = {f.get("fingerprint"): _pct(f.get("impact_pct_span")) for f in head.report.get("findings", []) if isinstance(f, dict)}
    cands = []
    for f in base.report.get("findings", []):
        w = f.get("what_if") if isinstance(f, dict) else None
        if not isinstance(w, dict) or not _pct(w.get("step_ns")):
            continue
        was = _pct(f.get("impact_pct_span"))
        fp = f.get("fingerprint")
        if fp in now and now[fp] > was / 2:
            continue
        cands.append((f, w, fp))
    if not cands:
        return [], None
    if not d["comparability"].get("comparable"):
        return [], None  # the verdict already says why nothing is compared
    if d["step"] is None:
        return [], "BASE's what-if predictions are per step; one side has no step time to check them against"
    if d["step"].get("basis") != "steps":
        return [], "BASE's what-if predictions are per step; these samples are not steps, so they are not checked"
    if d["comparability"].get("vouched"):
        return [], "BASE's what-if predictions are for BASE's program; HEAD runs other ops (compared on your word), so they are not checked"
    ps = d["per_sample"]
    ba, bb = (ps["batch_base"], ps["batch_head"]) if ps else (1, 1)
    out = []
    for f, w, fp in cands:
        measured = d["step"]["head_median_ns"] / bb
        predicted = float(w["step_ns"]) / ba
        out.append({
            "code": str(f.get("code", "")), "title": str(f.get("title", "")), "transform": None if w.get("transform") is None else str(w.get("transform")),
            "status": "fixed" if fp not in now else "reduced", "per": "sample" if ps else "step",
            "base_step_ns": (_pct(w.get("baseline_step_ns")) or d["step"]["base_median_ns"]) / ba,
            "predicted_step_ns": predicted, "measured_step_ns": measured,
            "error_pct": round(100.0 * (measured - predicted) / predicted, 1),  # predicted > 0: checked above
        })
    note = (f"the batch changed ({ba} \u2192 {bb}): BASE's predictions and HEAD's step are compared per sample" if ps else None)
    return out, note


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
    """``--fail-if-slower PCT``: fail when the change is over PCT % and the verdict is slower (the interval
    excludes no change, or the buckets that moved account for it); inconclusive when it is over PCT % without
    that evidence; pass otherwise."""
    if d["verdict"] == NOT_COMPARABLE:
        return {"fail_if_slower_pct": pct, "result": NOT_COMPARABLE}
    s = d["per_sample"] or d["step"]
    if s is None:
        return {"fail_if_slower_pct": pct, "result": INCONCLUSIVE}
    if s["change_pct"] is None or s["change_pct"] <= pct:
        return {"fail_if_slower_pct": pct, "result": PASS}
    if d["verdict"] == SLOWER:
        return {"fail_if_slower_pct": pct, "result": FAIL}
    return {"fail_if_slower_pct": pct, "result": INCONCLUSIVE}
