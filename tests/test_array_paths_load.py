"""The load path's array shortcuts give what the frame computations they replace give.

A single file's rows are finished on column arrays (``ingest._one_part``: range checks, plausibility, the common
clock, step numbers, launch inheritance) and the frame is built once; several parts are still finished on the
frame (``ingest._joined_parts``), which is the computation the array path replaced. Each case here reads one file
twice and runs both on the same reader output: the frames must be equal to the last bit, with the same warnings,
step source, origin and memory rows. ``timeline.categorical`` (categorical dtypes shared between calls) must give
what ``pd.Categorical.from_codes`` gives.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.kineto_writer import KinetoTrace
from traceinsight import ingest
from traceinsight.model.timeline import COPY_KINDS, KINDS, categorical

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def _both_ways(path: Path) -> pd.DataFrame:
    """Finish the reader's output of ``path`` on arrays and on the frame; assert they agree; return the frame."""
    fmt = ingest.detect(path)
    read = ingest.FORMATS[fmt].read
    with np.errstate(all="ignore"):
        a, b = read(path), read(path)
    assert len(a.parts) == 1
    mem_a: list = []
    mem_b: list = []
    with np.errstate(all="ignore"):
        ev_a, origin_a = ingest._one_part(a.parts[0], a.meta, mem_a)
        ev_b, origin_b = ingest._joined_parts(b.parts, b.meta, mem_b)
    pd.testing.assert_frame_equal(ev_a, ev_b, check_exact=True)
    assert list(ev_a.columns) == list(ev_b.columns)
    assert origin_a == origin_b
    assert a.meta.warnings == b.meta.warnings
    assert a.meta.extra.get("steps_source") == b.meta.extra.get("steps_source")
    assert len(mem_a) == len(mem_b)
    for (m_a, r_a, s_a), (m_b, r_b, s_b) in zip(mem_a, mem_b):
        assert (r_a, s_a) == (r_b, s_b)
    return ev_a


def _tiny(rank: int = 3) -> KinetoTrace:
    """A rank as the tiny-rank job benchmark writes it: one step, four kernels with their launches, a collective."""
    t = KinetoTrace(rank=rank, world_size=8)
    t.step(1, 0.0, 2000.0)
    for i in range(4):
        t.kernel("gemm", 100.0 + i * 300, 200.0)
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500.0, 300.0)
    return t


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_tiny_rank_same_frame_with_steps_inherited_by_kernels(tmp_path):
    ev = _both_ways(_tiny().write(tmp_path / "tiny.json"))
    kernels = ev[ev["kind"] == "kernel"]
    assert len(kernels) == 5 and (kernels["step"] == 1).all()  # GPU rows took their launch's step
    assert (ev["rank"] == 3).all() and ev["start_ns"].min() == 0


def test_kernel_running_past_its_step_takes_its_launch_step(tmp_path):
    t = _tiny()
    t.step(2, 2000.0, 2000.0)
    t.kernel("late", 2500.0, 100.0, launch_us=1900.0)  # launched in step 1, runs in step 2's time
    ev = _both_ways(t.write(tmp_path / "late.json"))
    assert ev.loc[(ev["kind"] == "kernel") & (ev["name"] == "late"), "step"].tolist() == [1]


def test_empty_trace_same_frame(tmp_path):
    doc = _tiny().to_dict()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    ev = _both_ways(_write(tmp_path, "empty.json", doc))
    assert ev.empty


def _only(t: KinetoTrace, name: str) -> dict:
    """The trace's document with its metadata events and the complete events named ``name`` only."""
    doc = t.to_dict()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("name") == name]
    return doc


def test_one_row_same_frame(tmp_path):
    t = KinetoTrace()
    t.cpu_op("aten::add", 10.0, 5.0)
    ev = _both_ways(_write(tmp_path, "one.json", _only(t, "aten::add")))
    assert len(ev) == 1 and ev["step"].tolist() == [-1]


def test_one_step_row_same_frame(tmp_path):
    t = KinetoTrace()
    t.step(7, 0.0, 100.0)
    ev = _both_ways(_write(tmp_path, "step.json", _only(t, "ProfilerStep#7")))
    assert len(ev) == 1 and ev["step"].tolist() == [7]


