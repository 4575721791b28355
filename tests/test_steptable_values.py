"""``steptable.ranges_table`` names each user range once per distinct name; the table is the one built from every
row's own text, on the sample traces and on a planted trace."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from traceinsight.derive import steptable
from traceinsight.derive.derived import Derived
from traceinsight.ingest import load
from traceinsight.model.steps import LIBRARY_RANGE
from traceinsight.vocab.intervals import merge_intervals
from traceinsight.vocab.patterns import DATA_WAIT_PRIMARY
from tests.helpers.kineto_writer import KinetoTrace

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(str(p) for p in [*ROOT.glob("sample_traces/*.json.gz"), *ROOT.glob("sample_traces/h100/*.json.gz")])


def _ranges_per_row(views) -> list[dict]:
    """The reference: every annotation row's name cast to text, the names sorted over the rows."""
    ev = views.events
    rows = np.flatnonzero((ev["kind"] == "annotation").to_numpy())
    if not len(rows):
        return []
    uniq, inv = np.unique(ev["name"].take(rows).astype(str).to_numpy(), return_inverse=True)
    ok = np.array([len(n) <= 200 and not LIBRARY_RANGE.search(n) and not re.search(DATA_WAIT_PRIMARY, n) for n in uniq])
    keep = ok[inv]
    rows, inv = rows[keep], inv[keep]
    if not len(rows):
        return []
    rank = ev["rank"].to_numpy()[rows].astype(np.int64)
    start = ev["start_ns"].to_numpy(np.int64)[rows]
    end = start + np.maximum(ev["dur_ns"].to_numpy(np.int64)[rows], 0)
    ln = views.launches
    out = []
    for code in np.unique(inv):
        m = inv == code
        gpu = ops = 0
        for r in np.unique(rank[m]):
            on = ln["rank"].to_numpy(np.int64) == r
            o = np.argsort(ln["launch_start_ns"].to_numpy(np.int64)[on], kind="stable")
            s_ = ln["launch_start_ns"].to_numpy(np.int64)[on][o]
            cum = np.r_[0, np.cumsum(np.maximum(ln["gpu_dur_ns"].to_numpy(np.int64)[on][o], 0))]
            a, b = merge_intervals(start[m & (rank == r)], end[m & (rank == r)])
            lo, hi = np.searchsorted(s_, a, side="left"), np.searchsorted(s_, b, side="left")
            gpu += int((cum[hi] - cum[lo]).sum())
            ops += int((hi - lo).sum())
        # an instance inside another of the same name on its thread is that call: counted with it, by a plain walk
        tid = ev["tid"].to_numpy()[rows].astype(np.int64)
        count = host = 0
        for r, t in sorted(set(zip(rank[m].tolist(), tid[m].tolist()))):
            own = sorted(zip(start[m & (rank == r) & (tid == t)].tolist(), end[m & (rank == r) & (tid == t)].tolist()))
            reach = None
            for a, b in own:
                if reach is None or a >= reach:
                    count += 1
                    host += b - a
                    reach = b
                elif b > reach:
                    host += b - reach
                    reach = b
        out.append({"name": str(uniq[code]), "count": count, "host_ns": host, "gpu_ns": gpu, "gpu_ops": ops})
    out.sort(key=lambda x: (-x["gpu_ns"], -x["host_ns"], x["name"]))
    return out[: steptable.MAX_RANGES]


def test_ranges_table_on_the_samples_is_the_per_row_table():
    seen = 0
    for path in SAMPLES:
        views = Derived(load(path)).views
        want = _ranges_per_row(views)
        assert steptable.ranges_table(views) == want, path
        seen += bool(want)
    assert seen  # some sample has user ranges


def test_ranges_table_names_sorted_as_over_every_row(tmp_path):
    t = KinetoTrace()
    for i in range(4):
        t.annotation("zeta", i * 1000.0, 300)
        t.annotation("Alpha", i * 1000.0 + 400, 200)
        t.kernel("k", i * 1000.0 + 60, 50, launch_us=i * 1000.0 + 40)
        t.kernel("k", i * 1000.0 + 460, 50, launch_us=i * 1000.0 + 420)
    tl = load(t.write(tmp_path / "r.json"))
    views = Derived(tl).views
    got = steptable.ranges_table(views)
    assert got == _ranges_per_row(views)
    assert {x["name"]: (x["count"], x["gpu_ops"]) for x in got} == {"zeta": (4, 4), "Alpha": (4, 4)}


def test_a_range_nested_in_one_of_its_name_is_one_call(tmp_path):
    """JAX records each jitted call as ``PjitFunction(add)`` twice, one inside the other: five calls, not ten, and
    their host time once; the same name on another thread at the same time is another call."""
    t = KinetoTrace()
    for i in range(5):
        t.annotation("PjitFunction(add)", i * 1000.0, 300, tid=1)
        t.annotation("PjitFunction(add)", i * 1000.0 + 1, 290, tid=1)
        t.kernel("k", i * 1000.0 + 60, 50, launch_us=i * 1000.0 + 40, tid=1)
    t.annotation("PjitFunction(add)", 0.0, 300, tid=2)
    views = Derived(load(t.write(tmp_path / "n.json"))).views
    got = steptable.ranges_table(views)
    assert got == _ranges_per_row(views)
    (row,) = got
    assert (row["count"], row["host_ns"], row["gpu_ops"]) == (6, 6 * 300_000, 5)

