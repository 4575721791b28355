"""The diff as terminal text (rich tables), Markdown (PR-comment sized), JSON and a self-contained HTML page.

Every renderer reads only the diff document (``compare.compare``), never a trace; strings from the traces (paths,
kernel and op names, finding titles) are escaped for the format they land in.
"""

from __future__ import annotations

import io
from typing import Any

from traceinsight.vocab.buckets import BUCKETS, LABELS
from traceinsight.vocab.units import fmt_ns
from traceinsight.vocab.sanitize import rich as rich_text

#: Rows per table in the text and Markdown output (the JSON keeps up to compare.MAX_ROWS).
TOP_ROWS = 10
#: The Markdown stays under GitHub's 65,536-character comment limit.
MAX_MD_CHARS = 60_000

#: KPIs shown elsewhere in the diff (step time, busy %, findings) or meaningful only inside one report (savings
#: estimates); any other numeric KPI both reports carry (peak memory, MFU, ...) is listed as it is.
SHOWN_KPIS = frozenset({"gpu_busy_pct", "span_ns", "findings", "steps", "mean_step_ns", "est_savings_ns", "est_savings_gpu_ns",
                        "largest_saving_ns", "avoidable_idle_ns", "modelled_speedup_ns", "steady_busy_pct"})

_VERDICT_ICON = {"faster": "🟢", "slower": "🔴", "no measurable change": "⚪", "inconclusive": "🟡", "not comparable": "⛔"}


def render(d: dict[str, Any], fmt: str, **kwargs: Any) -> str:
    """The diff in ``fmt``: the formats' one registry (``traceinsight.render.FORMATS``) picks the renderer."""
    from traceinsight.render import render as render_any

    return render_any(d, fmt, "diff", **kwargs)


def render_json(d: dict[str, Any]) -> str:
    from traceinsight.model.serialize import dumps

    return dumps(d)


# --- shared wording ----------------------------------------------------------------------------------------
def ms(ns: Any, signed: bool = False) -> str:
    if ns is None:
        return "—"
    return ("+" if signed and ns > 0 else "") + fmt_ns(ns)


def pct(v: Any, signed: bool = True) -> str:
    if v is None:
        return "—"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def count(v: Any) -> str:
    """A count per step: whole where it is (``265``), else to a tenth (``43.7``, not ``43.6666``); a mean over steps
    carries no more digits than that."""
    if v is None:
        return "—"
    v = float(v)
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def bucket_label(b: str) -> str:
    return LABELS.get(b, b)


def step_line(s: dict[str, Any] | None, unit: str | None = None) -> str:
    from traceinsight.delta.compare import REPEAT_WORDS

    basis = (s or {}).get("basis", "steps")
    unit = unit or ("GPU window" if basis == "gpu_window" else REPEAT_WORDS.get(basis, "step"))
    if s is None:
        return f"{unit}: no steps to compare"
    ci = f"{int(s['confidence'] * 100)}% CI {ms(s['low_ns'], True)} … {ms(s['high_ns'], True)} ({pct(s['low_pct'])} … {pct(s['high_pct'])})" if s["low_ns"] is not None else "too few steps for an interval"
    return f"{unit} {ms(s['base_median_ns'])} → {ms(s['head_median_ns'])}: {ms(s['change_ns'], True)} ({pct(s['change_pct'])}), {ci}"


def spread(x: dict[str, Any]) -> str:
    s = x["steps"]
    if not s["count"]:
        return "no steady-state steps"
    return f"median {ms(s['median_ns'])} · p10–p90 {ms(s['p10_ns'])}–{ms(s['p90_ns'])} · {s['count']} steps" + (f" (+{x['warmup_steps']} warm-up)" if x.get("warmup_steps") else "")


def shown_reasons(d: dict[str, Any]) -> list[str]:
    """The comparability notes to list under the sentence (which already quotes the first when it refuses)."""
    reasons = d["comparability"]["reasons"]
    return reasons[1:] if d["verdict"] == "not comparable" else reasons