def test_user_range_steps_same_frame(tmp_path):
    t = KinetoTrace()
    for i in range(5):  # no ProfilerStep: a repeated user range that covers the GPU window is picked
        t.annotation("train_step", i * 1000.0, 950.0)
        t.kernel("gemm", i * 1000.0 + 100, 700.0)
    ev = _both_ways(t.write(tmp_path / "ranges.json"))
    assert sorted(set(ev.loc[ev["kind"] == "kernel", "step"].tolist())) == [0, 1, 2, 3, 4]


def test_hostile_rows_same_frame_and_warnings(tmp_path):
    """Every plausibility check fires: long names, a far event, overlapping steps, repeated step numbers, a
    shared correlation id, a negative duration."""
    t = KinetoTrace(rank=0, world_size=1)
    for i in range(6):
        t.step(1, i * 1000.0 + (300.0 if i == 4 else 0.0), 1000.0)  # all named ProfilerStep#1; one overlaps
        t.kernel("gemm", i * 1000.0 + 100, 500.0)
    t.kernel("x" * 20_000, 6500.0, 100.0)
    t.kernel("far", 1e12, 100.0)
    t.kernel("neg", 5500.0, 10.0)
    t.kernel("k", 5600.0, 10.0)
    t.kernel("k", 5700.0, 10.0)
    doc = t.to_dict()
    for e in doc["traceEvents"]:
        if e.get("name") == "neg" and e.get("cat") == "kernel":
            e["dur"] = -5.0
        if e.get("name") in ("k", "cudaLaunchKernel") and e.get("ts", 0) > 5590 + t._ts(0) - 1000 and "correlation" in e.get("args", {}):
            e["args"]["correlation"] = 99_999
    p = _write(tmp_path, "hostile.json", doc)
    ev = _both_ways(p)
    warnings = " | ".join(ingest.load(p).meta.warnings)
    for fired in ("1 events with a negative duration", "2 names longer than", "2 events lie more than 24 h",
                  "1 of 6 step markers overlap", "share 1 correlation ids", "repeat an earlier step's number"):
        assert fired in warnings
    assert ev["name"].astype(str).str.len().max() <= 16_384
    assert "far" not in set(ev["name"].astype(str))


def test_hostile_rows_warn_as_the_frame_path(tmp_path):
    t = KinetoTrace()
    for i in range(3):
        t.step(i, i * 1000.0, 1000.0)
        t.kernel("y" * 17_000, i * 1000.0 + 100, 500.0)
    doc = t.to_dict()
    p = _write(tmp_path, "long.json", doc)
    _both_ways(p)
    tl = ingest.load(p)
    assert any("names longer than" in w for w in tl.meta.warnings)


@pytest.mark.parametrize("name", ["tiny_kernels.json.gz", "sync_stalls.json.gz", "h100/memory_churn.json.gz",
                                  "h100/compile_recompile.json.gz", "vecadd_sync.sqlite"])
def test_sample_traces_same_frame(name):
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    ev = _both_ways(path)
    assert len(ev) > 0


def test_load_of_a_single_file_equals_the_frame_path(tmp_path):
    """``load`` (which takes the array path for one file) gives the frame path's timeline."""
    p = _tiny().write(tmp_path / "tiny.json")
    tl = ingest.load(p)
    r = ingest.FORMATS["pytorch"].read(p)
    ev, _ = ingest._joined_parts(r.parts, r.meta, [])
    pd.testing.assert_frame_equal(tl.events, ev, check_exact=True)


# --- categorical dtypes shared between calls ----------------------------------------------------------------------


@pytest.mark.parametrize("categories", [
    ["b", "a", "c"],
    list(KINDS),
    list(COPY_KINDS),
    pd.Index(["x", "y"]),
    pd.Index(["x", "y"], dtype=object),
    pd.Index([], dtype="str"),
    [f"n{i}" for i in range(3000)],  # past the cached length: built each time
])
def test_categorical_equals_from_codes(categories):
    k = len(categories)
    codes = np.array([-1, 0, k - 1, 0, -1] if k else [-1, -1], dtype=np.int32)
    want = pd.Categorical.from_codes(codes, categories=categories, validate=False)
    for _ in range(2):  # the second call takes the cached dtype
        got = categorical(codes, categories)
        assert got.dtype == want.dtype
        assert got.categories.dtype == want.categories.dtype
        assert got.categories.equals(want.categories)
        assert got.ordered == want.ordered is False
        np.testing.assert_array_equal(got.codes, want.codes)
        assert got.codes.dtype == want.codes.dtype


