"""The array paths of the assessment and the job summary (issue 28: whole jobs of many tiny ranks), each checked on
values against the pandas computation it replaces: tiny inputs, empty ones, one row, and a real sample trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _evidence_frames() -> list[pd.DataFrame]:
    """Evidence-like frames of every column type a rule puts in its evidence, at 0, 1 and a few rows."""
    n = 7
    rng = np.random.default_rng(5)
    full = pd.DataFrame(
        {
            "i64": rng.integers(-5, 5, n).astype(np.int64),
            "i32": rng.integers(0, 9, n).astype(np.int32),
            "f": np.where(rng.random(n) < 0.3, np.nan, rng.random(n)),
            "b": rng.random(n) < 0.5,
            "obj": pd.Series([None, "a", 3, 2.5, "x", np.int64(4), "é"], dtype=object),
            "str": pd.Series(["k", None, "m", "n", "o", "p", "q"], dtype="str"),
            "cat": pd.Categorical(["g", "h", None, "g", "h", "g", "z"]),
            "when": pd.to_datetime(np.arange(n) * 10**9),
            "delta": pd.to_timedelta(np.arange(n), unit="s"),
            "nullable": pd.array([1, None, 3, 4, 5, 6, 7], dtype="Int64"),
        }
    )
    dup = full[["i64", "f"]].copy()
    dup.columns = ["x", "x"]  # duplicate labels: read by position
    return [full, full.iloc[:1], full.iloc[:0], dup, pd.DataFrame(index=range(3)), pd.DataFrame()]


def _rows_by_itertuples(ev: pd.DataFrame, n: int | None):
    from traceinsight.model.serialize import jsonable

    ev = ev if n is None else ev.head(n)
    return [[jsonable(v) for v in row] for row in ev.itertuples(index=False, name=None)]


@pytest.mark.parametrize("n", [None, 0, 1, 3, 10, -2])
def test_evidence_rows_equal_itertuples(n):
    """The evidence rows read column by column equal ``head`` + ``itertuples`` + ``jsonable``: same values and
    the same Python types (an int stays an int, a datetime its string), for every column type."""
    from traceinsight.model.serialize import evidence_rows

    for ev in _evidence_frames():
        got, want = evidence_rows(ev, n), _rows_by_itertuples(ev, n)
        assert got == want
        assert [[type(v) for v in r] for r in got] == [[type(v) for v in r] for r in want]


@pytest.fixture(scope="module")
def sample_analysis():
    """One analysis of a sample trace, read (never changed) by the tests of this file."""
    from traceinsight.pipeline.engine import analyze

    return analyze(SAMPLES / "dataloader_gaps.json.gz")


def test_evidence_rows_on_a_sample_trace(sample_analysis):
    """Every finding of a real sample: the rows equal the itertuples reading, at the job's 10 rows and in full."""
    from traceinsight.model.serialize import evidence_rows

    analysis = sample_analysis
    assert analysis.findings and any(len(f.evidence) > 1 for f in analysis.findings)
    for f in analysis.findings:
        for n in (None, 10, 1):
            assert evidence_rows(f.evidence, n) == _rows_by_itertuples(f.evidence, n)


def _ledger_frames():
    rng = np.random.default_rng(11)
    n = 120
    buckets = np.array(["compute", "idle_untraced", "idle_data_wait", "communication", "ïdle"], dtype=object)
    base = pd.DataFrame({"rank": rng.integers(0, 2, n).astype(np.int64), "device": rng.integers(0, 2, n).astype(np.int64),
                         "step": rng.integers(-1, 4, n).astype(np.int64), "bucket": rng.choice(buckets, n),
                         "ns": rng.integers(0, 10**9, n).astype(np.int64)})
    out = [base, base.astype({"bucket": "str"}), base.astype({"bucket": "category"}), base.iloc[:1], base.iloc[:0]]
    holes = base.astype({"bucket": object}).copy()
    holes.loc[3, "bucket"] = None
    out.append(holes)
    steps_f = base.astype({"step": float})
    steps_f.loc[5, "step"] = np.nan
    out.append(steps_f)
    return out


