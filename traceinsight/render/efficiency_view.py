"""The efficiency section every renderer shows: one headline, one table per kernel class, a roofline chart (SVG)."""

from __future__ import annotations

import html
import math
from typing import Any

from traceinsight.derive.efficiency import coverage_phrase
from traceinsight.vocab.units import fmt_ns
from traceinsight.vocab.work_classes import COLOURS

COLUMNS = ["class", "time", "% GPU time", "% modelled", "dtype", "TFLOP/s", "% of peak", "GB/s", "% of BW", "FLOP/B", "bound", "peak used"]


def efficiency_of(analysis: Any):
    views = analysis.views
    if views is None:
        return None
    try:
        return views.efficiency
    except Exception:  # the section is optional: a broken model must not cost the rest of the report
        return None


def headline(eff: Any) -> str:
    """One sentence: MFU with the peak and its source, or what is missing."""
    if eff is None:
        return ""
    if eff.mfu_pct is not None:
        src = eff.peak.source if eff.peak.source != "user" else "--peak-tflops"
        how = {"shapes": "FLOPs from recorded shapes", "recorded": "FLOPs as XLA recorded them per op"}.get(
            eff.flops_source, "FLOPs per step given with --model-flops-per-step")
        cov = coverage_phrase(getattr(eff, "coverage", None)) if eff.flops_source in ("shapes", "recorded") else ""
        basis = f" {eff.mfu_basis}" if getattr(eff, "mfu_basis", "") else ""
        return f"MFU {eff.mfu_pct:.1f}%{basis} of {eff.peak_label()} ({src}); {how}" + (f" ({cov})." if cov else ".")
    if getattr(eff, "mfu_withheld", ""):
        return eff.mfu_withheld + "."
    if eff.flops_source != "none":
        return f"Model FLOPs known, but {eff.peak_label()}."
    return " ".join(eff.notes[:1]) + "." if eff.notes else ""


def _f(v: Any, fmt: str) -> str:
    return format(v, fmt) if _known(v) else ""


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def _s(v: Any) -> str:
    return str(v) if _known(v) else ""


def table_rows(eff: Any) -> list[list[str]]:
    rows = []
    for r in eff.classes.to_dict("records"):
        measured = _known(r["pct_of_peak"]) or _known(r["pct_of_bandwidth"])
        rows.append([
            r["label"], fmt_ns(r["time_ns"]), _f(r["share_pct"], ".1f"),
            _f(100.0 * r["modelled_ns"] / r["time_ns"], ".0f") if r["time_ns"] else "", _s(r["dtype"]),
            _f(r["achieved_tflops"], ".1f"), _f(r["pct_of_peak"], ".1f"), _f(r["achieved_gbs"], ".0f"),
            _f(r["pct_of_bandwidth"], ".1f"), _f(r["intensity"], ".1f"), _s(r["bound"]),
            r["peak_label"].split(",")[0] if measured else "",
        ])
    return rows


TOP_OP_COLUMNS = ["op", "input dims", "dtype", "calls", "GFLOP/call", "kernel time", "TFLOP/s", "% of peak"]


def top_op_rows(eff: Any) -> list[list[str]]:
    top = getattr(eff, "top_ops", None)
    if top is None or not len(top):
        return []
    return [[r["op"], r["input_dims"], _s(r["dtype"]), f"{int(r['count']):,}", _f(r["gflop"], ".3g"), fmt_ns(r["kernel_ns"]),
             _f(r["tflops"], ".1f"), _f(r["pct_of_peak"], ".1f")] for r in top.to_dict("records")]


def step_line(eff: Any) -> str:
    st = eff.steps
    if st is None or not len(st) or st["mfu_pct"].isna().all():
        return ""
    m = st["mfu_pct"].dropna()
    return (f"MFU per step ({len(m)} steps): mean {m.mean():.1f}%, min {m.min():.1f}%, max {m.max():.1f}% "
            f"of {eff.peak_label()}")