def test_categorical_keeps_apart_same_strings_of_other_index_dtypes():
    a = categorical(np.array([0, 1]), pd.Index(["1", "2"], dtype=object))
    b = categorical(np.array([0, 1]), pd.Index(["1", "2"]))
    assert a.categories.dtype == object and b.categories.dtype != object


def test_categorical_one_row_and_no_rows():
    one = categorical(np.array([0], dtype=np.int8), ["only"])
    assert one.tolist() == ["only"]
    none = categorical(np.zeros(0, dtype=np.int8), ["a", "b"])
    assert len(none) == 0 and list(none.categories) == ["a", "b"]


def test_categorical_results_do_not_share_codes():
    codes = np.array([0, 1, 0])
    a = categorical(codes, ["p", "q"])
    b = categorical(codes.copy(), ["p", "q"])
    b[0] = "q"
    assert a.tolist() == ["p", "q", "p"] and b.tolist() == ["q", "q", "p"]
    assert copy.copy(a.dtype) == b.dtype


# --- thread names per row, factorized per thread ------------------------------------------------------------------


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("seed", range(25))
def test_thread_name_column_equals_the_categorical_of_the_lookup(seed, small, monkeypatch):
    from traceinsight.ingest.kineto import columns
    from traceinsight.ingest.kineto.columns import _thread_name_table, _thread_names, thread_name_column, thread_name_of

    if not small:
        monkeypatch.setattr(columns, "SMALL_MATCH", -1)

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    pid = rng.integers(-2, 3, n).astype(np.int64)
    tid = rng.integers(0, 4, n).astype(np.int64) * 1000
    is_name = rng.random(n) < 0.7
    names = [None if rng.random() < 0.1 else str(x) for x in rng.choice(np.array(["main", "", "b_thread", "a_loader"]), n)]
    table = _thread_name_table(pid, tid, is_name, names)
    m = int(rng.integers(0, 40))  # 0 rows and rows no thread names included
    ev_pid, ev_tid = rng.integers(-3, 4, m).astype(np.int64), rng.integers(0, 5, m).astype(np.int64) * 1000
    want = pd.Categorical(thread_name_of(ev_pid, ev_tid, _thread_names(pid, tid, is_name, names)))
    got = thread_name_column(ev_pid, ev_tid, table)
    assert got.dtype == want.dtype and got.categories.dtype == want.categories.dtype
    np.testing.assert_array_equal(got.codes, want.codes)
    assert list(got.categories) == list(want.categories)


def test_thread_name_column_one_row():
    from traceinsight.ingest.kineto.columns import thread_name_column

    table = {"pid": np.array([1]), "tid": np.array([2]), "thread_name": np.array(["main"], dtype=object)}
    assert thread_name_column(np.array([1]), np.array([2]), table).tolist() == ["main"]
    missing = thread_name_column(np.array([1]), np.array([3]), table)
    assert missing.isna().all() and missing.categories.equals(pd.Categorical(np.array([np.nan], dtype=object)).categories)


# --- string columns from decoder codes ------------------------------------------------------------------------------


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("seed", range(30))
def test_decoder_categorical_equals_the_categorical_of_the_strings(seed, small, monkeypatch):
    """``_categorical`` (codes into a string table, -1 absent) is ``pd.Categorical`` of the strings themselves;
    repeated strings in the table (two escapes of one text), unused strings, a missing stand-in, no rows and no
    row using any string included."""
    from traceinsight.ingest.kineto import columns
    from traceinsight.ingest.kineto.columns import _categorical

    if not small:
        monkeypatch.setattr(columns, "SMALL_MATCH", -1)
    rng = np.random.default_rng(seed)
    table = [str(x) for x in rng.choice(np.array(["gemm", "relu", "", "Memcpy HtoD", "gemm", "zeta", "alpha"]), int(rng.integers(0, 7)))]
    n = int(rng.integers(0, 15))
    codes = rng.integers(-1, len(table), n).astype(np.int32) if table else np.full(n, -1, dtype=np.int32)
    missing = "" if seed % 2 else None
    values = np.array([table[c] if c >= 0 else (missing if missing is not None else np.nan) for c in codes], dtype=object)
    want = pd.Categorical(values)
    got = _categorical(codes, table, missing=missing)
    assert list(got.categories) == list(want.categories)
    np.testing.assert_array_equal(got.codes, want.codes)
    assert got.codes.dtype == want.codes.dtype
    if len(want.categories):
        assert got.categories.dtype == want.categories.dtype


