"""The self-contained HTML job report: headline, clock note, cross-rank findings, rank x step heatmaps.

At 1,024 ranks per-rank timeline lanes would be megabytes; two heatmaps (step time, time waiting at collectives)
drawn on a canvas from a compact matrix show the same thing in a few hundred kB.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..render import escape
from ..units import fmt_ns
from .report_data import FULL_TABLE_RANKS, TOP, headline, rank_rule_groups, rank_table
from .run import JobAnalysis

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.4em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f4f4f4}.sev-error{color:#b00}.sev-warning{color:#a60}.sev-info{color:#06a}
.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:.8em 0}
canvas{border:1px solid #ccc;image-rendering:pixelated}.hm{display:inline-block;margin-right:2em;vertical-align:top}
.legend{font-size:11px;color:#555}
"""

_JS = """
function heat(id,data,nr,nc,title){const c=document.getElementById(id);const cw=Math.max(4,Math.floor(360/Math.max(nc,1)));
const rh=nr>256?1:Math.max(1,Math.floor(512/nr));c.width=nc*cw;c.height=nr*rh;const x=c.getContext('2d');
let mx=0;for(const v of data)if(v>mx)mx=v;for(let r=0;r<nr;r++)for(let s=0;s<nc;s++){const v=data[r*nc+s];
if(v<0){x.fillStyle='#eee'}else{const t=mx>0?v/mx:0;x.fillStyle=`rgb(${Math.round(255*t)},${Math.round(60+120*(1-t))},${Math.round(200*(1-t))})`}
x.fillRect(s*cw,r*rh,cw,rh)}document.getElementById(id+'-l').textContent=title+': 0 (blue) to '+(mx/1000).toFixed(3)+' ms (red); rows = ranks '+R[0]+'..'+R[R.length-1]+', columns = steps';
c.onmousemove=e=>{const b=c.getBoundingClientRect();const r=Math.floor((e.clientY-b.top)/rh),s=Math.floor((e.clientX-b.left)/cw);
if(r>=0&&r<nr&&s>=0&&s<nc)c.title='rank '+R[r]+', step '+S[s]+': '+(data[r*nc+s]/1000).toFixed(3)+' ms'}}
heat('hs',HS,R.length,S.length,'step time');heat('hw',HW,R.length,S.length,'waiting at collectives');
"""


def _e(x) -> str:
    return escape.html(x)


