"""``traceinsight record --sweep NAME=V1,V2,...``: one run per value (and per device with ``--device cpu,gpu``), and
one report comparing them: time per step and per sample, GPU busy, the bound and its lever, MFU, memory peak and
headroom, with a chart of time per sample against the value that marks where the bound changes.

Each run's figures are read back from its JSON report (docs/json-report.md is the contract), so the comparison
shows exactly what each run's own report says; nothing is recomputed here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from traceinsight.render.escape import html as esc, markdown as md_esc

SCHEMA = "traceinsight-sweep/1"
#: A run whose slowest recorded step is this many times its fastest is too noisy to compare at face value.
NOISY = 3
STEM = "traceinsight-sweep"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BATCHY = re.compile(r"batch|(^|_)bs($|_)", re.IGNORECASE)
#: ``--device``: what each name does to the run (CUDA_VISIBLE_DEVICES="" hides every GPU from PyTorch, TensorFlow
#: and JAX alike) and what ``{device}`` in the command becomes.
DEVICES = {"cpu": ({"CUDA_VISIBLE_DEVICES": ""}, "cpu"), "gpu": ({}, "cuda"), "cuda": ({}, "cuda")}


class SweepError(ValueError):
    pass


def parse(spec: str) -> tuple[str, list[str]]:
    """``NAME=V1,V2,...`` -> (NAME, [V1, V2, ...]); a malformed one is a usage error."""
    name, sep, rest = spec.partition("=")
    name = name.strip()
    values = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not _NAME.match(name):
        raise SweepError(f"--sweep {spec!r}: write NAME=V1,V2,... with NAME a word (it becomes {{NAME}} in the command, or an environment variable)")
    if len(values) < 2 or len(set(values)) != len(values):
        raise SweepError(f"--sweep {spec!r}: give two or more different values")
    return name, values


def parse_devices(spec: str | None) -> list[str | None]:
    if not spec:
        return [None]
    names = [d.strip().lower() for d in spec.split(",") if d.strip()]
    bad = [d for d in names if d not in DEVICES]
    if bad or not names or len(set(names)) != len(names):
        raise SweepError(f"--device {spec!r}: a comma-separated list of cpu and gpu (each once)")
    return names  # type: ignore[return-value]


def command_for(command: list[str], name: str, value: str, device: str | None) -> tuple[list[str], dict[str, str]]:
    """The command of one run, and the environment it adds: ``{NAME}`` (and ``{device}``) replaced in the arguments,
    or, when no argument names ``{NAME}``, the environment variable NAME set to the value."""
    key = "{" + name + "}"
    out = [a.replace(key, value) for a in command]
    env = {} if any(key in a for a in command) else {name: value}
    if device is not None:
        extra, word = DEVICES[device]
        env.update(extra)
        out = [a.replace("{device}", word) for a in out]
    return out, env


def run_name(name: str, value: str, device: str | None) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.=-]", "_", f"{name}={value}")
    return f"{device}-{safe}" if device else safe


def samples_basis(name: str, option: str | None) -> str | None:
    """How many samples a step holds: a number, ``value`` (the swept value: the default for a batch-size name),
    or None (time per step only)."""
    if option:
        if option == name or option == "value":
            return "value"
        try:
            if float(option) > 0:
                return option
        except ValueError:
            pass
        raise SweepError(f"--samples-per-step {option!r}: a positive number, or the swept name {name}")
    return "value" if _BATCHY.search(name) else None


@dataclass
class Run:
    value: str
    device: str | None
    run_dir: Path
    exit_code: int
    notes: list[str] = field(default_factory=list)
    report: dict | None = None


def _num(value: str) -> float | None:
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def figures(run: Run, basis: str | None) -> dict[str, Any]:
    """The compared figures of one run, from its JSON report (None where the report has no such figure)."""
    r = run.report or {}
    kpis, verdict = r.get("kpis") or {}, r.get("verdict") or {}
    steady = [s["dur_ns"] for s in (r.get("workload") or {}).get("steps") or [] if not s.get("warmup") and isinstance(s.get("dur_ns"), (int, float))]
    step_ns = median(steady) if steady else kpis.get("mean_step_ns")
    job = r.get("summary") if "ranks" in r and isinstance(r.get("summary"), dict) else None
    if job:  # a whole-job report (torchrun): its medians across ranks
        step_ns = job.get("step_ns_median")
        kpis = {"steps": job.get("steps_per_rank"), "gpu_busy_pct": job.get("gpu_busy_pct_median") if job.get("window_ns_median") else None}
    samples = _num(run.value) if basis == "value" else _num(basis) if basis else None
    devices = (r.get("trace") or {}).get("devices") or []
    mem = [d for d in (r.get("memory") or {}).get("devices") or []]
    peaks = [d.get("peak_reserved_bytes") or d.get("peak_allocated_bytes") for d in mem]
    peaks = [p for p in peaks if p]
    headroom = [d["headroom_bytes"] for d in mem if d.get("headroom_bytes") is not None]
    capacity = [d["capacity_bytes"] for d in mem if d.get("capacity_bytes")]
    lever = None
    for f in r.get("findings") or []:
        if f.get("fingerprint") and f.get("fingerprint") == verdict.get("claimed_by"):
            lever = f.get("title")
    if run.report is None:
        bound, category = (f"failed (exit {run.exit_code})", "failed") if run.exit_code else ("nothing recorded", "none")
    else:
        bound, category = verdict.get("headline"), verdict.get("category")
    return {
        "value": run.value, "device": run.device, "exit_code": run.exit_code, "run_dir": run.run_dir.name, "notes": run.notes,
        "report": run.report is not None,
        "steps": kpis.get("steps"), "step_ms": None if step_ns is None else step_ns / 1e6,
        "step_min_ms": min(steady) / 1e6 if steady else None, "step_max_ms": max(steady) / 1e6 if steady else None,
        "sample_ms": None if step_ns is None or not samples else step_ns / 1e6 / samples, "samples_per_step": samples,
        "gpu": bool(devices) or (kpis.get("gpu_busy_pct") is not None), "gpu_busy_pct": kpis.get("gpu_busy_pct"),
        "bound": bound, "bound_category": category, "lever": lever, "mfu_pct": (r.get("efficiency") or {}).get("mfu_pct"),
        "memory_peak_bytes": max(peaks) if peaks else None, "memory_capacity_bytes": max(capacity) if capacity else None,
        "memory_headroom_bytes": min(headroom) if headroom else None,
    }


def compare(name: str, runs: list[Run], basis: str | None, formats: tuple[str, ...] = ("html", "md", "json")) -> dict[str, Any]:
    """The comparison document (written as the sweep's JSON; the HTML and Markdown render it)."""
    rows = [figures(r, basis) for r in runs]
    changes, best = [], {}
    for dev in dict.fromkeys(r["device"] for r in rows):
        mine = [r for r in rows if r["device"] == dev]
        for a, b in zip(mine, mine[1:]):
            if a["bound_category"] != b["bound_category"]:
                changes.append({"device": dev, "between": [a["value"], b["value"]], "from": a["bound"], "to": b["bound"]})
        timed = [r for r in mine if r[_y_key(rows)] is not None]
        if timed:
            best[dev or "run"] = min(timed, key=lambda r: r[_y_key(rows)])["value"]
    return {"schema": SCHEMA, "name": name, "samples_per_step": basis, "formats": list(formats), "y": _y_key(rows), "runs": rows, "bound_changes": changes, "fastest": best}


def _y_key(rows: list[dict]) -> str:
    return "sample_ms" if any(r["sample_ms"] is not None for r in rows) else "step_ms"


def write(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    svg = chart(doc)
    paths = [out_dir / f"{STEM}.json", out_dir / f"{STEM}.md", out_dir / f"{STEM}.svg", out_dir / f"{STEM}.html"]
    paths[0].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(doc), encoding="utf-8")
    paths[2].write_text(svg + "\n", encoding="utf-8")
    paths[3].write_text(html_page(doc, svg), encoding="utf-8")
    return paths


def _grouped_notes(doc: dict) -> list[tuple[str, list[str]]]:
    """Each recording note once, with the runs it is about ("all runs" when every run says it)."""
    groups: dict[str, list[str]] = {}
    for r in doc["runs"]:
        for n in r["notes"]:
            groups.setdefault(n, []).append(r["run_dir"])
    return [(n, ["all runs"] if len(runs) == len(doc["runs"]) > 1 else runs) for n, runs in groups.items()]


def _report_file(doc: dict, prefer: str) -> str:
    """The run report to link to: the page's own format when the runs wrote it, else their JSON."""
    return f"traceinsight-report.{prefer if prefer in doc.get('formats', ()) else 'json'}"


# -- text -----------------------------------------------------------------------------------------------------------
def _ms(x: float | None) -> str:
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f} ms"
    if x >= 1:
        return f"{x:.2f} ms"
    return f"{x * 1000:.1f} µs"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} %"


