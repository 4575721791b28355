"""The diff's logic by value on hand-written JSON reports (the unit a diff reads: docs/json-report.md): when two
runs are the same workload, how the step change, its interval and the verdict are worded, which bucket, kernel and
op moved, the findings and what-if check, the straggler, and the gate at each of its boundaries.

tests/test_diff.py runs the same code end to end on helper-written traces; here every input is a few lines, so
each expected figure can be worked out by hand.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from traceinsight.delta import match as M
from traceinsight.delta.side import Side
from traceinsight.delta.stats import MIN_SAMPLES, Shift, shift

#: the module (``traceinsight.delta.compare`` the package attribute is the function of that name)
C = importlib.import_module("traceinsight.delta.compare")
MS = 1_000_000


def _report(durs=(), *, rank=0, warmup=(), kernels=(), ops=(), shapes=(), batch=None, by_step=(), buckets=(),
            findings=(), kpis=None, verdict=None, trace=None, busy=(), extra=None, workload=True):
    steps = [{"rank": rank, "step": i + 1, "dur_ns": int(d), "warmup": i in warmup} for i, d in enumerate(durs)]
    doc = {
        "trace": trace if trace is not None else {"format": "pytorch", "framework": "pytorch"},
        "ledger": {"buckets": list(buckets), "by_device": [], "by_step": list(by_step)},
        "summary": {"devices": [{"rank": r, "busy_pct": b} for r, b in busy]},
        "kpis": kpis or {},
        "verdict": verdict or {},
        "findings": list(findings),
    }
    if workload:
        doc["workload"] = {"steps": steps, "kernels": list(kernels), "ops": list(ops), "shapes": list(shapes), "batch": batch}
    doc.update(extra or {})
    return doc


OPS = [{"name": "aten::mm", "per_step": 10, "gpu_ns_per_step": 1000}, {"name": "aten::add", "per_step": 5, "gpu_ns_per_step": 100}]


def _side(label="base.json", **kw) -> Side:
    kw.setdefault("ops", OPS)
    return Side(_report(**kw), label)


# --- statistics ----------------------------------------------------------------------------------------------
def test_shift_interval_needs_enough_splits():
    """An interval needs 2 / C(n+m, n) <= 5 %: not 3 and 3 (1/20 each split), but 4 and 4, or 3 and 5."""
    assert MIN_SAMPLES == 4
    s = shift([10.0, 12.0, 11.0], [20.0, 22.0, 21.0])
    assert (s.estimate, s.low, s.high, s.has_interval, s.excludes_zero(), s.separated) == (10.0, None, None, False, False, 1)
    assert s.p_value == pytest.approx(0.1)  # 2 of the 20 splits are as extreme
    s = shift([10.0, 12.0, 11.0, 11.5], [20.0, 22.0, 21.0, 21.5])
    assert s.estimate == 10.0 and s.has_interval and s.low > 0 and s.excludes_zero()
    assert (s.low, s.high) == (8.0, 12.0)  # c = 0: the smallest and largest of the 16 differences
    assert s.low <= s.estimate <= s.high and s.confidence == 0.95
    assert shift([1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0]).has_interval
    with pytest.raises(ValueError) as e:
        shift([], [1.0])
    assert str(e.value) == "shift: both sides need at least one sample"
    with pytest.raises(ValueError):
        shift([1.0], [])


def test_shift_is_hodges_lehmann_with_the_mann_whitney_interval():
    """Against a direct count: the median of the 100 pairwise differences, and the interval's order statistics
    from the exact U distribution (10 and 10: c = 23 at 95 %, the tabled critical value)."""
    a = np.array([100.0, 104, 98, 101, 99, 100, 97, 103, 95, 102])
    b = a + np.array([3.0, -2, 5, 1, 0, 4, -1, 2, 6, 1])
    diffs = np.sort(np.subtract.outer(b, a).ravel())
    s = shift(a, b)
    assert s.estimate == float(np.median(diffs))
    assert (s.low, s.high) == (diffs[23], diffs[100 - 1 - 23])
    # one wild HEAD step moves the estimate by at most one order statistic
    wild = shift(a, np.r_[b[:-1], 10_000.0])
    assert abs(wild.estimate - s.estimate) <= float(np.max(np.diff(diffs)))


def test_shift_interval_always_holds_the_estimate():
    s = shift([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 5.0])
    assert s.estimate == 0.0 and s.low <= s.estimate <= s.high
    s = shift([0.0, 0.0, 10.0, 0.0], [0.0, 10.0, 10.0, 10.0])
    assert s.estimate == 10.0 and s.low <= 10.0 <= s.high


def test_excludes_zero_on_each_side():
    assert Shift(-5.0, -8.0, -1.0).excludes_zero() and Shift(5.0, 1.0, 8.0).excludes_zero()
    assert not Shift(0.0, -1.0, 1.0).excludes_zero() and not Shift(1.0, 0.0, 2.0).excludes_zero()
    assert not Shift(-1.0, -2.0, 0.0).excludes_zero()
    assert not Shift(1.0, 0.5, None).has_interval and not Shift(1.0, None, 2.0).has_interval


# --- comparability -------------------------------------------------------------------------------------------
def test_similarity_is_the_shared_share_of_the_larger_side():
    assert M._similarity({"a": 10, "b": 5}, {"a": 10, "b": 5}) == 100.0
    assert M._similarity({"a": 10, "b": 10}, {"a": 10}) == 50.0  # 10 of 20
    assert M._similarity({"a": 4}, {"a": 10, "c": 6}) == 25.0  # 4 of 16
    assert M._similarity({}, {}) == 100.0 and M._similarity({"a": 0}, {}) == 100.0


def test_differences_are_the_largest_first():
    x, y = {"a": 10, "b": 5, "c": 1, "d": 2}, {"a": 12, "b": 5, "c": 4, "e": 7}
    assert M._differences(x, y) == ["e: 0 -> 7 per step", "c: 1 -> 4 per step", "a: 10 -> 12 per step", "d: 2 -> 0 per step"]
    assert M._differences(x, y, n=2) == ["e: 0 -> 7 per step", "c: 1 -> 4 per step"]


def test_differences_name_at_most_five_and_only_real_ones():
    x = {f"op{i}": float(i) for i in range(7)}
    assert M._differences(x, {}) == [f"op{i}: {i} -> 0 per step" for i in (6, 5, 4, 3, 2)]
    assert M._differences({}, {"new": 1.0}) == ["new: 0 -> 1 per step"]
    assert M._differences({"a": 1e-9}, {}) == [] and M._differences({"a": 2e-9}, {}) == ["a: 2e-09 -> 0 per step"]


def test_batch_variants_up_to_six_tensors_try_every_choice():
    six = "[" + ", ".join(["[64]"] * 6) + "]"
    got = M._batch_variants(six, 64, 2)
    assert len(got) == 64 and got[0] == six.replace("64", "2") and got[-1] == six and len(set(got)) == 64


def test_a_zero_base_median_reads_the_change_against_one_ns():
    d = C._shift_dict(np.zeros(3), np.ones(3), Shift(1.0, 0.5, 1.5))
    assert (d["change_pct"], d["low_pct"], d["high_pct"]) == (100.0, 50.0, 150.0)


def test_the_same_ops_are_comparable():
    c = M.comparability(_side(durs=[10 * MS] * 3), _side(durs=[9 * MS] * 3))
    assert c == {"comparable": True, "matched_by": "framework_ops", "in_common_pct": 100.0, "shapes_in_common_pct": None,
                 "batch_base": None, "batch_head": None, "reasons": []}


def test_a_change_of_precision_sets_its_casts_and_loss_scaling_aside():
    """fp32 -> AMP adds casts (``aten::to`` and their backward) and GradScaler's ``_amp_`` ops: 10 of 25 per step
    here, which alone would read "different workloads". They are set aside, with a note of how many; a new op that
    is not one of them still counts."""
    amp = [{"name": "aten::mm", "per_step": 10}, {"name": "aten::add", "per_step": 5}, {"name": "aten::to", "per_step": 6},
           {"name": "autograd::engine::evaluate_function: ToCopyBackward0", "per_step": 2},
           {"name": "aten::_amp_foreach_non_finite_check_and_unscale_", "per_step": 1}, {"name": "aten::_amp_update_scale_", "per_step": 1}]
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[1] * 3, ops=amp))
    assert c["comparable"] and c["in_common_pct"] == 100.0
    assert c["reasons"] == ["dtype casts and mixed-precision loss scaling are set aside (0 per step in BASE, 10 in HEAD): a change "
                            "of precision adds or removes them without changing the model"]
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[1] * 3, ops=amp + [{"name": "aten::relu", "per_step": 5}]))
    assert not c["comparable"] and c["in_common_pct"] == 75.0  # 15 of 20 once the casts are set aside
    same = M.comparability(_side(durs=[1] * 3, ops=amp), _side(durs=[1] * 3, ops=amp))  # both AMP: nothing to say
    assert same["comparable"] and same["reasons"] == []


def test_ops_in_common_at_the_threshold():
    head_ops = [{"name": "aten::mm", "per_step": 10}, {"name": "aten::add", "per_step": 5}, {"name": "aten::relu", "per_step": 3.75}]
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[1] * 3, ops=head_ops))  # 15 of 18.75: exactly 80 %
    assert c["comparable"] and c["in_common_pct"] == 80.0 and c["reasons"] == []
    head_ops[2]["per_step"] = 3.8
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[1] * 3, ops=head_ops))
    assert not c["comparable"] and c["in_common_pct"] == 79.8
    assert c["reasons"] == [
        "only 80% of the framework ops per step are in common (at least 80% needed): the two run different framework ops, most of all aten::relu: 0 -> 3.8 per step",
        "aten::relu: 0 -> 3.8 per step",
    ]


def test_without_ops_kernels_stand_in():
    k = [{"name": "gemm_a", "per_step": 4, "class": "gemm"}, {"name": "elt", "per_step": 1, "class": "elementwise"}]
    c = M.comparability(_side(durs=[1] * 3, ops=[], kernels=k), _side(durs=[1] * 3, ops=[], kernels=k))
    assert c["comparable"] and c["matched_by"] == "kernels" and c["reasons"] == []
    c = M.comparability(_side(durs=[1] * 3, kernels=k), _side(durs=[1] * 3, ops=[], kernels=k))
    assert c["comparable"] and c["matched_by"] == "kernels"
    assert c["reasons"] == ["only BASE records framework ops; compared by kernel names"]
    c = M.comparability(_side(durs=[1] * 3, ops=[], kernels=k), _side(durs=[1] * 3, kernels=[{"name": "other", "per_step": 5}]))
    assert not c["comparable"] and c["in_common_pct"] == 0.0
    assert c["reasons"][0] == "only 0% of the kernels per step are in common (at least 80% needed): the two run different kernels, most of all other: 0 -> 5 per step"
    assert c["reasons"][1:] == ["only HEAD records framework ops; compared by kernel names", "other: 0 -> 5 per step",
                                "gemm_a: 4 -> 0 per step", "elt: 1 -> 0 per step"]


def test_kernels_by_class_are_compared_when_the_ops_launch_little_of_the_gpu_time():
    base_k = [{"name": "gemm_a", "per_step": 4, "class": "gemm", "ns_per_step": 1000}, {"name": "elt", "per_step": 6, "class": "elementwise", "ns_per_step": 1000}]
    head_k = [{"name": "gemm_a", "per_step": 4, "class": "gemm", "ns_per_step": 1000}, {"name": "elt", "per_step": 16, "class": "elementwise", "ns_per_step": 1000}]
    ops = [{"name": "aten::mm", "per_step": 10, "gpu_ns_per_step": 1000}]  # 50 % of the 2000 ns per step: enough
    c = M.comparability(_side(durs=[1] * 3, ops=ops, kernels=base_k), _side(durs=[1] * 3, ops=ops, kernels=head_k))
    assert c["comparable"] and (c["matched_by"], c["in_common_pct"]) == ("framework_ops", 100.0) and c["reasons"] == []
    ops = [{"name": "aten::mm", "per_step": 10, "gpu_ns_per_step": 900}]  # 45 %: the kernels too, 10 of 20 by class
    c = M.comparability(_side(durs=[1] * 3, ops=ops, kernels=base_k), _side(durs=[1] * 3, ops=ops, kernels=head_k))
    assert not c["comparable"] and (c["matched_by"], c["in_common_pct"]) == ("kernel_classes", 50.0)
    assert c["reasons"] == [
        "only 50% of the kernels by class per step are in common (at least 80% needed): the two run different kernels by class, most of all elementwise: 6 -> 16 per step",
        "the framework ops launch 45.0% of the GPU time per step (at least 50% to speak for the step): the kernels per class are compared too "
        "(100% of the framework ops, 50% of the kernels by class in common)",
        "elementwise: 6 -> 16 per step",
    ]
    # the same kernels by class: the ops' figure stands, with the note
    c = M.comparability(_side(durs=[1] * 3, ops=ops, kernels=base_k), _side(durs=[1] * 3, ops=ops, kernels=base_k))
    assert c["comparable"] and (c["matched_by"], c["in_common_pct"]) == ("framework_ops", 100.0) and len(c["reasons"]) == 1


def test_step_markers_on_one_side_only():
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[]))
    assert not c["comparable"] and c["reasons"] == ["only BASE has step markers: the step structure differs"]
    c = M.comparability(_side(durs=[]), _side(durs=[1] * 3))
    assert c["reasons"] == ["only HEAD has step markers: the step structure differs"]
    c = M.comparability(_side(durs=[]), _side(durs=[]))
    assert c["comparable"] and c["reasons"] == [
        "no step markers on either side: the GPU windows are compared, one sample each (no interval)"]
    # a different model and one side's markers: the reason for the model first, the markers second
    c = M.comparability(_side(durs=[1] * 3), _side(durs=[], ops=[{"name": "x", "per_step": 1}]))
    assert c["reasons"][:2] == [
        "only 0% of the framework ops per step are in common (at least 80% needed): the two run different framework ops, most of all aten::mm: 10 -> 0 per step",
        "only BASE has step markers: the step structure differs"]


def test_a_report_without_a_workload_block():
    old = Side(_report(workload=False), "old.json")
    for a, b, which in ((old, _side(), "BASE"), (_side(), old, "HEAD"), (old, old, "BASE and HEAD")):
        c = M.comparability(a, b)
        assert c == {"comparable": False, "matched_by": None, "in_common_pct": None, "shapes_in_common_pct": None,
                     "batch_base": None, "batch_head": None,
                     "reasons": [f"{which}: a report without a workload block (written before traceinsight could diff); analyse the trace again"]}


def _shapes(batch, extra=()):
    return [{"name": "aten::mm", "shapes": f"[[{batch}, 512], [512, 512]]", "per_step": 10},
            {"name": "aten::add", "shapes": f"[[{batch}, 512], [512]]", "per_step": 5}, *extra]


def test_shapes_with_the_batch_set_aside():
    c = M.comparability(_side(durs=[1] * 3, shapes=_shapes(32), batch=32), _side(durs=[1] * 3, shapes=_shapes(64), batch=64))
    assert c["comparable"] and c["shapes_in_common_pct"] == 100.0 and (c["batch_base"], c["batch_head"]) == (32, 64)
    c = M.comparability(_side(durs=[1] * 3, shapes=_shapes(32), batch=32), _side(durs=[1] * 3, shapes=_shapes(64), batch=32))
    assert not c["comparable"] and c["shapes_in_common_pct"] == 0.0
    assert c["reasons"][0] == ("only 0% of the framework ops per step have the same input shapes (batch dimension set aside; "
                               "at least 80% needed)")
    assert c["reasons"][1:] == ["aten::mm [[32, 512], [512, 512]]: 10 -> 0 per step", "aten::mm [[64, 512], [512, 512]]: 0 -> 10 per step",
                                "aten::add [[32, 512], [512]]: 5 -> 0 per step"]
    # shapes on one side only are not compared
    c = M.comparability(_side(durs=[1] * 3, shapes=_shapes(32)), _side(durs=[1] * 3))
    assert c["comparable"] and c["shapes_in_common_pct"] is None


def test_workloads_without_ops_or_kernels_lists():
    bare = Side({**_report(durs=[1] * 3), "workload": {"steps": _report(durs=[1] * 3)["workload"]["steps"]}}, "bare")
    c = M.comparability(bare, bare)
    assert c["comparable"] and c["matched_by"] == "kernels" and c["in_common_pct"] == 100.0


def test_shapes_at_the_threshold_and_their_rounding():
    base = [{"name": "aten::mm", "shapes": "[[32, 8]]", "per_step": 4}, {"name": "aten::add", "shapes": "[[32]]", "per_step": 1}]
    head = [{"name": "aten::mm", "shapes": "[[32, 8]]", "per_step": 4}, {"name": "aten::add", "shapes": "[[7]]", "per_step": 1}]
    c = M.comparability(_side(durs=[1] * 3, shapes=base), _side(durs=[1] * 3, shapes=head))
    assert c["comparable"] and c["shapes_in_common_pct"] == 80.0  # exactly the threshold: comparable
    head[0]["per_step"] = 4.123
    c = M.comparability(_side(durs=[1] * 3, shapes=base), _side(durs=[1] * 3, shapes=head))
    assert c["shapes_in_common_pct"] == 78.1 and c["comparable"] is False
    # a shapes reason and one side's step markers: the shapes first, the markers second
    c = M.comparability(_side(durs=[1] * 3, shapes=base), _side(durs=[], shapes=head))
    assert c["reasons"][0].startswith("only 78% of the framework ops per step have the same input shapes")
    assert c["reasons"][1] == "only BASE has step markers: the step structure differs"


def test_batch_variants_try_each_leading_dimension():
    assert M._batch_variants("[[64, 3], [64, 64]]", 64, 32) == [
        "[[32, 3], [32, 64]]", "[[32, 3], [64, 64]]", "[[64, 3], [32, 64]]", "[[64, 3], [64, 64]]"]
    assert M._batch_variants("[[8, 64]]", 64, 32) == ["[[8, 64]]"]  # only leading dimensions
    many = "[" + ", ".join(["[64]"] * 7) + "]"
    assert M._batch_variants(many, 64, 2) == ["[" + ", ".join(["[2]"] * 7) + "]", many]


def test_shape_similarity_with_two_batch_sizes():
    a = {("mm", "[[32, 64], [64, 64]]"): 10.0, ("add", "[[32, 64]]"): 10.0}
    b = {("mm", "[[64, 64], [64, 64]]"): 10.0, ("add", "[[64, 64]]"): 6.0, ("add", "[[7, 64]]"): 4.0}
    assert M.shape_similarity(a, b, 32, 64) == 80.0  # 16 of 20
    assert M.shape_similarity(a, b, 32, 32) == M._similarity(a, b) == 0.0
    assert M.shape_similarity(a, b, None, 64) == 0.0
    assert M.shape_similarity({}, {}, 32, 64) == 100.0
    # one HEAD entry cannot take more than BASE has left
    a2 = {("mm", "[[32, 64]]"): 3.0}
    assert M.shape_similarity(a2, {("mm", "[[64, 64]]"): 5.0}, 32, 64) == 60.0


def test_shape_matching_takes_the_most_frequent_head_shapes_first():
    """HEAD (batch 16) against BASE (batch 64): a HEAD shape leading with 16 may be BASE's batch-64 activation or a
    weight that happens to lead with 16; each BASE entry is used up once, most frequent HEAD entries first."""
    s64, s16 = ("mm", "[[64, 8]]"), ("mm", "[[16, 8]]")
    assert M.shape_similarity({s64: 5.0, s16: 2.0}, {s16: 2.0, s64: 5.0}, 64, 16) == 100.0
    # a BASE entry is used up: what one HEAD shape took, another cannot take again
    assert M.shape_similarity({s64: 5.0}, {s16: 3.0, s64: 4.0}, 64, 16) == pytest.approx(100 * 5 / 7)
    # one HEAD entry may match several BASE entries, each up to what is left of it
    assert M.shape_similarity({s64: 2.0, s16: 5.0}, {s16: 3.0}, 64, 16) == pytest.approx(100 * 3 / 7)
    # fractional counts per step (an op every other step)
    assert M.shape_similarity({s64: 0.5}, {s16: 0.5}, 64, 16) == 100.0
    assert M.shape_similarity({s64: 0.5}, {s16: 0.25, ("add", "[[16]]"): 0.25}, 64, 16) == 50.0


def test_kernel_stats_default_to_zero():
    assert C._stats(None) is None
    assert C._stats({}) == {"count": 0, "total_ns": 0, "per_step": 0.0, "ns_per_step": 0.0}
    got = C._stats({"count": 3.0, "total_ns": 10.7, "per_step": 1, "ns_per_step": 2})
    assert got == {"count": 3, "total_ns": 10, "per_step": 1.0, "ns_per_step": 2.0} and type(got["per_step"]) is float


def test_shape_counts_add_up_per_op_and_shapes():
    w = {"shapes": [{"name": "mm", "shapes": "[[1]]", "per_step": 2}, {"name": "mm", "shapes": "[[1]]", "per_step": 3},
                    {"name": "add", "per_step": None}]}
    assert M._shape_counts(w) == {("mm", "[[1]]"): 5.0, ("add", ""): 0.0}


def test_context_is_shown_never_judged():
    a = _side(trace={"format": "pytorch", "framework": "pytorch", "tool": "kineto", "tool_version": "2.3",
                     "ranks": [0, 1], "devices": [{"name": "A100", "vendor": "nvidia"}, {"name": "A100", "vendor": "nvidia"}]})
    b = _side(trace={"format": "pytorch", "framework": "pytorch", "tool": "kineto", "ranks": [0],
                     "devices": [{"name": "MI300X", "vendor": "amd"}, "junk"]})
    assert M.context(a, b) == [
        {"what": "GPU", "base": "A100", "head": "MI300X", "differs": True},
        {"what": "vendor", "base": "nvidia", "head": "amd", "differs": True},
        {"what": "format", "base": "pytorch", "head": "pytorch", "differs": False},
        {"what": "tool", "base": "kineto 2.3", "head": "kineto", "differs": True},
        {"what": "framework", "base": "pytorch", "head": "pytorch", "differs": False},
        {"what": "ranks", "base": "2", "head": "1", "differs": True},
    ]
    assert M.context(_side(trace={}), _side(trace={}))[0] == {"what": "GPU", "base": "unknown", "head": "unknown", "differs": False}
    mixed = _side(trace={"devices": [{"name": "H100"}, {"name": "A100"}]})
    assert M.context(mixed, mixed)[0]["base"] == "A100, H100"


# --- the step change, its verdict and sentence ---------------------------------------------------------------
def test_faster_with_interval_sentence_and_summary():
    base = _side(durs=[12_000_000, 10_000_000, 10_200_000, 9_800_000, 10_100_000], warmup=[0], batch=32, busy=[(0, 50.0)],
                 kpis={"gpu_busy_pct": 50.0}, verdict={"category": "input_pipeline", "label": "input", "headline": "h"},
                 by_step=[{"rank": 0, "step": s, "ns": {"idle_data_wait": 4 * MS, "compute": 5 * MS}} for s in (2, 3, 4, 5)],
                 buckets=["compute", "idle_data_wait"])
    head = _side("head.json", durs=[12_000_000, 6_000_000, 6_100_000, 5_900_000, 6_050_000], warmup=[0], batch=32,
                 kpis={"gpu_busy_pct": 80.0},
                 by_step=[{"rank": 0, "step": s, "ns": {"idle_data_wait": 0.1 * MS, "compute": 5 * MS}} for s in (2, 3, 4, 5)],
                 buckets=["compute", "idle_data_wait"])
    d = C.compare(base, head)
    assert d["verdict"] == C.FASTER
    st = d["step"]
    assert (st["base_median_ns"], st["head_median_ns"], st["basis"]) == (10.05 * MS, 6.025 * MS, "steps")
    hl = float(np.median(np.subtract.outer([6.0, 6.1, 5.9, 6.05], [10.0, 10.2, 9.8, 10.1]))) * MS
    assert st["change_ns"] == pytest.approx(hl, abs=1e-6)
    assert st["change_pct"] == round(100 * st["change_ns"] / (10.05 * MS), 2) and st["high_ns"] < 0 and st["confidence"] == 0.95
    assert (st["low_ns"], st["high_ns"]) == pytest.approx((-4.3 * MS, -3.7 * MS))  # 4 and 4: the extreme differences
    assert st["method"] == "Hodges-Lehmann shift, Mann-Whitney interval, exact rank test" and st["separated"] == -1
    assert d["decided_by"] == "step" and d["evidence"]["moved"] == ["idle_data_wait"]
    assert st["low_pct"] == round(100 * st["low_ns"] / (10.05 * MS), 2) and st["high_pct"] == round(100 * st["high_ns"] / (10.05 * MS), 2)
    assert d["per_sample"] is None
    assert d["base"] == {"path": "base.json", "format": "pytorch", "framework": "pytorch",
                         "steps": {"count": 4, "median_ns": 10.05 * MS, "p10_ns": 9_860_000.0, "p90_ns": 10_170_000.0,
                                   "min_ns": 9_800_000.0, "max_ns": 10_200_000.0},
                         "warmup_steps": 1, "batch": 32, "busy_pct": 50.0,
                         "verdict": {"category": "input_pipeline", "label": "input", "headline": "h"}}
    assert d["ledger"] == [{"bucket": "idle_data_wait", "base_ns_per_step": 4 * MS, "head_ns_per_step": 0.1 * MS, "change_ns": -3.9 * MS,
                            "shift_ns": -3.9 * MS, "p_value": round(2 / 70, 5), "moved": True},
                           {"bucket": "compute", "base_ns_per_step": 5 * MS, "head_ns_per_step": 5 * MS, "change_ns": 0.0,
                            "shift_ns": 0.0, "p_value": 1.0, "moved": False}]
    assert d["busy_pct"] == {"base": 50.0, "head": 80.0, "change": 30.0}
    assert d["kpis"] == [{"name": "gpu_busy_pct", "label": "GPU busy (whole window)", "unit": "pct", "base": 50.0, "head": 80.0, "change": 30.0, "note": None}]
    assert d["sentence"] == (f"Faster: step {C._ms(st['change_ns'], True)} ({st['change_pct']:+.1f}%, 95% CI {C._ms(st['low_ns'], True)} to "
                             f"{C._ms(st['high_ns'], True)}): data wait -3.90 ms")
    assert d["ledger_steps"]["base"][0] == {"step": 2, "ns": {"idle_data_wait": 4 * MS, "compute": 5 * MS}, "window_ns": 0.0}
    assert d["gate"] is None and d["ranks"] is None and d["schema_version"] == 2 and d["kind"] == "traceinsight-diff"
    assert C.compare(base, head, fail_if_slower=5.0)["gate"] == {"fail_if_slower_pct": 5.0, "result": C.PASS}


def test_slower_beyond_the_gate_fails_and_within_it_passes():
    base, head = _side(durs=[10 * MS] * 5), _side(durs=[11 * MS] * 5)
    d = C.compare(base, head, fail_if_slower=5.0)
    assert d["verdict"] == C.SLOWER and d["step"]["change_pct"] == 10.0
    assert d["gate"] == {"fail_if_slower_pct": 5.0, "result": C.FAIL}
    assert C.compare(base, head, fail_if_slower=10.0)["gate"]["result"] == C.PASS  # exactly the limit passes
    assert C.compare(base, head, fail_if_slower=9.99)["gate"]["result"] == C.FAIL
    assert d["sentence"] == "Slower: step +1.00 ms (+10.0%, 95% CI +1.00 ms to +1.00 ms)"


def test_gate_results_at_each_branch():
    step = {"change_pct": 12.0, "low_ns": -5.0, "change_ns": 1.0}
    assert C.gate({"verdict": C.NO_CHANGE, "per_sample": None, "step": step}, 10.0) == {"fail_if_slower_pct": 10.0, "result": C.INCONCLUSIVE}
    assert C.gate({"verdict": C.INCONCLUSIVE, "per_sample": None, "step": {**step, "low_ns": 0.5}}, 10.0)["result"] == C.INCONCLUSIVE
    # slower fails the gate whatever decided it: the interval, or the buckets with an interval through 0
    assert C.gate({"verdict": C.SLOWER, "per_sample": None, "step": {**step, "low_ns": 0.5}}, 10.0)["result"] == C.FAIL
    assert C.gate({"verdict": C.SLOWER, "per_sample": None, "step": {**step, "low_ns": -5.0}}, 10.0)["result"] == C.FAIL
    assert C.gate({"verdict": C.INCONCLUSIVE, "per_sample": None, "step": {**step, "low_ns": None}}, 10.0)["result"] == C.INCONCLUSIVE
    assert C.gate({"verdict": C.INCONCLUSIVE, "per_sample": None, "step": None}, 10.0) == {"fail_if_slower_pct": 10.0, "result": C.INCONCLUSIVE}
    assert C.gate({"verdict": C.NOT_COMPARABLE, "per_sample": None, "step": step}, 10.0) == {"fail_if_slower_pct": 10.0, "result": C.NOT_COMPARABLE}
    assert C.gate({"verdict": C.FASTER, "per_sample": None, "step": {**step, "change_pct": None}}, 10.0)["result"] == C.PASS
    # per sample decides when the batch changed
    per = {"change_pct": 1.0, "low_ns": 5.0}
    assert C.gate({"verdict": C.SLOWER, "per_sample": per, "step": step}, 10.0)["result"] == C.PASS


def test_verdict_at_each_branch():
    ok = {"comparable": True}
    assert C.verdict({"comparable": False}, {"low_ns": 1, "high_ns": 2}) == C.NOT_COMPARABLE
    assert C.verdict(ok, None) == C.INCONCLUSIVE and C.verdict(ok, {"low_ns": None, "high_ns": None}) == C.INCONCLUSIVE
    assert C.verdict(ok, {"low_ns": -3, "high_ns": -0.001}) == C.FASTER
    assert C.verdict(ok, {"low_ns": -3, "high_ns": 0}) == C.NO_CHANGE
    assert C.verdict(ok, {"low_ns": 0, "high_ns": 3}) == C.NO_CHANGE
    assert C.verdict(ok, {"low_ns": 0.001, "high_ns": 3}) == C.SLOWER


def test_no_change_needs_an_interval_within_the_margin():
    """An interval that holds 0 is "no measurable change" only when it rules out changes beyond
    ``NO_CHANGE_MARGIN_PCT`` of the base step either way; wider, it cannot tell, and says so."""
    ok = {"comparable": True}
    assert C.NO_CHANGE_MARGIN_PCT == 5.0
    assert C.verdict(ok, {"low_ns": -3, "high_ns": 2, "low_pct": -5.0, "high_pct": 5.0}) == C.NO_CHANGE  # the margin is inclusive
    assert C.verdict(ok, {"low_ns": -3, "high_ns": 2, "low_pct": -5.01, "high_pct": 1.0}) == C.INCONCLUSIVE
    assert C.verdict(ok, {"low_ns": -3, "high_ns": 2, "low_pct": -1.0, "high_pct": 5.01}) == C.INCONCLUSIVE
    assert C.verdict(ok, {"low_ns": -3, "high_ns": 2, "low_pct": -40.0, "high_pct": 30.0}) == C.INCONCLUSIVE
    # outside the margin but excluding zero: the direction is known
    assert C.verdict(ok, {"low_ns": -30, "high_ns": -1, "low_pct": -30.0, "high_pct": -0.1}) == C.FASTER
    # through compare: five steps each way, spread +-20 % around the same median
    d = C.compare(_side(durs=[8 * MS, 9 * MS, 10 * MS, 11 * MS, 12 * MS]), _side(durs=[12 * MS, 11 * MS, 10 * MS, 9 * MS, 8 * MS]))
    assert d["step"]["change_ns"] == 0 and d["step"]["low_pct"] < -5 and d["verdict"] == C.INCONCLUSIVE
    steady = C.compare(_side(durs=[10 * MS, 10.1 * MS, 9.9 * MS, 10.05 * MS]), _side(durs=[10 * MS, 9.9 * MS, 10.1 * MS, 9.95 * MS]))
    assert steady["verdict"] == C.NO_CHANGE and -5 <= steady["step"]["low_pct"] <= steady["step"]["high_pct"] <= 5
    # three and three: no interval; the power line says how many steps would tell
    few = C.compare(_side(durs=[10 * MS, 10.1 * MS, 9.9 * MS]), _side(durs=[10 * MS, 9.9 * MS, 10.1 * MS]))
    assert few["verdict"] == C.INCONCLUSIVE and few["power"]["detectable_pct"] is None and few["power"]["steps_for_5pct"] == 4


def test_a_step_cannot_shrink_by_more_than_itself():
    """The interval's low bound is clipped at minus the base step: -100 % at most."""
    st = C._shift_dict(np.array([10.0, 10.0, 10.0]), np.array([1.0, 1.0, 1.0]), Shift(-9.0, -25.0, -8.0))
    assert st["low_ns"] == -10.0 and st["low_pct"] == -100.0
    assert (st["change_ns"], st["change_pct"], st["high_ns"], st["high_pct"]) == (-9.0, -90.0, -8.0, -80.0)
    inside = C._shift_dict(np.array([10.0, 10.0, 10.0]), np.array([2.0, 2.0, 2.0]), Shift(-8.0, -9.5, -7.0))
    assert inside["low_ns"] == -9.5 and inside["low_pct"] == -95.0  # within the step: as computed
    none = C._shift_dict(np.array([10.0, 10.0]), np.array([1.0, 1.0]), Shift(-9.0, None, None))
    assert none["low_ns"] is None and none["low_pct"] is None


