"""The array paths of the rules, the views' column cache, the efficiency view and the memory view (round 3 of the
tiny-rank work), each checked against the pandas computation it replaces: on tiny inputs, empty inputs, one row,
ties, and the kernels of real sample traces."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceinsight.derive.derived import Derived
from traceinsight.derive.efficiency import CLASS_COLUMNS, STEP_COLUMNS
from traceinsight.ingest import load
from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import COLLECTIVE
from traceinsight.rulelib.groups import descending_order, group_float_sums
from traceinsight.rulelib.names import count_matching, kind_mask
from traceinsight.rules import rnn_cudnn_fallback as rnn
from traceinsight.rules import small_grids as sg
from traceinsight.rules import tensor_cores as tc
from tests.helpers.kineto_writer import KinetoTrace

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(str(p) for p in [*ROOT.glob("sample_traces/*.json.gz"), *ROOT.glob("sample_traces/h100/*.json.gz")])


def _views(path: str) -> Derived:
    return Derived(load(path))


@pytest.fixture(scope="module")
def sample_views() -> list[Derived]:
    return [_views(p) for p in SAMPLES]


# --- descending_order: pandas' order of a descending one-column sort, ties included --------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 5, 17, 40, 300])
def test_descending_order_is_the_frames_sort(n):
    rng = np.random.default_rng(n)
    for values in (rng.integers(0, 4, n).astype(np.int64), rng.integers(0, 4, n) * 0.5, np.arange(n, dtype=np.int64)):
        want = pd.DataFrame({"v": values}).sort_values("v", ascending=False).index.to_numpy()
        assert np.array_equal(descending_order(values), want)


# --- TI008 -----------------------------------------------------------------------------------------------
def _groupby_sums(code, columns):
    by = pd.DataFrame({i: c for i, c in enumerate(columns)}).groupby(code, sort=True).sum()
    return [by[i].to_numpy() for i in range(len(columns))]


@pytest.mark.parametrize("n,groups,ordered,nan", [(1, 1, True, False), (2, 1, True, False), (21, 1, True, False), (200, 1, True, False),
                                                  (200, 3, True, False), (200, 3, False, False), (50, 2, True, True), (7, 7, True, False)])
def test_group_float_sums_equal_the_groupby(n, groups, ordered, nan):
    """Equal to the groupby's sums: bit for bit on the pandas whose summation path the fast path takes (3.1, what
    the reports were checked byte-identical on), to the last bits' rounding on any other (its summation order is
    pandas' choice, not part of the answer)."""
    exact = tuple(int(x) for x in pd.__version__.split(".")[:2]) == (3, 1)
    rng = np.random.default_rng(n * 10 + groups)
    for _ in range(40):
        code = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
        code = np.sort(code) if ordered else rng.permutation(code)
        cols = (rng.random(n) * 10.0 ** rng.integers(0, 9), rng.integers(0, 10**6, n) * rng.random(n), np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 1e5))
        if nan:
            cols[0][rng.integers(0, n)] = np.nan
        for got, want in zip(group_float_sums(code, cols), _groupby_sums(code, cols)):
            assert got.dtype == want.dtype
            if exact:
                assert np.array_equal(got, want, equal_nan=True)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-12)


def _top_reference(names, blocks, dur, n):
    ev = sg.per_kernel(names, blocks, dur).sort_values("total_ms", ascending=False).head(n).reset_index(drop=True)
    ev["total_ms"] = ev["total_ms"] / 1e6
    return ev


@pytest.mark.parametrize("rows", [0, 1, 3, 40, 400])
def test_top_kernels_is_the_sorted_per_kernel_frame(rows):
    rng = np.random.default_rng(rows)
    for n in (1, 3, 20):
        names = rng.choice(np.array([f"k{i}" for i in range(30)], dtype=object), rows)
        blocks = rng.integers(1, 9, rows).astype(float)
        dur = rng.integers(1, 4, rows).astype(float) * 100.0  # few values: many tied totals
        pd.testing.assert_frame_equal(sg.top_kernels(names, blocks, dur, n), _top_reference(names, blocks, dur, n), check_exact=True)