def hardware_lines(eff: Any) -> list[str]:
    """Sampled GPU metrics (Nsight Systems ``--gpu-metrics-devices``): while busy, then per kernel class."""
    hw = getattr(eff, "hardware", None)
    if hw is None or hw.empty:
        return []
    order = ["SM Active", "SM Issue", "Tensor Active", "DRAM Read", "DRAM Write"]

    def line(scope: str) -> str:
        sub = hw[hw["scope"] == scope].set_index("metric")
        parts = [f"{m} {sub.loc[m, 'mean_pct']:.0f}%" for m in order if m in sub.index]
        n = int(sub["samples"].max()) if len(sub) else 0
        return f"{', '.join(parts)} ({n:,} samples)" if parts else ""

    out = []
    busy = line("busy")
    if busy:
        out.append(f"Hardware counters while the GPU is busy: {busy}")
    for label in [v for v in dict.fromkeys(hw["scope"]) if v not in ("all", "busy") and not str(v).startswith("step ")]:
        text = line(label)
        if text:
            out.append(f"  during {label} kernels: {text}")
    return out


def roofline_svg(eff: Any, width: int = 560, height: int = 340) -> str:
    """A log-log roofline: the bandwidth slope and the dtype's compute roof, one dot per class with FLOPs and bytes."""
    if eff is None or not eff.peak.known or not eff.peak.bandwidth_gbs:
        return ""
    pts = [r for r in eff.classes.to_dict("records") if _known(r["intensity"]) and _known(r["achieved_tflops"])
           and r["intensity"] > 0 and r["achieved_tflops"] > 0]
    if not pts:
        return ""
    peak_t, d = eff.peak.for_dtype(eff.mfu_dtype or pts[0]["dtype"])
    if not peak_t:
        return ""
    bw = eff.peak.bandwidth_gbs / 1e3  # TB/s: TFLOP/s = FLOP/B x TB/s
    x0, x1 = 0.01, 10000.0
    y1 = peak_t * 2
    y0 = min([y1 / 1e5] + [p["achieved_tflops"] / 2 for p in pts])
    ml, mr, mt, mb = 60, 20, 20, 40

    def sx(x: float) -> float:
        return ml + (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (width - ml - mr)

    def sy(y: float) -> float:
        return height - mb - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * (height - mt - mb)

    ridge = peak_t / bw
    xs = max(x0, y0 / bw)
    e = html.escape
    parts = [f'<svg class="roofline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="roofline">',
             f'<rect x="{ml}" y="{mt}" width="{width - ml - mr}" height="{height - mt - mb}" fill="none" stroke="#999"/>',
             f'<polyline fill="none" stroke="#555" stroke-width="2" points="{sx(xs):.1f},{sy(xs * bw):.1f} '
             f'{sx(ridge):.1f},{sy(peak_t):.1f} {sx(x1):.1f},{sy(peak_t):.1f}"/>',
             f'<text x="{sx(x1) - 4:.1f}" y="{sy(peak_t) - 5:.1f}" font-size="11" text-anchor="end">{e(f"{peak_t:g} TFLOP/s {d} dense")}</text>',
             f'<text x="{sx(xs) + 4:.1f}" y="{sy(xs * bw) - 8:.1f}" font-size="11">{e(f"{eff.peak.bandwidth_gbs:g} GB/s")}</text>']
    for exp in range(-2, 5):
        parts.append(f'<text x="{sx(10.0 ** exp):.1f}" y="{height - mb + 14}" font-size="10" text-anchor="middle">{10.0 ** exp:g}</text>')
    y = 10 ** math.ceil(math.log10(y0))
    while y <= y1:
        parts.append(f'<text x="{ml - 4}" y="{sy(y) + 3:.1f}" font-size="10" text-anchor="end">{y:g}</text>')
        y *= 10
    parts.append(f'<text x="{(ml + width) / 2:.0f}" y="{height - 6}" font-size="11" text-anchor="middle">arithmetic intensity (FLOP/byte)</text>')
    parts.append(f'<text x="12" y="{(mt + height - mb) / 2:.0f}" font-size="11" transform="rotate(-90 12 {(mt + height - mb) / 2:.0f})" text-anchor="middle">TFLOP/s</text>')
    for p in pts:
        cx, cy = sx(min(max(p["intensity"], x0), x1)), sy(max(p["achieved_tflops"], y0))
        label = f'{p["label"]}: {p["achieved_tflops"]:.2f} TFLOP/s at {p["intensity"]:.1f} FLOP/B ({p["bound"]}-bound)'
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{4 + 8 * min(p["share_pct"], 100) / 100:.1f}" '
                     f'fill="{COLOURS.get(p["cls"], COLOURS["other"])}" fill-opacity="0.75"><title>{e(label)}</title></circle>')
        parts.append(f'<text x="{cx + 10:.1f}" y="{cy + 4:.1f}" font-size="11">{e(p["label"])}</text>')
    parts.append("</svg>")
    return "".join(parts)