def _busy_side(verdict, busy=40.0):
    return _side(kpis={"gpu_busy_pct": busy}, verdict=verdict)


def test_busy_is_the_steady_states_when_the_report_books_warm_up():
    """GPU busy of the window less its warm-up (what the verdict reads): 40 ns busy of a 100 ns window with 50 ns
    of warm-up is 80 %; no warm-up or an unreadable ledger keeps the whole window's figure."""
    steady = {"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "compute": 30, "copy": 6, "communication": 4, "idle_host_sync": 10}}
    assert C._steady_busy_pct(_busy_side(steady)) == 80.0
    thirds = {"window_ns": 300, "ledger_ns": {"idle_warmup": 0, "compute": 0}}
    thirds["ledger_ns"].update(idle_warmup=3, compute=100)  # 100 of 297 steady ns: 33.67 %, shown to 0.1
    assert C._steady_busy_pct(_busy_side(thirds)) == 33.7
    assert C._steady_busy_pct(_busy_side({"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "copy": 5}})) == 10.0  # copies are busy
    assert C._steady_busy_pct(_busy_side({**steady, "ledger_ns": {**steady["ledger_ns"], "compute": 90}})) == 100.0  # capped
    for bad in (
        {},  # no verdict figures
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 0, "compute": 40}},  # no warm-up
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 100, "compute": 40}},  # nothing left
        {"window_ns": 100, "ledger_ns": {"idle_warmup": "half", "compute": 40}},
        {"window_ns": "x", "ledger_ns": {"idle_warmup": 50, "compute": 40}},
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "compute": float("nan")}},
        {"window_ns": float("inf"), "ledger_ns": {"idle_warmup": 50, "compute": 40}},
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "compute": -5}},
        {"window_ns": 100, "ledger_ns": ["idle_warmup", 50]},
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "compute": [40]}},
        {"window_ns": 10**400, "ledger_ns": {"idle_warmup": 50, "compute": 40}},  # JSON integers have no bound
        {"window_ns": 100, "ledger_ns": {"idle_warmup": 50, "compute": 10**400}},
    ):
        assert C._steady_busy_pct(_busy_side(bad)) == 40.0, bad
    assert C._steady_busy_pct(Side(_report(verdict="damaged", kpis={"gpu_busy_pct": 12.5}, ops=OPS), "x")) == 12.5
    d = C.compare(_busy_side(steady), _busy_side({}, busy=70.0))
    assert d["busy_pct"] == {"base": 80.0, "head": 70.0, "change": -10.0}