def test_texts_at_are_the_cast_values():
    from traceinsight.vocab.masks import texts_at

    cat = pd.Series(pd.Categorical(["b", "a", "b", "c", None], categories=["a", "b", "c", "unused"]))
    plain = pd.Series(["b", "a", None, "c"], dtype=object)
    for s, more in ((cat, [np.array([4, 0]), np.array([1, 4])]), (plain, [])):
        for rows in (np.array([], np.int64), np.array([2]), np.array([0, 2, 3, 1]), np.array([0, 3, 1, 1]), np.array([3, 0]), *more):
            got, want = texts_at(s, rows), s.iloc[rows].astype(str).to_numpy()
            assert got.dtype == want.dtype and [str(x) for x in got] == [str(x) for x in want]


def test_top_kernels_on_sample_kernels(sample_views):
    from traceinsight.vocab.masks import texts_at

    for v in sample_views:
        k = v.kernels
        if k.empty:
            continue
        blocks = sg.grid_blocks(k["grid"]) if "grid" in k else np.ones(len(k))
        pos = np.flatnonzero(~np.isnan(blocks))
        names = texts_at(k["name"], pos)
        assert list(names) == list(k["name"].iloc[pos].astype(str).to_numpy())
        dur = v.array("kernels", "dur_ns")[pos].astype(float)
        pd.testing.assert_frame_equal(sg.top_kernels(names, blocks[pos], dur, 20), _top_reference(names, blocks[pos], dur, 20), check_exact=True)


# --- TI007 -----------------------------------------------------------------------------------------------
def _evidence_reference(names, rows, dur, gemm_ns):
    ev = tc._count_sum_by_name(names, rows, dur).sort_values("sum", ascending=False).head(20)
    ev["total_ms"] = ev["sum"] / 1e6
    ev["pct_of_gemm_time"] = (100.0 * ev["sum"] / max(gemm_ns, 1)).round(2)
    return ev[["name", "count", "total_ms", "pct_of_gemm_time"]].reset_index(drop=True)


def test_tensor_core_evidence_is_the_sorted_groupby(sample_views):
    rng = np.random.default_rng(3)
    cases = []
    for v in sample_views:
        k = v.kernels
        if len(k):
            dur = v.array("kernels", "dur_ns")
            cases += [(k["name"], np.ones(len(k), bool), dur), (k["name"], rng.random(len(k)) < 0.5, dur)]
    cat = pd.Series(pd.Categorical(["g1", "g2", "g1", "g3", None, "g2"], categories=["g1", "g2", "g3", "g4"]))
    cases += [(cat, np.ones(6, bool), np.array([5, 5, 5, 10, 3, 5], np.int64)),  # ties and a missing name
              (cat.iloc[:1], np.ones(1, bool), np.array([7], np.int64)), (cat.iloc[:0], np.zeros(0, bool), np.zeros(0, np.int64))]
    for names, rows, dur in cases:
        for gemm_ns in (0, 1, int(dur.sum()) + 3):
            pd.testing.assert_frame_equal(tc._evidence(names, rows, dur, gemm_ns), _evidence_reference(names, rows, dur, gemm_ns), check_exact=True)


# --- the views' column cache ------------------------------------------------------------------------------
def test_views_array_is_the_column_read_once(sample_views):
    for v in sample_views[:4]:
        for frame, col in (("kernels", "dur_ns"), ("gpu_activity", "rank"), ("utilization", "busy_pct"), ("host_events", "start_ns")):
            got = v.array(frame, col)
            assert np.array_equal(got, getattr(v, frame)[col].to_numpy())
            assert v.array(frame, col) is got  # read once


