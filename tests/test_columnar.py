"""The columnar paths behind the speed of the whole job: Finding.instances kept as columns, window queries on
start-ordered indexes, join keys, warm-up first calls by dense groups, the compiled-template cache. Each is
checked against the plain computation it replaces."""

from __future__ import annotations

import json
import re
import pickle

import jinja2
import numpy as np
import pandas as pd
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.derive import ledger as L
from traceinsight.render import render, templating, timeline_svg
from traceinsight.model import serialize
from traceinsight.render.common import smallest_first
from traceinsight.rule_api import Instance, Instances, as_instances, instance_columns
from traceinsight.derive.summary import _kind_counts
from traceinsight.model.timeline import KINDS
from traceinsight.vocab.masks import codes_in, first_of_key, has_repeats, join_keys as _join_keys, kind_mask, name_mask, runs, take_rows
from traceinsight.derive.views import Views


# --- Finding.instances as columns ----------------------------------------------------------------------------
def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 10**12, n)
    return pd.DataFrame(
        {
            "start_ns": s,
            "end_ns": s + rng.integers(0, 10**6, n),
            "rank": rng.integers(-1, 4, n),
            "device": rng.choice([0.0, 1.0, np.nan, 2.7], n),
            "label": rng.choice(np.array(["gap", "sync", None], dtype=object), n),
        }
    )


def _objects(df: pd.DataFrame) -> list[Instance]:
    """What as_instances made before: one Instance per row, through Instance's own normalisation."""
    def ids(col: str) -> list:
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        return [None if x != x or x < 0 else int(x) for x in v.tolist()]

    return [
        Instance(s, e, r, d, lb)
        for s, e, r, d, lb in zip(df["start_ns"].tolist(), df["end_ns"].tolist(), ids("rank"), ids("device"), df["label"].astype(str).tolist())
    ]


def test_instances_from_a_frame_equal_the_objects_and_are_made_only_when_asked():
    df = _frame(500)
    got = as_instances(df)
    assert isinstance(got, Instances) and got._items is None  # columns only
    assert len(got) == 500 and got.columns().start_ns.dtype == np.int64
    assert got._items is None
    want = _objects(df)
    assert got == want and list(got) == want and got[3] == want[3] and got[-2:] == want[-2:]
    assert all(type(i) is Instance for i in got) and {i.label for i in got} == {"gap", "sync", "nan"}
    assert hash(got[0]) == hash(want[0])
    assert pickle.loads(pickle.dumps(got)) == want


def test_instance_columns_of_a_list_and_of_instances_agree():
    df = _frame(300, seed=1)
    a, b = as_instances(df).columns(), instance_columns(_objects(df))
    for x, y in zip(a[:4], b[:4]):
        assert np.array_equal(x, y, equal_nan=True)
    assert [a.label(i) for i in range(300)] == [b.label(i) for i in range(300)]


def test_instances_keep_the_errors_of_instance():
    with pytest.raises(ValueError, match="ends before it starts: 10 > 5"):
        as_instances(pd.DataFrame({"start_ns": [1, 10], "end_ns": [2, 5]}))
    with pytest.raises(TypeError):
        as_instances([(1, 2)])


def test_json_keeps_the_longest_instances_in_time_order(tmp_path, monkeypatch):
    monkeypatch.setattr(serialize, "MAX_INSTANCES", 40)
    df = _frame(200, seed=2)
    df.loc[df.index[:30], "end_ns"] = df["start_ns"].iloc[:30] + 7  # ties in length keep list order
    objs = _objects(df)
    want = sorted(sorted(objs, key=lambda i: -i.dur_ns)[:40], key=lambda i: i.start_ns)
    for inst in (as_instances(df), objs):
        got = serialize.instance_dicts(inst)
        assert got == [{"start_ns": i.start_ns, "end_ns": i.end_ns, "rank": i.rank, "device": i.device, "label": i.label} for i in want]


def test_largest_instance_is_the_first_longest_earliest():
    objs = [Instance(50, 60), Instance(10, 20, 1, 0, "a"), Instance(10, 20, 2, 0, "b"), Instance(0, 5)]
    assert timeline_svg.largest(objs) == Instance(10, 20, 1, 0, "a")
    assert timeline_svg.largest(as_instances(pd.DataFrame({"start_ns": [50, 10, 10], "end_ns": [60, 20, 20], "label": ["x", "y", "z"]}))).label == "y"
    assert timeline_svg.largest([]) is None