def test_too_few_steps_and_no_steps():
    d = C.compare(_side(durs=[10 * MS, 10 * MS]), _side(durs=[9 * MS, 9 * MS]))
    assert d["verdict"] == C.INCONCLUSIVE and d["step"]["low_ns"] is None and d["step"]["low_pct"] is None
    assert d["sentence"] == "Inconclusive: step -1.00 ms (-10.0%, too few steps for an interval)"
    # three and three, every HEAD step below every BASE step: 1/20 one-sided, the least that decides a direction
    sep = C.compare(_side(durs=[10 * MS, 10.2 * MS, 9.9 * MS]), _side(durs=[9 * MS, 9.1 * MS, 8.9 * MS]))
    assert sep["verdict"] == C.FASTER and sep["decided_by"] == "separation" and sep["step"]["low_ns"] is None
    assert "every BASE step is slower than every HEAD step: the most 3 and 3 steps can show (one-sided p = 0.05)" in sep["sentence"]
    assert C.compare(_side(durs=[10 * MS, 10.2 * MS]), _side(durs=[9 * MS, 9.1 * MS, 8.9 * MS]))["verdict"] == C.INCONCLUSIVE  # 1/10
    assert C.gate(d, 5.0)["result"] == C.PASS
    assert C.compare(_side(durs=[10 * MS, 10 * MS]), _side(durs=[12 * MS, 12 * MS]), fail_if_slower=5.0)["gate"]["result"] == C.INCONCLUSIVE


