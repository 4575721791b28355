"""The coordinator's array paths (stacking rank frames, ledger per step, step of each collective, the JSON's per-rank
ledger and waits) against the per-rank pandas computations they replace, on random jobs with and without steps,
with missing buckets, unsorted steps, collectives outside every step and ranks given out of order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.derive.ranks import reduce as R
from traceinsight.job.report import _ledger_by_rank
from traceinsight.derive.ranks.summary import COLL_COLUMNS, STEP_COLUMNS, RankSummary

BUCKETS = ["compute", "communication", "idle_host_busy", "copy", "idle_other"]


def _summary(rng: np.random.Generator, rank: int, *, steps: int, coll: int, nan_bucket: bool = False) -> RankSummary:
    n = max(steps, 1)
    step_no = rng.permutation(np.arange(3, 3 + n)) if steps else np.array([-1])
    start = rng.integers(0, 10_000, n) * 1000
    step_frame = pd.DataFrame({c: rng.integers(0, 1000, n) for c in STEP_COLUMNS})
    step_frame["step"], step_frame["start_ns"], step_frame["end_ns"] = step_no, start, start + rng.integers(1, 3000, n) * 1000
    c_start = np.sort(rng.integers(0, 13_000, coll) * 1000)
    coll_frame = pd.DataFrame({c: rng.integers(0, 1000, coll) for c in COLL_COLUMNS})
    coll_frame["group"] = pd.array([f"stream {rng.integers(0, 3)}" for _ in range(coll)], dtype="str")
    coll_frame["kind"] = pd.array(["allreduce"] * coll, dtype="str")
    coll_frame["start_ns"], coll_frame["end_ns"] = c_start, c_start + 500
    rows = rng.integers(1, 14)
    led_steps = rng.choice(np.r_[step_no, -1], rows)
    bucket = pd.array(rng.choice(BUCKETS, rows), dtype="str")
    if nan_bucket:
        bucket[0] = pd.NA
    ledger = pd.DataFrame({"step": led_steps, "bucket": bucket, "ns": rng.integers(0, 10**9, rows)})
    return RankSummary(rank=rank, device=0, source=f"r{rank}", world_size=None, origin_ns=int(rng.integers(0, 10**6)), device_names=[],
                       event_count=10, window_start_ns=0, window_end_ns=1, busy_ns=0, compute_ns=0, comm_ns=0, exposed_ns=0,
                       steps=step_frame, collectives=coll_frame, ledger=ledger)


def _job(seed: int) -> list[RankSummary]:
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(12)
    return [_summary(rng, int(r), steps=int(rng.integers(0, 4)), coll=int(rng.integers(0, 6)), nan_bucket=bool(rng.random() < 0.2)) for r in ranks]


def _concat_reference(summaries, attr, columns):
    frames = [getattr(s, attr).assign(rank=s.rank, origin_ns=s.origin_ns) for s in summaries if len(getattr(s, attr))]
    return pd.concat(frames, ignore_index=True)[["rank", "origin_ns", *columns]]


def _ledger_reference(summaries):
    frames = []
    for s in summaries:
        led = s.ledger
        inside = led[led["step"] >= 0]
        n = inside["step"].nunique()
        use, div = (inside, n) if n else (led, 1)
        g = use.groupby("bucket", sort=True)["ns"].sum()
        frames.append(pd.DataFrame({"bucket": pd.Series(g.index, dtype=led["bucket"].dtype), "ns": g.to_numpy() / div, "rank": s.rank}))
    return pd.concat(frames, ignore_index=True)[["rank", "bucket", "ns"]]


def _step_of_reference(coll, steps):
    out = []
    for r, start in zip(coll["rank"], coll["start_ns"]):
        st = steps[(steps["rank"] == r) & (steps["step"] >= 0) & (steps["start_ns"] <= start)].sort_values("start_ns", kind="stable")
        out.append(int(st["step"].iloc[-1]) if len(st) and start < st["end_ns"].iloc[-1] else -1)
    return np.array(out, np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_stacked_frames_equal_the_assigned_concat(seed):
    summaries = _job(seed)
    for attr, columns in (("steps", STEP_COLUMNS), ("collectives", COLL_COLUMNS)):
        if any(len(getattr(s, attr)) for s in summaries):
            pd.testing.assert_frame_equal(R._concat(summaries, attr, columns), _concat_reference(summaries, attr, columns), check_exact=True)


@pytest.mark.parametrize("seed", range(12))
def test_ledger_per_step_equals_the_per_rank_groupby(seed):
    summaries = _job(seed)
    got = R._ledger_per_step(summaries)
    pd.testing.assert_frame_equal(got, _ledger_reference(summaries), check_exact=True)
    assert got["ns"].sum() > 0


@pytest.mark.parametrize("seed", range(12))
def test_step_of_each_collective_equals_the_row_by_row_search(seed):
    summaries = _job(seed)
    coll = R._concat(summaries, "collectives", COLL_COLUMNS)
    steps = R._concat(summaries, "steps", STEP_COLUMNS)
    if len(coll):
        got = R._step_of(coll, steps)
        np.testing.assert_array_equal(got, _step_of_reference(coll, steps))


def test_step_of_finds_steps_and_misses_outside_them():
    steps = pd.DataFrame({"rank": [1, 1, 0, 0], "step": [8, 7, 5, -1], "start_ns": [200, 100, 0, 0], "end_ns": [300, 150, 50, 999]})
    coll = pd.DataFrame({"rank": [0, 1, 1, 1, 0, 2], "start_ns": [10, 120, 150, 250, 50, 10]})
    np.testing.assert_array_equal(R._step_of(coll, steps), [5, 7, -1, 8, -1, -1])


def test_ledger_per_step_divides_by_the_steps_and_falls_back_to_the_window():
    stepped = _summary(np.random.default_rng(0), 0, steps=2, coll=0)
    stepped.ledger = pd.DataFrame({"step": [3, 4, 3, -1], "bucket": pd.array(["copy", "copy", "compute", "copy"], dtype="str"), "ns": [10, 30, 8, 1000]})
    bare = _summary(np.random.default_rng(1), 1, steps=0, coll=0)
    bare.ledger = pd.DataFrame({"step": [-1, -1], "bucket": pd.array(["idle_other", "compute"], dtype="str"), "ns": [7, 5]})
    got = R._ledger_per_step([stepped, bare])
    assert got.to_dict("list") == {"rank": [0, 0, 1, 1], "bucket": ["compute", "copy", "compute", "idle_other"], "ns": [4.0, 20.0, 5.0, 7.0]}


def test_json_ledger_by_rank_equals_the_groupby():
    summaries = _job(3)
    ledger = R._ledger_per_step(summaries)
    reference = {int(r): {str(b): int(round(v)) for b, v in zip(g["bucket"], g["ns"])} for r, g in ledger.groupby("rank", sort=True)}
    got = _ledger_by_rank(ledger)
    assert got == reference and list(got) == list(reference)
    assert all(list(got[r]) == list(reference[r]) for r in got)
