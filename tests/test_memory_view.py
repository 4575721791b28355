"""The memory view (``traceinsight.derive.memory``) by value on planted traces: each GPU's peak (which op and step reached
it, and when), headroom against capacity per step, the allocator calls of the steady state, the series kept for
drawing, and the byte figures the reports print."""

from __future__ import annotations

import numpy as np
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.nsys_writer import NsysTrace
from traceinsight.derive.derived import Derived
from traceinsight.derive.memory import ALLOCATOR_CALLS, FREE_CALLS, DeviceMemory, _reduce, fmt_bytes

GiB = 1 << 30
US = 1_000


def _training(tmp_path, steps=3, capacity=16 * GiB):
    """``steps`` steps of 10 ms on GPU 0: in step s (0-based) an op allocates 1 GiB over (2 + s) GiB held, with the
    pool grown to (4 + s) GiB; step 2 also reaches its own level once more later (a tie: the first one counts).
    GPU 1 has one allocation with no op around it; the host has one row (never drawn against a GPU)."""
    t = KinetoTrace(memory_bytes=capacity, devices=2)
    for s in range(steps):
        t0 = s * 10_000
        t.step(s + 1, t0, 9_000)
        t.cpu_op("aten::empty", t0 + 100, 50)
        t.memory(t0 + 120, GiB, allocated=(3 + s) * GiB, reserved=(4 + s) * GiB)
        t.kernel("volta_sgemm_128x64_nn", t0 + 300, 5_000)
        t.memory(t0 + 8_000, -GiB, allocated=(2 + s) * GiB, reserved=(5 + s) * GiB)
    t.cpu_op("aten::cat", 10_000 + 8_400, 50)
    t.memory(10_000 + 8_420, GiB, allocated=4 * GiB, reserved=6 * GiB)  # step 2 back at its own peak
    t.memory(9_500, GiB, allocated=GiB, reserved=2 * GiB, device=1)  # between steps
    t.memory(800, 64, allocated=64, reserved=0, device_type=0)
    return t


def _memory(path):
    return Derived(traceinsight.load(path)).memory


def test_peaks_headroom_and_the_op_that_set_them(tmp_path):
    m = _memory(_training(tmp_path).write(tmp_path / "t.json"))
    assert [(d.rank, d.device) for d in m.devices] == [(0, 0), (0, 1)]  # the host row is not a GPU
    d = m.device(0, 0)
    assert (d.capacity, d.events, d.oom_events, d.relative, d.device_type) == (16 * GiB, 7, 0, False, "cuda")
    assert (d.peak_allocated, d.peak_reserved, d.peak) == (5 * GiB, 7 * GiB, 7 * GiB)
    assert (d.peak_at_ns, d.peak_op, d.peak_step) == (20_120 * US, "aten::empty", 3)
    assert d.peak_share == 7 / 16
    assert m.device(0, 2) is None and m.device(1, 0) is None
    got = d.to_dict()
    steps = got.pop("steps")
    assert got == {
        "rank": 0, "device": 0, "device_type": "cuda", "capacity_bytes": 16 * GiB, "events": 7,
        "peak_allocated_bytes": 5 * GiB, "peak_reserved_bytes": 7 * GiB, "peak_at_ns": 20_120 * US,
        "peak_op": "aten::empty", "peak_step": 3, "peak_share_of_capacity": 0.4375, "headroom_bytes": 9 * GiB,
        "allocated_relative_to_profile_start": False, "oom_events": 0,
    }
    assert steps == [
        {"step": 1, "peak_allocated": 3 * GiB, "peak_reserved": 5 * GiB, "start_reserved": 4 * GiB, "headroom": 11 * GiB},
        {"step": 2, "peak_allocated": 4 * GiB, "peak_reserved": 6 * GiB, "start_reserved": 5 * GiB, "headroom": 10 * GiB},
        {"step": 3, "peak_allocated": 5 * GiB, "peak_reserved": 7 * GiB, "start_reserved": 6 * GiB, "headroom": 9 * GiB},
    ]
    one = m.device(0, 1)
    assert (one.peak_at_ns, one.peak_op, one.peak_step, one.events) == (9_500 * US, None, None, 1)
    assert one.to_dict()["steps"] == [] and one.to_dict()["headroom_bytes"] == 14 * GiB
    assert m.to_dict() == {"devices": [d.to_dict(), one.to_dict()], "um_page_faults": 0, "allocator_calls": 0}