def test_without_step_markers_the_gpu_window_is_one_sample():
    base = _side(durs=[], extra={"ledger": {"buckets": [], "by_device": [{"window_ns": 8 * MS}, {"window_ns": 10 * MS}], "by_step": []}})
    head = _side(durs=[], extra={"ledger": {"buckets": [], "by_device": [{"window_ns": 7 * MS}], "by_step": []}})
    d = C.compare(base, head)
    assert d["step"]["basis"] == "gpu_window" and d["step"]["change_ns"] == -3 * MS and d["verdict"] == C.INCONCLUSIVE
    assert d["sentence"] == "Inconclusive: GPU window -3.00 ms (-30.0%, too few samples for an interval)"
    assert d["samples"]["basis"] == "gpu_window" and d["power"]["detectable_pct"] is None
    assert d["what_if"] == []  # a what-if is about steps


def test_not_comparable_says_why_and_has_no_step():
    d = C.compare(_side(durs=[10 * MS] * 3), _side(durs=[10 * MS] * 3, ops=[{"name": "x", "per_step": 1}]))
    assert d["verdict"] == C.NOT_COMPARABLE and d["step"] is None
    assert d["sentence"] == ("Not comparable: only 0% of the framework ops per step are in common (at least 80% needed): "
                             "the two run different framework ops, most of all aten::mm: 10 -> 0 per step")
    assert C.sentence({"verdict": C.NOT_COMPARABLE, "comparability": {"reasons": []}}) == "Not comparable: the workloads differ"
    assert C.sentence({"verdict": C.INCONCLUSIVE, "per_sample": None, "step": None, "comparability": {"reasons": []}}) == (
        "No step time to compare: no steady-state steps")
    assert C.sentence({"verdict": C.INCONCLUSIVE, "per_sample": None, "step": None, "comparability": {"reasons": ["a", "b"]}}) == (
        "No step time to compare: a; b")