def _compact_reference(c: pd.Categorical, keep):
    """The row-compaction as a frame computation: rows outside ``keep`` missing, unused categories removed."""
    s = pd.Series(c)
    if keep is not None:
        s = s.where(keep)
    return s.cat.remove_unused_categories().array


@pytest.mark.parametrize("seed", range(30))
def test_compact_equals_removing_unused_categories(seed):
    from traceinsight.ingest.kineto.reader import _compact

    rng = np.random.default_rng(seed)
    cats = pd.Index(["1,1,1", "128,1,1", "256,1,1", "64,2,1"][: int(rng.integers(0, 5))])
    n = int(rng.integers(0, 12))
    codes = rng.integers(-1, len(cats), n) if len(cats) else np.full(n, -1)
    c = pd.Categorical.from_codes(codes, categories=cats)
    keep = None if seed % 3 == 0 else rng.random(n) < [0.0, 0.5, 1.0][seed % 3]
    got, want = _compact(c, keep), _compact_reference(c, keep)
    assert list(got.categories) == list(want.categories)
    np.testing.assert_array_equal(got.codes, want.codes)


def test_empty_memory_frames_are_independent():
    from traceinsight.model.timeline import MEMORY_COLUMNS, build_memory

    a, b = build_memory(), build_memory()
    assert list(a.columns) == list(MEMORY_COLUMNS) and a.empty
    a["extra"] = np.zeros(0)
    a["kind"] = a["kind"].cat.add_categories(["new_kind"])
    c = build_memory()
    assert "extra" not in b and "extra" not in c
    assert "new_kind" not in set(c["kind"].cat.categories) and "new_kind" not in set(b["kind"].cat.categories)
    assert list(c.dtypes.astype(str)) == [str(t) for t in MEMORY_COLUMNS.values()]


# --- small matches through dicts and sets ---------------------------------------------------------------------------


