"""The memory chart of the HTML report: per GPU, allocated and reserved over the whole trace against capacity,
drawn on the x axis of the timeline's whole-trace overview (same gutter, width and ticks), with the steps marked,
the window the timeline shows shaded, and the peak named with its op and step.

The SVG is built here as strings of numbers; every text that comes from the trace (op names) is escaped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from markupsafe import Markup, escape

from traceinsight.derive.memory import fmt_bytes

#: Below this share of capacity the chart is scaled to the peak instead of to the capacity.
OFF_SCALE_SHARE = 0.1
#: Height of one device's chart (plot area), px.
PLOT_H = 110
_TOP = 18
_BOTTOM = 20


def charts(analysis, gutter: int, plot_w: int, ticks, window: dict | None, many_ranks: bool) -> list[dict[str, Any]]:
    """One entry per GPU with memory events: its label, summary line and SVG."""
    views = analysis.views
    mem = views.memory
    if not mem.devices:
        return []
    span = max(views.span_ns, 1)
    steps = views.steps
    out = []
    for d in mem.devices:
        label = f"rank {d.rank} · GPU {d.device}" if many_ranks else f"GPU {d.device}"
        peak = float(max(d.peak or 0, d.peak_allocated or 0))
        # against capacity when the peak is a fair share of it; otherwise scaled to the peak, so the steps of a
        # small run stay visible (the capacity is then named above the plot)
        on_scale = bool(d.capacity) and peak >= OFF_SCALE_SHARE * float(d.capacity)
        top = (float(d.capacity) if on_scale else max(peak, 1.0)) * (1.04 if on_scale else 1.25)
        width = gutter + plot_w + 10
        height = _TOP + PLOT_H + _BOTTOM

        def x(t):
            return gutter + plot_w * (np.clip(np.asarray(t, dtype=float), 0, span) / span)

        def y(v):
            return _TOP + PLOT_H * (1 - np.asarray(v, dtype=float) / top)

        parts = [f'<svg class="tl mem" viewBox="0 0 {width} {height}" role="img" aria-label="GPU memory of {escape(label)}" '
                 f'preserveAspectRatio="xMinYMin meet">']
        base = _TOP + PLOT_H
        for tk in ticks:
            parts.append(f'<line class="grid" x1="{tk["x"]:.2f}" x2="{tk["x"]:.2f}" y1="{_TOP}" y2="{base}"/>'
                         f'<text class="axis-t" x="{tk["x"]:.2f}" y="{height - 5}" text-anchor="{tk["anchor"]}">{escape(tk["label"])}</text>')
        if window:
            parts.append(f'<rect class="ov-win" x="{window["x"]:.2f}" y="{_TOP}" width="{window["w"]:.2f}" height="{PLOT_H}"><title>window the timeline shows</title></rect>')
        st = steps[steps["rank"].to_numpy() == d.rank] if not steps.empty else steps
        for s in st.itertuples(index=False):
            xs = float(x(s.start_ns))
            parts.append(f'<line class="mem-step" x1="{xs:.2f}" x2="{xs:.2f}" y1="{_TOP}" y2="{base}"><title>{escape(str(s.name))}</title></line>')
        if len(st) <= 40:
            for s in st.itertuples(index=False):
                parts.append(f'<text class="axis-t" x="{float(x(s.start_ns)) + 2:.2f}" y="{_TOP + 9}">{escape(_short_step(str(s.name)))}</text>')
        parts.append(f'<rect class="lane-bg" x="{gutter}" y="{_TOP}" width="{plot_w}" height="{PLOT_H}" fill-opacity="0.35"/>')
        if d.capacity and not on_scale:
            parts.append(f'<text class="axis-t" x="{gutter + plot_w - 2}" y="{_TOP - 4}" text-anchor="end">capacity '
                         f'{fmt_bytes(d.capacity)}, above this scale (peak {100 * peak / d.capacity:.1f} %)</text>')
        if d.capacity and on_scale:
            yc = float(y(d.capacity))
            parts.append(f'<line class="mem-cap" x1="{gutter}" x2="{gutter + plot_w}" y1="{yc:.2f}" y2="{yc:.2f}"/>'
                         f'<text class="axis-t" x="{gutter + plot_w - 2}" y="{yc - 3:.2f}" text-anchor="end">capacity {fmt_bytes(d.capacity)}</text>')
        s = d.series
        t = s["start_ns"].to_numpy()
        for col, cls in (("reserved", "mem-res"), ("allocated", "mem-alloc")):
            v = s[col].to_numpy(dtype=float)
            ok = np.isfinite(v)
            if ok.sum() == 0:
                continue
            xs, ys = x(t[ok]), y(v[ok])
            # a step line: the level holds until the next event, and from the last event to the end of the trace
            px = np.repeat(xs, 2)[1:]
            py = np.repeat(ys, 2)[:-1]
            px = np.r_[px, gutter + plot_w]
            py = np.r_[py, ys[-1]]
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px.tolist(), py.tolist()))
            parts.append(f'<polyline class="{cls}" points="{pts}"/>')
        if d.peak_at_ns is not None:
            pv = d.peak_allocated if d.peak_allocated is not None else d.peak
            px, py = float(x(d.peak_at_ns)), float(y(pv))
            what = f"peak allocated {fmt_bytes(pv)}" + (f" in step {d.peak_step}" if d.peak_step is not None else "") + \
                   (f" at {d.peak_op}" if d.peak_op else "")
            parts.append(f'<circle class="mem-peak" cx="{px:.2f}" cy="{py:.2f}" r="3.5"><title>{escape(what)}</title></circle>')
        parts.append(f'<text class="lane-t" x="{gutter - 6}" y="{_TOP + 12}" text-anchor="end">{escape(label)}</text>'
                     f'<text class="axis-t" x="{gutter - 6}" y="{_TOP + 26}" text-anchor="end">{fmt_bytes(top)}</text>'
                     f'<text class="axis-t" x="{gutter - 6}" y="{base}" text-anchor="end">0</text>')
        parts.append("</svg>")
        out.append({"label": label, "svg": Markup("".join(parts)), "summary": summary_line(d)})
    return out


def _short_step(name: str) -> str:
    digits = "".join(ch for ch in name[-8:] if ch.isdigit())
    return f"#{digits}" if digits else name[:10]


def summary_groups(devices) -> list[tuple[str, str]]:
    """(where, summary line) per GPU, the GPUs of one rank whose lines are identical in one entry ("rank 0 GPUs
    1-6"): eight GPUs of which two ran work, all holding the same preallocated pool, are one line, not eight."""
    out: list[tuple[int, list[int], str]] = []
    for d in devices:
        line = summary_line(d)
        same = next((g for g in out if g[0] == d.rank and g[2] == line), None)
        if same is not None:
            same[1].append(d.device)
        else:
            out.append((d.rank, [d.device], line))
    return [(f"rank {r} " + (f"GPU {devs[0]}" if len(devs) == 1 else f"GPUs {_ranges(devs)}"), line) for r, devs, line in out]


def _ranges(devs: list[int]) -> str:
    """0, 1, 2, 5 -> "0-2, 5"."""
    devs = sorted(devs)
    parts, a = [], devs[0]
    for prev, cur in zip(devs, devs[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            parts.append(str(a) if a == prev else f"{a}-{prev}")
            a = cur
    return ", ".join(parts)


def summary_line(d) -> str:
    """One line per GPU, the same in every renderer: peak allocated / reserved vs capacity, where the peak was."""
    bits = []
    if d.peak_allocated is not None:
        bits.append(f"peak allocated {fmt_bytes(d.peak_allocated)}" + (" (counted from the start of the profile)" if d.relative else ""))
    if d.peak_reserved is not None:
        bits.append(f"peak reserved {fmt_bytes(d.peak_reserved)}")
    if d.capacity:
        share = f" ({100 * d.peak_share:.0f} %)" if d.peak_share is not None and not d.relative else ""
        bits.append(f"of {fmt_bytes(d.capacity)}{share}")
    where = []
    if d.peak_step is not None:
        where.append(f"step {d.peak_step}")
    if d.peak_op:
        where.append(str(d.peak_op)[:80])
    line = ", ".join(bits)
    if where:
        line += "; peak at " + " / ".join(where)
    if d.oom_events:
        line += f"; {d.oom_events} out-of-memory event{'s' if d.oom_events > 1 else ''}"
    return line
