"""The ledger's heuristics pinned by value on planted kineto traces: what it books as host sync (blocking calls,
pageable copies, GPU-side sync records), as warm-up (first-call outliers at their exact thresholds), how steps,
ranks and devices split the account, and what a finding's claim takes at the edges of a gap.

Each trace is written by the test helpers in the real kineto format and read by the real reader; times are µs
from the trace's start, and every expected figure follows from the planted events (worked out in the comments).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

import traceinsight
from traceinsight.derive import ledger as L
from traceinsight.vocab.buckets import IDLE_BUCKETS
from traceinsight.derive.derived import Derived
from traceinsight.derive.steady import WARMUP_MIN_NS, WARMUP_RATIO
from traceinsight.model.timeline import Timeline

from .helpers.kineto_writer import KinetoTrace

US = 1_000


def _views(tmp_path, trace: KinetoTrace, name: str = "t.json") -> Derived:
    return Derived(traceinsight.load(trace.write(tmp_path / name)))


def _job(tmp_path, traces: dict[int, KinetoTrace]) -> Derived:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, t in traces.items():
        t.write(folder / f"rank{rank}.json")
    return Derived(traceinsight.load(folder))


def _totals(led, **where) -> dict[str, int]:
    return {b: n for b, n in led.totals(**where).items() if n}


def _warm(led, rank: int | None = None) -> list[tuple[int, int, str]]:
    """The warm-up regions as (start µs from the rank's window start, duration µs, reason)."""
    w = led.warmup
    out = []
    for r in w.itertuples(index=False):
        if rank is not None and r.rank != rank:
            continue
        origin = int(led.windows.loc[led.windows["rank"] == r.rank, "start_ns"].min())
        out.append(((int(r.start_ns) - origin) // US, (int(r.end_ns) - int(r.start_ns)) // US, str(r.reason)))
    return sorted(out)


# --- what blocks the host ---------------------------------------------------------------------------------
def _copy_then_gap(kind: str, pageable: bool) -> KinetoTrace:
    """k_a [0, 100); an async copy [100, 110) whose call runs [50, 120); the next kernel at 300, launched at 290."""
    t = KinetoTrace()
    t.kernel("k_a", 0, 100, launch_us=-10)
    t.memcpy(kind, 100, 10, 4096, pageable=pageable, launch_us=50, launch_dur_us=70)
    t.kernel("k_b", 300, 100, launch_us=290)
    return t


def test_async_copy_into_pageable_memory_owns_the_gap_as_a_host_sync(tmp_path):
    """The driver runs a DtoH copy into pageable memory synchronously: the GPU ran dry at 110 while the host sat
    in the copy call, so the gap [110, 300) is the sync's for the 70 µs the host was blocked in it (without the
    wait it would have been that much further on); the rest is the host's own time after it: untraced, and the
    launch of k_b over [290, 294)."""
    led = _views(tmp_path, _copy_then_gap("DtoH", pageable=True)).ledger
    assert _totals(led) == {"compute": 200 * US, "copy": 10 * US, "idle_host_sync": 70 * US, "idle_host_busy": 4 * US, "idle_untraced": 116 * US}


def test_pinned_or_host_to_device_async_copies_do_not_block(tmp_path):
    """The same gap after a pageable HtoD or a pinned DtoH copy: the host was free, so the gap is its own work
    (the copy call until 120, the launch of k_b over [290, 294)) and untraced time in between."""
    for kind, pageable in (("HtoD", True), ("DtoH", False)):
        led = _views(tmp_path, _copy_then_gap(kind, pageable), f"{kind}{pageable}.json").ledger
        assert _totals(led) == {"compute": 200 * US, "copy": 10 * US, "idle_host_busy": 14 * US, "idle_untraced": 176 * US}, kind


def test_a_frame_indexed_otherwise_books_the_same_pageable_copy(tmp_path):
    """A timeline assembled through the API with row labels that are not positions (spaced out, or positions in
    a rotated order) takes the general path to the copies' direction and gets the same account."""
    tl = traceinsight.load(_copy_then_gap("DtoH", pageable=True).write(tmp_path / "t.json"))
    n = len(tl.events)
    for labels in (np.arange(n) * 3 + 7, (np.arange(n) + 2) % n):
        led = Derived(Timeline(events=tl.events.set_axis(labels), meta=tl.meta)).ledger
        assert _totals(led) == {"compute": 200 * US, "copy": 10 * US, "idle_host_sync": 70 * US, "idle_host_busy": 4 * US, "idle_untraced": 116 * US}


def test_gpu_sync_records_do_not_override_a_rank_with_host_syncs(tmp_path):
    """GPU-side sync records stand in only where the host trace shows no blocking call: this rank has one (a
    stream sync over [20, 105), owning the first 85 µs of gap [100, 200), as long as it blocked; the rest is
    untraced but for k_b's launch over [190, 194)), so the record at [250, 260) does not make gap [250, 400) a
    sync; nothing is traced there but the launch of k_c over [390, 394)."""
    t = KinetoTrace()
    t.kernel("k_a", 0, 100, launch_us=-10)
    t.runtime("cudaStreamSynchronize", 20, 85)
    t.kernel("k_b", 200, 50, launch_us=190)
    t.gpu_sync(250, 10)
    t.kernel("k_c", 400, 50, launch_us=390)
    led = _views(tmp_path, t).ledger
    assert _totals(led) == {"compute": 200 * US, "idle_host_sync": 85 * US, "idle_host_busy": 8 * US, "idle_untraced": 157 * US}


def test_blocking_calls_at_the_window_start_are_named_in_the_warmup(tmp_path):
    """A blocking call that begins before the rank's first launch waits on work queued before the window: the
    ledger books it as warm-up and names what blocked (a pageable copy; a GPU-side sync record)."""
    t = KinetoTrace()
    t.memcpy("DtoH", 10, 10, 4096, pageable=True, launch_us=0, launch_dur_us=30)
    t.kernel("k_a", 100, 100, launch_us=90)
    led = _views(tmp_path, t).ledger
    assert [r for _, _, r in _warm(led)] == ["copy to pageable host memory at the window's start, waiting on work queued before the window"]
    t = KinetoTrace()
    t.gpu_sync(0, 5)
    t.kernel("k_a", 100, 100, launch_us=90)
    led = _views(tmp_path, t, "gs.json").ledger
    assert [r for _, _, r in _warm(led)] == ["GPU-side sync record at the window's start, waiting on work queued before the window"]



def test_a_host_range_that_waits_for_a_device_value_is_a_sync(tmp_path):
    """A framework range that converts a device array for the host (JAX's ``np.asarray(jax.Array)`` behind
    ``float(loss)``) blocks until the value is computed: it sat over [20, 105) while the GPU ran dry at 100, so the
    gap until the next kernel is the sync's for the 85 µs it blocked; the other 15 µs are the host's (untraced, and
    k_b's launch over [190, 194))."""
    t = KinetoTrace()
    t.kernel("k_a", 0, 100, launch_us=-10)
    t.annotation("np.asarray(jax.Array)", 20, 85)
    t.kernel("k_b", 200, 50, launch_us=190)
    assert _totals(_views(tmp_path, t).ledger) == {"compute": 150 * US, "idle_host_sync": 85 * US, "idle_host_busy": 4 * US, "idle_untraced": 11 * US}


def test_gpu_sync_records_stand_in_on_each_rank_without_host_syncs(tmp_path):
    """Rank 0 traces its stream sync on the host; rank 1 only as a GPU-side record over [20, 105), which stands in
    for it there: on both ranks gap [100, 200) is the sync's for the 85 µs it blocked (the rest: k_b's launch and
    untraced time), and rank 1's later gap [250, 400) is not (the launch call of its last kernel and untraced
    time)."""
    t0 = KinetoTrace(rank=0, world_size=2)
    t0.kernel("k_a", 0, 100, launch_us=-10)
    t0.runtime("cudaStreamSynchronize", 20, 85)
    t0.kernel("k_b", 200, 50, launch_us=190)
    t1 = KinetoTrace(rank=1, world_size=2)
    t1.kernel("k_a", 0, 100, launch_us=-10)
    t1.gpu_sync(20, 85)
    t1.kernel("k_b", 200, 50, launch_us=190)
    t1.kernel("k_c", 400, 50, launch_us=390)
    led = _job(tmp_path, {0: t0, 1: t1}).ledger
    assert _totals(led, rank=0) == {"compute": 150 * US, "idle_host_sync": 85 * US, "idle_host_busy": 4 * US, "idle_untraced": 11 * US}
    assert _totals(led, rank=1) == {"compute": 200 * US, "idle_host_sync": 85 * US, "idle_host_busy": 8 * US, "idle_untraced": 157 * US}

# --- warm-up: first calls that are outliers ------------------------------------------------------------------
def _first_call(t: KinetoTrace, name: str, first_us: float, later_us: float, *, at: float = 20.0, block: tuple[str, float] | None = None) -> None:
    """A first call of ``name`` over [at, at + first_us) launching a kernel at its end, then three later calls of
    ``later_us`` 300 µs apart, each launching a kernel; ``block``: a (runtime call, µs) inside the first call."""
    t.kernel("k0", 0, 10, launch_us=-10)
    op = t.cpu_op(name, at, first_us)
    if block is not None:
        call, dur = block
        if call.startswith("cudaMemcpy"):
            t.memcpy("HtoD", at + first_us - 10, 5, 4096, launch_us=at + 5, launch_dur_us=dur, op=op)
        else:
            t.runtime(call, at + 5, dur)
    t.kernel("conv_kernel", at + first_us, 100, launch_us=at + first_us - 10, op=op)
    for i in range(1, 4):
        base = at + first_us + 200 + 300 * i
        op = t.cpu_op(name, base, later_us)
        t.kernel("conv_kernel", base + later_us + 10, 100, launch_us=base + later_us - 8, op=op)


def _first_call_warmup(tmp_path, name: str, first_us: float, later_us: float, **kw) -> list[tuple[int, int, str]]:
    t = KinetoTrace()
    _first_call(t, name, first_us, later_us, **kw)
    return _warm(_views(tmp_path, t, f"{name.replace(':', '_')}-{first_us}-{later_us}.json").ledger)


def test_a_first_call_ten_times_its_later_median_is_warmup_and_nine_point_nine_is_not(tmp_path):
    """WARMUP_RATIO is inclusive: 2000 µs against later calls of 200 µs (10x) is one-time work booked over the
    call's own range; 1980 µs (9.9x) is steady state. The name does not matter (first and last in the trace's
    name table)."""
    assert WARMUP_RATIO == 10.0
    for name in ("aten::conv2d", "vision::roi_align"):
        assert _first_call_warmup(tmp_path, name, 2000, 200) == [(20, 2000, f"first call of {name}")]
        assert _first_call_warmup(tmp_path, name, 1980, 200) == []


def test_a_first_call_must_last_the_warmup_minimum(tmp_path):
    """WARMUP_MIN_NS is inclusive: a 1 ms first call 20x its later calls is warm-up, a 999 µs one is not."""
    assert WARMUP_MIN_NS == 1_000 * US
    assert _first_call_warmup(tmp_path, "aten::conv2d", 1000, 50) == [(20, 1000, "first call of aten::conv2d")]
    assert _first_call_warmup(tmp_path, "aten::conv2d", 999, 50) == []


def test_a_first_call_spent_half_inside_a_copy_call_is_not_warmup(tmp_path):
    """A first call that spends half its time or more inside copy or blocking calls measures the queue ahead of
    it, not one-time work: 1000 µs of a 2000 µs call inside cudaMemcpyAsync or a stream sync is left out, 990 µs
    is not. (The 1 ms blocking call itself, at the head of the run while the GPU runs nothing traced, may be set
    aside as waiting on work queued before the window: that is the window's start, not the first call's.)"""
    for call in ("cudaMemcpyAsync", "cudaStreamSynchronize"):
        firsts = [w for w in _first_call_warmup(tmp_path, "aten::to", 2000, 50, block=(call, 1000)) if w[2].startswith("first call")]
        assert firsts == [], call
        assert _first_call_warmup(tmp_path, "aten::to", 2000, 50, block=(call, 990)) == [(20, 2000, "first call of aten::to")], call


def test_every_rank_books_its_own_first_calls(tmp_path):
    """Each rank's first call is judged against that rank's later calls and that rank's blocking calls: rank 0's
    first conv2d sits in a stream sync (the queue, not warm-up), rank 1's at the same time does not; both ranks'
    first linear calls are outliers of their own."""
    traces = {}
    for rank in (0, 1):
        t = KinetoTrace(rank=rank, world_size=2)
        _first_call(t, "aten::conv2d", 2000, 100, block=("cudaStreamSynchronize", 1900) if rank == 0 else None)
        op = t.cpu_op("aten::linear", 5000 + 1000 * rank, 1500)
        t.kernel("gemm", 6600 + 1000 * rank, 50, launch_us=5000 + 1000 * rank + 1490, op=op)
        for i in range(3):
            op = t.cpu_op("aten::linear", 8000 + 200 * i, 20)
            t.kernel("gemm", 8030 + 200 * i, 50, launch_us=8010 + 200 * i, op=op)
        traces[rank] = t
    led = _job(tmp_path, traces).ledger
    first = {r: sorted(x for _, _, x in _warm(led, r) if x.startswith("first call")) for r in (0, 1)}
    assert first == {0: ["first call of aten::linear"], 1: ["first call of aten::conv2d", "first call of aten::linear"]}


def test_a_first_call_spent_allocating_is_warmup(tmp_path):
    """A first call that spends 1.5 ms of its 2 ms in cudaMalloc grows the allocator once: it is one-time work (not
    the queue, as a copy or sync call would be), and so is the allocation itself; the regions are numbered 0, 1."""
    t = KinetoTrace()
    _first_call(t, "aten::empty", 2000, 50, block=("cudaMalloc", 1500))
    led = _views(tmp_path, t).ledger
    assert _warm(led) == [(20, 2000, "first call of aten::empty"), (25, 1500, "allocator growth: cudaMalloc")]
    assert led.warmup.index.tolist() == [0, 1]


def test_warmup_regions_alone_equal_the_ledgers(tmp_path):
    """``warmup_regions`` called on its own (finding the blocking calls itself) gives the regions the ledger used."""
    t = KinetoTrace()
    _first_call(t, "aten::conv2d", 2000, 100)
    views = _views(tmp_path, t)
    alone = L.warmup_regions(views)
    assert list(alone["reason"]) == ["first call of aten::conv2d"]
    pd.testing.assert_frame_equal(alone, views.ledger.warmup)


# --- steps, pct and the JSON form ---------------------------------------------------------------------------
def test_a_step_that_begins_inside_the_first_kernel_splits_it(tmp_path):
    """Step 1 opens at 50 µs while the first kernel [0, 100) runs: its first half is outside every step (-1), the
    rest is step 1's, and each step's pct is of its own part of the window (step 1: [50, 300))."""
    t = KinetoTrace()
    t.kernel("k0", 0, 100, launch_us=-10)
    t.step(1, 50, 400)
    t.kernel("k1", 200, 100, launch_us=190)
    led = _views(tmp_path, t).ledger
    st = led.by_step[led.by_step["ns"] > 0]
    got = {(int(r.step), r.bucket): (int(r.ns) // US, round(float(r.pct), 3)) for r in st.itertuples(index=False)}
    assert got == {(-1, "compute"): (50, 100.0), (1, "compute"): (150, 60.0), (1, "idle_host_busy"): (4, 1.6), (1, "idle_untraced"): (96, 38.4)}
    doc = led.to_dict()["by_step"]
    assert [(s["step"], s["window_ns"], s["pct"]) for s in doc] == [
        (-1, 50 * US, {"compute": 100.0}), (1, 250 * US, {"compute": 60.0, "idle_host_busy": 1.6, "idle_untraced": 38.4})]


def test_json_shares_are_rounded_to_three_places(tmp_path):
    """A 300 µs window with 200 µs of kernels: 66.667 % compute, the 100 µs gap split 1.333 % (the launch call)
    and 32.0 % (nothing traced)."""
    t = KinetoTrace()
    t.kernel("k0", 0, 100, launch_us=-10)
    t.kernel("k1", 200, 100, launch_us=190)
    doc = _views(tmp_path, t).ledger.to_dict()
    pct = {b: p for b, p in doc["by_device"][0]["pct"].items() if p}
    assert pct == {"compute": 66.667, "idle_host_busy": 1.333, "idle_untraced": 32.0}
    assert {b: p for b, p in doc["total"]["pct"].items() if p} == pct


# --- data waits ---------------------------------------------------------------------------------------------
def test_tfdata_iterator_ranges_wait_only_on_the_consumer_thread(tmp_path):
    """An ``Iterator::`` range on the thread that holds the step markers is the loop waiting for its batch (the
    gap [100, 400) is data wait up to 380); the same range on a producer thread overlaps useful work and says
    nothing about the gap."""
    got = {}
    for tid in (4242, 9):
        t = KinetoTrace()
        t.step(1, 0, 1000)
        t.kernel("k0", 0, 100, launch_us=-10)
        t.annotation("Iterator::Root::Prefetch::Map", 100, 280, tid=tid)
        t.kernel("k1", 400, 100, launch_us=390)
        got[tid] = _totals(_views(tmp_path, t, f"{tid}.json").ledger)
    assert got[4242] == {"compute": 200 * US, "idle_data_wait": 280 * US, "idle_host_busy": 4 * US, "idle_untraced": 16 * US}
    assert got[9] == {"compute": 200 * US, "idle_host_busy": 4 * US, "idle_untraced": 296 * US}


# --- ranks and devices --------------------------------------------------------------------------------------
def _two_ranks(tmp_path) -> Derived:
    """Rank 0: kernels [0, 100) and [300, 400), a 200 µs gap; rank 1: kernels [0, 100) and [200, 400), a 100 µs
    gap during which rank 1's host runs an op over [110, 190). Each second kernel is launched 10 µs before it."""
    t0 = KinetoTrace(rank=0, world_size=2)
    t0.kernel("k0", 0, 100, launch_us=-10)
    t0.kernel("k1", 300, 100, launch_us=290)
    t1 = KinetoTrace(rank=1, world_size=2)
    t1.kernel("k0", 0, 100, launch_us=-10)
    t1.cpu_op("aten::add", 110, 80)
    t1.kernel("k1", 200, 200, launch_us=190)
    return _job(tmp_path, {0: t0, 1: t1})


def test_another_ranks_host_work_does_not_explain_this_ranks_idle(tmp_path):
    """Rank 1's op runs while rank 0 idles too; on rank 0 the gap stays untraced (its own host shows only the
    launch call), on rank 1 the op is host work."""
    led = _two_ranks(tmp_path).ledger
    assert _totals(led, rank=0) == {"compute": 200 * US, "idle_host_busy": 4 * US, "idle_untraced": 196 * US}
    assert _totals(led, rank=1) == {"compute": 300 * US, "idle_host_busy": 84 * US, "idle_untraced": 16 * US}


def _two_devices(tmp_path) -> Derived:
    """One rank, two GPUs whose launches interleave in time. GPU 0: kernels [0, 100) and [300, 400), the second
    queued at 20 µs (long before the GPU ran dry: a GPU-side wait). GPU 1: kernels [0, 40) and [90, 150), the
    second launched at 80 µs, after GPU 1 ran dry (a 50 µs launch-bound gap)."""
    t = KinetoTrace(devices=2)
    t.kernel("a0", 0, 100, launch_us=-10, device=0)
    t.kernel("a1", 300, 100, launch_us=20, device=0)
    t.kernel("b0", 0, 40, launch_us=-5, device=1)
    t.kernel("b1", 90, 60, launch_us=80, device=1)
    return _views(tmp_path, t)


def test_each_gpus_gaps_are_judged_by_its_own_launches(tmp_path):
    led = _two_devices(tmp_path).ledger
    assert _totals(led, device=0) == {"compute": 200 * US, "idle_gpu_dependency": 200 * US}
    assert _totals(led, device=1) == {"compute": 100 * US, "idle_launch_bound": 50 * US}


def test_the_earliest_returning_launch_decides_a_gap_that_two_streams_end(tmp_path):
    """Two kernels start together at 300 µs on two streams; one was queued at 20 µs, the other launched at 290 µs.
    The GPU waited on itself (the queued one could have run): the gap is a GPU-side dependency, whichever stream
    or launch comes first in the file."""
    for late_first in (True, False):
        t = KinetoTrace()
        t.kernel("k0", 0, 100, launch_us=-10)
        late = dict(name="late", start_us=300, dur_us=50, launch_us=290, stream=8 if late_first else 7)
        queued = dict(name="queued", start_us=300, dur_us=80, launch_us=20, stream=7 if late_first else 8)
        for k in ((late, queued) if late_first else (queued, late)):
            t.kernel(**k)
        led = _views(tmp_path, t, f"{late_first}.json").ledger
        assert _totals(led) == {"compute": 180 * US, "idle_gpu_dependency": 200 * US}, late_first


# --- claims: what a finding's ranges take -------------------------------------------------------------------
def _two_gaps(tmp_path):
    """Kernels [0, 100), [300, 400), [600, 700): gaps [100, 300) and [400, 600), each 4 µs of launch call and
    196 µs untraced. Returns the ledger and a function from µs to the trace's ns."""
    t = KinetoTrace()
    t.kernel("k0", 0, 100, launch_us=-10)
    t.kernel("k1", 300, 100, launch_us=290)
    t.kernel("k2", 600, 100, launch_us=590)
    led = _views(tmp_path, t).ledger
    origin = int(led.windows["start_ns"].iloc[0])
    return led, lambda us: origin + int(us * US)


def _spans(frame: pd.DataFrame, at) -> list[tuple[float, float, str]]:
    zero = at(0)
    return [((int(s) - zero) / US, (int(e) - zero) / US, str(b)) for s, e, b in zip(frame["start_ns"], frame["end_ns"], frame["bucket"])]


def test_a_range_claims_the_gaps_it_touches_whole_and_no_other(tmp_path):
    led, at = _two_gaps(tmp_path)
    second = [(400.0, 590.0, "idle_untraced"), (590.0, 594.0, "idle_host_busy"), (594.0, 600.0, "idle_untraced")]
    assert _spans(led.claimed(IDLE_BUCKETS, within=[(at(450), at(460))]), at) == second
    assert led.claim(IDLE_BUCKETS, within=[(at(450), at(460))]) == 200 * US
    # ranges are half-open: one ending where a gap begins, or starting where it ends, does not touch it
    for rng in ((at(50), at(100)), (at(300), at(350)), (at(600), at(650))):
        assert led.claimed(IDLE_BUCKETS, within=[rng]).empty and led.claim(IDLE_BUCKETS, within=[rng]) == 0
    assert len(led.claimed(IDLE_BUCKETS, within=[(at(50), at(100) + 1)])) == 3
    assert led.claim(IDLE_BUCKETS, within=[(at(599), at(650))]) == 200 * US


def test_a_point_instance_claims_one_nanosecond_of_busy_time(tmp_path):
    led, at = _two_gaps(tmp_path)
    got = led.claimed("compute", within=[(at(50), at(50))])
    assert [(int(s), int(e)) for s, e in zip(got["start_ns"], got["end_ns"])] == [(at(50), at(50) + 1)]
    assert led.claim("compute", within=[(at(50), at(50))]) == 1


def test_claims_take_any_iterable_of_ranges(tmp_path):
    """A generator or a tuple of (start, end) pairs claims what the list does."""
    led, at = _two_gaps(tmp_path)
    pairs = [(at(150), at(160)), (at(350), at(360))]
    want = led.claim(["compute", "idle_untraced"], within=pairs)
    assert want == 10 * US + 196 * US
    assert led.claim(["compute", "idle_untraced"], within=(p for p in pairs)) == want
    assert led.claim(["compute", "idle_untraced"], within=tuple(pairs)) == want
    assert _spans(led.claimed("idle_untraced", within=iter(pairs)), at) == [(100.0, 290.0, "idle_untraced"), (294.0, 300.0, "idle_untraced")]


@dataclasses.dataclass
class _Hit:
    """An instance given as an object with attributes (``Finding.instances`` takes those too)."""

    start_ns: int
    end_ns: int
    rank: int | None = None
    device: int | None = None


def test_ranges_that_name_a_rank_claim_on_that_rank_only(tmp_path):
    """At 150 µs both ranks idle (rank 0: [100, 300), rank 1: [100, 200)); a range naming rank 1 claims rank 1's
    gap only, as a frame column, as an instance attribute, or mixed with plain pairs (which apply to every rank)."""
    led = _two_ranks(tmp_path).ledger
    origin = int(led.windows["start_ns"].min())

    def at(us):
        return origin + int(us * US)

    frame = pd.DataFrame({"start_ns": [at(150)], "end_ns": [at(160)], "rank": [1]})
    assert set(led.claimed(IDLE_BUCKETS, within=frame)["rank"]) == {1}
    assert led.claim(IDLE_BUCKETS, within=frame) == 100 * US
    assert led.claimed_ns(IDLE_BUCKETS, within=frame) == {(1, 0, "idle_host_busy"): 84 * US, (1, 0, "idle_untraced"): 16 * US}

    assert led.claim(IDLE_BUCKETS, within=[_Hit(at(150), at(160), rank=1)]) == 100 * US
    # a pair (both ranks busy at 50: 10 µs each) with an instance on rank 1 at 350 (busy on both ranks)
    mixed = [(at(50), at(60)), _Hit(at(350), at(360), rank=1)]
    assert led.claimed_ns("compute", within=mixed) == {(0, 0, "compute"): 10 * US, (1, 0, "compute"): 20 * US}
    assert led.claimed_ns("compute", within=[(at(50), at(60)), _Hit(at(350), at(360))]) == {(0, 0, "compute"): 20 * US, (1, 0, "compute"): 20 * US}


def test_ranges_that_name_a_device_claim_on_that_device_only(tmp_path):
    """GPU 0 idles over [100, 300), GPU 1 over [40, 90); a range over [60, 70) naming GPU 1 claims GPU 1's gap,
    as a frame column or an instance attribute next to a plain pair; naming GPU 0 it claims nothing."""
    led = _two_devices(tmp_path).ledger
    origin = int(led.windows["start_ns"].min())

    def at(us):
        return origin + int(us * US)

    frame = pd.DataFrame({"start_ns": [at(60)], "end_ns": [at(70)], "device": [1]})
    assert _spans(led.claimed(IDLE_BUCKETS, within=frame), at) == [(40.0, 90.0, "idle_launch_bound")]
    assert led.claimed_ns(IDLE_BUCKETS, within=frame) == {(0, 1, "idle_launch_bound"): 50 * US}
    assert led.claim(IDLE_BUCKETS, within=frame.assign(device=[0])) == 0
    # GPU 1's gap alone, and GPU 0's gap alone, by time
    assert led.claimed_ns(IDLE_BUCKETS, within=[(at(200), at(210))]) == {(0, 0, "idle_gpu_dependency"): 200 * US}
    assert _spans(led.claimed(IDLE_BUCKETS, device=1, within=[(at(60), at(70))]), at) == [(40.0, 90.0, "idle_launch_bound")]

    mixed = [(at(20), at(30)), _Hit(at(60), at(70), device=1)]
    assert led.claimed_ns(["compute", "idle_launch_bound"], within=mixed) == {
        (0, 0, "compute"): 10 * US, (0, 1, "compute"): 10 * US, (0, 1, "idle_launch_bound"): 50 * US}


def test_a_ledger_rebuilt_from_plain_frames_claims_the_same(tmp_path):
    """Frames laid out otherwise (buckets as plain strings, as read back from a file) take the general path of
    ``claimed_ns`` and give the same figures, the rank filter included."""
    led = _two_ranks(tmp_path).ledger
    plain = dataclasses.replace(led, slices=led.slices.assign(bucket=led.slices["bucket"].astype(str)))
    origin = int(led.windows["start_ns"].min())
    within = [(origin + 150 * US, origin + 160 * US)]
    for rank in (None, 0, 1):
        assert plain.claimed_ns(IDLE_BUCKETS, rank=rank, within=within) == led.claimed_ns(IDLE_BUCKETS, rank=rank, within=within), rank
    assert plain.claimed_ns(IDLE_BUCKETS, rank=1, within=within) == {(1, 0, "idle_host_busy"): 84 * US, (1, 0, "idle_untraced"): 16 * US}


DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_a_slow_first_batch_is_a_data_wait_not_warmup(tmp_path):
    """The first fetch of the input pipeline (traced as an op) takes 2 ms against 100 µs later: the loop waited
    for data, which a faster pipeline removes, so it stays a data wait (the 2000 µs of gap [10, 2020) inside it)
    and is not booked as one-time work."""
    t = KinetoTrace()
    _first_call(t, DATA, 2000, 100)
    led = _views(tmp_path, t).ledger
    assert _warm(led) == []
    assert led.totals()["idle_data_wait"] == (2000 + 3 * 100) * US and led.totals()["idle_warmup"] == 0


def test_names_as_plain_strings_give_the_same_ledger(tmp_path):
    """A timeline assembled through the API with names as plain strings (not categories) books the same warm-up
    and the same buckets: an outlier first conv2d, a first call half inside a stream sync, a slow first batch,
    the first call of each input shape."""
    for name, block in (("aten::conv2d", None), ("aten::to", ("cudaStreamSynchronize", 1000)), (DATA, None)):
        t = KinetoTrace()
        _first_call(t, name, 2000, 100, block=block)
        tl = traceinsight.load(t.write(tmp_path / "t.json"))
        plain = Derived(Timeline(events=tl.events.assign(name=tl.events["name"].astype(object)), meta=tl.meta)).ledger
        led = Derived(tl).ledger
        firsts = [w for w in _warm(led) if w[2].startswith("first call")]
        assert _warm(plain) == _warm(led) and firsts == ([(20, 2000, "first call of aten::conv2d")] if name == "aten::conv2d" else []), name
        assert plain.totals() == led.totals(), name
    # input shapes recorded: each shape's first call, found on plain names as on categories
    t = _shaped_calls([(A, 2000), (A, 100), (A, 100), (A, 100), (B, 2000), (B, 100), (B, 100), (B, 100)])
    tl = traceinsight.load(t.write(tmp_path / "shaped.json"))
    plain = Derived(Timeline(events=tl.events.assign(name=tl.events["name"].astype(object)), meta=tl.meta)).ledger
    assert _warm(plain) == _warm(Derived(tl).ledger) == [(20, 2000, "first call of aten::conv2d"), (2720, 2000, "first call of aten::conv2d")]


def test_kinds_as_plain_strings_give_the_same_ledger(tmp_path):
    """A timeline assembled through the API with every category column as plain strings (kind, name, copy kind)
    builds the same ledger: the masks it combines in place must be its own arrays, not read-only views."""
    t = KinetoTrace()
    _first_call(t, "aten::to", 2000, 100, block=("cudaStreamSynchronize", 1000))
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    ev = tl.events
    plain_cols = {c: ev[c].astype(object) for c in ev.columns if isinstance(ev[c].dtype, pd.CategoricalDtype)}
    plain = Derived(Timeline(events=ev.assign(**plain_cols), meta=tl.meta)).ledger
    led = Derived(tl).ledger
    assert plain.totals() == led.totals() and _warm(plain) == _warm(led)


# --- warm-up per input shape (its cases: tests/test_ledger.py; here the calls the plain-names parity reads) -----
def _shaped_calls(calls: list[tuple[list | None, float]]) -> KinetoTrace:
    """aten::conv2d calls one after another (each [cursor, cursor + µs), a 50 µs kernel launched from inside it
    at its end, 100 µs between calls), from 20 µs, with the given input shapes (None: not recorded)."""
    t = KinetoTrace()
    t.kernel("k0", 0, 10, launch_us=-10)
    at = 20.0
    for dims, dur in calls:
        args = None if dims is None else {"Input Dims": [dims], "Input type": ["float"], "Concrete Inputs": [""]}
        op = t.cpu_op("aten::conv2d", at, dur, args=args)
        t.kernel("conv_kernel", at + dur, 50, launch_us=at + dur - 10, op=op)
        at += dur + 100
    return t


A, B = [8, 3, 224, 224], [8, 64, 56, 56]