# --- early answers: the test they skip could not have found anything -------------------------------------------
def test_launch_counts_never_exceed_runtime_calls(sample_views):
    """TI012 returns without reading names when there are fewer runtime calls than 20 and than kernels: both of its
    capture tests need more launches than that, and launches are runtime calls."""
    from traceinsight.vocab.patterns import GRAPH_CAPTURE_CALL as CAPTURE_CALL, LAUNCH_CALL

    for v in sample_views:
        host = v.host_events
        rt = kind_mask(host, "runtime")
        assert count_matching(host["name"], rt, LAUNCH_CALL, case=True) <= int(rt.sum())
        assert count_matching(host["name"], rt, CAPTURE_CALL, case=True) <= int(rt.sum())


def test_rnn_prefilter_agrees_with_the_detection(sample_views):
    seen_fallback = False
    for v in sample_views:
        det = rnn.detect_rnn(v.events)
        if det.fallback:
            seen_fallback = True
            assert rnn._may_fall_back(v.events["name"])
        if not rnn._may_fall_back(v.events["name"]):
            assert not det.fallback
    assert seen_fallback  # the samples include a fallback (lstm_fallback, lstm_cell_loop)
    none = pd.Series(pd.Categorical(["gemm", "cudaLaunchKernel"]))
    assert not rnn._may_fall_back(none)
    assert rnn._may_fall_back(pd.Series(pd.Categorical(["aten::lstm_cell"])))


def test_allocator_calls_without_allocator_names_are_the_empty_runtime_rows(sample_views, tiny_ranks):
    from traceinsight.derive.memory import ALLOCATOR_CALLS

    for v in [*sample_views, *(_views(p) for p in tiny_ranks[:2])]:
        got = v.memory.allocator_calls
        rt = v.runtime_calls
        hit = [c for c in rt["name"].cat.categories if ALLOCATOR_CALLS.match(str(c))] if len(rt) else []
        want = rt[rt["name"].isin(hit).to_numpy()] if hit else rt.iloc[:0]
        pd.testing.assert_frame_equal(got, want, check_exact=True)


# --- the efficiency view ----------------------------------------------------------------------------------
def test_efficiency_frames_are_the_eager_ones(sample_views, tiny_ranks):
    for v in [*sample_views, *(_views(p) for p in tiny_ranks[:2])]:
        eff = v.efficiency
        pd.testing.assert_frame_equal(eff.classes, pd.DataFrame(eff.class_rows, columns=CLASS_COLUMNS), check_exact=True)
        if not len(eff.steps):
            pd.testing.assert_frame_equal(eff.steps, pd.DataFrame([], columns=STEP_COLUMNS), check_exact=True)
        if eff.counts is not None and not len(eff.counts.ops):
            want = pd.DataFrame(columns=["row", "name", "cls", "flops", "bytes", "dtype", "assumed", "rank", "step", "kernel_ns", "kernels", "launches"])
            pd.testing.assert_frame_equal(eff.counts.ops, want, check_exact=True)


def test_empty_templates_are_not_shared(tiny_ranks):
    a, b = (_views(p) for p in tiny_ranks[:2])
    ea, eb = a.efficiency, b.efficiency
    assert ea.steps is not eb.steps and ea.counts.ops is not eb.counts.ops
    ea.steps["extra"] = 1
    ea.counts.ops["extra"] = 1
    assert "extra" not in eb.steps and "extra" not in eb.counts.ops
    assert "extra" not in _views(tiny_ranks[2]).efficiency.steps


@pytest.fixture(scope="module")
def tiny_ranks(tmp_path_factory) -> list[str]:
    """Three ranks of ~21 events as the tiny-rank benchmark writes them (one step, four GEMM-like kernels and their
    launches, one collective), with the kineto test writer."""
    out = []
    folder = tmp_path_factory.mktemp("tiny")
    for r in range(3):
        t = KinetoTrace(rank=r, world_size=3)
        t.step(1, 0.0, 2000.0)
        for i in range(4):
            t.kernel("gemm", 100.0 + i * 300, 200.0)
        t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500.0, 300.0)
        t.write(folder / f"rank{r}.json")
        out.append(str(folder / f"rank{r}.json"))
    return out


