"""The array paths that keep a small rank's fixed cost down (issue 28: whole jobs of many tiny ranks), each checked
on values against the pandas computation it replaces: same values, same dtypes, same order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from traceinsight.model import timeline as T


def test_grid_blocks_per_category_equals_the_extract():
    """Blocks per launch read per distinct grid with one regex each equal ``str.extract`` + row product (the path a
    column that is not categorical still takes), odd spellings and missing grids included."""
    from traceinsight.rulelib.names import grid_blocks

    texts = ["128,1,1", "[2, 3, 4]", "1 x 2 x 3", " 5,5,5 ", "0,1,1", "1,1,1extra", "99999999999999999999,99999999999,7",
             "abc", "1,2", "", "\u0663,1,1", "12,,3"]
    rng = np.random.default_rng(3)
    values = rng.choice(np.array(texts + [None], dtype=object), 200)
    got = grid_blocks(pd.Series(pd.Categorical(values)))
    want = grid_blocks(pd.Series(values, dtype=object))  # the extract on every row
    assert got.dtype == want.dtype == np.float64
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[pd.isna(values)]).all() and (got[values == "128,1,1"] == 128).all()


def _thread_name_inputs(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    pid = rng.integers(-3, 4, n).astype(np.int64)
    tid = rng.integers(0, 5, n).astype(np.int64) * 1000
    is_name = rng.random(n) < 0.7
    names = list(rng.choice(np.array(["main", "", "pt_autograd_0", "dataloader"], dtype=object), n))
    return pid, tid, is_name, [None if rng.random() < 0.1 else x for x in names]


@pytest.mark.parametrize("seed", range(20))
def test_thread_names_equal_drop_duplicates_and_the_merge(seed):
    """Each thread's last non-empty name (``drop_duplicates(keep="last")``), and the per-row lookup, equal to the
    left merge on pid and tid it replaces (NaN where a thread has no name)."""
    from traceinsight.ingest.kineto.columns import _thread_names, thread_name_of

    pid, tid, is_name, names = _thread_name_inputs(seed)
    keep = is_name & np.array([bool(x) for x in names], dtype=bool)
    ref = pd.DataFrame({"pid": pid[keep], "tid": tid[keep], "thread_name": pd.Series(np.array(names, dtype=object)[keep], dtype=object)})
    ref = ref.drop_duplicates(["pid", "tid"], keep="last").reset_index(drop=True)
    got = _thread_names(pid, tid, is_name, names)
    pd.testing.assert_frame_equal(got, ref, check_exact=True)

    rng = np.random.default_rng(100 + seed)
    ev_pid, ev_tid = rng.integers(-3, 4, 60).astype(np.int64), rng.integers(0, 5, 60).astype(np.int64) * 1000
    merged = pd.DataFrame({"pid": ev_pid, "tid": ev_tid}).merge(ref, on=["pid", "tid"], how="left")["thread_name"].to_numpy()
    looked = thread_name_of(ev_pid, ev_tid, got)
    assert pd.Categorical(looked).equals(pd.Categorical(merged))
    assert np.array_equal(pd.isna(looked), pd.isna(merged))


def _launching_pids_reference(pid, correlation, gpu, runtime):
    """The kineto reader's pid mapping as it was: a Series map of correlation ids and the host pids' mode."""
    host_pid_of_corr = pd.Series(pid[runtime], index=correlation[runtime])
    host_pid_of_corr = host_pid_of_corr[~host_pid_of_corr.index.duplicated()]
    host_pids = pid[~gpu]
    main_pid = int(pd.Series(host_pids[host_pids >= 0]).mode().iloc[0]) if (host_pids >= 0).any() else 0
    mapped = pd.Series(correlation[gpu]).map(host_pid_of_corr)
    out = pid.copy()
    out[gpu] = mapped.fillna(main_pid).to_numpy(dtype=np.int64)
    return out


@pytest.mark.parametrize("path", ["small", "arrays", "arrays, pids far apart"])
@pytest.mark.parametrize("seed", range(30))
def test_launching_pids_equal_the_series_map(seed, path, monkeypatch):
    """GPU rows take the pid of their id's first runtime call, else the host's most common pid (smallest of equals);
    ids repeated, ids no call has, no runtime calls at all and no host rows included; on the dict path of a few
    rows, and on the array path (pids counted in a table, or sorted when they lie too far apart for one)."""
    from traceinsight.ingest.kineto import reader
    from traceinsight.ingest.kineto.reader import launching_pids

    if path != "small":
        monkeypatch.setattr(reader, "SMALL_MATCH", -1)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    pid = rng.integers(-1, 4, n).astype(np.int64) * (100 if path != "arrays, pids far apart" else 1 << 40)
    correlation = rng.integers(-1, 12, n).astype(np.int64)
    gpu = rng.random(n) < (1.0 if seed == 0 else 0.5)
    runtime = ~gpu & (correlation >= 0) & (rng.random(n) < (0.0 if seed == 1 else 0.8))
    gpu[0] = True
    got = launching_pids(pid, correlation, gpu, runtime)
    want = _launching_pids_reference(pid, correlation, gpu, runtime)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_int_sums_equal_the_groupby():
    """The efficiency view's kernel time per class: exact int64 sums per distinct key, as the groupby gives them."""
    from traceinsight.derive.efficiency import _int_sums

    rng = np.random.default_rng(5)
    for n, top in ((1, 2**50), (7, 2**50), (300, 2**50), (5000, 10**6), (5000, 2**45)):  # summed as floats or as ints
        keys = rng.choice(np.array(["gemm", "conv", "elementwise", "other"], dtype=object), n)
        values = rng.integers(-1000, top, n).astype(np.int64)
        want = pd.Series(values, dtype=np.int64).groupby(keys).sum()
        got = _int_sums(keys, values)
        assert got == {k: int(v) for k, v in want.items()}
        assert all(type(v) is int for v in got.values())


