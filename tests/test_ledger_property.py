"""Property: on any set of intervals, the ledger's buckets tile each device's window exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from traceinsight.vocab.buckets import BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS  # noqa: E402
from traceinsight.model.timeline import Timeline, TraceMeta, assign_steps, build_events  # noqa: E402
from traceinsight.derive.views import Views
from traceinsight.derive.derived import Derived

GPU_NAMES = ["gemm", "ncclDevKernel_AllReduce", "elementwise"]
HOST = [
    ("cpu_op", "aten::add"),
    ("cpu_op", "aten::item"),
    ("runtime", "cudaStreamSynchronize"),
    ("runtime", "cudaMalloc"),
    ("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
    ("python", "train.py(12): step"),
]

interval = st.tuples(st.integers(0, 5_000), st.integers(0, 800))
gpu_row = st.tuples(
    interval,
    st.sampled_from(["kernel", "kernel", "memcpy", "memset"]),
    st.integers(0, len(GPU_NAMES) - 1),
    st.integers(0, 1),  # device
    st.integers(0, 2),  # stream
    st.integers(0, 1),  # rank
    st.one_of(st.none(), st.integers(-300, 50)),  # launch offset from the GPU start, or no launch
)
host_row = st.tuples(interval, st.integers(0, len(HOST) - 1), st.integers(0, 1))
step_row = st.tuples(st.integers(0, 4_000), st.integers(1, 2_000), st.integers(0, 1))


def _timeline(gpu, host, steps) -> Timeline:
    kind, name, start, dur, rank, device, stream, corr = [], [], [], [], [], [], [], []
    corr_id = 0
    for (s, d), k, n, dev, strm, rk, launch in gpu:
        corr_id += 1
        c = corr_id if launch is not None else -1
        kind.append(k), name.append(GPU_NAMES[n] if k == "kernel" else f"Memcpy {k}"), start.append(s), dur.append(d)
        rank.append(rk), device.append(dev), stream.append(strm), corr.append(c)
        if launch is not None:
            kind.append("runtime"), name.append("cudaLaunchKernel"), start.append(max(s + launch, 0)), dur.append(4)
            rank.append(rk), device.append(-1), stream.append(-1), corr.append(c)
    for (s, d), h, rk in host:
        k, n = HOST[h]
        kind.append(k), name.append(n), start.append(s), dur.append(d), rank.append(rk), device.append(-1), stream.append(-1), corr.append(-1)
    # steps of one rank must not overlap: lay them end to end from their sorted starts
    for rk in (0, 1):
        mine = sorted((s, d) for s, d, r in steps if r == rk)
        t = 0
        for i, (s, d) in enumerate(mine):
            s = max(s, t)
            kind.append("step"), name.append(f"ProfilerStep#{i + 1}"), start.append(s), dur.append(d)
            rank.append(rk), device.append(-1), stream.append(-1), corr.append(-1)
            t = s + d
    ev = build_events({"kind": kind, "name": name, "start_ns": np.array(start, np.int64) * 1000, "dur_ns": np.array(dur, np.int64) * 1000, "rank": rank, "device": device, "stream": stream, "correlation": corr})
    assign_steps(ev)
    return Timeline(ev, TraceMeta("pytorch", ranks=sorted(set(rank)) or [0]))


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(gpu_row, min_size=0, max_size=25), st.lists(host_row, max_size=25), st.lists(step_row, max_size=5))
def test_buckets_sum_to_the_window_per_device_and_per_step(gpu, host, steps):
    tl = _timeline(gpu, host, steps)
    views = Derived(tl)
    led = views.ledger
    util = views.utilization
    positive = util[util["window_ns"] > 0]
    assert len(led.windows) == len(positive)
    for r in positive.itertuples(index=False):
        t = led.totals(int(r.rank), int(r.device))
        assert sum(t.values()) == r.window_ns == led.window_ns(int(r.rank), int(r.device))
        # busy buckets are exactly the union of GPU activity: other streams running count as busy
        assert sum(t[b] for b in BUSY_BUCKETS) == r.busy_ns
    # per step: each step's buckets sum to the step's share of the window, and the steps add up to the device
    if not led.by_step.empty:
        steps_sum = led.by_step.groupby(["rank", "device", "bucket"])["ns"].sum()
        dev = led.by_device.set_index(["rank", "device", "bucket"])["ns"]
        assert steps_sum.reindex(dev.index, fill_value=0).equals(dev)
        sl = led.slices
        for (rk, dv, stp), g in sl.groupby(["rank", "device", "step"]):
            sel = led.by_step[(led.by_step["rank"] == rk) & (led.by_step["device"] == dv) & (led.by_step["step"] == stp)]
            assert int(sel["ns"].sum()) == int((g["end_ns"] - g["start_ns"]).sum())
    # slices tile the windows: contiguous, non-empty, every bucket known
    sl = led.slices
    assert set(sl["bucket"].astype(str)) <= set(BUCKETS)
    assert (sl["end_ns"] > sl["start_ns"]).all()
    for (rk, dv), g in sl.groupby(["rank", "device"]):
        assert (g["start_ns"].to_numpy()[1:] == g["end_ns"].to_numpy()[:-1]).all()
        w = led.windows[(led.windows["rank"] == rk) & (led.windows["device"] == dv)].iloc[0]
        assert g["start_ns"].iloc[0] == w["start_ns"] and g["end_ns"].iloc[-1] == w["end_ns"]
    # every idle slice lies in one of the gaps, whose per-bucket columns add up to the device's idle buckets
    for r in led.windows.itertuples(index=False):
        t = led.totals(int(r.rank), int(r.device))
        gp = led.gaps[(led.gaps["rank"] == r.rank) & (led.gaps["device"] == r.device)]
        assert int(gp["dur_ns"].sum()) == sum(t[b] for b in IDLE_BUCKETS)
        for b in IDLE_BUCKETS:
            assert int(gp[b].sum()) == t[b]
    # claims never exceed what they claim from
    for b in BUCKETS:
        assert led.claim(b) == led.totals()[b]
    half = [(int(w.start_ns), int(w.start_ns + w.window_ns // 2)) for w in led.windows.itertuples(index=False)]
    assert led.claim(list(BUCKETS), within=half) <= sum(led.totals().values())
    # the claim's sums (read through the gaps' columns) are the sums of the slices ``claimed`` takes
    for within in (half, [(int(g.start_ns) + 1, int(g.start_ns) + 1) for g in led.gaps.iloc[::2].itertuples(index=False)]):
        for buckets in (list(BUCKETS), list(IDLE_BUCKETS), list(BUSY_BUCKETS)):
            sl = led.claimed(buckets, within=within)
            want = {} if sl.empty else (sl["end_ns"] - sl["start_ns"]).groupby([sl["rank"], sl["device"], sl["bucket"].astype(str)], sort=True).sum()
            want = {(int(r), int(d), str(b)): int(v) for (r, d, b), v in dict(want).items() if v}
            assert list(led.claimed_ns(buckets, within=within).items()) == list(want.items())


def test_property_helper_builds_a_real_timeline():
    tl = _timeline([((0, 100), "kernel", 0, 0, 7, 0, -10)], [((0, 50), 0, 0)], [(0, 200, 0)])
    assert set(tl.events["kind"].astype(str)) == {"kernel", "runtime", "cpu_op", "step"}
    assert pd.api.types.is_integer_dtype(tl.events["start_ns"])
