"""The ledger's JSON form (``Ledger.to_dict``), pinned by value on a two-rank folder written by the test helpers.

Every report's "where the GPU time went" and the diff of two runs read this document, so its keys, its windows and
its rounding are what users and CI gates see. The figures below follow from the kernels placed here by hand:
rank 0 runs kernels over [100, 300) and [500, 700) µs, rank 1 over [0, 100) and [350, 1050) µs.
"""

from __future__ import annotations

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS

#: rank -> (kernels as (start µs, duration µs), steps as (start µs, duration µs))
PLAN = {
    0: ([(100.0, 200.0), (500.0, 200.0)], [(0.0, 400.0), (400.0, 400.0)]),
    1: ([(0.0, 100.0), (350.0, 700.0)], [(0.0, 500.0), (500.0, 600.0)]),
}


@pytest.fixture
def ledger(tmp_path):
    """Built for each test (not once per module): a mutation tester maps each test to the code it runs."""
    folder = tmp_path / "two_ranks"
    folder.mkdir()
    for rank, (kernels, steps) in PLAN.items():
        t = KinetoTrace(rank=rank, world_size=2)
        for n, (s, d) in enumerate(steps, start=1):
            t.step(n, s, d)
        for s, d in kernels:
            t.kernel("volta_sgemm_128x64_nn", s, d, launch_us=s - 20.0)
        t.write(folder / f"rank{rank}.json")
    return traceinsight.analyze(folder, select=["TI001"]).ledger


@pytest.fixture
def ledger_doc(ledger):
    return ledger.to_dict()


def _idle(ns: dict[str, int]) -> int:
    return sum(n for b, n in ns.items() if b != "compute")


def test_vocabulary_and_totals(ledger_doc):
    assert ledger_doc["buckets"] == list(BUCKETS)
    assert ledger_doc["avoidable_buckets"] == list(AVOIDABLE_BUCKETS)
    total = ledger_doc["total"]
    assert total["window_ns"] == 600_000 + 1_050_000
    assert total["ns"]["compute"] == 400_000 + 800_000
    assert set(total["ns"]) == set(BUCKETS) and sum(total["ns"].values()) == total["window_ns"]
    assert total["pct"]["compute"] == 72.727  # 1.2 / 1.65, rounded to three decimals
    assert total["pct"]["communication"] == 0.0
    assert sum(total["pct"].values()) == pytest.approx(100.0, abs=0.01)


def test_per_device_windows_and_shares(ledger_doc):
    rows = ledger_doc["by_device"]
    assert [(r["rank"], r["device"]) for r in rows] == [(0, 0), (1, 0)]
    r0, r1 = rows
    assert (r0["window_ns"], r1["window_ns"]) == (600_000, 1_050_000)  # first to last GPU activity per device
    assert (r0["ns"]["compute"], r1["ns"]["compute"]) == (400_000, 800_000)
    assert (_idle(r0["ns"]), _idle(r1["ns"])) == (200_000, 250_000)
    assert (r0["pct"]["compute"], r1["pct"]["compute"]) == (66.667, 76.19)
    assert set(r0["ns"]) == set(BUCKETS)  # per device every bucket is listed, zeros included
    assert r0["pct"]["copy"] == 0.0


def test_per_step_windows_leave_out_empty_buckets(ledger_doc):
    steps = {(s["rank"], s["step"]): s for s in ledger_doc["by_step"]}
    assert sorted(steps) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(s["device"] == 0 for s in steps.values())
    # rank 0: steps [0, 400) and [400, 800) clipped to the window [100, 700)
    assert (steps[0, 1]["window_ns"], steps[0, 2]["window_ns"]) == (300_000, 300_000)
    assert steps[0, 1]["ns"]["compute"] == steps[0, 2]["ns"]["compute"] == 200_000
    assert steps[0, 1]["pct"]["compute"] == 66.667
    # rank 1: steps [0, 500) and [500, 1100) clipped to [0, 1050); the second step is all compute
    assert (steps[1, 1]["window_ns"], steps[1, 2]["window_ns"]) == (500_000, 550_000)
    assert steps[1, 1]["ns"]["compute"] == 250_000 and steps[1, 1]["pct"]["compute"] == 50.0
    assert steps[1, 2]["ns"] == {"compute": 550_000} and steps[1, 2]["pct"] == {"compute": 100.0}
    for s in steps.values():
        assert sum(s["ns"].values()) == s["window_ns"] and all(s["ns"].values()) and all(s["pct"].values())