def test_same_workload_compares_on_the_users_word():
    """``same_workload``: a rewrite of the step (per-tensor ops batched) fails the op check; the user vouches, the
    diff compares, keeps the check's figures and says so first; a pair that passes the check is not marked."""
    base = _side(durs=[10 * MS] * 4)
    head = _side(durs=[2 * MS] * 4, ops=[{"name": "aten::_foreach_mul_", "per_step": 1, "gpu_ns_per_step": 50}])
    plain = C.compare(base, head)
    assert plain["verdict"] == C.NOT_COMPARABLE and "vouched" not in plain["comparability"]
    d = C.compare(base, head, same_workload=True)
    comp = d["comparability"]
    assert comp["comparable"] is True and comp["vouched"] is True
    assert comp["in_common_pct"] == plain["comparability"]["in_common_pct"] == 0.0
    assert comp["reasons"][0] == "compared on the user's word (--same-workload): " + plain["comparability"]["reasons"][0]
    assert comp["reasons"][1:] == plain["comparability"]["reasons"][1:]
    assert d["verdict"] == C.FASTER and d["step"]["change_ns"] == -8 * MS
    same = C.compare(base, _side(durs=[9 * MS] * 4), same_workload=True)
    assert "vouched" not in same["comparability"] and same["comparability"]["comparable"]
    # a report without a workload block cannot be vouched for: nothing was checked
    bare = C.compare(base, _side(durs=[2 * MS] * 4, workload=False), same_workload=True)
    assert bare["verdict"] == C.NOT_COMPARABLE and "vouched" not in bare["comparability"]


def test_a_larger_batch_is_judged_per_sample():
    base = _side(durs=[10 * MS] * 4, batch=32)
    head = _side(durs=[18 * MS] * 4, batch=64)
    d = C.compare(base, head, fail_if_slower=5.0)
    ps = d["per_sample"]
    assert (ps["base_median_ns"], ps["head_median_ns"], ps["change_ns"]) == (10 * MS / 32, 18 * MS / 64, 18 * MS / 64 - 10 * MS / 32)
    assert (ps["basis"], ps["batch_base"], ps["batch_head"], ps["change_pct"]) == ("steps", 32, 64, -10.0)
    assert d["verdict"] == C.FASTER and d["gate"]["result"] == C.PASS and d["step"]["change_pct"] == 80.0
    assert d["sentence"].startswith("Faster: per sample (step / batch) -31.2 µs (-10.0%, 95% CI")
    assert C.compare(base, _side(durs=[18 * MS] * 4, batch=32))["per_sample"] is None