def _launch_inputs(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    gpu = rng.random(n) < 0.4
    corr = rng.integers(-1, 8, n).astype(np.int64)
    runtime = rng.random(n) < 0.6
    rank = rng.integers(0, 2, n).astype(np.int32)
    pid = rng.choice(np.array([7, 10**12, -3], dtype=np.int64), n)  # wide pids: the key compresses in numpy
    return gpu, corr, runtime, rank, pid


@pytest.mark.parametrize("seed", range(40))
def test_launch_rows_small_equals_the_sorted_keys(seed, monkeypatch):
    from traceinsight.model import timeline

    gpu, corr, runtime, rank, pid = _launch_inputs(seed)
    small = timeline._launch_rows(gpu, corr, runtime, [rank, pid, corr])
    monkeypatch.setattr(timeline, "SMALL_MATCH", -1)
    sorted_keys = timeline._launch_rows(gpu, corr, runtime, [rank, pid, corr])
    if sorted_keys is None:
        assert small is None
    else:
        assert small is not None
        for a, b in zip(small, sorted_keys):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", range(40))
def test_shared_correlations_small_equals_the_unique_count(seed, monkeypatch):
    from traceinsight.model import plausible
    from traceinsight.model.timeline import TraceMeta

    gpu, corr, runtime, rank, pid = _launch_inputs(seed)
    meta_a, meta_b = TraceMeta(source_format="pytorch"), TraceMeta(source_format="pytorch")
    small = plausible._unlinked_correlations(corr, runtime, rank, pid, meta_a)
    monkeypatch.setattr(plausible, "SMALL_MATCH", -1)
    full = plausible._unlinked_correlations(corr, runtime, rank, pid, meta_b)
    assert (small is None) == (full is None)
    if full is not None:
        np.testing.assert_array_equal(small, full)
    assert meta_a.warnings == meta_b.warnings


def test_kind_is_on_the_shared_dtype_equals_the_string_comparison():
    from traceinsight.model.timeline import kind_is

    rng = np.random.default_rng(0)
    codes = rng.integers(-1, len(KINDS), 50)
    shared = categorical(codes, KINDS)
    own = pd.Categorical.from_codes(codes, categories=list(KINDS))  # same categories, a dtype of its own
    values = np.array(shared.astype(object))
    for names in (("step",), ("runtime",), ("kernel", "memcpy", "memset"), ("nothing",)):
        want = np.isin(values, names)
        np.testing.assert_array_equal(kind_is(shared, *names), want)
        np.testing.assert_array_equal(kind_is(own, *names), want)
    reordered = pd.Categorical.from_codes(np.array([0, 1, -1]), categories=["step", "kernel"])
    np.testing.assert_array_equal(kind_is(reordered, "step"), [True, False, False])


# --- the size ceiling of a small plain file -------------------------------------------------------------------------


def test_small_plain_file_reads_without_the_memory_look_and_keeps_every_ceiling(tmp_path, monkeypatch):
    import gzip

    from traceinsight.vocab.errors import TraceReadError, TraceTooLargeError
    from traceinsight.ingest import byteio

    plain = tmp_path / "t.json"
    plain.write_bytes(b'{"traceEvents": []}' + b" " * 100)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    looks = []
    monkeypatch.setattr(byteio, "_available_memory", lambda: looks.append(1) or 8 << 30)
    assert bytes(byteio.read_bytes(plain, [])) == plain.read_bytes() and not looks
    assert byteio.read_bytes(packed, []) == plain.read_bytes() and looks  # gzip: the real ceiling caps inflation
    with pytest.raises(TraceTooLargeError):
        byteio.read_bytes(plain, [], max_bytes=10)
    with pytest.raises(TraceTooLargeError):
        byteio.read_bytes(packed, [], max_bytes=10)
    with pytest.raises(TraceReadError, match="max_bytes must be positive"):
        byteio.read_bytes(tmp_path / "missing.json", [], max_bytes=0)  # the option is judged before the file
    monkeypatch.setattr(byteio, "_MIN_DEFAULT_MAX", 10)  # a file past the floor is checked against free memory
    monkeypatch.setattr(byteio, "_available_memory", lambda: 4)
    with pytest.raises(TraceTooLargeError):
        byteio.read_bytes(plain, [])


def test_span_equals_the_series_computation(tmp_path):
    from traceinsight.model.timeline import Timeline, TraceMeta, build_events

    for rows in ([], [(5, 0)], [(30, 5), (10, 40), (0, 0)], [(2**40, 7), (-3, 2**41)]):
        ev = build_events({"kind": ["kernel"] * len(rows), "name": ["k"] * len(rows),
                           "start_ns": [r[0] for r in rows], "dur_ns": [r[1] for r in rows]})
        tl = Timeline(events=ev, meta=TraceMeta(source_format="pytorch"))
        want = 0 if ev.empty else int((ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min())
        assert tl.span_ns == want and type(tl.span_ns) is int
    assert ingest.load(SAMPLES / "tiny_kernels.json.gz").span_ns > 0


@pytest.mark.parametrize("seed", range(25))
def test_thread_lookups_small_equal_the_sorted_keys(seed, monkeypatch):
    from traceinsight.ingest.kineto import columns

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    pid = rng.choice(np.array([1, 2, 10**13], dtype=np.int64), n)
    tid = rng.integers(0, 4, n).astype(np.int64)
    is_name = rng.random(n) < 0.8
    names = [str(x) for x in rng.choice(np.array(["main", "", "b", "a"]), n)]
    m = int(rng.integers(0, 40))
    ev_pid, ev_tid = rng.choice(np.array([1, 2, 3, 10**13], dtype=np.int64), m), rng.integers(0, 5, m).astype(np.int64)
    dup = pd.DataFrame({"pid": np.array([1, 1, 2], dtype=np.int64), "tid": np.array([0, 0, 1], dtype=np.int64),
                        "thread_name": np.array(["first", "second", "x"], dtype=object)})  # a repeated thread: the first
    small = (columns._thread_name_table(pid, tid, is_name, names), columns.thread_name_of(ev_pid, ev_tid, dup))
    monkeypatch.setattr(columns, "SMALL_MATCH", -1)
    full = (columns._thread_name_table(pid, tid, is_name, names), columns.thread_name_of(ev_pid, ev_tid, dup))
    for key in ("pid", "tid", "thread_name"):
        np.testing.assert_array_equal(small[0][key], full[0][key])
        assert small[0][key].dtype == full[0][key].dtype
    assert pd.isna(small[1]).tolist() == pd.isna(full[1]).tolist()
    assert [x for x in small[1] if isinstance(x, str)] == [x for x in full[1] if isinstance(x, str)]
    assert "second" not in set(x for x in small[1] if isinstance(x, str))


@pytest.mark.parametrize("seed", range(40))
def test_launching_pids_small_equal_the_sorted_ids(seed, monkeypatch):
    from traceinsight.ingest.kineto import reader

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 50))
    pid = rng.choice(np.array([-1, 5, 9, 4242], dtype=np.int64), n)
    correlation = rng.integers(-1, 10, n).astype(np.int64)
    gpu = rng.random(n) < 0.4
    runtime = ~gpu & (rng.random(n) < 0.5) & (correlation >= 0)
    small = reader.launching_pids(pid, correlation, gpu, runtime)
    monkeypatch.setattr(reader, "SMALL_MATCH", -1)
    full = reader.launching_pids(pid, correlation, gpu, runtime)
    np.testing.assert_array_equal(small, full)
    assert small.dtype == full.dtype