def test_the_first_time_the_peak_is_reached_counts(tmp_path):
    t = KinetoTrace(memory_bytes=16 * GiB)
    for s in range(3):
        t.step(s + 1, s * 10_000, 9_000)
    t.cpu_op("aten::mm", 10_100, 50)
    t.memory(10_120, GiB, allocated=6 * GiB, reserved=8 * GiB)
    t.memory(15_000, -GiB, allocated=5 * GiB, reserved=8 * GiB)
    t.cpu_op("aten::add", 20_100, 50)
    t.memory(20_120, GiB, allocated=6 * GiB, reserved=8 * GiB)  # the same level again, a step later
    d = _memory(t.write(tmp_path / "t.json")).device(0, 0)
    assert (d.peak_at_ns, d.peak_op, d.peak_step) == (10_120 * US, "aten::mm", 2)


def test_without_capacity_or_steps_there_is_no_headroom(tmp_path):
    d = DeviceMemory(rank=0, device=0, device_type="cuda", capacity=None, events=1, peak_allocated=float(GiB),
                     peak_reserved=None, peak_at_ns=5, peak_op=None, peak_step=None, relative=True, oom_events=0)
    assert d.peak == GiB and d.peak_share is None
    got = d.to_dict()
    assert (got["headroom_bytes"], got["peak_share_of_capacity"], got["peak_reserved_bytes"], got["steps"]) == (None, None, None, [])
    assert got["peak_allocated_bytes"] == GiB and got["allocated_relative_to_profile_start"] is True
    d.capacity = 0
    assert d.peak_share is None
    d.capacity = 3 * GiB  # a share printed to six places
    assert d.peak_share == 1 / 3 and d.to_dict()["peak_share_of_capacity"] == 0.333333 and d.to_dict()["headroom_bytes"] == 2 * GiB
    d.capacity, d.peak_allocated = 4 * GiB, None
    assert d.peak is None and d.peak_share is None and d.to_dict()["headroom_bytes"] is None
    d.capacity, d.peak_allocated = None, float("inf")
    assert d.to_dict()["peak_allocated_bytes"] is None


def test_bytes_only_traces_count_from_the_profile_start(tmp_path):
    """The 2021 kineto form records only each call's bytes: allocated is a running sum, reserved unknown, and the
    per-step headroom is taken against the allocated level."""
    t = KinetoTrace(memory_bytes=8 * GiB)
    for s in range(2):
        t.step(s + 1, s * 10_000, 9_000)
        t.memory(s * 10_000 + 100, 2 * GiB, legacy=True)
        t.memory(s * 10_000 + 200, GiB, legacy=True)
        t.memory(s * 10_000 + 5_000, -3 * GiB, legacy=True)
    t.kernel("k", 300, 10)
    d = _memory(t.write(tmp_path / "t.json")).device(0, 0)
    assert d.relative and d.peak_reserved is None and d.peak_allocated == 3 * GiB and d.peak == 3 * GiB
    assert (d.peak_at_ns, d.peak_step) == (200 * US, 1)
    assert d.to_dict()["steps"] == [
        {"step": 1, "peak_allocated": 3 * GiB, "peak_reserved": None, "start_reserved": None, "headroom": 5 * GiB},
        {"step": 2, "peak_allocated": 3 * GiB, "peak_reserved": None, "start_reserved": None, "headroom": 5 * GiB},
    ]


def test_driver_allocations_and_page_faults(tmp_path):
    """Nsight Systems: the driver's allocations (cudaMalloc / cudaFree) are the pool; unified-memory faults count."""
    t = NsysTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 10_000_000)
    a = t.cuda_malloc(100_000, GiB)
    t.cuda_malloc(200_000, 2 * GiB)
    t.cuda_free(5_000_000, a, GiB)
    t.cuda_malloc(6_000_000, GiB)  # back to 3 GiB: the first time counts
    t.kernel("k", 1_000_000, 1_000_000)
    t.um_gpu_faults(4_000_000, 100_000, 12)
    t.um_cpu_fault(3_000_000)
    m = _memory(t.write(tmp_path / "m.sqlite"))
    d = m.device(0, 0)
    assert d.peak_reserved == 3 * GiB and d.peak == 3 * GiB
    assert (d.peak_at_ns, d.peak_op, d.peak_step) == (210_000, "cudaMalloc", 1)
    assert d.to_dict()["headroom_bytes"] == 13 * GiB
    assert m.to_dict()["um_page_faults"] == 13 and len(m.faults) == 2


