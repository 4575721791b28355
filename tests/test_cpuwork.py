"""rulelib.cpu_only_ops pinned by value: which long framework ops made no GPU call on their own thread.

Planted kineto traces (times in µs); every expected op follows from the planted calls (worked out in the comments).
"""

from __future__ import annotations

import numpy as np

import traceinsight
from traceinsight.derive.derived import Derived
from traceinsight.rulelib import cpu_only_ops

from .helpers.kineto_writer import KinetoTrace

US = 1_000


def _ops(tmp_path, t: KinetoTrace, min_us: float = 100.0) -> list[tuple[int, int]]:
    got = cpu_only_ops(Derived(traceinsight.load(t.write(tmp_path / "t.json"))), int(min_us * US))
    assert all(a.dtype == np.int64 for a in got.values()) and set(got) == {"rank", "start_ns", "end_ns"}
    return [(s // US, e // US) for s, e in zip(got["start_ns"].tolist(), got["end_ns"].tolist())]


def test_a_call_on_another_thread_does_not_make_an_op_call_the_gpu(tmp_path):
    """Thread 1's op [0, 500) makes no call; thread 2 calls cudaMalloc at 200, inside that span but on its own
    thread: thread 1's op is CPU work, thread 2's op [1000, 1400) around its own call at 1100 is not."""
    t = KinetoTrace()
    t.kernel("k", 2000, 10, launch_us=1990)
    t.cpu_op("aten::randn", 0, 500, tid=1)
    t.runtime("cudaMalloc", 200, 10, tid=2)
    t.cpu_op("aten::empty", 1000, 400, tid=2)
    t.runtime("cudaMalloc", 1100, 10, tid=2)
    assert _ops(tmp_path, t) == [(0, 500)]


def test_the_ops_bounds_and_the_floor(tmp_path):
    """A call at an op's very start is inside it; one at its very end is not (it begins when the op is over). An op
    exactly ``min_ns`` long counts, a shorter one does not."""
    t = KinetoTrace()
    t.kernel("k", 5000, 10, launch_us=4990)
    t.cpu_op("aten::a", 0, 200, tid=1)
    t.runtime("cudaStreamSynchronize", 0, 5, tid=1)  # at a's start: a called the GPU
    t.cpu_op("aten::b", 300, 200, tid=1)
    t.runtime("cudaStreamSynchronize", 500, 5, tid=1)  # at b's end: not inside b
    t.cpu_op("aten::c", 1000, 100, tid=1)  # exactly the floor
    t.cpu_op("aten::d", 2000, 99, tid=1)  # under it
    assert _ops(tmp_path, t) == [(300, 500), (1000, 1100)]
    assert _ops(tmp_path, t, min_us=150.0) == [(300, 500)]  # each floor its own answer (the memo is per floor)


def test_no_host_rows_no_ops(tmp_path):
    t = KinetoTrace()
    t.kernel("k", 0, 10)
    assert _ops(tmp_path, t) == []


def test_a_trace_without_runtime_calls_has_every_long_op_as_cpu_work(tmp_path):
    """No host row of kind ``runtime`` at all (a trace recorded without CUDA API activity): nothing says an op called
    the GPU, so each long op counts, the short one does not."""
    from traceinsight.model.timeline import Timeline

    t = KinetoTrace()
    t.kernel("k", 2000, 10, launch_us=1990)
    t.cpu_op("aten::a", 0, 300, tid=1)
    t.cpu_op("aten::b", 500, 50, tid=1)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    ev = tl.events
    bare = Timeline(events=ev[(ev["kind"] != "runtime").to_numpy()], meta=tl.meta)
    got = cpu_only_ops(Derived(bare), 100 * US)
    assert list(zip(got["start_ns"].tolist(), got["end_ns"].tolist())) == [(0, 300 * US)]