def evidence_lines(d: dict[str, Any]) -> list[str]:
    """The evidence under the sentence, one line each, the same in every format: what the samples are, the
    buckets tested (moved or not), the steps left out of the bucket tests, what the sample counts can detect and
    why the what-if check is left out or per sample."""
    out = []
    smp = d.get("samples") or {}
    if smp.get("note"):
        out.append("samples: " + smp["note"])
    if d.get("decided_by"):
        out.append({"step": "decided by the step times (the interval excludes no change)",
                    "buckets": "decided by the ledger buckets that moved (rank test per bucket, Holm-corrected), which account for the step's change",
                    "separation": "decided by a complete separation of too few samples for an interval (weak evidence: record more steps)"}[d["decided_by"]])
    ev = d.get("evidence") or {}
    tested = [r for r in ev.get("buckets", []) if r.get("candidate")]
    if tested:
        out.append("buckets tested: " + "; ".join(
            f"{bucket_label(r['bucket'])} {ms(r['shift_ns'], True)} per step (p = {r['p_value']:.3g}, {'moved' if r['moved'] else 'within the noise'})" for r in tested))
    for c in ev.get("clipped", []):
        out.append(f"{c['side'].upper()} step {c['step']} left out of the bucket tests: its ledger covers {c['coverage_pct']:.0f}% of the step (the trace's GPU window starts or ends inside it)")
    if d.get("power"):
        out.append("power: " + d["power"]["sentence"])
    if d.get("what_if_note"):
        out.append("what-if: " + d["what_if_note"])
    return out


def bucket_test(r: dict[str, Any]) -> str:
    """A ledger row's test over the steps: its median shift (the Hodges–Lehmann figure the verdict's sentence
    quotes, beside the change of the means in the row), its p-value, and "moved" when it counted for the verdict."""
    if r.get("p_value") is None:
        return ""
    shift = f"shift {ms(r['shift_ns'], True)}, " if r.get("shift_ns") is not None else ""
    return f"{shift}p = {r['p_value']:.3g}" + (" · moved" if r.get("moved") else "")


def figure(k: dict[str, Any], key: str) -> str:
    """One figure (``kpis`` row's ``base``/``head``/``change``) in its unit."""
    v = k.get(key)
    if v is None:
        return "—"
    unit = k.get("unit", "number")
    sign = "+" if key == "change" and v > 0 else ""
    if unit == "ns":
        return ms(v, key == "change")
    if unit == "pct":
        return f"{sign}{v:.1f}" + (" pp" if key == "change" else "%")
    if unit == "bytes":
        return f"{sign}{v / 2**30:,.2f} GiB"
    if unit == "flop":
        return f"{sign}{v / 1e12:,.2f} TFLOP"
    if unit == "count":
        return f"{sign}{v:,.0f}"
    return f"{sign}{v:,.4g}"