def test_reserved_only_rows_take_the_peak_from_the_pool(tmp_path):
    """Rows that know only the pool (reserved): the peak and its time, op and step come from the first row at the
    pool's peak; per-step headroom from the pool."""
    import pandas as pd

    m = _memory(_training(tmp_path).write(tmp_path / "t.json"))
    g = pd.DataFrame({"start_ns": [10, 20, 30, 40, 50], "allocated": [np.nan] * 5,
                      "reserved": [GiB, 3 * GiB, 2 * GiB, 3 * GiB, 0.5 * GiB],
                      "op": ["a", "b", None, "d", "e"], "step": [-1, 4, 4, 5, 0], "device_type": ["hip"] * 5,
                      "kind": ["alloc", "alloc", "free", "oom", "alloc"]})
    d = m._device(1, 2, g, 8 * GiB, False)
    assert (d.rank, d.device, d.device_type, d.events, d.oom_events) == (1, 2, "hip", 5, 1)
    assert d.peak_allocated is None and d.peak_reserved == 3 * GiB
    assert (d.peak_at_ns, d.peak_op, d.peak_step) == (20, "b", 4)
    assert d.to_dict()["steps"] == [
        {"step": 0, "peak_allocated": None, "peak_reserved": GiB // 2, "start_reserved": GiB // 2, "headroom": 7.5 * GiB},
        {"step": 4, "peak_allocated": None, "peak_reserved": 3 * GiB, "start_reserved": 3 * GiB, "headroom": 5 * GiB},
        {"step": 5, "peak_allocated": None, "peak_reserved": 3 * GiB, "start_reserved": 3 * GiB, "headroom": 5 * GiB},
    ]
    g.loc[4, "reserved"] = 4 * GiB  # the peak in step 0: step 0 is a step
    assert m._device(1, 2, g, 8 * GiB, False).peak_step == 0
    g["reserved"] = np.nan  # nothing known: no peak at all
    d = m._device(1, 2, g, None, False)
    assert (d.peak, d.peak_at_ns, d.peak_op, d.peak_step) == (None, None, None, None)
    assert d.to_dict()["steps"][1] == {"step": 4, "peak_allocated": None, "peak_reserved": None, "start_reserved": None, "headroom": None}


def test_a_timeline_from_before_the_memory_table(tmp_path):
    """A cached Timeline pickled before ``Timeline.memory`` existed has no such attribute: no devices, no error."""
    t = KinetoTrace()
    t.step(1, 0, 1_000)
    t.kernel("k", 100, 10)
    t.memory(50, GiB, allocated=GiB, reserved=GiB)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    del tl.memory
    m = Derived(tl).memory
    assert m.table.empty and m.devices == [] and m.to_dict() == {"devices": [], "um_page_faults": 0, "allocator_calls": 0}


def test_a_trace_without_gpu_memory_has_no_devices(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1_000)
    t.kernel("k", 100, 10)
    t.memory(50, 64, allocated=64, reserved=0, device_type=0)  # host memory only
    m = _memory(t.write(tmp_path / "t.json"))
    assert m.devices == [] and m.device(0, 0) is None
    assert m.to_dict() == {"devices": [], "um_page_faults": 0, "allocator_calls": 0}
    t = KinetoTrace()
    t.kernel("k", 100, 10)
    assert _memory(t.write(tmp_path / "u.json")).devices == []


def test_out_of_memory_is_counted_per_device(tmp_path):
    t = _training(tmp_path)
    t.out_of_memory(25_000, 20 * GiB, allocated=4 * GiB, reserved=6 * GiB)
    m = _memory(t.write(tmp_path / "t.json"))
    assert m.device(0, 0).oom_events == 1 and m.device(0, 1).oom_events == 0
    assert m.device(0, 0).events == 8


# --- allocator calls and the steady state --------------------------------------------------------------------
def test_allocator_call_names():
    for name in ("cudaMalloc", "cudaMallocAsync", "cudaFree", "cudaFreeAsync", "cuMemAlloc_v2", "cuMemFree_v2",
                 "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "hipMalloc", "hipFree", "hipMallocAsync",
                 "hipFreeAsync"):
        assert ALLOCATOR_CALLS.match(name), name
    for name in ("cudaMallocHost", "cudaFreeHost", "cudaMallocManaged", "cudaLaunchKernel", "xcudaMalloc", "cudaMalloc_x"):
        assert not ALLOCATOR_CALLS.match(name), name
    assert [bool(FREE_CALLS.search(n)) for n in ("cudaFree", "cuMemRelease", "cuMemUnmap", "cudaMalloc", "cuMemMap")] == [
        True, True, True, False, False]


def _calls_trace(tmp_path, steps=3):
    t = KinetoTrace()
    for s in range(steps):
        t.step(s + 1, s * 10_000, 9_000)
        t.kernel("volta_sgemm_128x64_nn", s * 10_000 + 1_000, 6_000)
    t.runtime("cudaMalloc", 500, 100)  # warm-up (first step)
    t.runtime("cudaFree", 9_500, 100)  # between steps 1 and 2: not in a step
    t.runtime("cudaMallocHost", 12_000, 100)  # pinned host memory: not the device pool
    t.runtime("cudaMalloc", 12_500, 100)
    t.runtime("cudaFree", 22_000, 300)
    t.runtime("cuMemUnmap", 23_000, 300)
    return Derived(traceinsight.load(t.write(tmp_path / "c.json")))


def test_steady_state_allocator_calls(tmp_path):
    d = _calls_trace(tmp_path)
    m = d.memory
    calls = m.allocator_calls
    assert sorted(zip(calls["start_ns"], calls["name"].astype(str))) == [
        (500 * US, "cudaMalloc"), (9_500 * US, "cudaFree"), (12_500 * US, "cudaMalloc"),
        (22_000 * US, "cudaFree"), (23_000 * US, "cuMemUnmap")]
    assert m.warmup_end == {0: 9_000 * US}
    grow = m.steady_allocator_calls(FREE_CALLS.pattern, matching=False)
    assert grow["start_ns"].tolist() == [12_500 * US]  # not the warm-up's
    freed = m.steady_allocator_calls(FREE_CALLS.pattern)
    assert freed["name"].astype(str).tolist() == ["cudaFree", "cuMemUnmap"] and freed["step"].tolist() == [3, 3]
    assert m.to_dict()["allocator_calls"] == 5


def test_steady_rows_start_at_the_end_of_warm_up():
    """``steady`` on hand-made rows: inside a step and at or after the rank's warm-up end (inclusive)."""
    class _M:
        warmup_end = {0: 100, 1: 50}

    from traceinsight.derive.memory import Memory

    rank = np.array([0, 0, 0, 1, 1, 2, 1])
    t = np.array([99, 100, 150, 50, 60, 1_000, 70])
    step = np.array([1, 1, -1, 2, 2, 3, 0])  # step 0 is a step (XPlane and nsys number from 0)
    assert Memory.steady(_M(), rank, t, step).tolist() == [False, True, False, True, True, False, True]


def test_one_step_has_no_steady_state(tmp_path):
    d = _calls_trace(tmp_path, steps=1)
    assert d.memory.warmup_end == {}
    assert d.memory.steady_allocator_calls(FREE_CALLS.pattern).empty
    assert d.memory.steady_allocator_calls(FREE_CALLS.pattern, matching=False).empty


def test_no_runtime_calls_no_allocator_calls(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1_000)
    t.step(2, 1_000, 1_000)
    t.kernel("k", 100, 10)
    m = _memory(t.write(tmp_path / "t.json"))
    assert m.allocator_calls.empty and m.steady_allocator_calls("Free").empty
    t.runtime("cudaLaunchKernel", 1_200, 5)
    m = _memory(t.write(tmp_path / "u.json"))
    assert m.allocator_calls.empty and m.steady_allocator_calls("Free").empty


# --- the series drawn ----------------------------------------------------------------------------------------
def test_series_keeps_first_peak_and_last_of_each_bucket():
    t = np.arange(12, dtype=np.int64) * 10
    alloc = np.array([1, 5, 2, 0, 0, 1, 9, 3, 4, 4, 8, 1], dtype=float)
    none = np.full(12, np.nan)
    s = _reduce(t, alloc, none, limit=9)  # 3 buckets of 4 points: 0-3, 4-7, 8-11
    assert s["start_ns"].tolist() == [0, 10, 30, 40, 60, 70, 80, 100, 110]
    assert s["allocated"].tolist() == [1, 5, 0, 0, 9, 3, 4, 8, 1]
    # where reserved is known it is the level whose peaks are kept
    res = np.array([0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 9], dtype=float)
    s = _reduce(t, alloc, res, limit=9)
    assert s["start_ns"].tolist() == [0, 20, 30, 40, 70, 80, 110]
    # a bucket with no level at all keeps its first and last rows
    assert s["reserved"].tolist() == [0, 7, 0, 0, 0, 0, 9]
    s = _reduce(t, none, none, limit=9)
    assert s["start_ns"].tolist() == [0, 30, 40, 70, 80, 110]
    # the first finite value may be a bucket's last but one
    s = _reduce(t, np.array([np.nan, np.nan, 7, 3] * 3), none, limit=9)
    assert s["start_ns"].tolist() == [0, 20, 30, 40, 60, 70, 80, 100, 110]
    # times need not start at 0; a limit that is not a multiple of 3 still gives limit // 3 buckets
    s = _reduce(t + 1_000, alloc, none, limit=10)
    assert s["start_ns"].tolist() == [1_000, 1_010, 1_030, 1_040, 1_060, 1_070, 1_080, 1_100, 1_110]
    full = _reduce(t, alloc, none, limit=12)  # few enough: every row
    assert full["start_ns"].tolist() == t.tolist() and full["allocated"].tolist() == alloc.tolist()
    assert np.isnan(full["reserved"]).all()


def test_series_over_one_instant():
    t = np.zeros(5, dtype=np.int64)
    s = _reduce(t, np.arange(5, dtype=float), np.full(5, np.nan), limit=3)  # one bucket: first, peak, last
    assert s["allocated"].tolist() == [0, 4]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (None, "n/a"), (float("nan"), "n/a"), (float("inf"), "n/a"), (0, "0 B"), (512, "512 B"), (1023, "1023 B"),
        (1024, "1.0 KiB"), (1536, "1.5 KiB"), ((1 << 20) - 1, "1024.0 KiB"), (1 << 20, "1.0 MiB"),
        (int(1.5 * (1 << 20)), "1.5 MiB"), (1 << 30, "1.0 GiB"), (int(30.2 * (1 << 30)), "30.2 GiB"),
        (-2 * (1 << 30), "-2.0 GiB"), (-512, "-512 B"),
    ],
)
def test_bytes_as_printed(n, text):
    assert fmt_bytes(n) == text