@pytest.mark.parametrize("seed", range(15))
def test_device_windows_equal_the_reindex(seed):
    """TI003's window per (rank, device): a dict lookup equals the MultiIndex reindex (0 for a device the table
    lacks); a table listing a device twice goes through the reindex itself."""
    from traceinsight.rules.tiny_kernels import _windows

    rng = np.random.default_rng(seed)
    pairs = sorted({(int(r), int(d)) for r, d in rng.integers(0, 4, (int(rng.integers(1, 8)), 2))})
    util = pd.DataFrame({"rank": np.array([p[0] for p in pairs], np.int32), "device": np.array([p[1] for p in pairs], np.int64),
                         "window_ns": rng.integers(1, 10**9, len(pairs)).astype(np.int64)})
    dev_keys = rng.integers(0, 4, (int(rng.integers(1, 10)), 2)).astype(np.int64)
    win = pd.Series(util["window_ns"].to_numpy(), index=pd.MultiIndex.from_arrays([util["rank"].to_numpy().astype(np.int64), util["device"].to_numpy().astype(np.int64)]))
    want = win.reindex(pd.MultiIndex.from_arrays([dev_keys[:, 0], dev_keys[:, 1]])).fillna(0).to_numpy(dtype=float)
    got = _windows(util, dev_keys)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    with pytest.raises(ValueError):  # the reindex's own answer to a device listed twice
        _windows(pd.concat([util, util.iloc[:1]], ignore_index=True), dev_keys)


def _events(rng, n_ranks: int = 2, names_categorical: bool = True) -> pd.DataFrame:
    """A small events frame: per rank a few step markers (some out of time order, one number repeated on a rank),
    runtime calls and the kernels they launch."""
    rows = []
    corr = 0
    for rank in range(n_ranks):
        starts = rng.permutation(4) * 1000
        for i, s in enumerate(starts):
            rows.append(("step", f"ProfilerStep#{i if rank == 0 else 7 - i // 2}", rank, int(s), 900, -1, -1, 11))
        for _ in range(int(rng.integers(1, 12))):
            s = int(rng.integers(0, 4000))
            corr += 1
            rows.append(("runtime", "cudaLaunchKernel", rank, s, 5, -1, corr, 11))
            rows.append(("kernel", "gemm", rank, s + 7, 50, 0, corr if rng.random() < 0.8 else corr + 10_000, 11))
    ev = pd.DataFrame(rows, columns=["kind", "name", "rank", "start_ns", "dur_ns", "device", "correlation", "pid"])
    ev["kind"] = ev["kind"].astype("category")
    ev["name"] = ev["name"].astype("category") if names_categorical else ev["name"].astype(object)
    for c in ("rank", "pid"):
        ev[c] = ev[c].astype(np.int32 if c == "rank" else np.int64)
    ev["step"] = np.full(len(ev), -1, np.int32)
    return ev