def shown_figures(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [k for k in d["kpis"] if k["name"] not in SHOWN_KPIS and (k["change"] or k.get("note"))]


def _kernel_change(k: dict[str, Any]) -> str:
    st = k["status"]
    return {"new": "new", "vanished": "vanished", "matched": "renamed", "same": ""}.get(st, st)


def _per_step(k: dict[str, Any] | None, key: str = "ns_per_step") -> Any:
    return None if k is None else k.get(key)


# --- text --------------------------------------------------------------------------------------------------
def render_text(d: dict[str, Any], width: int = 110, **_: Any) -> str:
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=max(width, 60), force_terminal=False, color_system=None, highlight=False, soft_wrap=False)
    b, h = d["base"], d["head"]
    con.print(f"traceinsight diff  BASE {rich_text(b['path'], 200)}  →  HEAD {rich_text(h['path'], 200)}")
    ctx = [c for c in d["context"] if c["differs"]]
    for c in ctx:
        con.print(f"  context: {rich_text(c['what'])} {rich_text(c['base'], 120)} → {rich_text(c['head'], 120)}")
    con.print()
    con.print(f"{_VERDICT_ICON.get(d['verdict'], '')} {rich_text(d['sentence'], 500)}")
    comp = d["comparability"]
    for r in shown_reasons(d):
        con.print(f"  - {rich_text(r, 300)}")
    if comp["comparable"]:
        con.print(f"  workload{' (on your word, --same-workload)' if comp.get('vouched') else ''}: {comp['in_common_pct']}% of the {comp['matched_by'].replace('_', ' ')} per step in common" + (f", shapes {comp['shapes_in_common_pct']}%" if comp["shapes_in_common_pct"] is not None else ""))
    con.print(f"  BASE {spread(b)}")
    con.print(f"  HEAD {spread(h)}")
    if d["step"]:
        con.print(f"  {step_line(d['step'])}")
    if d["per_sample"]:
        p = d["per_sample"]
        con.print(f"  batch {p['batch_base']} → {p['batch_head']}: {step_line(p, 'per sample')}")
    bp = d["busy_pct"]
    con.print(f"  GPU busy {pct(bp['base'], False)} → {pct(bp['head'], False)} · verdict {b['verdict']['label']} → {h['verdict']['label']}")
    if d["gate"]:
        con.print(f"  gate --fail-if-slower {d['gate']['fail_if_slower_pct']:g}%: {d['gate']['result'].upper()}")
    for line in evidence_lines(d):
        con.print(f"  {rich_text(line, 600)}")
    if d["ledger"]:
        t = Table(title="Time ledger, per step (one GPU)", title_justify="left", show_edge=False)
        for c in ("bucket", "BASE", "HEAD", "change", "median shift, rank test"):
            t.add_column(c, justify="left" if c == "bucket" else "right")
        for r in d["ledger"]:
            t.add_row(bucket_label(r["bucket"]), ms(r["base_ns_per_step"]), ms(r["head_ns_per_step"]), ms(r["change_ns"], True), bucket_test(r))
        con.print(t)
    if d["kernel_classes"]:
        t = Table(title="Kernel classes, GPU time per step", title_justify="left", show_edge=False)
        for c in ("class", "BASE", "HEAD", "change", "count/step"):
            t.add_column(c, justify="left" if c == "class" else "right")
        for r in d["kernel_classes"]:
            t.add_row(r["class"], ms(r["base_ns_per_step"]), ms(r["head_ns_per_step"]), ms(r["change_ns_per_step"], True), f"{count(r['base_per_step'])} → {count(r['head_per_step'])}")
        con.print(t)
    if d["ops"]:
        t = Table(title="Framework ops (top level), GPU time per step", title_justify="left", show_edge=False)
        for c in ("op", "BASE", "HEAD", "change", "count/step"):
            t.add_column(c, justify="left" if c == "op" else "right", overflow="ellipsis", no_wrap=True, max_width=60 if c == "op" else None)
        for r in d["ops"][:TOP_ROWS]:
            t.add_row(rich_text(r["name"], 120), ms(r["base_gpu_ns_per_step"]), ms(r["head_gpu_ns_per_step"]), ms(r["change_gpu_ns_per_step"], True), f"{count(r['base_per_step'] or 0)} → {count(r['head_per_step'] or 0)}")
        con.print(t)
    if d["kernels"]:
        t = Table(title="Kernels, time per step (largest change first)", title_justify="left", show_edge=False)
        for c in ("kernel", "class", "BASE", "HEAD", "change", ""):
            t.add_column(c, justify="left" if c in ("kernel", "class", "") else "right", overflow="ellipsis", no_wrap=True, max_width=56 if c == "kernel" else None)
        for k in d["kernels"][:TOP_ROWS]:
            t.add_row(rich_text(k["name"], 200), k["class"], ms(_per_step(k["base"])), ms(_per_step(k["head"])), ms(k["change_ns_per_step"], True), _kernel_change(k))
        con.print(t)
    f = d["findings"]
    c = f["counts"]
    con.print(f"Findings: {c['new']} new, {c['worse']} worse, {c['same']} unchanged, {c['fixed']} fixed")
    for x in f["new"][:5]:
        con.print(f"  new   {rich_text(x['code'], 20)} {rich_text(x['title'], 160)}")
    for x in f["worse"][:5]:
        con.print(f"  worse {rich_text(x['code'], 20)} {rich_text(x['title'], 160)}")
    for x in f["fixed"][:5]:
        con.print(f"  fixed {rich_text(x['code'], 20)} {rich_text(x['title'], 160)}")
    for w in d["what_if"]:
        con.print(f"What-if check: BASE predicted {ms(w['predicted_step_ns'])} per {w.get('per', 'step')} with {rich_text(w['code'], 20)} fixed; HEAD measures {ms(w['measured_step_ns'])} ({pct(w['error_pct'])} vs the prediction)")
    if d["ranks"]:
        r = d["ranks"]
        con.print("Ranks: " + ", ".join(f"{x['rank']}: {ms(x['base_median_ns'])} → {ms(x['head_median_ns'])}" for x in r["rows"][:16]))
        con.print(f"  {straggler_line(r)}")
    extra = shown_figures(d)
    if extra:
        con.print("Figures: " + "; ".join(f"{rich_text(k['label'], 60)} {figure(k, 'base')} → {figure(k, 'head')}" + (f" ({k['note']})" if k.get("note") else "") for k in extra[:10]))
    from traceinsight.render.escape import log_document

    return log_document(buf.getvalue())  # no line a CI runner reads as a workflow command


def _num(v: Any, name: str = "") -> str:
    if name.endswith("_bytes") and isinstance(v, (int, float)):
        return f"{v / 2**30:,.2f} GiB"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{v:,.0f}" if isinstance(v, (int, float)) else str(v)