@pytest.mark.parametrize("seed", range(30))
def test_factorized_small_equals_pandas_factorize(seed):
    from traceinsight.ingest.kineto.columns import _factorized

    rng = np.random.default_rng(seed)
    values = [None if x == "-" else str(x) for x in rng.choice(np.array(["gemm", "-", "", "relu", "1,1,1"]), int(rng.integers(0, 20)))]
    codes, uniques = _factorized(values)
    want_codes, want_uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    np.testing.assert_array_equal(codes, want_codes)
    assert codes.dtype == np.int32 and uniques == list(want_uniques)


def _in_range_reference(floats: dict) -> tuple[dict, np.ndarray]:
    """The range check written field by field with ``isinf``, as the reader had it."""
    from traceinsight.ingest.kineto.reader import _ID_FIELDS, _ID_LIMIT, _TS_LIMIT_NS

    f = dict(floats)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = np.isinf(f["ts"]) | (np.abs(f["ts"]) * 1000.0 > _TS_LIMIT_NS)
        bad |= np.isinf(f["dur"]) | (np.abs(f["dur"]) * 1000.0 > _TS_LIMIT_NS)
        for key in _ID_FIELDS:
            over = np.isinf(f[key]) | (np.abs(f[key]) > _ID_LIMIT)
            if over.any():
                bad |= over
                f[key] = np.where(over, np.nan, f[key])
    if bad.any():
        f["ts"] = np.where(bad, np.nan, f["ts"])
        f["dur"] = np.where(bad, np.nan, f["dur"])
    return f, bad


@pytest.mark.parametrize("seed", range(30))
def test_in_range_equals_the_field_by_field_check(seed):
    from traceinsight.ingest.kineto.columns import _FLOAT_FIELDS, EventColumns
    from traceinsight.ingest.kineto.reader import _in_range

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    pool = np.array([0.0, 1.5, -7.0, 1e3, np.nan, np.inf, -np.inf, 2.0**62 + 2.0**40, -(2.0**63), 3e15, 1e300])
    floats = {k: rng.choice(pool[: 4 if rng.random() < 0.5 else len(pool)], n) for k in _FLOAT_FIELDS}
    empty = pd.Categorical([])
    cols = EventColumns(n_events=n, has_ts=np.ones(n, bool), cat=empty, name=empty, pid=np.zeros(n, np.int64),
                        tid=np.zeros(n, np.int64), floats=floats, grid=empty, block=empty, input_dims=empty,
                        input_types=empty, concrete_inputs=empty, thread_names={})
    want_f, want_bad = _in_range_reference({k: v.copy() for k, v in floats.items()})  # _in_range blanks in place
    got_f, got_bad = _in_range(cols)
    assert cols.floats == {}  # consumed: the buffers now belong to the columns made from them
    np.testing.assert_array_equal(got_bad, want_bad)
    for k in _FLOAT_FIELDS:
        np.testing.assert_array_equal(got_f[k], want_f[k])