# --- the views ------------------------------------------------------------------------------------------
def _gaps_reference(b: pd.DataFrame) -> pd.DataFrame:
    """The gaps as a frame filtered after it is built (the recipe the views replaced)."""
    same = (b["rank"].to_numpy()[1:] == b["rank"].to_numpy()[:-1]) & (b["device"].to_numpy()[1:] == b["device"].to_numpy()[:-1])
    g_start = b["end_ns"].to_numpy()[:-1][same]
    g_end = b["start_ns"].to_numpy()[1:][same]
    out = pd.DataFrame({"rank": b["rank"].to_numpy()[1:][same], "device": b["device"].to_numpy()[1:][same],
                        "start_ns": g_start, "end_ns": g_end, "dur_ns": g_end - g_start})
    return out[out["dur_ns"] > 0].reset_index(drop=True)


def _one_kernel_trace(folder: Path) -> str:
    t = KinetoTrace(rank=0, world_size=1)
    t.kernel("gemm", 100.0, 200.0)
    t.write(folder / "one.json")
    return str(folder / "one.json")


def test_views_equal_their_pandas_recipes(sample_views, tiny_ranks, tmp_path):
    views = [*sample_views, *(_views(p) for p in tiny_ranks), _views(_one_kernel_trace(tmp_path))]
    for v in views:
        if not v.busy.empty:
            pd.testing.assert_frame_equal(v.gaps, _gaps_reference(v.busy), check_exact=True)
        act = v.gpu_activity
        want = pd.Series(name_mask(act["name"], COLLECTIVE) & (act["kind"] == "kernel").to_numpy(), index=act.index)
        pd.testing.assert_series_equal(v.is_collective, want, check_exact=True)
        ev = v.events
        pos = np.flatnonzero((ev["kind"] == "step").to_numpy())
        pos = pos[np.lexsort((ev["start_ns"].to_numpy()[pos], ev["rank"].to_numpy()[pos]))]
        assert list(v.steps["name"]) == list(ev["name"].take(pos).astype(str).to_numpy())
        assert v.steps["name"].to_numpy().dtype == object


# --- row takes at an even stride are slices ---------------------------------------------------------------
def test_take_rows_at_an_even_stride_equals_the_take(sample_views, tiny_ranks):
    from traceinsight.vocab.masks import _even_step, take_rows

    assert [_even_step(np.array(p, np.int64)) for p in ([], [4], [2, 4, 6], [1, 2, 4], [3, 3], [5, 2], [0, 1, 2, 3], [0, 2, 3, 6])] == [0, 1, 2, 0, 0, 0, 1, 0]
    frames = [v.events for v in sample_views] + [_views(p).events for p in tiny_ranks]
    frames += [f.set_axis(pd.Index(np.arange(len(f)) * 3 + 7), axis=0) for f in frames[-2:]]  # labels that are no range
    for ev in frames:
        n = len(ev)
        for p in (np.arange(n), np.arange(0, n, 2), np.arange(1, n, 3), np.array([0]), np.array([n - 1]), np.arange(3, min(n, 40)),
                  np.array([0, 1, 3]) if n > 3 else np.array([0]), np.array([0, 2, 3, 6]) if n > 6 else np.array([0])):
            want, got = ev.iloc[p], take_rows(ev, p)
            pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
            assert type(got.index) is type(want.index) and list(got.index) == list(want.index)