def test_a_trace_without_gpu_work_has_an_empty_ledger_with_the_full_schema(tmp_path):
    """No kernels: every ledger table is empty but keeps its columns and types (rules and renderers select columns
    and do arithmetic on them without checking), and the JSON form is all zeros."""
    t = KinetoTrace()
    t.step(1, 0.0, 100.0)
    t.cpu_op("aten::add", 10.0, 20.0)
    led = traceinsight.analyze(t.write(tmp_path / "cpu_only.json"), select=["TI001"]).ledger
    want = {
        "slices": {"rank": "int64", "device": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64", "bucket": "object"},
        "by_device": {"rank": "int64", "device": "int64", "bucket": "object", "ns": "int64", "pct": "float64"},
        "by_step": {"rank": "int64", "device": "int64", "step": "int64", "bucket": "object", "ns": "int64", "pct": "float64"},
        "windows": {"rank": "int64", "device": "int64", "start_ns": "int64", "end_ns": "int64", "window_ns": "int64"},
        "warmup": {"rank": "int64", "start_ns": "int64", "end_ns": "int64", "reason": "object"},
    }
    for name, cols in want.items():
        frame = getattr(led, name)
        assert frame.empty and {c: str(frame[c].dtype) for c in frame.columns} == cols, name
    assert led.gaps.empty and list(led.gaps.columns) == ["rank", "device", "start_ns", "end_ns", "dur_ns", "next_launch_end_ns", "cause"]
    doc = led.to_dict()
    assert doc["by_device"] == [] and doc["by_step"] == []
    assert doc["total"]["window_ns"] == 0 and set(doc["total"]["pct"].values()) == {0.0}


def test_claims_follow_rank_and_time(ledger):
    """What findings claim: busy slices clipped to their ranges, idle gaps taken whole when a range touches them,
    and a range that names a rank claims on that rank only."""
    import pandas as pd

    from traceinsight.vocab.buckets import IDLE_BUCKETS

    w = ledger.windows.set_index("rank")["start_ns"]
    origin = int(w[0]) - 100_000  # rank 0's first kernel starts at 100 µs
    assert int(w[1]) == origin  # rank 1's at 0 µs, on the same clock

    def at(us):
        return origin + int(us * 1000)

    def total(frame):
        return int((frame["end_ns"] - frame["start_ns"]).sum())

    compute1 = ledger.claimed("compute", rank=1)
    assert set(compute1["rank"]) == {1} and total(compute1) == 800_000
    clipped = ledger.claimed("compute", within=[(at(0), at(200))])
    assert total(clipped[clipped["rank"] == 0]) == 100_000 and total(clipped[clipped["rank"] == 1]) == 100_000
    # rank 0 idles over [300, 500) µs: a 10 µs range inside that gap claims the whole 200 µs of it
    on0 = ledger.claimed(IDLE_BUCKETS, within=pd.DataFrame({"start_ns": [at(400)], "end_ns": [at(410)], "rank": [0], "device": [0]}))
    assert set(on0["rank"]) == {0} and total(on0) == 200_000
    # the same range on rank 1, whose GPU is busy then, touches no gap and claims nothing
    assert ledger.claimed(IDLE_BUCKETS, within=pd.DataFrame({"start_ns": [at(400)], "end_ns": [at(410)], "rank": [1], "device": [0]})).empty
    # rank 1 idles over [100, 350) µs; a range there without a rank claims rank 1's gap and nothing of rank 0
    both = ledger.claimed(IDLE_BUCKETS, within=[(at(200), at(201))])
    assert set(both["rank"]) == {1} and total(both) == 250_000


def _steps_by_groupby(by_step):
    """The reference ``to_dict``'s per-step list was: a pandas groupby over the frame, one group at a time."""
    return [
        {"rank": int(r), "device": int(d), "step": int(s), "window_ns": int(g["ns"].sum()),
         "ns": {str(b): int(n) for b, n in zip(g["bucket"], g["ns"]) if n},
         "pct": {str(b): round(float(p), 3) for b, p in zip(g["bucket"], g["pct"]) if p}}
        for (r, d, s), g in by_step.groupby(["rank", "device", "step"], sort=True)
    ]


@pytest.mark.parametrize("ns_dtype", ["int64", "float64"])
def test_step_rows_are_the_groupby_rows_in_key_order(ns_dtype):
    """Per-step rows from arrays: the groups in (rank, device, step) order whatever the frame's order, a group's
    buckets in frame order, zeros left out, the window the sum of its ns; frames of other dtypes go through pandas."""
    import numpy as np
    import pandas as pd

    from traceinsight.derive.ledger.account import _step_dicts

    rng = np.random.default_rng(7)
    n = 400
    frame = pd.DataFrame({
        "rank": rng.integers(0, 3, n), "device": rng.integers(0, 2, n), "step": rng.integers(-1, 5, n),
        "bucket": pd.array(rng.choice(list(BUCKETS), n), dtype="string"),
        "ns": rng.integers(0, 3, n) * rng.integers(0, 10**9, n), "pct": np.round(rng.random(n) * 100, 5) * rng.integers(0, 2, n),
    })
    frame["ns"] = frame["ns"].astype(ns_dtype)
    got = _step_dicts(frame)
    assert got == _steps_by_groupby(frame)
    assert [(x["rank"], x["device"], x["step"]) for x in got] == sorted({(int(r), int(d), int(s)) for r, d, s in
                                                                           zip(frame["rank"], frame["device"], frame["step"])})
    assert any(0 in (x["ns"].values()) for x in got) is False and _step_dicts(frame.iloc[:0]) == []