@pytest.mark.parametrize("which", range(7))
def test_sum_by_small_equals_the_general_path(which, monkeypatch):
    """The job summary's ledger per (step, bucket) grouped in a dict equals the factorized path (rows, order, sums,
    dtypes: step int64, bucket its column's dtype) and, without missing keys, the groupby; for object, str and
    categorical buckets, one row, none, missing keys."""
    from traceinsight.derive.ranks import summary

    frame = _ledger_frames()[which]
    for rank in (0, 1):
        rows = frame["rank"].to_numpy() == rank
        assert rows.sum() <= summary.SMALL_GROUPS
        got = summary._sum_by(frame, rows, ["step", "bucket"])
        with monkeypatch.context() as m:
            m.setattr(summary, "SMALL_GROUPS", -1)
            general = summary._sum_by(frame, rows, ["step", "bucket"])
        pd.testing.assert_frame_equal(got, general, check_exact=True)
        if not frame[["step", "bucket"]].isna().any().any():
            want = frame[rows].groupby(["step", "bucket"], as_index=False, sort=True, observed=True)["ns"].sum()
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_int_frame_equals_the_dict_constructor():
    """The step table built as one block equals the frame of separate columns (values, dtypes, index), and other
    columns fall back to the dict constructor."""
    from traceinsight.derive.ranks.summary import _int_frame

    for n in (0, 1, 5):
        cols = {c: np.arange(n, dtype=np.int64) * (i + 1) for i, c in enumerate("abcd")}
        pd.testing.assert_frame_equal(_int_frame(cols), pd.DataFrame(cols), check_exact=True)
        mixed = {**cols, "f": np.arange(n, dtype=float), "i32": np.arange(n, dtype=np.int32)}
        pd.testing.assert_frame_equal(_int_frame(mixed), pd.DataFrame(mixed), check_exact=True)


def test_collective_kinds_of_codes_equal_the_taken_names():
    """The kinds read on the codes of the names that occur equal ``collective_kind`` of the taken names,
    missing names and plain (non-categorical) names included."""
    from traceinsight.derive.ranks.summary import _kinds_of, collective_kind

    names = ["ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_AllGather_RING", "gemm", None,
             "ncclKernel_ReduceScatter", "nccl:all_to_all", "ncclSendRecv", "broadcast_x"]
    plain = [n for n in names if n is not None]  # a plain column: the timeline's names are categorical, never missing
    for s in (pd.Series(pd.Categorical(names)), pd.Series(plain, dtype=object)):
        for pos in (np.arange(len(s)), np.array([3, 0, 0, 6], dtype=np.int64), np.zeros(0, np.int64), np.array([1])):
            got, want = _kinds_of(s, pos), collective_kind(s.take(pos))
            assert got.dtype == want.dtype == object and got.tolist() == want.tolist()
    assert _kinds_of(pd.Series(pd.Categorical(names)), np.array([0, 2, 3])).tolist() == ["allreduce", "collective", "collective"]


def _tiny_rank(tmp_path: Path, collectives: int = 1) -> Path:
    """A rank file like the job benchmark's: one step, four GEMMs and ``collectives`` all-reduces."""
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace(rank=3, world_size=8)
    t.step(1, 0.0, 2000.0)
    for i in range(4):
        t.kernel("gemm", 100.0 + i * 300, 200.0)
    for i in range(collectives):
        t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500.0 + i * 100, 80.0)
    path = tmp_path / "rank3.json"
    t.write(path)
    return path


def _summaries_both_ways(path: Path, monkeypatch):
    """The job summary of ``path`` by the array paths and by the pandas computations they replace."""
    from traceinsight.pipeline.engine import analyze
    from traceinsight.derive.ranks import summary

    analysis = analyze(path)
    fast = summary.summarize_ranks(analysis.timeline, analysis.views)
    with monkeypatch.context() as m:
        m.setattr(summary, "SMALL_BUSY", -1)
        m.setattr(summary, "SMALL_GROUPS", -1)
        m.setattr(summary, "_int_frame", pd.DataFrame)
        m.setattr(summary, "_kinds_of", lambda names, pos: summary.collective_kind(names.take(pos)))
        slow = summary.summarize_ranks(analysis.timeline, analysis.views)
    return fast, slow, analysis


@pytest.mark.parametrize("trace", ["tiny0", "tiny1", "tiny3", "sync_stalls.json.gz", "h100/dataloader_before.json.gz",
                                   "corpus:pytorch/param_dlrm_v100_8ranks/worker3_step_12.1694128201557.pt.trace.json.gz"])