def _steps_reference(is_step, names, ev_rank, ev_start, ev_dur):
    """Step numbers as a masked search per rank (every rank masked, the numbers read through the names' strings)."""
    import re

    out = np.full(len(is_step), -1, dtype=np.int32)
    sidx = np.flatnonzero(is_step)
    if not len(sidx):
        return out
    labels = np.asarray(names.astype(object))[sidx]
    numbers = np.array([int(m.group(1)) if (m := re.search(r"(\d+)\s*$", str(x))) else i for i, x in enumerate(labels)], dtype=np.int32)
    for rank in pd.unique(ev_rank[sidx]):
        own = np.flatnonzero(ev_rank[sidx] == rank)
        order = np.argsort(ev_start[sidx][own], kind="stable")
        s_start, s_num = ev_start[sidx][own][order], numbers[own][order]
        s_end = s_start + ev_dur[sidx][own][order]
        if len(np.unique(s_num)) < len(s_num):
            s_num = np.arange(len(s_num), dtype=np.int32)
        for i in np.flatnonzero(ev_rank == rank):
            k = np.searchsorted(s_start, ev_start[i], side="right") - 1
            if k >= 0 and ev_start[i] < s_end[k]:
                out[i] = s_num[k]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_steps_of_equals_a_masked_search_per_rank(seed):
    from traceinsight.model.timeline import TraceMeta, _steps_of

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    ranks = 1 if seed % 2 else int(rng.integers(1, 4))
    ev_rank = rng.integers(0, ranks, n).astype(np.int32)
    ev_start = rng.integers(0, 10_000, n).astype(np.int64)
    ev_dur = rng.integers(0, 3_000, n).astype(np.int64)
    is_step = rng.random(n) < 0.3
    names = pd.Categorical(rng.choice(np.array(["ProfilerStep#3", "ProfilerStep#7", "ProfilerStep#7", "gemm"]), n))
    got = _steps_of(is_step, names, ev_rank, ev_start, ev_dur, TraceMeta(source_format="pytorch"))
    np.testing.assert_array_equal(got, _steps_reference(is_step, names, ev_rank, ev_start, ev_dur))
    assert got.dtype == np.int32


def test_categorical_cache_keeps_a_bounded_amount_of_names(monkeypatch):
    from traceinsight.model import timeline

    monkeypatch.setattr(timeline, "_DTYPES", {})
    monkeypatch.setattr(timeline, "_dtype_chars", 0)
    monkeypatch.setattr(timeline, "_CACHED_CHARS", 1000)
    huge = categorical(np.array([0]), ["x" * 5000])  # longer than the whole budget: built, never kept
    assert huge.tolist() == ["x" * 5000] and not timeline._DTYPES
    for i in range(30):  # 30 x 100 characters against a budget of 1,000: the cache starts over, never grows past it
        got = categorical(np.array([0, -1]), [f"{i:03d}" + "y" * 97])
        assert got.tolist()[0].startswith(f"{i:03d}")
        assert timeline._dtype_chars <= 1000 and len(timeline._DTYPES) <= 10
    again = categorical(np.array([0]), ["029" + "y" * 97])
    assert again.dtype is got.dtype  # the newest entries stay shared