def _gib(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**30:.2f} GiB"


def _busy(r: dict) -> str:
    if r["step_ms"] is None:
        return "—"  # nothing recorded: nothing to say about the GPU either
    return _pct(r["gpu_busy_pct"]) if r["gpu"] else "no GPU in trace"


COLUMNS = ("value", "device", "time/step", "steps min–max", "time/sample", "GPU busy", "bound", "lever", "MFU", "memory peak", "headroom")


def _cells(r: dict) -> list[str]:
    spread = "—" if r.get("step_min_ms") is None else f"{_ms(r['step_min_ms'])} – {_ms(r['step_max_ms'])}"
    return [r["value"], r["device"] or "—", _ms(r["step_ms"]), spread, _ms(r["sample_ms"]), _busy(r), r["bound"] or "—", r["lever"] or "—",
            _pct(r["mfu_pct"]), _gib(r["memory_peak_bytes"]), _gib(r["memory_headroom_bytes"])]


def summary_lines(doc: dict) -> list[str]:
    """What the sweep found, in sentences (the reports' opening, and the command's last words on stderr)."""
    y = "time per sample" if doc["y"] == "sample_ms" else "time per step"
    lines = []
    for dev, value in doc["fastest"].items():
        where = f" on {dev}" if dev != "run" else ""
        row = next(r for r in doc["runs"] if r["value"] == value and (r["device"] or "run") == dev)
        lines.append(f"Lowest {y}{where}: {doc['name']}={value} ({_ms(row[doc['y']])}).")
    for c in doc["bound_changes"]:
        where = f" on {c['device']}" if c["device"] else ""
        lines.append(f"The bound changes{where} between {doc['name']}={c['between'][0]} and {c['between'][1]}: {c['from']} → {c['to']}.")
    if not doc["bound_changes"]:
        lines.append("The bound is the same at every value.")
    noisy = [r["run_dir"] for r in doc["runs"] if r.get("step_min_ms") and r["step_max_ms"] > NOISY * r["step_min_ms"]]
    if noisy:
        lines.append(f"Step times vary more than {NOISY}x within {len(noisy)} of {len(doc['runs'])} run(s) ({', '.join(noisy[:4])}"
                     f"{', ...' if len(noisy) > 4 else ''}): the machine was busy or the steps differ; compare with care, "
                     "or record more steps (--active) on a quiet machine.")
    if any(not r["gpu"] and r["exit_code"] == 0 and r["step_ms"] is not None for r in doc["runs"]):
        lines.append("Runs without a GPU in their trace are compared on time only (GPU busy, MFU and GPU memory do not apply).")
    return lines