def _device(device, *, peak_op="aten::empty", rank=0):
    return DeviceMemory(rank=rank, device=device, device_type="cuda", capacity=16 * GiB, events=2, peak_allocated=GiB,
                        peak_reserved=2 * GiB, peak_at_ns=0, peak_op=peak_op, peak_step=None, relative=False, oom_events=0)


def test_identical_gpus_are_one_line_and_no_placeholder_op_is_printed():
    """Eight GPUs of one rank holding the same pool read as one line ("GPUs 0-2, 4-7"), a different one alone; a
    profiler's placeholder for "no op" (XPlane's ``(null)``) is no op name."""
    from traceinsight.derive.memory import _op_name
    from traceinsight.render.memory_view import summary_groups

    devs = [_device(i, peak_op=None) for i in (0, 1, 2, 4, 5, 6, 7)] + [_device(3), _device(0, rank=1, peak_op=None)]
    got = summary_groups(devs)
    assert [w for w, _ in got] == ["rank 0 GPUs 0-2, 4-7", "rank 0 GPU 3", "rank 1 GPU 0"]
    assert got[1][1].endswith("; peak at aten::empty") and "peak at" not in got[0][1]
    assert [_op_name(v) for v in ("(null)", "NULL", "", "  ", None, float("nan"), "aten::mm")] == [None] * 6 + ["aten::mm"]