def straggler_line(r: dict[str, Any]) -> str:
    sa, sb = r.get("straggler_base"), r.get("straggler_head")
    if not sa or not sb:
        return "straggler: n/a"
    was = sa["is_straggler"]
    now = sb["is_straggler"]
    if was and not now:
        return f"straggler fixed: rank {sa['rank']} was {sa['excess_pct']:+.1f}% over the typical rank; now the slowest is rank {sb['rank']} at {sb['excess_pct']:+.1f}%"
    if now:
        return f"straggler {'still' if was and sa['rank'] == sb['rank'] else 'now'}: rank {sb['rank']} {sb['excess_pct']:+.1f}% over the typical rank" + (f" (BASE: rank {sa['rank']} {sa['excess_pct']:+.1f}%)" if was else "")
    return f"no straggler (slowest rank {sb['rank']} {sb['excess_pct']:+.1f}% over the typical rank)"


# --- Markdown ----------------------------------------------------------------------------------------------
def render_md(d: dict[str, Any], html_name: str | None = None, max_chars: int = MAX_MD_CHARS, **_: Any) -> str:
    from traceinsight.render.markdown import esc

    b, h = d["base"], d["head"]
    out = [f"## {_VERDICT_ICON.get(d['verdict'], '')} traceinsight diff: **{d['verdict']}**", "", esc(d["sentence"], 600), ""]
    for r in shown_reasons(d):
        out.append(f"- {esc(r, 300)}")
    if shown_reasons(d):
        out.append("")
    out += ["| | BASE | HEAD |", "|---|---|---|", f"| trace | {esc(b['path'], 120)} | {esc(h['path'], 120)} |"]
    for c in d["context"]:
        if c["differs"]:
            out.append(f"| {esc(c['what'])} | {esc(c['base'], 120)} | {esc(c['head'], 120)} |")
    out.append(f"| step time | {esc(spread(b))} | {esc(spread(h))} |")
    if d["per_sample"]:
        p = d["per_sample"]
        out.append(f"| batch / per sample | {p['batch_base']} · {ms(p['base_median_ns'])} | {p['batch_head']} · {ms(p['head_median_ns'])} |")
    bp = d["busy_pct"]
    out.append(f"| GPU busy | {pct(bp['base'], False)} | {pct(bp['head'], False)} |")
    out.append(f"| verdict | {esc(b['verdict']['headline'])} | {esc(h['verdict']['headline'])} |")
    for k in shown_figures(d):
        # a note speaks for the row (both sides), so it goes with the label, not after HEAD's figure
        label = esc(k["label"], 60) + (f" ({esc(k['note'], 200)})" if k.get("note") else "")
        out.append(f"| {label} | {figure(k, 'base')} | {figure(k, 'head')} |")
    out.append("")
    if d["step"]:
        out += [f"**Step:** {esc(step_line(d['step']))}", ""]
    if d["gate"]:
        out += [f"**Gate** `--fail-if-slower {d['gate']['fail_if_slower_pct']:g}`: **{d['gate']['result']}**", ""]
    ev = evidence_lines(d)
    if ev:
        out += [f"- {esc(x, 600)}" for x in ev] + [""]
    if d["ledger"]:
        out += ["### Where the step time moved (time ledger, per step)", "", "| bucket | BASE | HEAD | change | median shift, rank test |", "|---|---:|---:|---:|---:|"]
        out += [f"| {bucket_label(r['bucket'])} | {ms(r['base_ns_per_step'])} | {ms(r['head_ns_per_step'])} | **{ms(r['change_ns'], True)}** | {bucket_test(r)} |" for r in d["ledger"]]
        out.append("")
    if d["kernel_classes"]:
        out += ["### Kernel classes (GPU time per step)", "", "| class | BASE | HEAD | change | count/step |", "|---|---:|---:|---:|---:|"]
        out += [f"| {r['class']} | {ms(r['base_ns_per_step'])} | {ms(r['head_ns_per_step'])} | {ms(r['change_ns_per_step'], True)} | {count(r['base_per_step'])} → {count(r['head_per_step'])} |" for r in d["kernel_classes"]]
        out.append("")
    if d["kernels"]:
        out += ["<details><summary>Kernels with the largest change</summary>", "", "| kernel | op | BASE | HEAD | change | |", "|---|---|---:|---:|---:|---|"]
        out += [f"| {esc(k['name'], 90)} | {esc(k['op'], 40)} | {ms(_per_step(k['base']))} | {ms(_per_step(k['head']))} | {ms(k['change_ns_per_step'], True)} | {_kernel_change(k)} |" for k in d["kernels"][:TOP_ROWS]]
        out += ["", "</details>", ""]
    f = d["findings"]
    c = f["counts"]
    out.append(f"**Findings:** {c['new']} new, {c['worse']} worse, {c['same']} unchanged, {c['fixed']} fixed")
    for tag in ("new", "worse", "fixed"):
        for x in f[tag][:5]:
            out.append(f"- {tag}: **{esc(x['code'], 20)}** {esc(x['title'], 160)}")
    out.append("")
    for w in d["what_if"]:
        out.append(f"**What-if check:** BASE predicted {ms(w['predicted_step_ns'])} per {w.get('per', 'step')} with **{esc(w['code'], 20)}** fixed; HEAD measures {ms(w['measured_step_ns'])} ({pct(w['error_pct'])}).")
    if d["ranks"]:
        out += ["", f"**Ranks:** {esc(straggler_line(d['ranks']))}", "", "<details><summary>Per rank</summary>", "",
                "| rank | BASE median step | HEAD median step | change | GPU busy |", "|---:|---:|---:|---:|---:|"]
        out += [f"| {r['rank']} | {ms(r['base_median_ns'])} | {ms(r['head_median_ns'])} | {pct(r['change_pct'])} | {pct(r['base_busy_pct'], False)} → {pct(r['head_busy_pct'], False)} |"
                for r in d["ranks"]["rows"][:64]]
        out += ["", "</details>"]
    if html_name:
        out += ["", f"Full diff: {esc(html_name, 120)}"]
    text = "\n".join(out) + "\n"
    if len(text) > max_chars:
        text = text[: max_chars - 40].rsplit("\n", 1)[0] + "\n\n… (cut to fit a PR comment)\n"
    return text