def test_job_summary_equals_the_pandas_paths(trace, tmp_path, monkeypatch):
    """Every field of each rank's summary (steps, collectives, ledger frames included, dtypes and all) is the same
    through the array paths as through views.busy, the groupby path, the dict constructor and the taken names."""
    from tests.conftest import corpus_file

    if trace.startswith("tiny"):
        path = _tiny_rank(tmp_path, int(trace[4:]))
    else:
        path = corpus_file(trace[7:]) if trace.startswith("corpus:") else SAMPLES / trace
    fast, slow, analysis = _summaries_both_ways(path, monkeypatch)
    assert len(fast) == len(slow) >= 1
    # the collectives are the rows ``views.is_collective`` marks
    assert sum(len(s.collectives) for s in fast) == int(analysis.views.is_collective.sum())
    for a, b in zip(fast, slow):
        for name in vars(a):
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, pd.DataFrame):
                pd.testing.assert_frame_equal(x, y, check_exact=True)
            else:
                assert x == y, name
    if trace == "tiny3":
        s = fast[0]
        assert s.collectives["kind"].tolist() == ["allreduce"] * 3 and s.collectives["seq"].tolist() == [0, 1, 2]
        assert s.busy_ns == 4 * 200_000 + 3 * 80_000 and s.comm_ns == 3 * 80_000
        assert s.ledger["ns"].sum() == s.window_ns
        assert s.steps[["compute_ns", "comm_ns", "exposed_ns"]].values.tolist() == [[800_000, 240_000, 240_000]]
        assert s.collectives["gpu_before_ns"].tolist() == [800_000, 0, 0]
        assert s.collectives["idle_before_ns"].tolist() == [700_000, 20_000, 20_000]


@pytest.mark.parametrize("trace", ["tiny1", "sync_stalls.json.gz", "h100/compile_cold.json.gz", "h100/dataloader_before.json.gz",
                                   "vecadd_sync.sqlite"])
def test_steady_arrays_equal_the_steady_windows_frame(trace, tmp_path):
    """The windows grading and the savings read as arrays equal the columns of ``steady_windows`` (values and
    dtypes), and every finding's base and share are the same read either way."""
    from traceinsight.assess import severity
    from traceinsight.derive.derived import Derived
    from traceinsight.pipeline.engine import analyze

    path = _tiny_rank(tmp_path, 1) if trace.startswith("tiny") else SAMPLES / trace
    analysis = analyze(path)
    for views in (analysis.views, Derived(analysis.timeline)):  # kept by the analysis, and computed afresh
        frame = severity.steady_windows(views)
        got = severity.steady_arrays(views)
        for a, c in zip(got, ("rank", "device", "window_ns")):
            want = frame[c].to_numpy()
            assert a.dtype == want.dtype and np.array_equal(a, want), c
        for f in analysis.findings:
            assert severity.base_ns(f, views) == severity.base_ns(f, views, frame)
            assert severity.share_pct(f, views) == severity.share_pct(f, views, frame)
    assert len(got[2]) == len(analysis.views.utilization)


def test_steady_arrays_take_each_devices_warmup_off():
    """A ledger with a warm-up on one device of two: that device's window loses it, the other keeps its own; two
    warm-up figures on one device take the frame's merge path, with the same answer as the frame."""
    from types import SimpleNamespace

    from traceinsight.assess import severity

    util = pd.DataFrame({"rank": np.array([0, 0], np.int64), "device": np.array([0, 1], np.int64),
                         "window_ns": np.array([1000, 800], np.int64)})
    one = (np.array([0, 0]), np.array([0, 1]), np.array(["idle_warmup", "compute"], dtype=object), np.array([300, 500]))
    keep_nothing = lambda key, build: build()  # noqa: E731 - a stand-in store's memo: each ask computes afresh
    views = SimpleNamespace(utilization=util, ledger=SimpleNamespace(device_arrays=one), memo=keep_nothing)
    got = severity.steady_arrays(views)
    assert got[2].tolist() == [700, 800]
    assert [a.tolist() for a in got] == [severity.steady_windows(views)[c].tolist() for c in ("rank", "device", "window_ns")]
    two = (np.array([0, 0]), np.array([1, 1]), np.array(["idle_warmup", "idle_warmup"], dtype=object), np.array([100, 50]))
    views = SimpleNamespace(utilization=util, ledger=SimpleNamespace(device_arrays=two), memo=keep_nothing)
    frame = severity.steady_windows(views)
    got = severity.steady_arrays(views)
    assert [a.tolist() for a in got] == [frame[c].tolist() for c in ("rank", "device", "window_ns")]


def test_median_of_one_equals_numpy():
    """A one-value median is the value itself, as ``np.median`` gives it; longer arrays go to ``np.median``."""
    from traceinsight.derive.whatif.replay import median_of as _median

    for x in ([7], [2**53 + 1], [-3], [1, 2], [5, 1, 4], [2**62, 2**62 - 1]):
        a = np.array(x, dtype=np.int64)
        assert _median(a) == float(np.median(a)) and type(_median(a)) is float


