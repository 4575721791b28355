"""The steps and user ranges as the reports show them: which marker made the steps and why, each step's duration
and ledger with their spread and the outlier step (``table``), and user ranges projected onto the GPU
(``ranges_table``). Derived data: it reads the views and the ledger (where steps come from is ``traceinsight.model.steps``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS
from traceinsight.vocab.intervals import merge_grouped, merge_intervals
from traceinsight.vocab.masks import distinct_texts, kind_mask
from traceinsight.vocab.patterns import DATA_WAIT_PRIMARY
from traceinsight.derive.steady import warmup_steps
from traceinsight.model.steps import LIBRARY_RANGE


def table(views, ledger_by_step, source: dict | None = None) -> dict:
    """The steps as the reports show them: ``source`` (which marker made them and why), ``count``, ``per_step``
    (rank, step, name, start_ns, dur_ns, warmup (a warm-up step of the steady-state model), ``ledger_ns``: the
    step's ns per ledger bucket, summed over the rank's devices), ``spread`` over the steps outside warm-up
    (median, p10, p90, min, max in ns) and ``outlier``: the slowest steady step when it is over 1.5x the median,
    with ``cause``, the ledger bucket that grew most against the median step. ``ledger_by_step``: the time
    ledger's per-step frame, asked only when there are steps (``Derived.ledger.by_step``)."""
    st = views.steps
    out: dict = {"source": source or {"marker": None, "how": "none", "why": "no step markers"}, "count": int(len(st)), "per_step": [], "spread": None, "outlier": None}
    if st.empty:
        return out
    by = ledger_by_step()
    led = by[by["step"] >= 0].groupby(["rank", "step", "bucket"], sort=False)["ns"].sum() if len(by) else pd.Series(dtype="int64")
    led = led.to_dict()  # looked up per step and bucket: a dict, not a MultiIndex search each time
    rows = []
    for r, g in st.groupby("rank", sort=True):
        g = g.sort_values("start_ns")
        warm = warmup_steps(g["dur_ns"].to_numpy())
        for (row, w) in zip(g.itertuples(index=False), warm):
            ledger_ns = {b: int(led.get((int(r), int(row.step), b), 0)) for b in BUCKETS}
            rows.append({"rank": int(r), "step": int(row.step), "name": str(row.name), "start_ns": int(row.start_ns), "dur_ns": int(row.dur_ns),
                         "warmup": bool(w), "ledger_ns": {b: v for b, v in ledger_ns.items() if v}})
    out["per_step"] = rows
    steady = [x for x in rows if not x["warmup"]] or rows
    d = np.array([x["dur_ns"] for x in steady], dtype=float)
    med = float(np.median(d))
    out["spread"] = {"steps": len(steady), "median_ns": int(round(med)), "p10_ns": int(round(np.percentile(d, 10))), "p90_ns": int(round(np.percentile(d, 90))),
                     "min_ns": int(d.min()), "max_ns": int(d.max())}
    worst = max(steady, key=lambda x: x["dur_ns"])
    if len(steady) >= 3 and worst["dur_ns"] > 1.5 * med:
        med_b = {b: float(np.median([x["ledger_ns"].get(b, 0) for x in steady])) for b in BUCKETS}
        grew = {b: worst["ledger_ns"].get(b, 0) - med_b[b] for b in BUCKETS}
        cause = max(grew, key=grew.get)
        out["outlier"] = {"rank": worst["rank"], "step": worst["step"], "name": worst["name"], "dur_ns": worst["dur_ns"],
                          "x_median": round(worst["dur_ns"] / med, 2), "cause": cause, "cause_ns": int(grew[cause])}
    return out


#: Most user ranges listed in the per-range table (the rest are in no report; the largest GPU time first).
MAX_RANGES = 30