@pytest.mark.parametrize("seed", range(10))
def test_assign_steps_through_categories_equals_the_string_path(seed):
    """Step numbers read through the name categories equal the per-row string path (repeated numbers renumbered
    the same way), and GPU rows get their launch's step."""
    rng = np.random.default_rng(seed)
    a = _events(rng)
    b = a.copy()
    b["name"] = b["name"].astype(object)  # the per-row string path
    meta_a, meta_b = T.TraceMeta(source_format="pytorch", path="a"), T.TraceMeta(source_format="pytorch", path="b")
    T.assign_steps(a, meta_a)
    T.assign_steps(b, meta_b)
    assert a["step"].dtype == np.int32 and np.array_equal(a["step"].to_numpy(), b["step"].to_numpy())
    assert meta_a.warnings == meta_b.warnings and meta_a.warnings  # rank 1 repeats its step numbers
    assert (a.loc[a["kind"] == "kernel", "step"] >= 0).any()


@pytest.mark.parametrize("seed", range(10))
def test_inherit_from_launch_column_write_equals_the_loc_write(seed):
    """The launch's value written into a new column array equals the ``.loc`` write an extension column takes."""
    rng = np.random.default_rng(seed)
    a = _events(rng)
    a["step"] = rng.integers(-1, 9, len(a)).astype(np.int32)
    before = a["step"].to_numpy().copy()
    b = a.copy()
    b["step"] = pd.array(a["step"].to_numpy(), dtype="Int32")
    T.inherit_from_launch(a, "step")
    T.inherit_from_launch(b, "step")
    assert a["step"].dtype == np.int32 and b["step"].dtype == "Int32"
    assert np.array_equal(a["step"].to_numpy(), b["step"].to_numpy(dtype=np.int32))
    assert not np.array_equal(a["step"].to_numpy(), before)  # some GPU rows took their launch's step


@pytest.mark.parametrize("seed", range(12))
def test_shared_correlation_ids_equal_duplicated(seed):
    """Runtime calls sharing an id are found on one int64 key per call, as ``duplicated(keep=False)`` on rank, pid
    and id finds them: the same rows unlinked, the same warning."""
    from traceinsight.model import plausible

    rng = np.random.default_rng(seed)
    n = 60
    ev = pd.DataFrame({
        "kind": pd.Categorical(rng.choice(["runtime", "kernel", "cpu_op"], n)),
        "rank": rng.integers(0, 2, n).astype(np.int32),
        "pid": rng.integers(0, 2, n).astype(np.int64) * 7,
        "correlation": rng.integers(-1, 40 if seed % 3 else 400, n).astype(np.int64),
    })
    ref = ev.copy()
    runtime = (ref["kind"] == "runtime").to_numpy() & (ref["correlation"].to_numpy() >= 0)
    host = pd.DataFrame({"rank": ref["rank"].to_numpy()[runtime], "pid": ref["pid"].to_numpy()[runtime], "corr": ref["correlation"].to_numpy()[runtime]})
    dup = host.duplicated(["rank", "pid", "corr"], keep=False).to_numpy()
    meta = SimpleNamespace(warnings=[], warn=lambda w: meta.warnings.append(w))
    plausible._shared_correlations(ev, meta)
    if runtime.sum() < 2 or not dup.any():
        assert meta.warnings == [] and np.array_equal(ev["correlation"].to_numpy(), ref["correlation"].to_numpy())
        return
    bad = host[dup]
    keys = set(zip(bad["rank"].tolist(), bad["corr"].tolist()))
    corr = ref["correlation"].to_numpy()
    unlinked = np.array([(int(r), int(c)) in keys for r, c in zip(ref["rank"], corr)])
    assert np.array_equal(ev["correlation"].to_numpy(), np.where(unlinked, -1, corr))
    assert meta.warnings and meta.warnings[0].startswith(f"{int(dup.sum()):,} runtime calls share")