def test_sentence_names_the_buckets_that_moved_most():
    d = {"verdict": C.SLOWER, "per_sample": None, "comparability": {"reasons": []},
         "step": {"change_ns": 2 * MS, "change_pct": 20.0, "low_ns": 1 * MS, "high_ns": 3 * MS, "confidence": 0.95, "basis": "steps"},
         "ledger": [{"bucket": "idle_host_sync", "change_ns": 1.5 * MS}, {"bucket": "compute", "change_ns": 0.4 * MS},
                    {"bucket": "idle_launch", "change_ns": -0.1 * MS}, {"bucket": "copy", "change_ns": 0.099 * MS},
                    {"bucket": "other", "change_ns": 0.1 * MS}]}
    assert C.sentence(d) == ("Slower: step +2.00 ms (+20.0%, 95% CI +1.00 ms to +3.00 ms): host sync +1.50 ms, "
                             "compute +400.0 µs, launch -100.0 µs")
    d["step"]["change_ns"] = 1_000  # tiny change: buckets must still move 5 µs (5 % of 100 µs) to be named
    d["ledger"] = [{"bucket": "compute", "change_ns": 5_000}, {"bucket": "copy", "change_ns": 4_999}]
    assert C.sentence(d).endswith(": compute +5.0 µs")
    assert C._ms(None) == "n/a" and C._ms(-5.0, True) == "-5 ns" and C._ms(0.0, True) == "0 ns" and C._ms(5.0) == "5 ns"
    assert C._ms(1.0, True) == "+1 ns" and C._ms(0.4, True) == "+0 ns"


def test_the_document_has_every_part():
    from traceinsight.vocab.version import __version__

    d = C.compare(_side(durs=[10 * MS] * 3), _side("head.json", durs=[10 * MS] * 3))
    assert list(d) == ["schema_version", "kind", "traceinsight_version", "base", "head", "context", "comparability", "step",
                       "per_sample", "samples", "evidence", "outliers", "power", "verdict", "decided_by", "ledger", "ledger_steps",
                       "sentence", "kernels", "kernel_classes", "ops", "busy_pct", "kpis", "what_if", "what_if_note", "findings",
                       "ranks", "gate"]
    assert d["traceinsight_version"] == __version__ and d["head"]["path"] == "head.json" and d["context"][0]["what"] == "GPU"
    assert d["ledger_steps"] == {"base": [], "head": []} and d["kernels"] == [] and d["kernel_classes"] == []
    assert [r["name"] for r in d["ops"]] == ["aten::add", "aten::mm"] and d["findings"]["counts"]["new"] == 0  # no change: by name
    assert C._spread(np.zeros(0)) == {"count": 0, "median_ns": None, "p10_ns": None, "p90_ns": None, "min_ns": None, "max_ns": None}
    many = C.compare(_ranks({0: [10 * MS] * 3, 1: [11 * MS] * 3}), _ranks({0: [10 * MS] * 3, 1: [10 * MS] * 3}))
    assert many["ranks"]["straggler_base"]["rank"] == 1


# --- why: ledger, kernels, ops, KPIs, findings -----------------------------------------------------------------
def test_ledger_rows_keep_the_report_order_for_equal_changes():
    base = _side(durs=[1] * 3, buckets=["b1", "b2", "b3"], by_step=[
        {"rank": 0, "step": 1, "ns": {"b1": 100, "b2": 50, "b3": 0}}, {"rank": 0, "step": 2, "ns": {"b1": 300, "b2": 50, "b3": 0}}])
    head = _side(durs=[1] * 3, buckets=["b1", "b2", "b3"], by_step=[
        {"rank": 0, "step": 1, "ns": {"b1": 100, "b2": 150, "b4": 10}}, {"rank": 0, "step": 2, "ns": {"b1": 100, "b2": 150, "b4": 10}}])
    plain = {"shift_ns": None, "p_value": None, "moved": False}
    assert C.ledger_diff(base, head) == [
        {"bucket": "b1", "base_ns_per_step": 200.0, "head_ns_per_step": 100.0, "change_ns": -100.0, **plain},
        {"bucket": "b2", "base_ns_per_step": 50.0, "head_ns_per_step": 150.0, "change_ns": 100.0, **plain},
        {"bucket": "b4", "base_ns_per_step": 0.0, "head_ns_per_step": 10.0, "change_ns": 10.0, **plain},
    ]


def _k(name, cls, ns, op="", per_step=1.0, count=3):
    return {"name": name, "class": cls, "op": op, "count": count, "total_ns": int(ns * 3), "per_step": per_step, "ns_per_step": ns}


def test_kernels_matched_across_names_through_their_op():
    base = _side(kernels=[_k("cublas_gemm", "gemm", 500, op="aten::mm"), _k("elt", "elementwise", 100, per_step=2),
                          _k("gone", "other", 30)])
    head = _side(kernels=[_k("hipblaslt_gemm", "gemm", 450, op="aten::mm"), _k("elt", "elementwise", 160, per_step=2),
                          _k("fresh", "other", 10, op="aten::x")])
    rows, classes = C.kernel_diff(base, head)
    by = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["cublas_gemm", "hipblaslt_gemm", "elt", "gone", "fresh"]  # largest |change| first
    assert by["cublas_gemm"]["status"] == "matched" and by["cublas_gemm"]["matched_with"] == ["hipblaslt_gemm"]
    assert by["hipblaslt_gemm"]["matched_with"] == ["cublas_gemm"] and by["hipblaslt_gemm"]["change_ns_per_step"] == 450
    assert (by["gone"]["status"], by["fresh"]["status"], by["elt"]["status"]) == ("vanished", "new", "same")
    assert by["elt"]["change_ns_per_step"] == 60 and by["elt"]["op"] == "" and by["gone"]["head"] is None
    assert by["elt"]["base"] == {"count": 3, "total_ns": 300, "per_step": 2.0, "ns_per_step": 100.0}
    assert by["fresh"]["class"] == "other" and by["fresh"]["op"] == "aten::x"
    assert classes == [
        {"class": "elementwise", "base_ns_per_step": 100, "head_ns_per_step": 160, "change_ns_per_step": 60,
         "base_per_step": 2.0, "head_per_step": 2.0},
        {"class": "gemm", "base_ns_per_step": 500, "head_ns_per_step": 450, "change_ns_per_step": -50,
         "base_per_step": 1.0, "head_per_step": 1.0},
        {"class": "other", "base_ns_per_step": 30, "head_ns_per_step": 10, "change_ns_per_step": -20,
         "base_per_step": 1.0, "head_per_step": 1.0},
    ]


def test_kernel_rows_with_only_a_name_and_reports_without_kernels():
    base = _side(kernels=[{"name": "k"}, _k("attn", "attention", 70, per_step=2), _k("mm_same", "gemm", 10, op="aten::mm")])
    head = _side(kernels=[{"name": "k2"}, _k("mm_same", "gemm", 12, op="aten::mm")])
    rows, classes = C.kernel_diff(base, head)
    by = {r["name"]: r for r in rows}
    zero = {"count": 0, "total_ns": 0, "per_step": 0.0, "ns_per_step": 0.0}
    assert by["k"] == {"name": "k", "class": "other", "op": "", "base": zero, "head": None, "change_ns_per_step": 0.0,
                       "status": "vanished", "matched_with": []}
    assert by["k2"]["status"] == "new" and by["k2"]["head"] == zero and by["k2"]["base"] is None
    assert by["mm_same"]["status"] == "same" and by["mm_same"]["matched_with"] == []  # same name: never "matched"
    assert by["mm_same"]["head"] == {"count": 3, "total_ns": 36, "per_step": 1.0, "ns_per_step": 12.0}
    assert {c["class"]: (c["base_ns_per_step"], c["head_ns_per_step"], c["base_per_step"], c["head_per_step"]) for c in classes} == {
        "attention": (70, 0, 2.0, 0), "gemm": (10, 12, 1.0, 1.0), "other": (0, 0, 0, 0)}  # a row with no class: by its name
    bare = Side({**_report(), "workload": {"steps": []}}, "bare")
    assert C.kernel_diff(bare, bare) == ([], []) and C.op_diff(bare, bare) == []