def ranges_table(views) -> list[dict]:
    """User ranges (NVTX, ``record_function``, TraceMe; library ranges and step markers left out) projected onto
    the GPU: per name, ``count``, ``host_ns`` (the instances' summed length), ``gpu_ns`` (the summed GPU time of the
    kernels, copies and memsets whose launch call starts inside an instance on the same rank) and ``gpu_ops``.
    Nested ranges each count the work inside them, so an outer range includes its children's. A range nested in one
    of the same name on its thread is the same call (JAX records ``PjitFunction(add)`` twice, one inside the other):
    ``count`` and ``host_ns`` are of the outermost ones. Largest ``gpu_ns`` first, at most ``MAX_RANGES``."""
    ev = views.events
    rows = np.flatnonzero(kind_mask(ev["kind"], ("annotation",)))
    if not len(rows):
        return []
    codes, texts = distinct_texts(ev["name"], rows)  # each distinct name turned to text once, not once per row
    if (codes < 0).any():  # a missing name: as the rows' own texts give it
        uniq, inv = np.unique(ev["name"].take(rows).astype(str).to_numpy(), return_inverse=True)
    else:
        uniq, by_text = np.unique(texts, return_inverse=True)  # the names sorted, as over every row's text
        inv = by_text.reshape(-1)[codes]
    ok = np.array([len(n) <= 200 and not LIBRARY_RANGE.search(n) and not re.search(DATA_WAIT_PRIMARY, n) for n in uniq])
    keep = ok[inv]
    rows, inv = rows[keep], inv[keep]
    if not len(rows):
        return []
    rank = ev["rank"].to_numpy()[rows].astype(np.int64)
    tid = ev["tid"].to_numpy()[rows].astype(np.int64)
    start = ev["start_ns"].to_numpy(np.int64)[rows]
    end = start + np.maximum(ev["dur_ns"].to_numpy(np.int64)[rows], 0)
    ln = views.launches
    l_rank = ln["rank"].to_numpy(np.int64) if len(ln) else np.zeros(0, np.int64)
    l_start = ln["launch_start_ns"].to_numpy(np.int64) if len(ln) else np.zeros(0, np.int64)
    l_dur = np.maximum(ln["gpu_dur_ns"].to_numpy(np.int64), 0) if len(ln) else np.zeros(0, np.int64)
    by_rank = {}
    for r in np.unique(rank):
        m = l_rank == r
        o = np.argsort(l_start[m], kind="stable")
        s_ = l_start[m][o]
        by_rank[int(r)] = (s_, np.r_[0, np.cumsum(l_dur[m][o])])
    out = []
    for code in np.unique(inv):
        m = inv == code
        gpu, ops = 0, 0
        for r in np.unique(rank[m]):
            s_, cum = by_rank[int(r)]
            mr = m & (rank == r)
            a, b = merge_intervals(start[mr], end[mr])
            lo, hi = np.searchsorted(s_, a, side="left"), np.searchsorted(s_, b, side="left")
            gpu += int((cum[hi] - cum[lo]).sum())
            ops += int((hi - lo).sum())
        count, host_ns = _outermost(rank[m], tid[m], start[m], end[m])
        out.append({"name": str(uniq[code]), "count": count, "host_ns": host_ns, "gpu_ns": gpu, "gpu_ops": ops})
    out.sort(key=lambda x: (-x["gpu_ns"], -x["host_ns"], x["name"]))
    return out[:MAX_RANGES]


def report(views, ledger_by_step, source: dict | None = None) -> dict:
    """``{"steps": table(views, ledger_by_step, source), "ranges": ranges_table(views)}``, built once per views (their
    ``memo``, which the analysis' store answers for), so every format of one analysis reads the same steps and none
    builds them again. ``ledger_by_step``: the time ledger's per-step frame, asked only when there are steps (the
    store's ``lambda: ledger.by_step``). ``views`` None (an analysis made without the engine's store): no steps, as
    ``table`` says of a trace without markers."""
    if views is None:
        return {"steps": {"source": source or {"marker": None, "how": "none", "why": "no step markers"}, "count": 0, "per_step": [], "spread": None, "outlier": None},
                "ranges": []}
    return views.memo("steps.report", lambda: {"steps": table(views, ledger_by_step, source), "ranges": ranges_table(views)})


def _outermost(rank: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    """(how many, how long in all) the instances of one name are, an instance nested in another on its thread being
    part of it: per (rank, thread), the merged intervals."""
    key = rank * (1 << 32) + (tid & 0xFFFFFFFF)
    m = merge_grouped(key, start, end)
    return len(m), int((m["end_ns"] - m["start_ns"]).sum())

