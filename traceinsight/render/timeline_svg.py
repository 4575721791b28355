"""The report's timeline picture as data for the template: the whole-trace overview, the chosen window's lanes
(GPU streams, host ranges, syncs and gaps), each finding's markers and the close-up of its largest instance.

Everything is aggregated to pixel columns here, in numpy, so a trace with millions of kernels still gives a few
thousand SVG nodes; the template only places what this module measured.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from markupsafe import Markup

from traceinsight.model.analysis import Analysis
from traceinsight.model.finding import Finding, Instance, instance_columns
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.patterns import COLLECTIVE, SYNC_CALL
from traceinsight.model.timeline import GPU_ACTIVITY_KINDS
from traceinsight.vocab.units import fmt_ns
from traceinsight.render.common import clean, smallest_first

#: Width of the drawing area of timelines, in SVG user units (the SVG scales to the page).
PLOT_W = 1000
GUTTER = 170
LANE_H = 18
#: Caps that keep the file small and the browser fast whatever the trace size.
MAX_STREAM_LANES_PER_DEVICE = 8
MAX_DEVICES_DRAWN = 16
MAX_GAPS_DRAWN = 300
MAX_MARKERS_PER_FINDING = 80
MAX_FINDING_ROWS = 10
LEVELS = 4  # coverage is drawn in this many opacity steps; equal neighbours merge into one rect



#: Drawing classes of GPU rows (CSS classes): kernel, collective, copy, other.
_GPU_CLASSES = ("k", "n", "c", "s")


def _classify(kernel: np.ndarray, memcpy: np.ndarray, collective: np.ndarray) -> np.ndarray:
    """Drawing class per GPU row, as an index into ``_GPU_CLASSES``: a collective (the views' classification) is
    drawn as such, other kernels as kernels, then copies, then the rest (memsets)."""
    cls = np.where(kernel, 0, np.where(memcpy, 2, 3))
    cls[collective] = 1
    return cls


def coverage_rects(starts: np.ndarray, ends: np.ndarray, w0: int, w1: int, width: int = PLOT_W) -> list[tuple[float, float, int]]:
    """Busy fraction per pixel column of [w0, w1), as (x, w, level) runs; level 1..LEVELS, 0 is not drawn."""
    if len(starts) == 0 or w1 <= w0:
        return []
    s = np.clip(starts, w0, w1)
    e = np.clip(ends, w0, w1)
    keep = e > s
    if not keep.any():
        return []
    ms, me = merge_intervals(s[keep], e[keep])
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    edges = np.linspace(w0, w1, width + 1)

    def covered(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ms, t, side="right") - 1
        inside = np.where(i >= 0, np.clip(t - ms[np.maximum(i, 0)], 0, (me - ms)[np.maximum(i, 0)]), 0)
        return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0)

    frac = np.diff(covered(edges)) / ((w1 - w0) / width)
    level = np.where(frac > 0, np.ceil(np.clip(frac, 0, 1) * LEVELS), 0).astype(int)
    # runs of equal level, the drawn ones (level > 0) as Python numbers
    a = np.concatenate([[0], np.flatnonzero(np.diff(level)) + 1])
    b = np.append(a[1:], width)
    drawn = level[a] > 0
    a, b = a[drawn], b[drawn]
    return list(zip(a.astype(float).tolist(), (b - a).astype(float).tolist(), level[a].tolist()))


def _x(t: float, w0: int, w1: int) -> float:
    # in float: numpy int64 times near the range limit would overflow (and warn) in PLOT_W * (t - w0)
    return round(GUTTER + PLOT_W * (float(t) - float(w0)) / max(float(w1) - float(w0), 1.0), 2)


def pick_window(analysis: Analysis, views) -> tuple[int, int, str]:
    """One median-length step where steps exist (typical, not the warm-up outlier), else the busiest tenth."""
    span = views.span_ns
    views_busy = views.busy
    steps = views.steps
    if not steps.empty:
        st = steps[steps["rank"] == steps["rank"].min()]
        d = st["dur_ns"].to_numpy()
        i = int(np.argsort(d, kind="stable")[len(d) // 2])
        row = st.iloc[i]
        return int(row["start_ns"]), int(row["start_ns"] + max(row["dur_ns"], 1)), f"{clean(row['name'], 60)} (median-length step)"
    gpu_n = len(views.gpu_activity)
    if span <= 0 or views_busy.empty:
        return 0, max(span, 1), "whole trace"
    # the GPU's active extent: a program that computes for 5 ms of a 1 s capture must not be drawn 5 px wide
    g0 = int(views_busy["start_ns"].min())
    g1 = int(views_busy["end_ns"].max())
    pad = max((g1 - g0) // 50, 1)
    a0, a1 = max(0, g0 - pad), min(span, g1 + pad)
    if gpu_n <= 3000:
        return a0, max(a1, a0 + 1), "GPU active window" if (a1 - a0) < 0.9 * span else "whole trace"
    bins = 200
    width = (a1 - a0) / bins
    busy = np.zeros(bins)
    for r in coverage_rects(views_busy["start_ns"].to_numpy(), views_busy["end_ns"].to_numpy(), a0, a1, bins):
        busy[int(r[0]) : int(r[0] + r[1])] += r[2]
    win = bins // 10
    sums = np.convolve(busy, np.ones(win), mode="valid")
    a = int(np.argmax(sums))
    return int(a0 + a * width), int(a0 + (a + win) * width), "busiest tenth of the GPU active window"


_TICK_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"), (1, "ns"))


def axis_ticks(w0: int, w1: int, n: int = 8) -> list[dict[str, Any]]:
    """Axis ticks on a 1-2-5 grid, every label in one unit with just enough decimals to tell neighbours apart;
    labels near the edges are anchored inwards so none is clipped."""
    span = max(w1 - w0, 1)
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    scale, unit = next(((sc, u) for sc, u in _TICK_UNITS if max(abs(w0), abs(w1)) >= sc), (1, "ns"))
    decimals = min(max(0, -math.floor(math.log10(step / scale) + 1e-9)), 6)
    out = []
    k = math.ceil(w0 / step)
    while k * step <= w1 and len(out) < 20:
        t = k * step
        x = _x(t, w0, w1)
        anchor = "end" if x > GUTTER + PLOT_W - 40 else ("start" if x < GUTTER + 20 else "middle")
        out.append({"x": x, "label": f"{t / scale:,.{decimals}f} {unit}", "anchor": anchor})
        k += 1
    return out


class _WindowRows:
    """The events overlapping one window [w0, w1), as plain arrays of the few columns the lanes draw.

    Found in one pass over the events' start/end (``Views.events_overlapping``) and taken column by column: a
    close-up costs its own rows, not the whole-trace frames (runtime calls, host rows) nor sorted indices over
    them. The row sets and flags are the views' own tests (``gpu_activity``, ``host_events``, ``runtime_calls``,
    ``is_collective``, ``is_sync_call``) applied to these rows, so the lanes show exactly what the views hold.
    """

    def __init__(self, views, w0: int, w1: int) -> None:
        ev = views.events
        pos = views.events_overlapping(w0, w1)
        self.rank = ev["rank"].to_numpy()[pos]
        self.device = ev["device"].to_numpy()[pos]
        self.stream = ev["stream"].to_numpy()[pos]
        self.start = ev["start_ns"].to_numpy()[pos]
        self.dur = ev["dur_ns"].to_numpy()[pos]
        self.kind = ev["kind"].take(pos)
        self.name = ev["name"].take(pos)
        self.tid = ev["tid"].to_numpy()[pos]
        self.host = self.device < 0
        self.gpu = kind_mask(self.kind, GPU_ACTIVITY_KINDS) & ~self.host

    def kind_is(self, *kinds: str) -> np.ndarray:
        """Per row: its kind is one of ``kinds``."""
        return kind_mask(self.kind, kinds)

    def names(self, rows: np.ndarray) -> np.ndarray:
        """The names of the rows at ``rows``, as strings."""
        return self.name.iloc[rows].astype(str).to_numpy()


def window_lanes(views, w0: int, w1: int, devices: list[tuple[int, int]], many_ranks: bool,
                  max_streams: int = MAX_STREAM_LANES_PER_DEVICE) -> list[dict[str, Any]]:
    """The lanes of [w0, w1): per device its busy coverage with idle gaps, then its busiest streams; then the host
    CUDA API of each rank shown (synchronising calls apart, as they usually explain a gap)."""
    win = _WindowRows(views, w0, w1)
    min_gap = max((w1 - w0) / PLOT_W, 1)
    busy_s, busy_e = views.busy["start_ns"].to_numpy(), views.busy["end_ns"].to_numpy()
    gaps = views.gaps
    gap_s, gap_e, gap_d = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy(), gaps["dur_ns"].to_numpy()
    kernels, memcpys = win.kind_is("kernel"), win.kind_is("memcpy")
    lanes: list[dict[str, Any]] = []
    for rank, device in devices:
        dlabel = f"r{rank} GPU {device}" if many_ranks else f"GPU {device}"
        b = views.device_rows("busy", rank, device, w0, w1)  # what the window's coverage is made of
        g = views.device_rows("gaps", rank, device, w0, w1)
        g_s, g_e, g_d = gap_s[g], gap_e[g], gap_d[g]
        wide = np.flatnonzero(g_d >= min_gap)
        # the longest MAX_GAPS_DRAWN, longest first, ties in time order (what DataFrame.nlargest keeps)
        shown = wide[np.argsort(-g_d[wide], kind="stable")[:MAX_GAPS_DRAWN]]
        gap_rects = [
            {"x": _x(max(s, w0), w0, w1), "w": max(_x(min(e, w1), w0, w1) - _x(max(s, w0), w0, w1), 0.8), "title": f"idle {fmt_ns(e - s)} at {fmt_ns(s)}"}
            for s, e in zip(g_s[shown], g_e[shown])
        ]
        lanes.append(
            {
                "label": f"{dlabel} all streams",
                "kind": "device",
                "rects": [(GUTTER + x, w, lv, "k") for x, w, lv in coverage_rects(busy_s[b], busy_e[b], w0, w1)],
                "gaps": gap_rects,
            }
        )
        rows = np.flatnonzero(win.gpu & (win.rank == rank) & (win.device == device))
        if not len(rows):
            continue
        # streams by GPU time, most first (ties: as pandas' sort_values orders them), the first max_streams drawn
        streams, of_stream = np.unique(win.stream[rows], return_inverse=True)
        total = np.zeros(len(streams), np.int64)
        np.add.at(total, of_stream, win.dur[rows])
        rank_order = np.arange(len(streams))[::-1][total[::-1].argsort(kind="quicksort")][::-1]
        shown_streams = np.sort(streams[rank_order[:max_streams]])
        kernel = kernels[rows]
        cls_all = _classify(kernel, memcpys[rows], name_mask(win.name.iloc[rows], COLLECTIVE) & kernel)  # is_collective
        st_all = win.start[rows]
        en_all = st_all + np.maximum(win.dur[rows], 0)
        stream_of_row = win.stream[rows]
        for stream in shown_streams.tolist():
            on_stream = stream_of_row == stream
            cls, st, en = cls_all[on_stream], st_all[on_stream], en_all[on_stream]
            rects = []
            for i, c in enumerate(_GPU_CLASSES):
                m = cls == i
                if m.any():
                    rects += [(GUTTER + x, w, lv, c) for x, w, lv in coverage_rects(st[m], en[m], w0, w1)]
            lanes.append({"label": f"stream {stream}", "kind": "stream", "rects": rects, "gaps": []})
        if len(streams) > len(shown_streams):
            lanes.append({"label": f"+{len(streams) - len(shown_streams)} more streams", "kind": "note", "rects": [], "gaps": []})
    ranks = sorted({r for r, _ in devices})
    for rank in ranks[:4]:
        lanes += _host_lanes(win, rank, w0, w1, f"r{rank} " if many_ranks else "")
        lanes += _range_gpu_lane(views, win, rank, w0, w1, f"r{rank} " if many_ranks else "")
    rt = np.flatnonzero(win.host & win.kind_is("runtime") & np.isin(win.rank, ranks))
    if len(rt):
        sync = name_mask(win.name.iloc[rt], SYNC_CALL)
        rt_rank = win.rank[rt]
        for rank in np.unique(rt_rank).tolist():
            mine = rt_rank == rank
            m = sync[mine]
            st = win.start[rt[mine]]
            en = st + win.dur[rt[mine]]
            rects = [(GUTTER + x, w, lv, "h") for x, w, lv in coverage_rects(st[~m], en[~m], w0, w1)]
            rects += [(GUTTER + x, w, lv, "y") for x, w, lv in coverage_rects(st[m], en[m], w0, w1)]
            lanes.append({"label": f"r{rank} host CUDA API" if many_ranks else "host CUDA API", "kind": "host", "rects": rects, "gaps": []})
            if len(lanes) > 60:
                break
    return lanes


#: Host lanes: what the host was doing in the window, so "data loading" or "optimizer step" can be seen.
HOST_LANES = (("annotation", "host ranges", "a"), ("cpu_op", "CPU ops", "o"), ("python", "Python", "p"))
MIN_LABEL_PX = 28  # rows narrower than this are drawn but not named
MAX_LABELS_PER_LANE = 40


def _host_lanes(win: _WindowRows, rank: int, w0: int, w1: int, prefix: str = "") -> list[dict[str, Any]]:
    """Per kind of host row (user ranges, framework ops, Python frames) one lane of coverage, with the longest
    rows named where they fit: the outermost ones first, as they say what the step was doing."""
    lanes: list[dict[str, Any]] = []
    mine = win.host & (win.rank == rank)
    scale = PLOT_W / max(w1 - w0, 1)
    busy = _launching_tid(win, mine)
    for k, label, cls in HOST_LANES:
        m = mine & win.kind_is(k)
        if k == "python" and busy is not None and (m & (win.tid == busy)).any():
            # Python frames of the thread that issues the launches (it holds the GIL while it does): a thread asleep
            # in threading.py's wait would otherwise fill the lane with its one long frame
            m &= win.tid == busy
            label = f"Python (thread {busy})"
        r = np.flatnonzero(m)
        if not len(r):
            continue
        st = win.start[r]
        en = st + np.maximum(win.dur[r], 0)
        rects = [(GUTTER + x, w, lv, cls) for x, w, lv in coverage_rects(st, en, w0, w1)]
        x0 = GUTTER + (np.clip(st, w0, w1) - w0) * scale
        x1 = GUTTER + (np.clip(en, w0, w1) - w0) * scale
        boxes: list[dict[str, Any]] = []
        wide = np.flatnonzero(x1 - x0 >= MIN_LABEL_PX)
        names = win.names(r[wide])
        taken: list[tuple[float, float]] = []
        for j in np.argsort(-(x1 - x0)[wide], kind="stable").tolist():
            if len(boxes) >= MAX_LABELS_PER_LANE:
                break
            i = wide[j]
            if any(a < x1[i] and x0[i] < b for a, b in taken):
                continue  # nested or overlapping a longer named row
            taken.append((float(x0[i]), float(x1[i])))
            w = float(x1[i] - x0[i])
            name = clean(names[j], 120)
            chars = int((w - 6) / 5.6)
            text = name if len(name) <= chars else (name[: chars - 1] + "…" if chars >= 4 else "")
            boxes.append({"x": round(float(x0[i]), 2), "w": round(w, 2), "text": text,
                          "title": f"{name}: {fmt_ns(int(en[i] - st[i]))} at {fmt_ns(int(st[i]))}"})
        lanes.append({"label": f"{prefix}{label}", "kind": "hostop", "rects": rects, "gaps": [], "boxes": boxes})
    return lanes


def _launching_tid(win: _WindowRows, mine: np.ndarray):
    """The host thread with the most runtime calls in the window (the one launching GPU work), or None."""
    rt = mine & win.kind_is("runtime")
    if not rt.any():
        return None
    tids, counts = np.unique(win.tid[rt], return_counts=True)
    return int(tids[np.argmax(counts)])


def _range_gpu_lane(views, win: _WindowRows, rank: int, w0: int, w1: int, prefix: str = "") -> list[dict[str, Any]]:
    """User ranges projected onto the GPU: per range instance in the window (library ranges left out), the span
    from the first start to the last end of the GPU work launched inside it, named like the host lanes."""
    from traceinsight.model.steps import LIBRARY_RANGE

    r = np.flatnonzero(win.host & (win.rank == rank) & win.kind_is("annotation"))
    ln = views.launches
    if not len(r) or ln.empty:
        return []
    names = win.names(r)
    user = np.array([not LIBRARY_RANGE.search(n) for n in names], dtype=bool)
    r, names = r[user], names[user]
    m = ln["rank"].to_numpy() == rank
    ls = ln["launch_start_ns"].to_numpy(np.int64)[m]
    o = np.argsort(ls, kind="stable")
    ls = ls[o]
    gs = ln["gpu_start_ns"].to_numpy(np.int64)[m][o]
    ge = gs + np.maximum(ln["gpu_dur_ns"].to_numpy(np.int64)[m][o], 0)
    st = win.start[r].astype(np.int64)
    en = st + np.maximum(win.dur[r].astype(np.int64), 0)
    lo, hi = np.searchsorted(ls, st, side="left"), np.searchsorted(ls, en, side="left")
    has = hi > lo
    if not has.any():
        return []
    p0 = np.array([gs[a:b].min() for a, b in zip(lo[has], hi[has])], np.int64)
    p1 = np.array([ge[a:b].max() for a, b in zip(lo[has], hi[has])], np.int64)
    pn = names[has]
    rects = [(GUTTER + x, w, lv, "k") for x, w, lv in coverage_rects(p0, p1, w0, w1)]
    scale = PLOT_W / max(w1 - w0, 1)
    x0 = GUTTER + (np.clip(p0, w0, w1) - w0) * scale
    x1 = GUTTER + (np.clip(p1, w0, w1) - w0) * scale
    boxes: list[dict[str, Any]] = []
    taken: list[tuple[float, float]] = []
    for i in np.argsort(-(x1 - x0), kind="stable").tolist():
        w = float(x1[i] - x0[i])
        if w < MIN_LABEL_PX or len(boxes) >= MAX_LABELS_PER_LANE:
            break
        if any(a < x1[i] and x0[i] < b for a, b in taken):
            continue
        taken.append((float(x0[i]), float(x1[i])))
        name = clean(pn[i], 120)
        chars = int((w - 6) / 5.6)
        text = name if len(name) <= chars else (name[: chars - 1] + "…" if chars >= 4 else "")
        boxes.append({"x": round(float(x0[i]), 2), "w": round(w, 2), "text": text,
                      "title": f"{name} on the GPU: {fmt_ns(int(p1[i] - p0[i]))} at {fmt_ns(int(p0[i]))}"})
    return [{"label": f"{prefix}ranges on GPU", "kind": "hostop", "rects": rects, "gaps": [], "boxes": boxes}]


def _rects_svg(rects: list[tuple[float, float, int, str]], y: float, height: float) -> Markup:
    """Coverage runs (x, w, level, class) as SVG rects. Formatted here, not in the template: a report draws
    thousands, and they hold only numbers and our own class letters, nothing that needs escaping."""
    return Markup("".join([f'<rect class="r {c} l{lv}" x="{x}" y="{y}" width="{w}" height="{height}"/>' for x, w, lv, c in rects]))


def _layout(lanes: list[dict[str, Any]], y: int = 24) -> int:
    """Gives each lane its y (and its drawn coverage); returns the y below the last one."""
    for lane in lanes:
        lane["y"] = y
        lane["rects_svg"] = _rects_svg(lane["rects"], y + 2, LANE_H - 4)
        y += LANE_H + (6 if lane["kind"] == "device" else 2)
    return y


def largest(instances: Any) -> Instance | None:
    """The longest instance (ties: the earliest start, then the first listed), read off the columns."""
    c = instance_columns(instances)
    if not len(c.start_ns):
        return None
    dur = c.end_ns - c.start_ns
    cand = np.flatnonzero(dur == dur.max())
    i = int(cand[np.argmin(c.start_ns[cand])])  # argmin: the first of equal starts
    r, d = float(c.rank[i]), float(c.device[i])
    return Instance(int(c.start_ns[i]), int(c.end_ns[i]), None if r != r else int(r), None if d != d else int(d), c.label(i))


def instance_view(tl, views, f: Finding) -> dict[str, Any] | None:
    """A close-up of the finding's largest instance (``Finding.instances``), on the lanes of its device: what a
    reader would otherwise look for by zooming the main timeline."""
    inst = largest(f.instances)
    if inst is None:
        return None
    s, e = float(inst.start_ns), float(inst.end_ns)
    span = max(views.span_ns, 1)
    pad = max(0.25 * (e - s), 5_000.0)  # the instance fills about two thirds of the close-up, whatever its length
    w0, w1 = int(max(0.0, s - pad)), int(max(min(float(span), e + pad), e))
    if w1 <= w0:
        return None
    act = views.gpu_activity
    if act.empty:
        return None
    loc = f.location
    rank = inst.rank if inst.rank is not None else loc.rank
    device = inst.device if inst.device is not None else loc.device
    devices = [(r, d) for r, d in views.device_keys if (rank is None or r == rank) and (device is None or d == device)][:2]
    if not devices:
        return None
    lanes = window_lanes(views, w0, w1, devices, len({r for r, _ in devices}) > 1 or rank not in (None, 0), max_streams=3)
    lanes_end = _layout(lanes)
    x0 = _x(max(s, w0), w0, w1)
    return {
        "title": (f"Largest instance: {fmt_ns(e - s)} at {fmt_ns(s)}" if e > s else f"First instance: at {fmt_ns(s)}")
        + (f" ({clean(inst.label, 80)})" if inst.label else ""),
        "w0": w0,
        "w1": w1,
        "lanes": lanes,
        "lanes_end": lanes_end,
        "height": lanes_end + 4,
        "width": GUTTER + PLOT_W + 10,
        "ticks": axis_ticks(w0, w1),
        "band": {"x": x0, "w": max(_x(min(e, w1), w0, w1) - x0, 1.5)},
    }


def memory_charts(analysis: Analysis, tl: dict[str, Any] | None, many_ranks: bool) -> list[dict[str, Any]]:
    """Per GPU with memory events, its chart on the whole-trace axis of the timeline's overview."""
    from traceinsight.render.memory_view import charts

    span = max(analysis.views.span_ns, 1)
    axis = tl["ov_ticks"] if tl else axis_ticks(0, span, 6)
    return charts(analysis, GUTTER, PLOT_W, axis, tl["ov_window"] if tl else None, many_ranks)