# --- views ---------------------------------------------------------------------------------------------------
def _trace(tmp_path):
    t = KinetoTrace()
    for i in range(6):
        b = i * 1000.0
        t.step(i, b, 900.0)
        t.kernel("gemm", b + 100, 300.0, launch_us=b + 50)
        t.kernel("ncclKernel_AllReduce", b + 450, 200.0, launch_us=b + 60)
    return traceinsight.load(t.write(tmp_path / "t.json"))


@pytest.mark.parametrize("frame", Views.WINDOWED)
def test_rows_overlapping_is_the_boolean_mask(tmp_path, frame):
    v = Views(_trace(tmp_path))
    df = getattr(v, frame)
    st = df["start_ns"].to_numpy()
    en = st + df["dur_ns"].to_numpy()
    rng = np.random.default_rng(3)
    for a in rng.integers(int(st.min()) - 10, int(en.max()) + 10, 40):
        b = a + int(rng.integers(0, 3000_000))
        want = np.flatnonzero((st < b) & (en > a))
        assert np.array_equal(v.rows_overlapping(frame, int(a), int(b)), want)
    with pytest.raises(ValueError):
        v.rows_overlapping("steps", 0, 1)


def test_device_rows_and_keys_match_masks(tmp_path):
    v = Views(_trace(tmp_path))
    assert v.device_keys == sorted({(int(r), int(d)) for r, d in zip(v.gpu_activity["rank"], v.gpu_activity["device"])})
    for frame in ("busy", "gaps"):
        df = getattr(v, frame)
        for r, d in v.device_keys:
            on = df[(df["rank"] == r) & (df["device"] == d)]
            pd.testing.assert_frame_equal(df.iloc[v.device_rows(frame, r, d)], on)
            w0, w1 = int(on["start_ns"].min()) + 500_000, int(on["start_ns"].min()) + 2_600_000
            inside = on[(on["end_ns"] > w0) & (on["start_ns"] < w1)]
            pd.testing.assert_frame_equal(df.iloc[v.device_rows(frame, r, d, w0, w1)], inside)


