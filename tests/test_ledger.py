"""The time ledger on planted traces: exact nanoseconds per bucket, written as real kineto files."""

from __future__ import annotations

import pytest

import traceinsight
from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.derive.views import Views
from traceinsight.derive.derived import Derived

from .helpers.kineto_writer import KinetoTrace

US = 1_000
DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _ledger(tmp_path, trace: KinetoTrace, name: str = "t.json"):
    tl = traceinsight.load(trace.write(tmp_path / name))
    views = Derived(tl)
    return views, views.ledger


def _totals(ledger) -> dict[str, int]:
    return {b: n for b, n in ledger.totals().items() if n}


def _sums_to_window(ledger) -> None:
    per_dev = ledger.by_device.groupby(["rank", "device"])["ns"].sum()
    for r in ledger.windows.itertuples(index=False):
        assert per_dev[(r.rank, r.device)] == r.window_ns
    sl = ledger.slices
    assert (sl["end_ns"] > sl["start_ns"]).all()
    for _, g in sl.groupby(["rank", "device"]):
        assert (g["start_ns"].to_numpy()[1:] == g["end_ns"].to_numpy()[:-1]).all()  # contiguous, disjoint


def test_data_wait_gap_then_host_busy_then_untraced(tmp_path):
    t = KinetoTrace()
    t.kernel("k_a", 0, 100)
    t.annotation(DATA, 100, 300)
    t.cpu_op("aten::add", 440, 20)
    t.kernel("k_b", 500, 100, launch_us=450)
    views, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 200 * US, "idle_data_wait": 300 * US, "idle_host_busy": 20 * US, "idle_untraced": 80 * US}
    assert led.window_ns(0, 0) == 600 * US
    gap = led.gaps.iloc[0]
    assert gap["cause"] == "idle_data_wait" and gap["dur_ns"] == 400 * US
    # a claim restricted to the data-wait bucket and to part of the gap
    start = int(led.windows["start_ns"].iloc[0])
    assert led.claim("idle_data_wait") == 300 * US
    # a range touching the gap claims the gap's slices of those buckets whole; busy slices are clipped
    assert led.claim(["idle_data_wait", "idle_untraced"], within=[(start + 350 * US, start + 450 * US)]) == (300 + 80) * US
    assert led.claim("idle_host_busy", within=[(start + 450 * US, start + 450 * US)]) == 20 * US  # a point instance
    assert led.claim("compute", within=[(start + 50 * US, start + 150 * US)]) == 50 * US
    assert led.claim("idle_data_wait", within=[(start + 510 * US, start + 600 * US)]) == 0  # touches no gap
    assert led.claim("idle_data_wait", rank=1) == 0


def test_sync_gap_is_charged_to_the_sync_until_new_work_arrives(tmp_path):
    """A sync the host sat in for longer than the gap that follows (it was that far ahead of the GPU) owns the
    whole gap: without it the host would have queued the next work before the GPU ran dry."""
    t = KinetoTrace()
    t.kernel("k_a", 0, 100)
    t.runtime("cudaStreamSynchronize", 0, 105)  # blocked 105 µs, until 5 µs after the GPU ran dry
    t.cpu_op("aten::add", 105, 45)
    t.kernel("k_b", 200, 50, launch_us=190)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 150 * US, "idle_host_sync": 100 * US}


def test_a_sync_owns_a_gap_only_for_as_long_as_it_blocked(tmp_path):
    """The same gap [100, 200) after a sync the host sat in for 85 µs: without the sync the host would have been
    85 µs further on, and the GPU would still have waited the other 15 µs for the host's own work. So the gap is
    the sync's for its first 85 µs, and the rest is booked as the host was then: untraced, and the launch call of
    k_b over [190, 194) as host busy."""
    t = KinetoTrace()
    t.kernel("k_a", 0, 100)
    t.runtime("cudaStreamSynchronize", 20, 85)  # blocked 85 µs, until 5 µs after the GPU ran dry
    t.cpu_op("aten::add", 105, 45)
    t.kernel("k_b", 200, 50, launch_us=190)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 150 * US, "idle_host_sync": 85 * US, "idle_host_busy": 4 * US, "idle_untraced": 11 * US}
    g = led.gaps.iloc[0]
    assert (g["idle_host_sync"], g["cause"]) == (85 * US, "idle_host_sync")  # the gap's largest bucket names it