def timeline_block(analysis: Analysis, views) -> dict[str, Any] | None:
    act = views.gpu_activity
    if act.empty:
        return None
    w0, w1, what = pick_window(analysis, views)
    span = max(views.span_ns, 1)
    devices = views.device_keys[:MAX_DEVICES_DRAWN]
    many_ranks = len({r for r, _ in devices}) > 1
    overview = []
    for rank, device in devices:
        b = views.busy.iloc[views.device_rows("busy", rank, device)]
        dlabel = f"r{rank} GPU {device}" if many_ranks else f"GPU {device}"
        rects = coverage_rects(b["start_ns"].to_numpy(), b["end_ns"].to_numpy(), 0, span)
        oy = 16 + len(overview) * 14  # the row's y in the overview
        overview.append({"label": dlabel, "rects": rects, "rects_svg": _rects_svg([(GUTTER + x, w, lv, "k") for x, w, lv in rects], oy, 11)})
    lanes = window_lanes(views, w0, w1, devices, many_ranks)
    # finding markers: their location as a band over the lanes, their instances as ticks in the finding's own row
    marks = []
    for n, f in enumerate(analysis.findings[:MAX_FINDING_ROWS], start=1):
        ticks = []
        c = instance_columns(f.instances)
        # in the window; the longest MAX_MARKERS_PER_FINDING (ties: list order), drawn in time order
        shown = np.flatnonzero((c.end_ns >= w0) & (c.start_ns <= w1))
        shown = shown[smallest_first(c.start_ns[shown] - c.end_ns[shown], MAX_MARKERS_PER_FINDING)]
        shown = shown[np.argsort(c.start_ns[shown], kind="stable")]
        for i_s, i_e, k in zip(c.start_ns[shown].tolist(), c.end_ns[shown].tolist(), c.label_code[shown].tolist()):
            x0 = _x(max(i_s, w0), w0, w1)
            text = c.labels[k]
            label = f"{clean(text, 60)}: " if text else ""
            ticks.append({"x": x0, "w": max(_x(min(i_e, w1), w0, w1) - x0, 1.5), "title": f"{label}{fmt_ns(i_s)} – {fmt_ns(i_e)}"})
        has_time = len(c.start_ns) > 0
        band = None
        loc = f.location
        if loc.start_ns is not None:
            ls, le = loc.start_ns, loc.end_ns if loc.end_ns is not None else loc.start_ns
            if le >= w0 and ls <= w1 and (le - ls) < 0.9 * (w1 - w0):
                x0 = _x(max(ls, w0), w0, w1)
                band = {"x": x0, "w": max(_x(min(le, w1), w0, w1) - x0, 1.5)}
        ov = None
        if loc.start_ns is not None:
            le = loc.end_ns if loc.end_ns is not None else loc.start_ns
            ov = {"x": GUTTER + PLOT_W * loc.start_ns / span, "w": max(PLOT_W * (le - loc.start_ns) / span, 1.5)}
        marks.append({"n": n, "code": clean(f.code, 12), "severity": f.severity.value, "title": clean(f.title, 120), "ticks": ticks, "band": band, "overview": ov, "timed": has_time or loc.start_ns is not None})
    y = lanes_end = _layout(lanes)
    for m in marks:
        m["y"] = y
        y += 14
    height = y + 6
    return {
        "w0": w0,
        "w1": w1,
        "what": what,
        "window": f"{fmt_ns(w0)} – {fmt_ns(w1)} ({fmt_ns(w1 - w0)})",
        "width": GUTTER + PLOT_W + 10,
        "height": height,
        "lanes_end": lanes_end,
        "lanes": lanes,
        "marks": marks,
        "ticks": axis_ticks(w0, w1),
        "gutter": GUTTER,
        "plot_w": PLOT_W,
        "lane_h": LANE_H,
        "overview": overview,
        "ov_window": {"x": GUTTER + PLOT_W * w0 / span, "w": max(PLOT_W * (w1 - w0) / span, 2)},
        "ov_height": 16 + len(overview) * 14 + 22,
        "ov_ticks": axis_ticks(0, span, 6),
        "span": span,
    }