def markdown(doc: dict) -> str:
    out = [f"# traceinsight sweep: {md_esc(doc['name'])}", ""]
    for line in summary_lines(doc):
        out += [md_esc(line, 400), ""]
    out += [f"![{'time per sample' if doc['y'] == 'sample_ms' else 'time per step'} against {md_esc(doc['name'])}]({STEM}.svg)", ""]
    out.append("| " + " | ".join(COLUMNS) + " | report |")
    out.append("|" + "---|" * (len(COLUMNS) + 1))
    for r in doc["runs"]:
        link = f"[{md_esc(r['run_dir'])}]({r['run_dir']}/{_report_file(doc, 'md')})" if r["report"] else md_esc(r["run_dir"])
        out.append("| " + " | ".join(md_esc(c) for c in _cells(r)) + f" | {link} |")
    notes = _grouped_notes(doc)
    if notes:
        out += ["", "Recording:", ""] + [f"- {md_esc(', '.join(runs))}: {md_esc(n, 400)}" for n, runs in notes]
    return "\n".join(out) + "\n"


def html_page(doc: dict, svg: str) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in (*COLUMNS, "report"))
    body = []
    for r in doc["runs"]:
        cells = "".join(f"<td>{esc(c)}</td>" for c in _cells(r))
        link = f'<a href="{esc(r["run_dir"])}/{_report_file(doc, "html")}">{esc(r["run_dir"])}</a>' if r["report"] else esc(r["run_dir"])
        body.append(f"<tr class=\"{esc(r['bound_category'] or '')}\">{cells}<td>{link}</td></tr>")
    notes = "".join(f"<li><b>{esc(', '.join(runs))}</b>: {esc(n)}</li>" for n, runs in _grouped_notes(doc))
    summary = "".join(f"<p>{esc(line)}</p>" for line in summary_lines(doc))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>traceinsight sweep: {esc(doc['name'])}</title>