@pytest.mark.parametrize("trace", ["tiny1", "h100/compile_cold.json.gz", "sync_stalls.json.gz"])
def test_step_arrays_follow_the_steps_frame(trace, tmp_path):
    """The step columns kept on a graph equal its steps frame's, for the graph and its steady copy; a copy whose
    steps are replaced reads the new frame, and its step times equal those computed on the frame's columns."""
    from traceinsight.derive import whatif
    from traceinsight.derive.whatif.replay import step_columns
    from traceinsight.pipeline.engine import analyze

    path = _tiny_rank(tmp_path, 1) if trace.startswith("tiny") else SAMPLES / trace
    analysis = analyze(path)
    graphs = analysis.views.graphs
    assert graphs
    for g in graphs:
        for gr in (g, whatif.steady_graph(g)):
            cols = step_columns(gr)
            for c in ("start_node", "end_node", "t0", "t1"):
                assert np.array_equal(cols[c], gr.steps[c].to_numpy())
        if len(g.steps) < 2:
            continue
        t = g.copy()
        step_columns(t)
        t.steps = t.steps.iloc[1:].reset_index(drop=True)
        assert np.array_equal(step_columns(t)["start_node"], t.steps["start_node"].to_numpy())
        t.window = whatif.window.replay_window(t, t.steps)
        ns, ne = whatif.replay(t)
        got = whatif.step_times(t, ns, ne)
        st = t.steps  # the step times on the frame's own columns
        gl = np.flatnonzero((t.ntype == whatif.GPU) & (t.launch >= 0))
        cuts = np.r_[t.start[st["start_node"].to_numpy()], t.start[int(st["end_node"].iloc[-1])] + 1]
        which = np.searchsorted(cuts, t.start[t.launch[gl]], side="right") - 1
        gend = np.full(len(st) + 1, np.iinfo(np.int64).min)
        for k, e in zip(which[which < len(st)] + 1, ne[gl][which < len(st)]):
            gend[k] = max(gend[k], e)
        bound = np.maximum.accumulate(np.maximum(ns[st["start_node"].to_numpy()], gend[:-1]))
        last = max(int(ne[int(st["end_node"].iloc[-1])]), int(gend[-1]), int(bound[-1]))
        assert got.tolist() == np.diff(np.r_[bound, last]).tolist()


def _instances_by_pandas(value: pd.DataFrame):
    """The columns ``as_instances`` makes of a frame, by ``to_numeric``, ``factorize`` and ``astype(str)``."""
    n = len(value)

    def ids(col):
        if col not in value:
            return np.full(n, np.nan)
        v = pd.to_numeric(value[col], errors="coerce").to_numpy(dtype=float)
        return np.where(v < 0, np.nan, np.trunc(v))

    if "label" in value:
        code, _ = pd.factorize(value["label"], use_na_sentinel=False)
        code = code.astype(np.int64)
        _, first = np.unique(code, return_index=True)
        labels = [str(x) for x in value["label"].iloc[first].astype(str).tolist()]
    else:
        code, labels = np.zeros(n, np.int64), [""]
    return value["start_ns"].to_numpy(np.int64), value["end_ns"].to_numpy(np.int64), ids("rank"), ids("device"), code, labels


def _instance_frames():
    base = {"start_ns": np.array([0, 10, 20, 30, 40], np.int64), "end_ns": np.array([5, 15, 25, 35, 45], np.int64)}
    labels = ["b", "a", "b", None, "c"]
    return [
        pd.DataFrame({**base, "rank": np.array([0, 1, -1, 2, 0], np.int64), "device": np.array([0.0, np.nan, 2.7, -1.0, 3.0]),
                      "label": pd.Series(labels, dtype=object)}),
        pd.DataFrame({**base, "rank": np.array([3, 3, 3, 3, 3], np.int32), "label": pd.Series(labels, dtype="str")}),
        pd.DataFrame({**base, "device": pd.array([1, None, 2, 3, 4], dtype="Int64"), "label": pd.Categorical(labels)}),
        pd.DataFrame({**base, "rank": pd.Series(["1", "x", "2", None, "3"], dtype=object), "label": pd.Series([1, 2, 1, 1.0, np.nan], dtype=object)}),
        pd.DataFrame({**base, "label": pd.Series(["k", np.nan, None, "k", b"k"], dtype=object)}),
        pd.DataFrame({**base, "label": pd.Series(["x", "x", "y", "x", "y"], dtype=object)}).iloc[:1],
        pd.DataFrame({**base, "label": pd.Series(["x", "x", "y", "x", "y"], dtype=object)}).iloc[:0],
        pd.DataFrame(base),
        pd.DataFrame({**base, "rank": np.array([True, False, True, True, False])}),
    ]