def test_both_matched_sides_are_marked():
    rows, _ = C.kernel_diff(_side(kernels=[_k("a", "gemm", 5, op="aten::mm")]), _side(kernels=[_k("b", "gemm", 5, op="aten::mm")]))
    assert [(r["name"], r["status"], r["matched_with"]) for r in rows] == [("a", "matched", ["b"]), ("b", "matched", ["a"])]


def test_ledger_buckets_gone_and_the_order_of_reports_without_a_list():
    def side(buckets, ns):
        return _side(durs=[1] * 3, buckets=buckets, by_step=[{"rank": 0, "step": 1, "ns": ns}])
    got = C.ledger_diff(side([], {"x": 5.0, "y": 7.0}), side(["y", "x"], {"y": 7.0, "x": 5.0, "z": 0.0}))
    assert [r["bucket"] for r in got] == ["y", "x"]  # no change: HEAD's order when BASE lists none
    got = C.ledger_diff(side([], {"x": 5.0, "w": 1.0}), side([], {"w": 1.0, "x": 5.0}))
    assert [r["bucket"] for r in got] == ["w", "x"]  # neither lists them: by name
    got = C.ledger_diff(side(["gone"], {"gone": 20.0}), side([], {}))
    plain = {"shift_ns": None, "p_value": None, "moved": False}
    assert got == [{"bucket": "gone", "base_ns_per_step": 20.0, "head_ns_per_step": 0.0, "change_ns": -20.0, **plain}]
    got = C.ledger_diff(side([], {}), side([], {"new": 3.0}))
    assert got == [{"bucket": "new", "base_ns_per_step": 0.0, "head_ns_per_step": 3.0, "change_ns": 3.0, **plain}]


def test_kernel_and_op_tables_are_capped(monkeypatch):
    monkeypatch.setattr(C, "MAX_ROWS", 2)
    many = [_k(f"k{i}", "gemm", i) for i in range(4)]
    rows, _ = C.kernel_diff(_side(kernels=many), _side(kernels=[]))
    assert [r["name"] for r in rows] == ["k3", "k2"]
    ops = [{"name": f"o{i}", "per_step": 1, "gpu_ns_per_step": i} for i in range(4)]
    assert [r["name"] for r in C.op_diff(_side(ops=ops), _side(ops=[]))] == ["o3", "o2"]


def test_op_rows():
    base = _side(ops=[{"name": "aten::mm", "per_step": 10, "gpu_ns_per_step": 1000}, {"name": "aten::gone", "per_step": 1}])
    head = _side(ops=[{"name": "aten::mm", "per_step": 10, "gpu_ns_per_step": 700}, {"name": "aten::new", "per_step": 2, "gpu_ns_per_step": 50}])
    assert C.op_diff(base, head) == [
        {"name": "aten::mm", "base_per_step": 10, "head_per_step": 10, "base_gpu_ns_per_step": 1000, "head_gpu_ns_per_step": 700,
         "change_gpu_ns_per_step": -300.0, "status": "same"},
        {"name": "aten::new", "base_per_step": None, "head_per_step": 2, "base_gpu_ns_per_step": None, "head_gpu_ns_per_step": 50,
         "change_gpu_ns_per_step": 50.0, "status": "new"},
        {"name": "aten::gone", "base_per_step": 1, "head_per_step": None, "base_gpu_ns_per_step": None, "head_gpu_ns_per_step": None,
         "change_gpu_ns_per_step": 0.0, "status": "vanished"},
    ]


def test_kpis_both_reports_hold():
    base = _side(kpis={"gpu_busy_pct": 40, "steps": 5, "name": "x", "flag": True, "only_base": 1.0},
                 extra={"memory": {"devices": [{"peak_reserved_bytes": 4e9, "headroom_bytes": 1e9}]}, "efficiency": {"mfu_pct": 30.0}})
    head = _side(kpis={"gpu_busy_pct": 55.5, "steps": 5, "name": "y", "flag": False},
                 extra={"memory": {"devices": [{"peak_reserved_bytes": 5e9, "headroom_bytes": 0.5e9}]}, "efficiency": {"mfu_pct": 33.0}})
    assert C.kpi_diff(base, head) == [
        {"name": "gpu_busy_pct", "label": "GPU busy (whole window)", "unit": "pct", "base": 40.0, "head": 55.5, "change": 15.5, "note": None},
        {"name": "steps", "label": "steps in the trace", "unit": "count", "base": 5.0, "head": 5.0, "change": 0.0, "note": None},
        {"name": "efficiency.mfu_pct", "label": "MFU", "unit": "pct", "base": 30.0, "head": 33.0, "change": 3.0, "note": None,
         "base_coverage_pct": None, "head_coverage_pct": None},
        {"name": "memory.peak_reserved_bytes", "label": "peak memory reserved", "unit": "bytes", "base": 4e9, "head": 5e9, "change": 1e9, "note": None},
        {"name": "memory.headroom_bytes", "label": "memory headroom (smallest)", "unit": "bytes", "base": 1e9, "head": 0.5e9, "change": -0.5e9, "note": None},
    ]
    # MFU says how much of the matrix-unit time its FLOPs cover; a figure no table names is labelled from its key
    cls = lambda cov: {"mfu_pct": 8.0, "classes": [{"cls": "gemm", "time_ns": 100, "modelled_ns": cov}, {"cls": "elementwise", "time_ns": 900, "modelled_ns": 0}]}
    got = C.kpi_diff(_side(extra={"efficiency": cls(8)}), _side(extra={"efficiency": cls(10)}))
    (mfu,) = [k for k in got if k["name"] == "efficiency.mfu_pct"]
    assert (mfu["base_coverage_pct"], mfu["head_coverage_pct"]) == (8.0, 10.0) and mfu["note"].startswith("counted FLOPs cover 8% (BASE) and 10% (HEAD)")
    assert C.figure_label("memory.spill_bytes") == ("memory: spill", "bytes") and C.figure_label("foo_ns") == ("foo", "ns")
    assert C._pair(1, None) == {"base": 1, "head": None, "change": None}
    assert C._pair(True, 2) == {"base": True, "head": 2, "change": None}
    assert C._pair(2, 3.5) == {"base": 2, "head": 3.5, "change": 1.5}


def _finding(fp, pct, code="TI001", what_if=None, **kw):
    f = {"fingerprint": fp, "impact_pct_span": pct, "code": code, "title": f"t{fp[0]}", "severity": "warning", **kw}
    if what_if is not None:
        f["what_if"] = what_if
    return f


def test_findings_new_worse_same_and_fixed():
    a, b, c, d = "a" * 16, "b" * 16, "c" * 16, "d" * 16
    base = _side(findings=[_finding(a, 10.0), _finding(b, 5.0), _finding(c, 3.0, code="TI006")])
    head = _side(findings=[_finding(a, 10.5), _finding(b, 12.0), _finding(d, 1.23456), "junk"])
    got = C.findings_diff(base, head)
    assert got["counts"] == {"new": 1, "worse": 1, "same": 1, "fixed": 1}
    assert got["same"] == [{"code": "TI001", "title": "ta", "severity": "warning", "fingerprint": a, "impact_pct_span": 10.5,
                            "base_impact_pct_span": 10.0}]
    assert got["worse"] == [{"code": "TI001", "title": "tb", "severity": "warning", "fingerprint": b, "impact_pct_span": 12.0,
                             "base_impact_pct_span": 5.0}]
    assert got["new"] == [{"code": "TI001", "title": "td", "severity": "warning", "fingerprint": d, "impact_pct_span": 1.235,
                           "base_impact_pct_span": None}]
    assert got["fixed"] == [{"code": "TI006", "title": "tc", "fingerprint": c, "impact_pct_span": 3.0}]
    odd = C.findings_diff(_side(findings=[]), _side(findings=[{"fingerprint": a, "impact_pct_span": "NaN"}]))
    assert odd["new"] == [{"code": "", "title": "", "severity": "", "fingerprint": a, "impact_pct_span": 0.0, "base_impact_pct_span": None}]