def test_sync_that_starts_after_the_gap_does_not_own_it(tmp_path):
    t = KinetoTrace()
    t.kernel("k_a", 0, 100)
    t.cpu_op("aten::mul", 90, 150)
    t.runtime("cudaStreamSynchronize", 240, 5)  # GPU long idle: returns at once, costs nothing
    t.kernel("k_b", 300, 50, launch_us=280)
    _, led = _ledger(tmp_path, t)
    # host busy: the op until 240, the sync call, the launch call of k_b (280-284); nothing traced otherwise
    assert _totals(led) == {"compute": 150 * US, "idle_host_busy": (140 + 5 + 4) * US, "idle_untraced": 51 * US}


def test_launch_bound_stretch(tmp_path):
    t = KinetoTrace()
    for i in range(10):  # the host launches every 10 µs, the kernels run 2 µs: the queue runs dry each time
        t.kernel("tiny", 10 * i + 6, 2, launch_us=10 * i, launch_dur_us=4)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 20 * US, "idle_launch_bound": 72 * US}
    assert 8 * US < LAUNCH_GAP_NS


def test_copy_bound_and_copies_hidden_under_kernels(tmp_path):
    t = KinetoTrace()
    t.memcpy("HtoD", 0, 1000, 64 << 20, pageable=True, sync=True)
    t.kernel("hidden_under_copy", 200, 100, stream=8)
    t.kernel("k", 1000, 10)
    t.memcpy("DtoH", 1010, 1000, 64 << 20, pageable=True, sync=True)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 110 * US, "copy": 1900 * US}


def test_streams_overlap_counts_busy_and_collectives_only_when_exposed(tmp_path):
    t = KinetoTrace()
    t.kernel("gemm_a", 0, 100, stream=7)
    t.kernel("gemm_b", 50, 150, stream=8)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 150, 100, stream=9)  # 50 µs hidden, 50 µs exposed
    t.kernel("gemm_c", 300, 100, stream=7, launch_us=295, launch_dur_us=4)  # launched late: short gap
    t.kernel("gemm_d", 500, 100, stream=7, launch_us=100, launch_dur_us=4)  # queued long before: GPU-side wait
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    assert _totals(led) == {"compute": 400 * US, "communication": 50 * US, "idle_launch_bound": 50 * US, "idle_gpu_dependency": 100 * US}


def test_first_op_outlier_is_warmup_not_steady_state(tmp_path):
    t = KinetoTrace()
    t.kernel("k0", 0, 10)
    t.cpu_op("aten::conv2d", 20, 20_000)  # autotune inside the first convolution: 20 ms
    t.kernel("conv", 20_010, 100, launch_us=20_000)
    for i in range(1, 4):
        base = 20_200 + 300 * i
        t.cpu_op("aten::conv2d", base, 50)
        t.kernel("conv", base + 60, 100, launch_us=base + 40)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    tot = led.totals()
    assert tot["idle_warmup"] == 19_990 * US  # the gap's part inside the first conv2d (20-20 020 µs, GPU busy from 20 010)
    assert "first call of aten::conv2d" in set(led.warmup["reason"])
    assert led.avoidable_ns < 1_000 * US


#: two convolutions of different input shapes (cuDNN searches an algorithm per shape)
CONV_A = [[8, 3, 224, 224], [64, 3, 7, 7]]
CONV_B = [[8, 64, 56, 56], [64, 64, 3, 3]]


def _two_shape_passes(tmp_path, *, b_calls: int = 3, b_shapes: bool = True):
    """Three passes over two ``aten::cudnn_convolution`` calls of shapes A and B (B in the first ``b_calls`` passes,
    its shapes recorded unless ``b_shapes`` is False); each first call of a shape autotunes for 50 ms, later calls
    take 100 µs; each call's kernel is launched at its end. No step markers: a first step set aside whole would
    hide which calls are warm-up."""
    t = KinetoTrace()
    _conv_passes(t, b_calls, b_shapes)
    return _ledger(tmp_path, t)[1]