def _table(df: pd.DataFrame, max_rows: int) -> str:
    if df.empty:
        return ""
    df = df.head(max_rows)
    head = "".join(f"<th>{_e(c)}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False, name=None):
        rows.append("<tr>" + "".join(f"<td>{_e(_fmt(v))}</td>" for v in row) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:g}"
    s = str(v)
    return s if len(s) <= 100 else s[:99] + "…"


def _matrix(ja: JobAnalysis) -> tuple[list[int], list[int], list[int], list[int]]:
    """Ranks, steps, and row-major step-time / wait matrices in µs (-1 where a rank has no such step)."""
    st = ja.job.steps
    ranks = [int(r) for r in ja.job.ranks["rank"]]
    steps = sorted(int(s) for s in st["step"].unique()) if len(st) else [-1]
    if st.empty:
        return ranks, steps, [-1] * len(ranks), [-1] * len(ranks)
    ri = pd.Index(ranks)
    si = pd.Index(steps)
    hs = np.full((len(ranks), len(steps)), -1, np.int64)
    hw = np.full((len(ranks), len(steps)), -1, np.int64)
    r = ri.get_indexer(st["rank"])
    s = si.get_indexer(st["step"])
    hs[r, s] = (st["dur_ns"].to_numpy() // 1000).astype(np.int64)
    hw[r, s] = (st["wait_ns"].to_numpy() // 1000).astype(np.int64)
    return ranks, steps, hs.ravel().tolist(), hw.ravel().tolist()


def render_html(ja: JobAnalysis) -> str:
    j = ja.job
    h = headline(ja)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>traceinsight job: {_e(ja.source)}</title><style>{_CSS}</style></head><body>"]
    parts.append(f"<h1>traceinsight job report: {_e(ja.source)}</h1>")
    step = f"median step {fmt_ns(h['step_ns_median'])}, {h['steps_per_rank']} steps per rank" if h["step_ns_median"] else "no step markers"
    parts.append(
        f"<p><b>{h['ranks']} ranks</b> (world size {_e(h['world_size'] or 'unknown')}), {_e(step)}; median GPU busy {_e(h['gpu_busy_pct_median'])} %; "
        f"median collective time {fmt_ns(h['comm_ns_median'] or 0)}, {fmt_ns(h['exposed_comm_ns_median'] or 0)} of it exposed, "
        f"{fmt_ns(h['collective_wait_ns_median'] or 0)} waiting for later ranks.</p>"
    )
    parts.append(f"<p><b>Clocks:</b> {_e(j.alignment.describe())}.</p>")
    parts.append("<p><b>Ran on:</b> " + (f"the Dask cluster at {_e(ja.cluster)} (a scheduler is trusted code: it can run code in this process).</p>"
                                            if ja.cluster else "local processes on this machine.</p>"))
    if ja.rule_failures:
        parts.append("<h2>Rule failures (their findings are missing)</h2><ul>" + "".join(f"<li>{_e(x[:600])}</li>" for x in ja.rule_failures[:20]) + "</ul>")
    if ja.missing:
        parts.append(f"<h2>{len(ja.missing)} rank file(s) not analysed</h2><ul>" + "".join(f"<li>{_e(x[:400])}</li>" for x in ja.missing[:20]) + "</ul>")
    ranks, steps, hs, hw = _matrix(ja)
    parts.append("<h2>Ranks x steps</h2>")
    parts.append("<div class='hm'><canvas id='hs'></canvas><div class='legend' id='hs-l'></div></div>")
    parts.append("<div class='hm'><canvas id='hw'></canvas><div class='legend' id='hw-l'></div></div>")
    parts.append("<h2>Cross-rank findings</h2>")
    if not ja.findings:
        parts.append("<p>None.</p>")
    for f in ja.findings:
        fx = f.fixes.get("pytorch")
        parts.append(
            f"<div class='card'><h3><span class='sev-{f.severity.value}'>{_e(f.code)}</span> {_e(f.title)}</h3>"
            f"<p>impact {fmt_ns(f.impact_ns)} · {_e(f.severity.value)}</p><p>{_e(f.message)}</p>{_table(f.evidence, TOP)}"
            + (f"<p><b>Fix (PyTorch):</b> {_e(fx.text)}</p><pre>{_e(fx.code.strip())}</pre>" if fx else "")
            + "</div>"
        )
    table = rank_table(ja)
    parts.append("<h2>Ranks</h2>")
    if len(table) <= FULL_TABLE_RANKS:
        parts.append(_table(table, FULL_TABLE_RANKS))
    else:
        parts.append(f"<p>Ranks that held the others longest (top {TOP}):</p>")
        parts.append(_table(table.sort_values(["held_ms", "rank"], ascending=[False, True]), TOP))
        parts.append(f"<p>Slowest ranks by median step (top {TOP}):</p>")
        parts.append(_table(table.sort_values(["step_ms", "rank"], ascending=[False, True]), TOP))
    parts.append("<h2>Per-rank findings, by rule</h2><ul>")
    for g in rank_rule_groups(ja):
        worst = ", ".join(f"rank {w['rank']} ({fmt_ns(w['impact_ns'])})" for w in g["worst"][:3])
        parts.append(f"<li><b>{_e(g['code'])} {_e(g['rule'])}</b> ({_e(g['severity'])}): on {g['ranks']} of {j.rank_count} ranks; worst: {_e(worst)}.<br>{_e(g['example_message'][:400])}</li>")
    parts.append("</ul>")
    if ja.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_e(w[:300])}</li>" for w in ja.warnings[:20]) + "</ul>")
        if len(ja.warnings) > 20:
            parts.append(f"<p>… and {len(ja.warnings) - 20} more (see the JSON report).</p>")
    data = json.dumps({"R": ranks, "S": steps, "HS": hs, "HW": hw}, separators=(",", ":"))
    parts.append(f"<script>const D={data};const R=D.R,S=D.S,HS=D.HS,HW=D.HW;{_JS}</script></body></html>")
    return "".join(parts)