<style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1150px;color:#1d2330;padding:0 16px}}
h1{{font-size:22px}} table{{border-collapse:collapse;margin:16px 0;width:100%}}
th,td{{border-bottom:1px solid #dde2ea;padding:6px 8px;text-align:left;vertical-align:top}} th{{background:#f3f5f9}}
td:nth-child(3),td:nth-child(4),td:nth-child(5),td:nth-child(6),td:nth-child(9),td:nth-child(10),td:nth-child(11){{text-align:right;white-space:nowrap}}
tr.failed td{{color:#a4262c}} .chart{{border:1px solid #dde2ea;border-radius:6px;padding:8px;background:#fff}} ul{{padding-left:20px}}
</style></head><body>
<h1>traceinsight sweep: {esc(doc['name'])}</h1>
{summary}
<div class="chart">{svg}</div>
<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>
{f'<h2>Recording</h2><ul>{notes}</ul>' if notes else ''}
</body></html>
"""


# -- the chart ------------------------------------------------------------------------------------------------------
_SERIES = {"cpu": "#d9822b", "gpu": "#2b6cb0", "cuda": "#2b6cb0", None: "#2b6cb0"}
_CATEGORY_DOT = {"failed": "#a4262c", "none": "#8a94a6"}


def chart(doc: dict, width: int = 860, height: int = 360) -> str:
    """Inline SVG: the chosen time against the swept value, one line per device, each point labelled with its bound,
    and a dashed line where the bound changes. Values are placed on a log scale when they are numbers spanning 4x or
    more (batch sizes), evenly otherwise."""
    rows, ykey = doc["runs"], doc["y"]
    left, right, top, bottom = 92, 20, 30, 60
    pw, ph = width - left - right, height - top - bottom
    values = list(dict.fromkeys(r["value"] for r in rows))
    nums = [_num(v) for v in values]
    if all(n is not None and n > 0 for n in nums) and max(nums) / min(nums) >= 4:  # type: ignore[type-var,operator]
        lo, hi = math.log(min(nums)), math.log(max(nums))  # type: ignore[type-var,arg-type]
        xpos = {v: left + pw * (math.log(n) - lo) / (hi - lo) for v, n in zip(values, nums)}  # type: ignore[arg-type]
    elif all(n is not None for n in nums) and len(set(nums)) > 1:
        lo, hi = min(nums), max(nums)  # type: ignore[type-var]
        xpos = {v: left + pw * (n - lo) / (hi - lo) for v, n in zip(values, nums)}  # type: ignore[operator]
    else:
        xpos = {v: left + pw * (i / max(len(values) - 1, 1)) for i, v in enumerate(values)}
    ys = [r[ykey] for r in rows if r[ykey] is not None]
    ymax = max(ys) * 1.15 if ys else 1.0
    ylabel = "time per sample" if ykey == "sample_ms" else "time per step"

    def ypos(y: float) -> float:
        return top + ph * (1 - y / ymax)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{esc(ylabel)} against {esc(doc["name"])}" font-family="system-ui,sans-serif" font-size="12">',
             f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#1d2330"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#1d2330"/>']
    for i in range(5):
        y = ymax * i / 4
        parts.append(f'<line x1="{left}" y1="{ypos(y):.1f}" x2="{left + pw}" y2="{ypos(y):.1f}" stroke="#eef1f5"/>')
        parts.append(f'<text x="{left - 6}" y="{ypos(y) + 4:.1f}" text-anchor="end">{esc(_ms(y) if i else "0")}</text>')
    for v in values:
        parts.append(f'<text x="{xpos[v]:.1f}" y="{top + ph + 18}" text-anchor="middle">{esc(v)}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 12}" text-anchor="middle" font-weight="600">{esc(doc["name"])}</text>')
    parts.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" font-weight="600" transform="rotate(-90 16 {top + ph / 2})">{esc(ylabel)}</text>')
    for c in doc["bound_changes"]:
        a, b = c["between"]
        x = (xpos[a] + xpos[b]) / 2
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#a4262c" stroke-dasharray="5 4"/>')
        parts.append(f'<text x="{x + 4:.1f}" y="{top + 12}" fill="#a4262c">bound changes{" (" + esc(c["device"]) + ")" if c["device"] else ""}</text>')
    devices = list(dict.fromkeys(r["device"] for r in rows))
    for k, dev in enumerate(devices):
        colour = _SERIES.get(dev, "#2b6cb0")
        pts = [(xpos[r["value"]], ypos(r[ykey]), r) for r in rows if r["device"] == dev and r[ykey] is not None]
        if len(pts) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y, _ in pts)}"/>')
        last_bound = None
        for x, y, r in pts:
            per = r[ykey] / r["step_ms"] if r["step_ms"] else None
            if per and r.get("step_min_ms") is not None:  # the spread of the recorded steps: how far to trust a point
                y0, y1 = (max(min(ypos(v * per), top + ph), top) for v in (r["step_min_ms"], r["step_max_ms"]))
                parts.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="{colour}" stroke-opacity="0.45" stroke-width="6"/>')
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"><title>{esc(r["value"])}: {esc(_ms(r[ykey]))}, {esc(r["bound"])}</title></circle>')
            if r["bound"] != last_bound:  # the bound, where a series starts and where it changes
                anchor = "end" if x > left + pw * 0.85 else "start" if x < left + pw * 0.15 else "middle"
                dx = {"end": -8, "start": 8, "middle": 0}[anchor]
                parts.append(f'<text x="{x + dx:.1f}" y="{y - 10:.1f}" text-anchor="{anchor}" fill="#3a4355" font-size="11">{esc(_short(r["bound"]))}</text>')
            last_bound = r["bound"]
        for r in rows:
            if r["device"] == dev and r[ykey] is None:
                x = xpos[r["value"]]
                parts.append(f'<text x="{x:.1f}" y="{top + ph - 6}" text-anchor="middle" fill="{_CATEGORY_DOT.get(r["bound_category"], "#a4262c")}">✕ {esc(_short(r["bound"]))}</text>')
        if dev is not None:
            parts.append(f'<rect x="{left + pw - 120}" y="{top + 4 + 18 * k}" width="12" height="12" fill="{colour}"/>'
                         f'<text x="{left + pw - 102}" y="{top + 14 + 18 * k}">{esc(dev)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(bound: str | None) -> str:
    if not bound:
        return ""
    return bound.removeprefix("Bound by ").strip()