def _conv_passes(t: KinetoTrace, b_calls: int, b_shapes: bool = True) -> None:
    at = 0.0
    for p in range(3):
        for dims, calls in ((CONV_A, 3), (CONV_B, b_calls)):
            if p >= calls:
                continue
            dur = 50_000.0 if p == 0 else 100.0
            t.cpu_op("aten::cudnn_convolution", at, dur, args={"Input Dims": dims} if dims is CONV_A or b_shapes else None)
            t.kernel("conv_kernel", at + dur - 20, 50.0, launch_us=at + dur - 30)
            at += dur + 100
        at += 500


def test_first_call_of_each_input_shape_is_warmup(tmp_path):
    """The second shape's first call is not the op's first call by name, but it is its shape's first, 500x its
    shape's later calls, and the shape comes back twice: warm-up, both first calls."""
    led = _two_shape_passes(tmp_path)
    w = led.warmup.sort_values("start_ns")
    assert w["reason"].tolist() == ["first call of aten::cudnn_convolution"] * 2
    assert w[["start_ns", "end_ns"]].to_numpy().tolist() == [[0, 50_000 * US], [50_100 * US, 100_100 * US]]
    # the first call ends before the GPU's window opens; the second one's gap (50.1 ms to its kernel at 100.08 ms)
    # is booked as warm-up, not as the host keeping the GPU idle
    assert led.totals()["idle_warmup"] == 49_980 * US
    assert led.totals()["idle_host_busy"] < 1_000 * US


@pytest.mark.parametrize("variant", [{"b_calls": 2}, {"b_shapes": False}], ids=["shape_seen_twice", "no_shapes"])
def test_a_shape_seen_twice_or_without_shapes_is_not_warmup_by_shape(tmp_path, variant):
    """A shape that comes back only once (a variable-length batch) keeps its first call in the steady state, and
    calls without recorded shapes are judged by name alone (only the op's first call)."""
    led = _two_shape_passes(tmp_path, **variant)
    assert led.warmup[["start_ns", "end_ns"]].to_numpy().tolist() == [[0, 50_000 * US]]
    assert led.totals()["idle_warmup"] == 0
    assert led.totals()["idle_host_busy"] >= 49_000 * US  # B's 50 ms call keeps the GPU idle in the steady state


@pytest.mark.parametrize("b_calls", [2, 3])
def test_a_shape_must_come_back_on_its_own_rank(tmp_path, b_calls):
    """Two ranks run the same passes: shape B seen twice on each rank is seen four times in the job, but on no rank
    does it come back twice, so its first calls stay in the steady state; seen three times on each, both ranks
    set its first call aside."""
    for r in (0, 1):
        t = KinetoTrace(rank=r, world_size=2)
        _conv_passes(t, b_calls)
        t.write(tmp_path / "job" / f"rank{r}.pt.trace.json")
    led = Derived(traceinsight.load(tmp_path / "job")).ledger
    got = sorted(led.warmup[["rank", "start_ns", "end_ns"]].to_numpy().tolist())
    want = [[r, 0, 50_000 * US] for r in (0, 1)] + ([[r, 50_100 * US, 100_100 * US] for r in (0, 1)] if b_calls == 3 else [])
    assert got == sorted(want)


def test_first_step_outlier_is_warmup(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 3000)
    t.kernel("k", 100, 100)
    t.kernel("k", 2900, 100, launch_us=2880)
    for n in range(2, 6):
        s = 3000 + (n - 2) * 1000
        t.step(n, s, 1000)
        t.kernel("k", s + 100, 800, launch_us=s + 80)
    _, led = _ledger(tmp_path, t)
    _sums_to_window(led)
    st = led.by_step.pivot_table(index="step", columns="bucket", values="ns", aggfunc="sum")
    assert st.loc[1, "idle_warmup"] == 2700 * US
    assert st.loc[1, "compute"] == 200 * US
    # steps 2..5: 100 µs between the previous kernel end and the next kernel start, launched after the GPU ran dry
    for n in range(2, 6):
        assert st.loc[n].sum() == (1000 if n < 5 else 900) * US
    by_step_sum = led.by_step.groupby("bucket")["ns"].sum()
    assert {b: int(by_step_sum[b]) for b in BUCKETS} == led.totals()