def test_views_rows_are_the_takes(sample_views, tiny_ranks):
    for v in [*sample_views, *(_views(p) for p in tiny_ranks)]:
        ev = v.events
        on = ev["device"].to_numpy() >= 0
        act = ev.iloc[np.flatnonzero(ev["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy() & on)]
        pd.testing.assert_frame_equal(v.gpu_activity, act, check_exact=True, check_index_type=True)
        pd.testing.assert_frame_equal(v.kernels, act.iloc[np.flatnonzero((act["kind"] == "kernel").to_numpy())], check_exact=True, check_index_type=True)
        pd.testing.assert_frame_equal(v.host_events, ev.iloc[np.flatnonzero(~on)], check_exact=True, check_index_type=True)


# --- the masks' caches ------------------------------------------------------------------------------------
def test_kind_mask_equals_isin_whatever_was_asked_before():
    from traceinsight.vocab.masks import kind_mask

    rng = np.random.default_rng(5)
    kinds = ["kernel", "memcpy", "runtime", "step", "cpu_op"]
    for n in (0, 1, 12, 300):
        for cats in (kinds, kinds[::-1], kinds[:3]):
            values = rng.choice(np.array(cats + [None], dtype=object), n)
            s = pd.Series(pd.Categorical(values, categories=cats))
            for wanted in (("kernel",), ("kernel", "memcpy"), ("step",), ("nothing",), ["runtime", "cpu_op"]):
                want = s.isin(list(wanted)).to_numpy()
                for _ in range(2):  # the second answer comes from the cache
                    got = kind_mask(s, wanted)
                    assert got.dtype == bool and np.array_equal(got, want)
                    got[:] = True  # the caller's own array: writing to it leaves the next answer alone


def test_name_hits_kept_by_names_stay_per_pattern_and_flags():
    from traceinsight.vocab.masks import name_mask

    names = ["gemm_kernel", "GEMM_big", "ncclKernel_AllReduce", "cudaLaunchKernel", "elementwise"]
    for order in (names, names[::-1]):
        for _ in range(2):
            s = pd.Series(pd.Categorical(order * 2, categories=order))  # a fresh categories object each time
            plain = pd.Series(order * 2, dtype=object)
            for pattern, case in (("gemm", False), ("gemm", True), ("GEMM", True), ("nccl|Launch", False), (re.compile("^e"), False)):
                assert np.array_equal(name_mask(s, pattern, case=case), name_mask(plain, pattern, case=case))
    assert name_mask(pd.Series(pd.Categorical(names)), "gemm", case=True).sum() == 1
    assert name_mask(pd.Series(pd.Categorical(names)), "gemm", case=False).sum() == 2


def test_names_where_per_category_equals_the_per_row_masks(sample_views):
    from traceinsight.vocab.masks import name_mask
    from traceinsight.rulelib.names import hits_per_category, names_where

    def test(m):
        return m(tc.TENSOR_CORE) & ~m(tc.FP64) & ~m("nccl") | m("Kernel", case=True)

    cases = [v.kernels["name"] for v in sample_views if len(v.kernels)] + [pd.Series(pd.Categorical([], categories=["a"])),
                                                                          pd.Series(pd.Categorical(["my_kernel", "dgemm"])),
                                                                          pd.Series(pd.Categorical(["sgemm_x", None, "ncclKernel"]))]
    for names in cases:
        plain = names.astype(object)
        want = np.asarray(test(lambda p, case=False: name_mask(plain, p, case=case)), dtype=bool)
        assert np.array_equal(names_where(names, test), want)
        per = hits_per_category(names, test)
        cats = pd.Series(list(names.cat.categories), dtype=object)
        assert np.array_equal(per, np.asarray(test(lambda p, case=False: name_mask(cats, p, case=case)), dtype=bool))
    names = cases[-1]
    hits_per_category(names, lambda m: m("gemm").__iand__(np.zeros(2, bool)))  # a test that writes to its answer
    assert hits_per_category(names, lambda m: m("gemm")).tolist() == [False, True]


def test_kernel_classes_kept_per_name_are_the_searches(sample_views):
    from traceinsight.vocab.work_classes import kernel_class_of

    names = {str(n) for v in sample_views for n in v.kernels["name"].cat.categories} | {"", "sgemm", "ncclKernel_x", "my_fused_op"}
    for n in sorted(names):
        assert kernel_class_of(n) == kernel_class_of.__wrapped__(n) == kernel_class_of(n)