def test_join_keys_are_equal_exactly_when_all_columns_are():
    rng = np.random.default_rng(4)
    n = 2000
    cols = [rng.choice([0, 7, 2**31 - 1], n), rng.choice([3, 2**40, 2**62], n), rng.integers(-(2**62), 2**62, n)]
    cols[2][: n // 2] = cols[2][n // 2 :]  # repeated ids, so equal rows exist
    a = [c[: n // 2] for c in cols]
    b = [c[n // 2 :][::-1] for c in cols]
    ka, kb = _join_keys([(x, y) for x, y in zip(a, b)])
    ta = list(zip(*(x.tolist() for x in a)))
    tb = list(zip(*(x.tolist() for x in b)))
    pairs = rng.integers(0, n // 2, (3000, 2))
    for i, j in pairs:
        assert (ka[i] == kb[j]) == (ta[i] == tb[j])
    assert len(set(ka.tolist())) == len(set(ta))


@pytest.mark.parametrize("spread", [1, 3, 10**9])  # dense ids (a table indexed by key), nearly dense, sparse (a sort)
@pytest.mark.parametrize("seed", [0, 1])
def test_first_of_key_is_a_join_keeping_each_keys_first_row(spread, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 300, 500) * spread - 40  # repeats: the first position of a key must win
    dst = np.concatenate([rng.choice(src, 300), rng.integers(-50, 300 * spread, 200), [src.min() - 1, src.max() + 1]])
    first: dict[int, int] = {}
    for i, k in enumerate(src.tolist()):
        first.setdefault(k, i)
    want = np.array([first.get(k, -1) for k in dst.tolist()])
    np.testing.assert_array_equal(first_of_key(src, dst), want)
    assert (want >= 0).sum() >= 300 and (want < 0).sum() >= 2
    np.testing.assert_array_equal(first_of_key(src[:0], dst), np.full(len(dst), -1))


@pytest.mark.parametrize("spread", [1, 10**12])
def test_has_repeats_tells_a_shared_key(spread):
    keys = np.arange(1000) * spread
    assert not has_repeats(keys) and not has_repeats(keys[:1]) and not has_repeats(keys[:0])
    shared = keys.copy()
    shared[700] = shared[3]
    assert has_repeats(shared)


def test_runs_are_the_stretches_of_rows_equal_in_every_column():
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2, 300).repeat(3), rng.integers(0, 3, 900)
    head, length = runs([a, b])
    want = [i for i in range(len(a)) if i == 0 or (a[i], b[i]) != (a[i - 1], b[i - 1])]
    assert head.tolist() == want and length.sum() == len(a)
    assert length.tolist() == np.diff(want + [len(a)]).tolist()
    assert [len(x) for x in runs([a[:0], b[:0]])] == [0, 0]


def test_name_mask_reuses_category_hits_and_maps_missing_names_to_false():
    s = pd.Series(pd.Categorical(["cudaStreamSynchronize", None, "gemm", "cudaStreamSynchronize"]))
    want = np.array([True, False, False, True])
    assert np.array_equal(name_mask(s, "synchronize"), want)
    assert np.array_equal(name_mask(s.iloc[1:], "synchronize"), want[1:])  # same categories: cached hits
    m = name_mask(s, "synchronize")
    m[:] = False  # a caller may change its mask without touching the cache
    assert np.array_equal(name_mask(s, "synchronize"), want)


def test_masks_on_codes_equal_the_per_row_answer_for_few_and_many_hits():
    rng = np.random.default_rng(6)
    cats = [f"op{i}" for i in range(40)]
    values = rng.choice(np.array([*cats, None], dtype=object), 3000)
    s = pd.Series(pd.Categorical(values, categories=rng.permutation(cats)))  # codes unrelated to names' order
    plain = s.astype(object)
    for pattern in ("op1$", "op1", "op[0-3]", "op", "nothing"):  # one, a few, many, all and no categories
        want = np.array([v is not None and re.search(pattern, v) is not None for v in values])
        assert np.array_equal(name_mask(s, pattern), want), pattern
        assert np.array_equal(name_mask(plain, pattern), want), pattern
    for wanted in (("op3",), tuple(cats[:3]), tuple(cats[:20]), ("absent",)):
        want = np.array([v in wanted for v in values])
        assert np.array_equal(kind_mask(s, wanted), want) and np.array_equal(kind_mask(plain, wanted), want)


def test_kind_counts_equal_value_counts():
    kinds = pd.Series(pd.Categorical(["kernel", "runtime", None, "kernel", "step"], categories=["step", "runtime", "kernel", "gone"]))
    want = {k: int(kinds.value_counts().get(k, 0)) for k in KINDS}
    assert _kind_counts(kinds) == want == _kind_counts(kinds.astype(object))
    assert want["kernel"] == 2 and want["memcpy"] == 0


def test_take_rows_is_pandas_take(tmp_path):
    ev = _trace(tmp_path).events
    ev = ev.set_axis(pd.RangeIndex(5, 5 + 3 * len(ev), 3))  # labels unlike positions
    rng = np.random.default_rng(7)
    picks = [np.zeros(0, np.intp), np.arange(len(ev)), np.arange(2, 9), np.sort(rng.choice(len(ev), 11, replace=False)), np.array([4, 1, 1])]
    for pos in picks:
        got, want = take_rows(ev, pos), ev.take(pos)
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
        assert type(got.index) is type(want.index) and list(got.dtypes) == list(want.dtypes)
        mask = np.zeros(len(ev), bool)
        mask[pos] = True
        if len(np.unique(pos)) == len(pos) and (np.diff(pos) > 0).all():
            pd.testing.assert_frame_equal(take_rows(ev, pos), ev[mask], check_exact=True)


def test_take_rows_keeps_every_column_dtype():
    df = pd.DataFrame(
        {
            "obj": pd.Series(["x", None, "z"], dtype=object),
            "mixed": pd.Series([1, "z", 2.5], dtype=object),
            "text": pd.Series(["a", "b", "c"]),
            "nullable": pd.array([1, None, 3], dtype="Int64"),
            "when": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"]),
            "cat": pd.Categorical(["k", "m", "k"]),
        },
        index=[10, 10, 30],
    )
    for frame in (df, df.drop(columns=["obj", "mixed"])):
        for pos in (np.array([2, 0]), np.array([], np.intp)):
            got, want = take_rows(frame, pos), frame.take(pos)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            assert list(got.dtypes) == list(want.dtypes)


@pytest.mark.parametrize("zone_rows,chunk_blocks", [(2048, 512), (3, 512), (3, 2), (1, 1)])
def test_events_overlapping_is_the_boolean_mask_over_every_kind(tmp_path, monkeypatch, zone_rows, chunk_blocks):
    monkeypatch.setattr(Views, "ZONE_ROWS", zone_rows)  # 3: many blocks, so windows take the zone-map path
    monkeypatch.setattr(Views, "_ZONE_CHUNK_BLOCKS", chunk_blocks)  # 2, 1: the blocks' ends summed in several chunks
    v = Views(_trace(tmp_path))
    st = v.events["start_ns"].to_numpy()
    en = st + v.events["dur_ns"].to_numpy()
    rng = np.random.default_rng(8)
    for a in rng.integers(int(st.min()) - 10, int(en.max()) + 10, 60):
        b = a + int(rng.integers(0, 3000_000 if a % 2 else 300_000))
        assert np.array_equal(v.events_overlapping(int(a), int(b)), np.flatnonzero((st < b) & (en > a)))


def test_window_lanes_show_what_the_view_frames_hold(tmp_path):
    """The lanes read the window's rows off the events; drawn from the views' own frames they are the same."""
    t = KinetoTrace()
    for i in range(4):
        b = i * 1000.0
        t.step(i, b, 900.0)
        t.kernel("gemm", b + 100, 300.0, launch_us=b + 50)
        t.kernel("ncclKernel_AllReduce", b + 450, 200.0, launch_us=b + 60, stream=13)
        t.runtime("cudaStreamSynchronize", b + 700, 150.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI001"])
    v = a.views
    w0, w1 = 1_500_000, 3_200_000
    lanes = timeline_svg.window_lanes(v, w0, w1, v.device_keys, False)
    by_label = {lane["label"]: lane for lane in lanes}
    act = v.gpu_activity
    on = act.iloc[v.rows_overlapping("gpu_activity", w0, w1)]
    for stream, cls in ((7, "k"), (13, "n")):
        rows = on[on["stream"] == stream]
        st = rows["start_ns"].to_numpy()
        want = [(timeline_svg.GUTTER + x, w, lv, cls) for x, w, lv in timeline_svg.coverage_rects(st, st + rows["dur_ns"].to_numpy(), w0, w1)]
        assert want and by_label[f"stream {stream}"]["rects"] == want
    rt = v.runtime_calls.iloc[v.rows_overlapping("runtime_calls", w0, w1)]
    sync = v.is_sync_call.reindex(rt.index).to_numpy()
    st = rt["start_ns"].to_numpy()[sync]
    want = [(timeline_svg.GUTTER + x, w, lv, "y") for x, w, lv in timeline_svg.coverage_rects(st, st + rt["dur_ns"].to_numpy()[sync], w0, w1)]
    assert want and [r for r in by_label["host CUDA API"]["rects"] if r[3] == "y"] == want


def test_smallest_first_is_the_head_of_a_stable_argsort():
    rng = np.random.default_rng(9)
    for trial in range(400):
        n, k = int(rng.integers(0, 80)), int(rng.integers(1, 90))
        key = rng.integers(-4, 4, n) if trial % 2 else rng.integers(-(10**12), 10**12, n)  # many ties, then few
        assert np.array_equal(smallest_first(key, k), np.argsort(key, kind="stable")[:k])


# --- ledger warm-up first calls ------------------------------------------------------------------------------
def test_first_calls_by_name_code_equal_the_hashed_groups():
    rng = np.random.default_rng(5)
    n = 5000
    names = pd.Series(pd.Categorical(rng.choice(["a", "b", "c", "d", None], n)))
    start = rng.integers(0, 10**6, n) // 100 * 100  # ties in start
    dur = np.where(rng.random(n) < 0.02, 5 * L.WARMUP_MIN_NS, rng.integers(1, 10**5, n))
    cand = rng.random(n) < 0.8
    one = L.warmup._outlier_first_calls(names, cand, np.zeros(n, np.int32), start, dur)  # dense groups by name code
    hashed = L.warmup._outlier_first_calls(names.astype(object), cand, np.zeros(n, np.int32), start, dur)  # general path
    assert np.array_equal(one, hashed)
    # the same rows on a second rank (the general path): rank 0's first calls are unchanged, rank 1's follow
    two = L.warmup._outlier_first_calls(
        pd.Series(pd.concat([names, names], ignore_index=True).astype("category")), np.r_[cand, cand],
        np.r_[np.zeros(n, np.int32), np.ones(n, np.int32)], np.r_[start, start], np.r_[dur, dur],
    )
    assert np.array_equal(two, np.r_[one, one + n])


# --- the compiled-template cache -----------------------------------------------------------------------------
def test_template_cache_renders_the_same_and_survives_damage(tmp_path, monkeypatch):
    a = traceinsight.analyze(_trace(tmp_path))
    monkeypatch.setenv(templating.CACHE_ENV, "")
    templating.env.cache_clear()
    plain = render(a, "html")
    cache = tmp_path / "cache"
    monkeypatch.setenv(templating.CACHE_ENV, str(cache))
    templating.env.cache_clear()
    assert render(a, "html") == plain
    files = list((cache / "templates").glob("tmpl-*.cache"))
    assert files  # compiled once, kept
    templating.env.cache_clear()
    assert render(a, "html") == plain  # read back
    for f in files:
        f.write_bytes(b"not a cache")
    templating.env.cache_clear()
    assert render(a, "html") == plain
    templating.env.cache_clear()
    monkeypatch.delenv(templating.CACHE_ENV)


def test_json_report_lists_every_instance_in_order_when_under_the_cap(tmp_path):
    a = traceinsight.analyze(_trace(tmp_path), min_impact=0)
    doc = json.loads(render(a, "json"))
    timed = [(f, fd) for f, fd in zip(a.findings, doc["findings"]) if len(f.instances)]
    assert timed and all(isinstance(f.instances, Instances) for f, _ in timed)  # the built-in rules pass frames
    for f, fd in timed:
        assert fd["total_instances"] == len(f.instances) <= serialize.MAX_INSTANCES
        assert fd["instances"] == [{"start_ns": i.start_ns, "end_ns": i.end_ns, "rank": i.rank, "device": i.device, "label": i.label} for i in f.instances]


def test_template_cache_is_not_read_from_a_folder_others_can_write(tmp_path, monkeypatch):
    """Compiled templates are code: a world-writable cache folder (shared /tmp, a restored CI cache) is ignored."""
    cache = tmp_path / "shared"
    (cache / "templates").mkdir(parents=True)
    (cache / "templates").chmod(0o777)
    monkeypatch.setenv(templating.CACHE_ENV, str(cache))
    assert templating.template_cache(jinja2.Environment()) is None
    (cache / "templates").chmod(0o700)
    assert templating.template_cache(jinja2.Environment()) is not None
    templating.env.cache_clear()


def test_template_cache_key_covers_every_environment_option(tmp_path, monkeypatch):
    """A compiled template is reused only by an environment that would compile the same code: with a warm cache,
    turning autoescape off (or changing a filter, an option) must compile afresh, not replay the old code."""
    monkeypatch.setenv(templating.CACHE_ENV, str(tmp_path / "cache"))

    def rendered(autoescape=True, shout=str.upper, **options):
        env = jinja2.Environment(loader=jinja2.DictLoader({"t.html": "{{ x }}|{{ x | shout }}"}), autoescape=autoescape, **options)
        env.filters["shout"] = shout
        env.bytecode_cache = templating.template_cache(env)
        return env.get_template("t.html").render(x="<b>"), templating.environment_key(env, "t.html")

    escaped, key = rendered()
    assert escaped == "&lt;b&gt;|&lt;B&gt;"
    assert len(list((tmp_path / "cache" / "templates").glob("tmpl-*.cache"))) == 1
    assert rendered() == (escaped, key)  # same environment: read back
    raw, raw_key = rendered(autoescape=False)
    assert raw == "<b>|<B>" and raw_key != key
    keys = {key, raw_key}
    for change in ({"shout": str.lower}, {"trim_blocks": True}, {"keep_trailing_newline": True}, {"variable_start_string": "{{", "finalize": str}, {"extensions": ["jinja2.ext.loopcontrols"]}):
        keys.add(rendered(**change)[1])
    assert len(keys) == 7
    assert rendered(shout=str.lower)[0] == "&lt;b&gt;|&lt;b&gt;"
    # a select_autoescape function is decided per template name
    env = jinja2.Environment(autoescape=jinja2.select_autoescape(["html"], default_for_string=False))
    assert templating.environment_key(env, "a.html") != templating.environment_key(env, "a.txt")


def test_the_report_renders_without_any_cache(tmp_path, monkeypatch):
    a = traceinsight.analyze(_trace(tmp_path))
    monkeypatch.setenv(templating.CACHE_ENV, "")
    templating.env.cache_clear()
    try:
        assert templating.env().bytecode_cache is None
        assert "<!DOCTYPE html>" in render(a, "html")
        assert not any(tmp_path.rglob("tmpl-*.cache"))
    finally:
        templating.env.cache_clear()


@pytest.mark.parametrize("n_wanted", [0, 1, 3, 16, 17, 40])
@pytest.mark.parametrize("missing", [False, True])
def test_codes_in_is_a_table_lookup_with_missing_codes(n_wanted, missing):
    rng = np.random.default_rng(n_wanted)
    codes = rng.integers(-1, 60, 5000).astype(np.int8)
    hit = np.zeros(60, dtype=bool)
    hit[rng.choice(60, n_wanted, replace=False)] = True
    want = np.array([missing if c < 0 else hit[c] for c in codes.tolist()])
    assert np.array_equal(codes_in(codes, hit, missing=missing), want)