def test_gpu_sync_records_stand_in_for_missing_host_syncs(tmp_path):
    t = KinetoTrace()
    t.kernel("k_a", 0, 100)
    t.gpu_sync(0, 105)
    t.kernel("k_b", 200, 50, launch_us=190)
    _, led = _ledger(tmp_path, t)
    assert _totals(led) == {"compute": 150 * US, "idle_host_sync": 100 * US}


def test_no_gpu_activity_gives_an_empty_ledger(tmp_path):
    t = KinetoTrace()
    t.cpu_op("aten::add", 0, 100)
    _, led = _ledger(tmp_path, t)
    assert led.slices.empty and led.by_device.empty and led.window_ns() == 0
    assert led.claim(list(AVOIDABLE_BUCKETS)) == 0
    assert led.to_dict()["by_device"] == []


def test_unknown_bucket_is_an_error(tmp_path):
    t = KinetoTrace()
    t.kernel("k", 0, 10)
    _, led = _ledger(tmp_path, t)
    with pytest.raises(ValueError, match="unknown ledger bucket"):
        led.claim("idle")


def test_json_form_has_device_and_step_tables(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 300)
    t.kernel("k_a", 10, 100)
    t.kernel("k_b", 200, 50, launch_us=150)
    _, led = _ledger(tmp_path, t)
    d = led.to_dict()
    assert d["buckets"] == list(BUCKETS)
    dev = d["by_device"][0]
    assert dev["window_ns"] == 240 * US and sum(dev["ns"].values()) == 240 * US
    assert abs(sum(dev["pct"].values()) - 100.0) < 0.01
    assert [s["step"] for s in d["by_step"]] == [1]
    assert d["by_step"][0]["window_ns"] == 240 * US



def _dispatch_gap(tmp_path, name: str):
    """Two kernels 2 ms apart; the host is inside the range ``name`` for the whole gap, then launches the second."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    t.kernel("k0", 100, 500, launch_us=90)
    t.annotation(name, 650, 1_900)
    t.kernel("k1", 2_600, 500, launch_us=2_560)
    return traceinsight.analyze(t.write(tmp_path / "gap.json"), min_impact=0).ledger.totals()


def test_framework_dispatch_annotations_are_host_work(tmp_path):
    """TF eager / JAX dispatch is traced as annotations (TraceMe), not ops: a GPU gap under ``TFE_Py_FastPathExecute_C``
    or ``PjitFunction(...)`` is host/framework work, never "untraced"; a user range over the same gap is not."""
    for name in ("TFE_Py_FastPathExecute_C", "EagerExecute: LogicalAnd", "PjitFunction(forward_3d_conv)"):
        tot = _dispatch_gap(tmp_path, name)
        assert tot["idle_host_busy"] >= 1_500_000 and tot["idle_untraced"] < 500_000, (name, tot)
    tot = _dispatch_gap(tmp_path, "my_user_range")
    assert tot["idle_host_busy"] < 500_000, tot



def test_verdict_names_the_visible_host_work_of_host_caused_idle(tmp_path):
    """Bound by host work: the verdict says what the host was doing in the longest gap (issue 23: TF eager dispatch
    named, not only "untraced host time")."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace
    from traceinsight.assess.verdict import details

    t = KinetoTrace()
    for i in range(6):
        b = i * 3_000
        t.kernel("k0", b + 100, 300, launch_us=b + 90)
        t.annotation("TFE_Py_FastPathExecute_C", b + 450, 2_400)
    d = details(traceinsight.analyze(t.write(tmp_path / "eager.json")))
    assert d["category"] == "host_overhead", d
    assert "in the longest gap the host was in" in d["sentence"] and "TFE_Py_FastPathExecute_C" in d["sentence"]