@pytest.mark.parametrize("seed", range(10))
def test_thread_rows_equals_a_dict_of_the_threads(seed, monkeypatch):
    """Each row's position in the thread-name table (the first of a repeated thread; -1: none), looked up once per
    run of rows on one thread: rows in runs, single rows, and threads the table lacks."""
    from traceinsight.ingest.kineto import columns

    monkeypatch.setattr(columns, "SMALL_MATCH", -1)  # the array path, whatever the size
    rng = np.random.default_rng(seed)
    threads = [(int(p), int(t)) for p, t in zip(rng.integers(-2, 3, 6), rng.integers(0, 4, 6) * 1000)]
    names = {"pid": np.array([p for p, _ in threads], dtype=np.int64), "tid": np.array([t for _, t in threads], dtype=np.int64)}
    runs = rng.integers(1, 6, 60)  # run lengths
    pick = rng.integers(-1, len(threads), len(runs))  # -1: a thread the table does not name
    pid = np.repeat([threads[i][0] if i >= 0 else 7 for i in pick], runs).astype(np.int64)
    tid = np.repeat([threads[i][1] if i >= 0 else 9999 for i in pick], runs).astype(np.int64)
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(threads):
        first.setdefault(key, i)
    want = np.array([first.get((p, t), -1) for p, t in zip(pid.tolist(), tid.tolist())], dtype=np.int64)
    got = columns._thread_rows(pid, tid, names)
    np.testing.assert_array_equal(got, want)
    assert (want == -1).any() and (want >= 0).any()


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_decoder_categorical_reads_none_in_the_table_as_absent(seed, small, monkeypatch):
    """Grid and block: several raw texts read as one "x,y,z" and some as nothing (None in the table): rows coded to
    a None entry are absent, rows of one text share one category, as ``pd.Categorical`` of the texts gives."""
    from traceinsight.ingest.kineto import columns
    from traceinsight.ingest.kineto.columns import _categorical

    if not small:
        monkeypatch.setattr(columns, "SMALL_MATCH", -1)
    rng = np.random.default_rng(seed)
    table = [None if x == "-" else str(x) for x in rng.choice(np.array(["1,1,1", "-", "128,1,1", "1,1,1", "-"]), int(rng.integers(1, 6)))]
    codes = rng.integers(-1, len(table), int(rng.integers(1, 30))).astype(np.int32)
    values = np.array([table[c] if c >= 0 and table[c] is not None else np.nan for c in codes], dtype=object)
    want = pd.Categorical(values)
    got = _categorical(codes, table)
    assert list(got.categories) == list(want.categories)
    np.testing.assert_array_equal(got.codes, want.codes)


@pytest.mark.parametrize("seed", range(8))
def test_as_int64_in_place_equals_the_where_then_astype_it_replaces(seed):
    """The in-place conversion of a float column (device, stream, ids) gives what
    ``np.where(gpu, np.where(isnan(v), pid, v), -1).astype(int64)`` gave: truncation, the pid through a float
    (a pid past 2**53 rounds as before), -1 on blanked rows, and the buffer of ``v`` reused."""
    from traceinsight.ingest.kineto.reader import _as_int64

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    v = rng.choice(np.array([np.nan, 0.0, 7.9, -3.5, 2.0**40, 1e15 + 0.5]), n)
    pid = rng.choice(np.array([5, 783658, 2**53 + 1, -(2**60) - 3], dtype=np.int64), n)
    gpu = rng.random(n) < 0.5
    want = np.where(gpu, np.where(np.isnan(v), pid, v), -1).astype(np.int64)
    want_scalar = np.where(np.isnan(v), -1, v).astype(np.int64)
    w = v.copy()
    got = _as_int64(w, pid, ~gpu)
    np.testing.assert_array_equal(got, want)
    assert np.shares_memory(got, w)
    np.testing.assert_array_equal(_as_int64(v.copy(), -1), want_scalar)


def test_load_pauses_the_collector_and_gives_it_back(tmp_path, monkeypatch):
    """The cyclic collector is off while a trace is read and assembled (``heap.collector_paused``: a full
    collection walks every object pandas made, for nothing to collect), and on again after a load, and after one
    that fails."""
    import gc

    import traceinsight
    from traceinsight.ingest.kineto import reader
    from traceinsight.vocab.errors import TraceReadError

    t = KinetoTrace()
    for i in range(300):
        t.cpu_op(f"op{i % 7}", 10.0 * i, 5.0)
    path = t.write(tmp_path / "t.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": }]}')
    seen: list[tuple[str, bool]] = []
    for mod, name in ((reader, "read"), (ingest, "assemble")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _real=real, _name=name, **k: (seen.append((_name, gc.isenabled())), _real(*a, **k))[1])
    assert gc.isenabled()
    tl = traceinsight.load(path)
    assert seen == [("read", False), ("assemble", False)] and gc.isenabled()
    with pytest.raises(TraceReadError):
        traceinsight.load(bad)
    assert gc.isenabled() and (tl.events["kind"] == "cpu_op").sum() == 300