# --- HTML --------------------------------------------------------------------------------------------------
_BUCKET_ORDER = BUCKETS


def _step_rows(steps: list[dict[str, Any]], scale: float) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        total = sum(s["ns"].values())
        segs = [{"bucket": b, "label": bucket_label(b), "ns": s["ns"][b], "pct": 100.0 * s["ns"][b] / scale if scale else 0.0}
                for b in _BUCKET_ORDER if s["ns"].get(b)]
        rows.append({"step": s["step"], "total_ns": total, "segments": segs})
    return rows


def html_context(d: dict[str, Any]) -> dict[str, Any]:
    from traceinsight.render.templating import report_css
    from traceinsight.vocab.version import __version__

    ls = d["ledger_steps"]
    scale = max([sum(s["ns"].values()) for s in ls["base"] + ls["head"]] or [0.0])
    n = max(len(ls["base"]), len(ls["head"]))
    pairs = [{"base": (_step_rows(ls["base"], scale)[i] if i < len(ls["base"]) else None),
              "head": (_step_rows(ls["head"], scale)[i] if i < len(ls["head"]) else None)} for i in range(min(n, 50))]
    mean = {k: {r["bucket"]: r[f"{k}_ns_per_step"] for r in d["ledger"]} for k in ("base", "head")}
    mean_rows = {k: _step_rows([{"step": "mean", "ns": mean[k]}], scale)[0] for k in ("base", "head")}
    legend = [{"bucket": b, "label": bucket_label(b)} for b in _BUCKET_ORDER if any(r["bucket"] == b for r in d["ledger"])]
    return {
        "d": d, "version": __version__, "css": report_css(), "pairs": pairs, "mean": mean_rows, "legend": legend,
        "step_line": step_line(d["step"]) if d["step"] else None,
        "sample_line": step_line(d["per_sample"], "per sample") if d["per_sample"] else None,
        "spread_base": spread(d["base"]), "spread_head": spread(d["head"]),
        "straggler": straggler_line(d["ranks"]) if d["ranks"] else None,
        "kernels": [dict(k, base_ns=_per_step(k["base"]), head_ns=_per_step(k["head"]), tag=_kernel_change(k)) for k in d["kernels"][:40]],
        "ms": ms, "count": count, "pct": pct, "bucket_label": bucket_label, "bucket_test": bucket_test, "num": _num, "figure": figure,
        "extra_kpis": shown_figures(d), "evidence": evidence_lines(d),
    }


def render_html(d: dict[str, Any], **_: Any) -> str:
    from traceinsight.render.templating import env

    return env().get_template("diff.html.j2").render(**html_context(d))