def test_what_if_predictions_checked_against_the_measured_step():
    a, b, c, d, e = "a" * 16, "b" * 16, "c" * 16, "d" * 16, "e" * 16
    base = _side(durs=[10 * MS] * 4, findings=[
        _finding(a, 30.0, what_if={"step_ns": 7 * MS, "baseline_step_ns": 10.5 * MS, "transform": "remove_data_wait"}),
        _finding(b, 20.0, code="TI002", what_if={"step_ns": 8 * MS}),  # halved: reduced
        _finding(c, 20.0, what_if={"step_ns": 9 * MS}),  # only a little smaller: not checked
        _finding(d, 20.0, what_if={"step_ns": 0}),  # no prediction
        _finding(e, 20.0),
    ])
    head = _side(durs=[8 * MS] * 4, findings=[_finding(b, 10.0), _finding(c, 10.01), _finding(e, 1.0)])
    d_ = C.compare(base, head)
    assert d_["what_if"] == [
        {"code": "TI001", "title": "ta", "transform": "remove_data_wait", "status": "fixed", "base_step_ns": 10.5 * MS,
         "predicted_step_ns": 7 * MS, "measured_step_ns": 8 * MS, "error_pct": round(100 * 1 / 7, 1), "per": "step"},
        {"code": "TI002", "title": "tb", "transform": None, "status": "reduced", "base_step_ns": 10 * MS,
         "predicted_step_ns": 8 * MS, "measured_step_ns": 8 * MS, "error_pct": 0.0, "per": "step"},
    ]
    assert d_["what_if_note"] is None
    got, note = C.what_if_check(base, head, {"step": {"basis": "gpu_window"}, "comparability": {"comparable": True}})
    assert got == [] and note.startswith("BASE's what-if predictions are per step; these samples are not steps")
    got, note = C.what_if_check(base, head, {"step": None, "comparability": {"comparable": True}})
    assert got == [] and note.endswith("one side has no step time to check them against")
    # not comparable: the verdict says why; no note that calls the samples "not steps"
    assert C.what_if_check(base, head, {"step": None, "comparability": {"comparable": False}}) == ([], None)
    # the batch grew 128x: per sample, or the prediction would be read against 128x the work
    big = C.compare(_side(durs=[10 * MS] * 4, batch=4, findings=base.report["findings"]), _side(durs=[600 * MS] * 4, batch=512, findings=head.report["findings"]))
    assert big["what_if"][0]["per"] == "sample" and big["what_if"][0]["predicted_step_ns"] == 7 * MS / 4
    assert big["what_if"][0]["measured_step_ns"] == 600 * MS / 512 and big["what_if_note"].startswith("the batch changed (4 \u2192 512)")
    vouched = C.compare(base, _side(durs=[8 * MS] * 4, ops=[{"name": "x", "per_step": 1}], findings=head.report["findings"]), same_workload=True)
    assert vouched["what_if"] == [] and "HEAD runs other ops" in vouched["what_if_note"]


def test_what_if_check_reads_every_finding_whatever_comes_first():
    a, b, c = "a" * 16, "b" * 16, "c" * 16
    step: dict = {"step": {"basis": "steps", "base_median_ns": 10 * MS, "head_median_ns": 8 * MS}}
    base = _side(findings=[
        "junk",
        {"fingerprint": c, "impact_pct_span": 5.0},  # no what-if
        {"fingerprint": b, "impact_pct_span": 20.0, "what_if": {"step_ns": 9 * MS}},  # still there: not checked
        {"fingerprint": a, "impact_pct_span": 20.0, "what_if": {"step_ns": 7 * MS, "transform": 3}},  # no code or title
    ])
    head = _side(findings=[{"fingerprint": b, "impact_pct_span": 19.0}])
    step.update(per_sample=None, comparability={"comparable": True})
    assert C.what_if_check(base, head, step) == ([
        {"code": "", "title": "", "transform": "3", "status": "fixed", "per": "step", "base_step_ns": 10 * MS, "predicted_step_ns": 7 * MS,
         "measured_step_ns": 8 * MS, "error_pct": round(100 / 7, 1)}], None)
    no_findings = Side({k: v for k, v in _report().items() if k != "findings"}, "x")
    assert C.what_if_check(base, no_findings, step)[0][0]["status"] == "fixed"
    assert C.what_if_check(no_findings, head, step) == ([], None)


# --- ranks ---------------------------------------------------------------------------------------------------
def _ranks(durs_by_rank, busy=()):
    steps = [{"rank": r, "step": i + 1, "dur_ns": int(x), "warmup": False} for r, ds in durs_by_rank.items() for i, x in enumerate(ds)]
    rep = _report(busy=busy)
    rep["workload"]["steps"] = steps
    return Side(rep, "r")


def test_ranks_and_the_straggler():
    base = _ranks({0: [10 * MS] * 3, 1: [10.5 * MS] * 3, 2: [10 * MS] * 3}, busy=[(0, 80.0), (0, 60.0), (1, 50.0)])
    head = _ranks({0: [10 * MS] * 3, 1: [10 * MS] * 3})
    got = C.rank_diff(base, head)
    assert got["rows"] == [
        {"rank": 0, "base_median_ns": 10 * MS, "head_median_ns": 10 * MS, "change_pct": 0.0, "base_busy_pct": 70.0, "head_busy_pct": None},
        {"rank": 1, "base_median_ns": 10.5 * MS, "head_median_ns": 10 * MS, "change_pct": round(-100 * 0.5 / 10.5, 2),
         "base_busy_pct": 50.0, "head_busy_pct": None},
        {"rank": 2, "base_median_ns": 10 * MS, "head_median_ns": None, "change_pct": None, "base_busy_pct": None, "head_busy_pct": None},
    ]
    assert got["straggler_base"] == {"rank": 1, "excess_pct": 5.0, "is_straggler": True}  # exactly 5 % over: a straggler
    assert got["straggler_head"] == {"rank": 0, "excess_pct": 0.0, "is_straggler": False}  # a tie: the lowest rank
    assert C.rank_diff(_ranks({0: [1] * 3}), _ranks({0: [1] * 3})) is None
    assert C.straggler({0: np.array([10.0]), 1: np.array([10.49])}) == {"rank": 1, "excess_pct": round(100 * 0.245 / 10.245, 2), "is_straggler": False}
    assert C.straggler({0: np.array([0.0]), 1: np.array([0.0])}) == {"rank": 0, "excess_pct": 0.0, "is_straggler": False}
    assert C.straggler({0: np.array([1.0])}) is None and C.STRAGGLER_PCT == 5.0


def test_repeated_regions_stand_in_only_for_most_of_the_work_and_damaged_ones_are_skipped():
    """Too few steps (2 and 2): a region repeated 5 times a side that holds most of the steps' time is the sample;
    one that holds a sliver (an optimizer call) is not; a damaged ``repeats`` block is read as none."""
    def side(step_ms, runs_ms, name="Torch-Compiled Region", kind="compiled_region", **kw):
        s = _side(durs=[x * MS for x in step_ms], **kw)
        s.report["workload"]["repeats"] = [{"kind": kind, "name": name, "count": len(runs_ms), "dur_ns": [x * MS for x in runs_ms]}]
        return s
    d = C.compare(side([10, 10], [4, 4.1, 3.9, 4, 4.05]), side([12, 12], [5, 5.1, 4.9, 5, 5.05]))
    assert d["samples"]["basis"] == "compiled_region" and d["step"]["base_count"] == 5 and d["verdict"] == C.SLOWER
    assert d["samples"]["note"].startswith("2 and 2 steps are too few for an interval; the compiled region")
    # a run is timed by its kernels where the trace has GPU activity, else by its host duration, and the note says which
    assert d["samples"]["note"].endswith("(its host duration: a trace without GPU activity has no kernels to time it by)")
    g = C.compare(side([10, 10], [4, 4.1, 3.9, 4, 4.05], kpis={"gpu_busy_pct": 50.0}),
                  side([12, 12], [5, 5.1, 4.9, 5, 5.05], kpis={"gpu_busy_pct": 55.0}))
    assert g["samples"]["note"].endswith("each run is a sample (its GPU time, first kernel to last)")
    small = C.compare(side([10, 10], [0.1] * 5, "Optimizer.step#SGD.step", "user_range"), side([12, 12], [0.2] * 5, "Optimizer.step#SGD.step", "user_range"))
    assert small["samples"]["basis"] == "steps" and small["verdict"] == C.INCONCLUSIVE
    for junk in (5, "x", [{"kind": "compiled_region", "name": "r", "dur_ns": [True, "1", float("nan")]}]):
        s = _side(durs=[MS, MS])
        s.report["workload"]["repeats"] = junk
        assert C.compare(s, s)["samples"]["basis"] == "steps"
