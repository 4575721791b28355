"""TI032 allocator-churn: positive (growth after warm-up, cudaMalloc in steps, reserved >> allocated), negative
(growth during warm-up only), fix."""

from __future__ import annotations

from ._memory_traces import GiB, kineto_steps, kineto_uncached, of, xplane_jax


#: positive: it fires; negative: it stays silent; fix: the same workload, fixed as its fix text says.
CASES = {
    "positive": ["test_positive_reserved_grows_after_warmup", "test_positive_cudamalloc_inside_steps", "test_positive_reserved_far_above_allocated",
                 "test_positive_allocator_off_found_from_the_optimizer_iterations", "test_positive_allocator_off_without_any_marker",
                 "test_positive_allocator_off_with_profiler_steps"],
    "negative": ["test_negative_growth_only_in_warmup", "test_negative_growth_that_stops_after_one_more_step",
                 "test_negative_caching_allocator_on", "test_negative_empty_cache_once_per_step_is_not_an_allocator_off",
                 "test_negative_jax_preallocation_is_not_fragmentation"],
    "fix": ["test_fix_static_shapes_stop_the_growth", "test_fix_allocator_off_is_the_caching_allocator_not_graphs"],
}


def test_positive_reserved_grows_after_warmup(tmp_path):
    (f,) = of(kineto_steps(tmp_path, grow_per_step=GiB // 2), "TI032")
    # steps 2..5 each grow by 0.5 GiB: 10 GiB at the end over the 8 GiB the warm-up step (the first) held
    assert f.metrics["growth_after_warmup_bytes"] == 2 * GiB
    assert f.metrics["level_after_warmup_bytes"] == 8 * GiB


def test_positive_cudamalloc_inside_steps(tmp_path):
    (f,) = of(kineto_steps(tmp_path, malloc_in_steps=True), "TI032")
    assert f.metrics["steady_state_alloc_calls"] == 4 and f.impact_ns == 4 * 200_000


def test_positive_reserved_far_above_allocated(tmp_path):
    (f,) = of(kineto_steps(tmp_path, reserved=20 * GiB), "TI032")
    assert f.metrics["fragmented"] and f.metrics["peak_reserved_bytes"] == 20 * GiB


def test_negative_growth_only_in_warmup(tmp_path):
    """The first step grows the pool (8 GiB reserved from the start here, as after warm-up): nothing after."""
    assert not of(kineto_steps(tmp_path), "TI032")


def test_fix_static_shapes_stop_the_growth(tmp_path):
    f = of(kineto_steps(tmp_path, grow_per_step=GiB, name="a.json"), "TI032")[0]
    assert "expandable_segments:True" in f.fixes["pytorch"].text and "padded_batch" in f.fixes["tensorflow"].text
    assert not of(kineto_steps(tmp_path, grow_per_step=0, name="b.json"), "TI032")


def test_negative_growth_that_stops_after_one_more_step(tmp_path):
    """cudaMalloc in one step after the first only (warm-up that ran one step long): not churn."""
    import traceinsight

    from ..helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    for s in range(5):
        t0 = s * 10_000
        t.step(s + 1, t0, 9_990)
        if s == 1:
            t.runtime("cudaMalloc", t0 + 60, 200)
            t.runtime("cudaMalloc", t0 + 400, 200)
        t.kernel("gemm", t0 + 1_200, 5_000)
    assert not of(traceinsight.analyze(t.write(tmp_path / "t.json")), "TI032")


# --- an allocator that does not cache (PYTORCH_NO_CUDA_MEMORY_CACHING=1), with or without step markers ----------


def _uncached(a):
    (f,) = [f for f in of(a, "TI032") if f.metrics.get("allocator_caches") is False]
    return f


def test_positive_allocator_off_found_from_the_optimizer_iterations(tmp_path):
    """No step markers, as the real ROCm DDP trace: the iterations come from Optimizer.zero_grad, and the 5 after
    the first each free 8 tensors with a synchronising hipFree and allocate 8 with hipMalloc (7 right after a free)."""
    a = kineto_uncached(tmp_path)
    assert a.timeline.meta.extra["steps_source"]["how"] == "optimizer"
    assert a.views.step_count == 6
    f = _uncached(a)
    m = f.metrics
    assert (m["free_calls"], m["malloc_calls"], m["reallocations"], m["iterations"]) == (40, 40, 35, 5)
    # frees grow with the iteration (200 µs x (1 + i), i = 1..5), each malloc 50 µs
    assert m["free_ns"] == 8 * 200_000 * (2 + 3 + 4 + 5 + 6) and f.impact_ns == m["free_ns"] + 40 * 50_000
    assert m["longest_free_ns"] == 1_200_000
    for word in ("malloc", "free", "allocator", "synchronising"):
        assert word in f.message
    assert f.root_cause and f.severity.value == "warning"
    # the idle gaps under those calls are its doing: TI001 is its symptom, TI031 claims none of the frees
    (gaps,) = of(a, "TI001")
    assert gaps.metrics["explained_by"] == f.fingerprint and not of(a, "TI031")
    # the verdict's lever is this finding, and its headline names it (the bucket's words alone would hide it)
    assert a.verdict["lever"] == "TI032"
    assert a.verdict["headline"].endswith("(root cause: TI032)")


def test_positive_allocator_off_without_any_marker(tmp_path):
    """No step markers and no optimizer ranges: the repeated part is the window outside warm-up, and the mallocs
    that follow frees are not taken for the allocator's one-time growth."""
    a = kineto_uncached(tmp_path, markers="none")
    assert a.views.step_count == 0
    f = _uncached(a)
    assert f.metrics["free_calls"] == 48 and f.metrics["reallocations"] >= 40
    reasons = " ".join(a.ledger.warmup["reason"])
    assert reasons.count("allocator growth") == 1  # only the first malloc, before any free, is growth


def test_positive_allocator_off_with_profiler_steps(tmp_path):
    f = _uncached(kineto_uncached(tmp_path, markers="profiler"))
    assert f.metrics["free_calls"] == 40 and f.metrics["iterations"] == 5


def test_negative_caching_allocator_on(tmp_path):
    """The same loop with the pool on: the driver's malloc runs in the first iteration only, its free never."""
    for markers in ("optimizer", "none"):
        assert not of(kineto_uncached(tmp_path, caching=True, markers=markers, name=f"{markers}.json"), "TI032")


def test_negative_empty_cache_once_per_step_is_not_an_allocator_off(tmp_path):
    """empty_cache() at each step's end frees, and the next step allocates: TI031's asked-for releases, not this."""
    a = kineto_steps(tmp_path, malloc_in_steps=True, free_in_steps=True)
    assert not [f for f in of(a, "TI032") if f.metrics.get("allocator_caches") is False]
    assert of(a, "TI031")


def test_negative_jax_preallocation_is_not_fragmentation(tmp_path):
    """JAX reserves 14 GiB up front and uses 1 GiB of it: reserved far above allocated by design, not fragmentation."""
    assert not of(xplane_jax(tmp_path), "TI032")


def test_fix_allocator_off_is_the_caching_allocator_not_graphs(tmp_path):
    f = _uncached(kineto_uncached(tmp_path, name="off.json"))
    pt = f.fixes["pytorch"]
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in pt.text and "expandable_segments:True" in pt.code
    assert "graph" not in pt.text.lower() and "compile" not in pt.text.lower()
    assert "XLA_PYTHON_CLIENT_ALLOCATOR" in f.fixes["jax"].text
    assert not of(kineto_uncached(tmp_path, caching=True, name="on.json"), "TI032")