def _warmup_step_regions_reference(steps: pd.DataFrame) -> list[tuple[int, int, int, str]]:
    from traceinsight.derive.steady import warmup_steps

    out = []
    for r, g in steps.groupby("rank", sort=True):
        d = g.sort_values("start_ns")
        w = warmup_steps(d["dur_ns"].to_numpy())
        if w.any():
            d = d[w]
            out += [(int(r), int(s), int(e), f"warm-up step ({n})") for s, e, n in zip(d["start_ns"], d["end_ns"], d["name"])]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_warmup_steps_per_rank_equal_the_groupby(seed):
    """Leading warm-up steps found per rank on the step arrays equal the groupby + sort_values they replace
    (ranks out of order, equal starts, several warm-up steps)."""
    from traceinsight.derive.steady import one_time_regions

    rng = np.random.default_rng(seed)
    rows = []
    for rank in rng.permutation(3):
        n = int(rng.integers(0, 7))
        starts = np.sort(rng.integers(0, 20, n)) * 10**7
        durs = rng.integers(1, 5, n) * 10**6
        if n > 3:
            durs[: int(rng.integers(1, 3))] = 80 * 10**6  # slow first steps
        rows += [(int(rank), f"ProfilerStep#{i}", int(s), int(d)) for i, (s, d) in enumerate(zip(starts, durs))]
    steps = pd.DataFrame(rows, columns=["rank", "name", "start_ns", "dur_ns"]).astype({"rank": np.int32, "start_ns": np.int64, "dur_ns": np.int64})
    steps["end_ns"] = steps["start_ns"] + steps["dur_ns"]
    views = SimpleNamespace(steps=steps, host_events=pd.DataFrame(), launches=pd.DataFrame(),
                            memo=lambda key, build: build())  # a stand-in's memo keeps nothing
    got = one_time_regions(views, [])
    assert [tuple(x) for x in got[["rank", "start_ns", "end_ns", "reason"]].itertuples(index=False)] == _warmup_step_regions_reference(steps)


def test_sum_by_equals_the_groupby():
    """The job summary's ledger per (step, bucket): the groupby's rows, order, sums and dtypes (step int64)."""
    from traceinsight.derive.ranks.summary import _sum_by

    rng = np.random.default_rng(11)
    n = 120
    frame = pd.DataFrame({"rank": rng.integers(0, 2, n).astype(np.int64), "device": rng.integers(0, 2, n).astype(np.int64),
                          "step": rng.integers(-1, 4, n).astype(np.int64),
                          "bucket": rng.choice(np.array(["busy_compute", "idle_untraced", "idle_data_wait"], dtype=object), n),
                          "ns": rng.integers(0, 10**9, n).astype(np.int64)})
    rows = frame["rank"].to_numpy() == 1
    want = frame[rows].groupby(["step", "bucket"], as_index=False, sort=True)["ns"].sum()
    pd.testing.assert_frame_equal(_sum_by(frame, rows, ["step", "bucket"]), want, check_exact=True)


@pytest.mark.parametrize("order", ["increasing", "tied", "shuffled"])
def test_whatif_steps_keep_the_sorted_order(order):
    """Step markers already strictly in time order are kept as they are; others are sorted as before."""
    from traceinsight.derive.whatif.window import _steps

    m = 6
    t = {"increasing": np.arange(m) * 100, "tied": np.array([0, 100, 100, 300, 300, 500]),
         "shuffled": np.array([300, 0, 500, 100, 400, 200])}[order].astype(np.int64)
    start = np.concatenate([np.zeros(3, np.int64), t, t + 50])  # three other host nodes, then starts, then ends
    nh = len(start)
    marker_steps = np.arange(m)
    got = _steps(start, nh, marker_steps, max_steps=4)
    a = np.arange(nh - 2 * m, nh - m)
    ref = pd.DataFrame({"step": marker_steps, "start_node": a, "end_node": a + m, "t0": start[a], "t1": start[a + m]})
    ref = ref.sort_values("t0").reset_index(drop=True).iloc[1:5].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, ref, check_exact=True)


def test_small_events_frame_equals_the_uncopied_one(monkeypatch):
    """A small events frame built with a copy (columns in 2-D blocks) holds the same columns, dtypes and values as
    one built without; kind categories a reader left in another order are still set to ``KINDS``."""
    rng = np.random.default_rng(2)
    n = 50
    cols = {"kind": pd.Categorical(rng.choice(["kernel", "runtime", "step"], n)), "name": pd.Categorical(rng.choice(["a", "b"], n)),
            "start_ns": rng.integers(0, 10**6, n), "dur_ns": rng.integers(0, 10**3, n), "device": rng.integers(-1, 2, n)}
    small = T.build_events(dict(cols))
    monkeypatch.setattr(T, "SMALL_FRAME_ROWS", 0)
    large = T.build_events(dict(cols))
    pd.testing.assert_frame_equal(small, large, check_exact=True)
    assert small._mgr.nblocks < large._mgr.nblocks
    assert small["kind"].cat.categories.tolist() == list(T.KINDS)