def _warm_gap_then_eager(tmp_path, warm_us: float, other_us: float):
    """A first ``aten::conv2d`` of ``warm_us`` (its later calls take 100 µs: warm-up) and ``other_us`` of a Python
    pre-processing op in the same GPU gap, then 8 gaps of 2.5 ms of TF eager dispatch."""
    from traceinsight.assess.verdict import details

    t = KinetoTrace()
    t.kernel("k0", 100, 300, launch_us=90)
    t.cpu_op("aten::conv2d", 450, warm_us)
    t.cpu_op("my_preprocess", 500 + warm_us, other_us)
    end = 500 + warm_us + other_us
    t.kernel("conv", end + 60, 100, launch_us=end + 40)
    for i in range(8):
        b = end + 500 + i * 3_000
        t.kernel("k0", b + 100, 300, launch_us=b + 90)
        t.annotation("TFE_Py_FastPathExecute_C", b + 450, 2_400)
        t.cpu_op("aten::conv2d", b + 2_860, 100)
        t.kernel("conv", b + 2_900, 50, launch_us=b + 2_880)
    a = traceinsight.analyze(t.write(tmp_path / f"warm{int(warm_us)}.json"))
    (gaps,) = [f for f in a.findings if f.code == "TI001"]
    return gaps.evidence, details(a)


def test_verdict_skips_a_longest_gap_that_is_mostly_warm_up(tmp_path):
    """The longest gap is 7.66 ms, 5 ms of it the first conv2d's autotuning: what the host did there is warm-up,
    so the verdict names the steady state's longest gap (TF eager dispatch), not the convolution."""
    ev, d = _warm_gap_then_eager(tmp_path, 5_000, 2_500)
    first = ev.iloc[0]
    assert (first["duration_us"], first["warmup_us"]) == (7_660.0, 5_000.0) and "aten::conv2d" in first["host_activity"]
    assert d["category"] == "host_overhead"
    assert "in the longest gap the host was in thread 4242: TFE_Py_FastPathExecute_C (2.40 ms)" in d["sentence"]
    assert "aten::conv2d (5.00 ms)" not in d["sentence"]


def test_verdict_names_a_longest_gap_that_is_mostly_steady(tmp_path):
    """3 ms of warm-up in a 7.66 ms gap: under half of it, so the gap is the steady state's, and named."""
    ev, d = _warm_gap_then_eager(tmp_path, 3_000, 4_500)
    first = ev.iloc[0]
    assert (first["duration_us"], first["warmup_us"]) == (7_660.0, 3_000.0)
    assert "in the longest gap the host was in thread 4242: my_preprocess (4.50 ms)" in d["sentence"]


def test_a_gap_a_unified_memory_migration_ends_is_the_hosts(tmp_path):
    """Nsight exports unified-memory migrations as copies no API call made (copy kinds 11/12 with a migration
    cause). The reader names them ("Unified Memory DtoH (page fault)"), and a gap one ends is not idle with no
    launch linked: the driver moved the pages when the host touched them, so the gap is booked by what the host
    did then (here nothing traced: untraced host time), as a late launch would be."""
    from .helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    t.kernel("k_a", 0, 100_000, launch_ns=-10_000)
    t.migration("DtoH", 500_000, 20_000, 1 << 20)  # the CPU reads results: a page fault 400 µs after k_a
    t.kernel("k_b", 800_000, 100_000, launch_ns=790_000)
    tl = traceinsight.load(t.write(tmp_path / "um.sqlite"))
    names = tl.events.loc[tl.events["kind"] == "memcpy", "name"].astype(str).tolist()
    assert names == ["Unified Memory DtoH (page fault)"]
    led = Derived(tl).ledger
    g = led.gaps.sort_values("start_ns")
    assert g["cause"].tolist() == ["idle_untraced", "idle_untraced"]
    assert int(led.totals()["idle_other"]) == 0