@pytest.mark.parametrize("which", range(9))
def test_as_instances_equals_to_numeric_and_factorize(which):
    """A finding's instances from a frame: rank/device read directly from numeric columns and string labels coded
    in a dict equal ``to_numeric`` + ``factorize`` + ``astype(str)`` (values, NaN for unknown, label order)."""
    from traceinsight.model.finding import as_instances

    frame = _instance_frames()[which]
    got = as_instances(frame).columns()
    want = _instances_by_pandas(frame)
    for a, b in zip(got[:5], want[:5]):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    assert got.labels == want[5]


def test_as_instances_on_a_sample_finding(sample_analysis):
    """The instances of a real sample's findings, rebuilt from their columns as a frame, come back the same."""
    from traceinsight.model.finding import as_instances

    analysis = sample_analysis
    some = [f for f in analysis.findings if len(f.instances)]
    assert some
    for f in some:
        c = f.instances.columns()
        frame = pd.DataFrame({"start_ns": c.start_ns, "end_ns": c.end_ns, "rank": c.rank, "device": c.device,
                              "label": [c.labels[k] for k in c.label_code.tolist()]})
        got = as_instances(frame).columns()
        want = _instances_by_pandas(frame)
        for a, b in zip(got[:5], want[:5]):
            assert np.array_equal(a, b, equal_nan=True)
        assert got.labels == want[5] == c.labels


@pytest.mark.parametrize("order", ["increasing", "shuffled", "many"])
def test_step_table_arrays_equal_its_frame(order):
    """The step columns kept from building the what-if's step table equal the frame's own columns; a table that
    had to be sorted or cut to the middle steps keeps none (they are read off the frame)."""
    from traceinsight.derive.whatif import MAX_STEPS
    from traceinsight.derive.whatif.window import _steps, step_table as _step_table

    m = 40 if order == "many" else 5
    rng = np.random.default_rng(2)
    t0 = np.cumsum(rng.integers(10, 100, m)).astype(np.int64)
    if order == "shuffled":
        t0 = rng.permutation(t0)
    nh = 3 + 2 * m
    start = np.zeros(nh + 4, np.int64)
    start[nh - 2 * m: nh - m] = t0
    start[nh - m: nh] = t0 + 5
    steps = np.arange(m, dtype=np.int64) + 1
    frame, cols = _step_table(start, nh, steps, MAX_STEPS)
    pd.testing.assert_frame_equal(frame, _steps(start, nh, steps, MAX_STEPS))
    if order == "increasing":
        for c in ("start_node", "end_node", "t0", "t1"):
            assert cols[c].dtype == frame[c].dtype and np.array_equal(cols[c], frame[c].to_numpy())
    else:
        assert cols is None
    assert _step_table(start, nh, steps[:0], MAX_STEPS)[1] is None


def _graphs_of(path: Path):
    from traceinsight.pipeline.engine import analyze
    from traceinsight.derive.whatif import build_graphs

    a = analyze(path)
    return build_graphs(a.views.views, a.ledger.warmup)


def test_hand_offs_skip_single_thread_groups(tmp_path, monkeypatch):
    """A process with one host thread, or a device with one stream, has no other thread or stream to have waited
    for: skipping their search leaves every graph's cross edges and latencies as the full search gives them (on
    traces with several threads and streams too, where cross edges exist)."""
    from traceinsight.derive import whatif

    paths = [_tiny_rank(tmp_path, 1), SAMPLES / "h100/dataloader_before.json.gz", SAMPLES / "h100/compile_cold.json.gz",
             SAMPLES / "sync_stalls.json.gz", SAMPLES / "lstm_cudnn.json.gz"]
    crossed = 0
    for path in paths:
        fast = _graphs_of(path)
        with monkeypatch.context() as m:
            m.setattr(whatif.edges, "_one_value", lambda a: False)  # where the graph builder reads it
            full = _graphs_of(path)
        assert len(fast) == len(full) >= 1
        for a, b in zip(fast, full):
            assert np.array_equal(a.cross, b.cross) and np.array_equal(a.cross_lat, b.cross_lat)
            assert np.array_equal(a.prev_lat, b.prev_lat) and np.array_equal(a.launch_lat, b.launch_lat)
            crossed += int((a.cross >= 0).sum())
    assert crossed > 0
