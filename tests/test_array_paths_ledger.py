"""The small-rank shortcuts of the ledger, the steady-state model, TI001, TI002 and TI013 (issue 28: whole jobs of
many tiny ranks), each checked against the computation it replaces: same values, same dtypes, same findings.

Inputs: a tiny rank as the job benchmark writes it (one step, a few launches), variants of it that plant what the
shortcuts look for (a long sync, an allocation, an optimizer step, start-up calls, warm-up), a rank without GPU
work, a rank of one kernel, and the sample traces."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceinsight.derive.ledger as L
import traceinsight.derive.steady as S
from traceinsight.derive.derived import Derived
from traceinsight.ingest import load
from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import (ALLOC_CALL, CAPTURE_BEGIN, COPY_CALL, DATA_WAIT_PRIMARY, DATA_WAIT_TFDATA, FRAMEWORK_DISPATCH, INIT_CALL,
                                   ONE_TIME_CALL, OPTIMIZER, SYNC_CALL, SYNC_OP, SYNC_RANGE)

from .helpers.kineto_writer import KinetoTrace
from .helpers.rule_cases import GEMM, GRID, with_warmup

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
SAMPLE_FILES = ["sync_stalls.json.gz", "dataloader_gaps.json.gz", "tiny_kernels.json.gz", "h100/inference_requests.json.gz",
                "h100/compile_cold.json.gz", "h100/cudagraph_capture.json.gz", "h100/memory_churn.json.gz"]
PATTERNS = [(SYNC_CALL, False), (SYNC_OP, False), (SYNC_RANGE, False), (COPY_CALL, False), (ONE_TIME_CALL, False), (CAPTURE_BEGIN, False),
            (ALLOC_CALL, False), (DATA_WAIT_PRIMARY, True), (DATA_WAIT_TFDATA, True), (FRAMEWORK_DISPATCH, False), (OPTIMIZER, False),
            (INIT_CALL, False)]


def _tiny(t: KinetoTrace) -> None:
    """The job benchmark's rank: one 2 ms step, four GEMMs and an all-reduce launched 300 µs apart."""
    t.step(1, 0.0, 2_000.0)
    for i in range(4):
        t.kernel("gemm", 100.0 + 300 * i, 200.0, launch_us=95.0 + 300 * i, launch_dur_us=4.0)
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1_400.0, 300.0, launch_us=1_395.0, launch_dur_us=4.0)


def _variant(name: str) -> KinetoTrace:
    t = KinetoTrace(rank=3, world_size=8)
    if name == "warmup":
        with_warmup(t, init=True)
        return t
    if name == "gpu-free":  # host rows only
        t.step(1, 0.0, 2_000.0)
        t.cpu_op("aten::add", 10.0, 50.0)
        return t
    if name == "request":  # inference: each step ends in a sync after its last launch, the next gap opens inside it
        for k in range(3):
            t0 = k * 2_000.0
            t.step(k, t0, 2_000.0)
            for i in range(3):
                t.kernel("gemm", t0 + 100.0 + 300 * i, 250.0, launch_us=t0 + 95.0 + 300 * i, launch_dur_us=4.0)
            t.runtime("cudaDeviceSynchronize", t0 + 800.0, 400.0)
        return t
    if name == "startup":  # two steps, the program's own work begins before the first
        t.runtime("cudaGetDeviceProperties", 10.0, 30.0)
        for k in range(2):
            t0 = 500.0 + k * 1_000.0
            t.step(k, t0, 1_000.0)
            t.kernel("gemm", t0 + 100.0, 250.0, launch_us=t0 + 95.0, launch_dur_us=4.0)
        return t
    if name == "one-kernel":
        t.kernel(GEMM, 10.0, 50.0, launch_us=5.0, grid=GRID)
        return t
    _tiny(t)
    if name == "sync":  # a long blocking call, a gap starting inside it
        t.runtime("cudaDeviceSynchronize", 1_000.0, 250.0)
    elif name == "alloc":  # a long allocation and a set-up call: one-time work by name
        t.runtime("cudaMalloc", 20.0, 1_500.0)
        t.runtime("cudaGetDeviceProperties", 1_600.0, 30.0)
    elif name == "optimizer":  # an optimizer range over the host's gaps
        t.cpu_op("Optimizer.step#AdamW.step", 300.0, 1_000.0)
    elif name == "pageable":  # an async copy into pageable memory: the driver blocks the call
        t.memcpy("DtoH", 1_750.0, 100.0, 1 << 20, pageable=True, launch_us=1_720.0, launch_dur_us=150.0)
        t.memcpy("HtoD", 20.0, 50.0, 1 << 20, pageable=True, launch_us=10.0)
    elif name == "long-op":  # a long first call of an op, the candidate warm-up looks at
        for i in range(4):
            t.cpu_op("aten::conv2d", 10.0 + 400 * i, 1_200.0 if i == 0 else 20.0)
    return t


VARIANTS = ["tiny", "sync", "alloc", "optimizer", "long-op", "warmup", "gpu-free", "one-kernel", "request", "startup", "pageable"]


@pytest.fixture(scope="module")
def timelines(tmp_path_factory):
    d = tmp_path_factory.mktemp("fast_fledger")
    out = {v: load(_variant(v).write(d / f"{v}.json")) for v in VARIANTS}
    for f in SAMPLE_FILES:
        out[f] = load(SAMPLES / f)
    return out


CASES = VARIANTS + SAMPLE_FILES


def _full_path(monkeypatch) -> None:
    """Every ``may_match`` answers "maybe": the masks it lets the code skip are built again (the path it replaced)."""
    always = lambda names, pattern, case=False: len(names) > 0  # noqa: E731
    for mod in ("traceinsight.derive.steady", "traceinsight.derive.ledger.host", "traceinsight.derive.ledger.build", "traceinsight.rulelib.warmup",
                "traceinsight.rules.gpu_idle_gaps"):
        monkeypatch.setattr(f"{mod}.may_match", always)


# --- may_match: a skip only where the mask is all False ------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_may_match_is_false_only_when_no_row_matches(timelines, case):
    host = Derived(timelines[case]).host_events
    for pattern, case_sensitive in PATTERNS:
        names = host["name"]
        hit = name_mask(names, pattern, case=case_sensitive)
        if hit.any():
            assert S.may_match(names, pattern, case=case_sensitive)
        # on the categories: some category matches exactly when may_match says so
        if isinstance(names.dtype, pd.CategoricalDtype) and len(names):
            rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
            any_cat = any(rx.search(str(c)) is not None for c in names.cat.categories)
            assert S.may_match(names, pattern, case=case_sensitive) == any_cat


def test_may_match_plain_and_empty_columns():
    plain = pd.Series(["cudaMalloc", "gemm"], dtype=object)
    assert S.may_match(plain, ALLOC_CALL) and S.may_match(plain, SYNC_CALL)  # not categorical: always "maybe"
    assert not S.may_match(pd.Series([], dtype=object), ALLOC_CALL)
    cat = pd.Series(pd.Categorical(["gemm", "cudaLaunchKernel"]))
    assert not S.may_match(cat, ALLOC_CALL) and S.may_match(cat, "launch") and not S.may_match(cat, "launch", case=True)
    assert not S.may_match(cat.iloc[:0], "gemm")


# --- the ledger: the same frames with and without the skips; its arrays equal its frames -------------------------
def _frames(led):
    return {f: getattr(led, f) for f in ("slices", "by_device", "by_step", "windows", "gaps", "warmup")}


@pytest.mark.parametrize("case", CASES)
def test_ledger_equals_the_full_path(timelines, case, monkeypatch):
    fast = _frames(L.build_ledger(Derived(timelines[case])))
    _full_path(monkeypatch)
    full = _frames(L.build_ledger(Derived(timelines[case])))
    for f in fast:
        pd.testing.assert_frame_equal(fast[f], full[f], check_exact=True)


@pytest.mark.parametrize("case", CASES)
def test_warmup_and_one_time_regions_equal_the_full_path(timelines, case, monkeypatch):
    v = Derived(timelines[case])
    blocking = L.blocking_parts(v)
    fast = (L.warmup_regions(v, blocking), S.one_time_regions(v, blocking), blocking)
    _full_path(monkeypatch)
    w = Derived(timelines[case])
    full_blocking = L.blocking_parts(w)
    full = (L.warmup_regions(w, full_blocking), S.one_time_regions(w, full_blocking), full_blocking)
    pd.testing.assert_frame_equal(fast[0], full[0], check_exact=True)
    pd.testing.assert_frame_equal(fast[1], full[1], check_exact=True)
    assert [(p[3], p[0].tolist(), p[1].tolist(), p[2].tolist()) for p in fast[2]] == [(p[3], p[0].tolist(), p[1].tolist(), p[2].tolist()) for p in full[2]]


def test_program_start_up_before_two_steps(timelines):
    regions = L.warmup_regions(Derived(timelines["startup"]))
    assert "before the first step (program start-up)" in regions["reason"].tolist()


@pytest.mark.parametrize("case", CASES)
def test_slice_steps_are_the_markers_containing_them(timelines, case):
    """Each slice's step, against the step markers looked up on the frame: the latest-starting marker of its rank that
    contains the slice's start, -1 outside every marker."""
    v = Derived(timelines[case])
    sl, st = v.ledger.slices, v.steps
    for rank, start, step in zip(sl["rank"].tolist(), sl["start_ns"].tolist(), sl["step"].tolist()):
        m = st[(st["rank"] == rank) & (st["start_ns"] <= start) & (st["end_ns"] > start)] if len(st) else st
        assert step == (int(m.sort_values("start_ns", kind="stable")["step"].iloc[-1]) if len(m) else -1)
    if case in ("tiny", "request"):
        assert (sl["step"] >= 0).any()


@pytest.mark.parametrize("case", CASES)
def test_warmup_candidates_on_codes_equal_the_plain_columns(timelines, case):
    """The categorical path (kinds first, then names by category) against the per-row masks of plain columns."""
    host = Derived(timelines[case]).host_events
    dur = host["dur_ns"].to_numpy()
    got = L.warmup._warmup_candidates(host["name"], host["kind"], dur)
    want = L.warmup._warmup_candidates(host["name"].astype(object), host["kind"].astype(object), dur)
    assert got.tolist() == want.tolist()


def test_warmup_candidates_random_rows():
    rng = np.random.default_rng(5)
    names = ["aten::conv2d", "cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "aten::item", "ProfilerStep#3",
             "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", None]
    kinds = ["cpu_op", "runtime", "annotation", "step", None]
    for _ in range(20):
        n = int(rng.integers(0, 60))
        nm = rng.choice(np.array(names, dtype=object), n)
        kd = rng.choice(np.array(kinds, dtype=object), n)
        dur = rng.choice(np.array([10, 999_999, 1_000_000, 5_000_000], dtype=np.int64), n)
        got = L.warmup._warmup_candidates(pd.Series(pd.Categorical(nm)), pd.Series(pd.Categorical(kd)), dur)
        want = L.warmup._warmup_candidates(pd.Series(nm, dtype=object), pd.Series(kd, dtype=object), dur)
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("case", CASES)
def test_ledger_arrays_equal_its_frames(timelines, case):
    """``device_arrays``, ``gap_columns`` and the claims' layout from ``build_ledger``'s arrays against the same read
    from the frames (a copy by ``dataclasses.replace`` has no arrays), and the claims on both."""
    led = Derived(timelines[case]).ledger
    plain = dataclasses.replace(led)
    assert plain._arrays is None
    for a, b in zip(led.device_arrays, plain.device_arrays):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    gc, pc = led.gap_columns, plain.gap_columns
    assert gc.keys() == pc.keys()
    for k in gc:
        assert gc[k].dtype == pc[k].dtype and np.array_equal(gc[k], pc[k], equal_nan=gc[k].dtype.kind == "f"), k
        assert not gc[k].flags.writeable
    gp = led.gaps
    for k in ("rank", "device", "start_ns", "end_ns", "dur_ns", "next_launch_end_ns", "cause"):
        assert gc[k].tolist() == gp[k].tolist() or (k == "next_launch_end_ns" and np.array_equal(gc[k], gp[k].to_numpy(float), equal_nan=True))
    la, lb = led._layout, plain._layout
    assert (la is None) == (lb is None)
    if la is not None:
        assert la["devices"] == lb["devices"]
        for k in ("code", "start", "end", "gap_start", "gap_end"):
            assert la[k].dtype == lb[k].dtype and la[k].tolist() == lb[k].tolist(), k
        assert {b: v.tolist() for b, v in la["gap_ns"].items()} == {b: v.tolist() for b, v in lb["gap_ns"].items()}
    windows = led.windows
    if len(windows):
        s, e = int(windows["start_ns"].min()), int(windows["end_ns"].max())
        within = [(s + (e - s) // 5, s + (e - s) // 2), (e - (e - s) // 4, e)]
        for buckets in (["idle_host_busy", "idle_untraced", "idle_launch_bound"], ["compute"], list(L.BUCKETS)):
            assert led.claimed_ns(buckets, within=within) == plain.claimed_ns(buckets, within=within)
            assert led.claimed_ns(buckets) == plain.claimed_ns(buckets)
            assert led.totals() == plain.totals()


@pytest.mark.parametrize("case", CASES)
def test_host_arrays_equal_the_columns(timelines, case):
    v = Derived(timelines[case])
    ha, host = S.host_arrays(v), v.host_events
    assert S.host_arrays(v) is ha  # kept in the analysis' store
    for c in ("rank", "start_ns", "dur_ns"):
        assert ha[c].dtype == host[c].dtype and ha[c].tolist() == host[c].tolist()
    for c in ("name", "kind"):
        assert ha[c].equals(host[c])
    sa, st = S.step_arrays(v), v.steps
    assert S.step_arrays(v) is sa
    for c in ("rank", "start_ns", "dur_ns", "end_ns", "step"):
        assert sa[c].dtype == st[c].dtype and sa[c].tolist() == st[c].tolist()


# --- the rule library's gap arrays ------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_gap_columns_equal_the_frames(timelines, case):
    from traceinsight.vocab.buckets import IDLE_BUCKETS
    from traceinsight.rulelib.gaps import gap_columns, ledger_gap_columns, ledger_gaps
    from traceinsight.rulelib.warmup import gap_warmup_ns

    v = Derived(timelines[case])
    gaps, lg = v.gaps, ledger_gaps(v)
    gc, lc = gap_columns(v), ledger_gap_columns(v)
    for c in ("rank", "device", "start_ns", "end_ns", "dur_ns"):
        assert gc[c].tolist() == gaps[c].tolist()
    for b in IDLE_BUCKETS:
        if b in lg:
            assert lc[b].tolist() == lg[b].fillna(0).to_numpy(np.int64).tolist()
    assert lc["cause"].tolist() == lg["cause"].to_numpy(dtype=object).tolist()
    assert np.array_equal(lc["next_launch_end_ns"], lg["next_launch_end_ns"].to_numpy(float), equal_nan=True)
    want = lg["idle_warmup"].fillna(0).to_numpy(np.int64) if "idle_warmup" in lg else np.zeros(len(lg), np.int64)
    assert gap_warmup_ns(v).tolist() == want.tolist()


@pytest.mark.parametrize("case", CASES)
def test_sync_calls_and_request_gaps_equal_the_reference(timelines, case):
    from traceinsight.rulelib.enclosing import host_columns, starts_inside
    from traceinsight.rulelib.gaps import closing_syncs, inference_ranks, request_boundary_gaps, sync_calls
    from traceinsight.rulelib.names import kind_mask, names_where

    v = Derived(timelines[case])
    host = v.host_events
    m = kind_mask(host, "runtime")
    if m.any():
        m &= names_where(host["name"], lambda n: n(SYNC_CALL))
    hc = host_columns(v)
    want = pd.DataFrame({c: hc[c][m] for c in ("rank", "start_ns", "dur_ns", "end_ns")})
    pd.testing.assert_frame_equal(sync_calls(v), want, check_exact=True)
    # the request boundaries with the ranks asked first, as before
    ref = np.zeros(len(v.gaps), dtype=bool)
    ranks = inference_ranks(v)
    if not v.gaps.empty and not v.steps.empty and ranks and not want.empty:
        calls = want[np.isin(want["rank"].to_numpy(), np.fromiter(ranks, dtype=np.int64))]
        if not calls.empty:
            ref = starts_inside(v.gaps, calls[closing_syncs(calls, v.steps, v.launches)])
    assert request_boundary_gaps(v, v.gaps).tolist() == ref.tolist()
    if case == "request":  # the case has request boundaries to find
        assert ref.any()


# --- the rules: same findings with the shortcuts taken or not ---------------------------------------------------------
def _findings(timeline, code):
    from traceinsight.job.mapper import MapSettings, per_rank_rules
    from traceinsight.model.serialize import finding_dict
    from traceinsight.rule_api import Context

    rule = next(r for r in per_rank_rules(MapSettings())[0] if r.code == code)
    v = Derived(timeline)
    return [finding_dict(f) for f in rule.check(Context(timeline, v, rule))]


@pytest.mark.parametrize("case", CASES)
def test_ti001_equals_the_full_path(timelines, case, monkeypatch):
    """TI001 with its shortcuts (no optimizer mask without an optimizer name, instances as objects for few gaps)
    against the frame of instances and every mask built."""
    fast = _findings(timelines[case], "TI001")
    _full_path(monkeypatch)
    monkeypatch.setattr("traceinsight.rules.gpu_idle_gaps._FEW_INSTANCES", -1)
    assert fast == _findings(timelines[case], "TI001")


def test_ti001_instances_as_objects_equal_the_frame():
    from traceinsight.model.finding import as_instances, instance_columns
    from traceinsight.rules.gpu_idle_gaps import _instances

    start = np.array([10, 50, 90], np.int64)
    end = np.array([20, 80, 95], np.int64)
    cause = np.array(["data loading", "host busy", "data loading"], dtype=object)
    for rank, device in ((3, 0), (0, 1), (-1, 0)):
        few = instance_columns(as_instances(_instances(start, end, rank, device, cause)))
        frame = instance_columns(as_instances(pd.DataFrame({"start_ns": start, "end_ns": end, "rank": np.full(3, rank), "device": np.full(3, device), "label": cause})))
        for a, b in zip(few, frame):
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
            else:
                assert a == b
    assert _instances(start[:0], end[:0], 0, 0, cause[:0]) == []


@pytest.mark.parametrize("case", CASES)
def test_ti002_answers_at_once_only_without_stalls(timelines, case):
    """TI002's test on arrays is a superset of the stalls ``find_stalls`` keeps: when it says none, none are."""
    from traceinsight.rules.host_sync_stalls import _any_long_blocking, find_stalls

    tl = timelines[case]
    v = Derived(tl)
    stalls = find_stalls(tl.events, v.launches)
    # at the stalls' own lengths too: a stall exactly min_ns long is kept
    for min_ns in sorted({0, 50_000, 200_000, *stalls["dur_ns"].astype(np.int64).tolist()}):
        kept = stalls[stalls["dur_ns"] >= min_ns]
        if not _any_long_blocking(tl.events, min_ns):
            assert kept.empty
        else:
            long = tl.events["dur_ns"].to_numpy() >= min_ns
            assert long.any()
    if case in ("sync", "sync_stalls.json.gz"):
        assert _any_long_blocking(tl.events, 50_000) and _findings(tl, "TI002")


@pytest.mark.parametrize("case", CASES)
def test_ti013_answers_at_once_only_without_warmup_or_startup_calls(timelines, case):
    """TI013's early answer is taken only where the frames it skips are empty, and its findings are those of the
    full path."""
    from traceinsight.rulelib.warmup import gap_warmup_ns, has_startup_calls, startup_call_gaps, warmup_by_gap

    v = Derived(timelines[case])
    if not gap_warmup_ns(v).any() and not has_startup_calls(v):
        assert warmup_by_gap(v).empty and startup_call_gaps(v).empty
    if case == "warmup":
        assert has_startup_calls(v) and _findings(timelines[case], "TI013")


@pytest.mark.parametrize("case", ["warmup", "alloc", "tiny", "h100/compile_cold.json.gz", "dataloader_gaps.json.gz"])
def test_ti013_equals_the_full_path(timelines, case, monkeypatch):
    fast = _findings(timelines[case], "TI013")
    _full_path(monkeypatch)
    monkeypatch.setattr("traceinsight.rules.warmup_in_window.has_startup_calls", lambda views: True)
    assert fast == _findings(timelines[case], "TI013")


@pytest.mark.parametrize("case", CASES)
def test_deferred_frames_equal_their_sums_and_pickle(timelines, case):
    """``by_device`` and ``windows``, built on first read, against the per-step table they sum (every bucket of a
    device, zeros included; a device's buckets add up to its window), and a ledger pickled before either is read."""
    import pickle

    led = Derived(timelines[case]).ledger
    again = pickle.loads(pickle.dumps(led))
    bd, bs, w = led.by_device, led.by_step, led.windows
    if not len(w):
        assert bd.empty
        return
    want = bs.groupby(["rank", "device", "bucket"], sort=False)["ns"].sum()
    got = bd.set_index(["rank", "device", "bucket"])["ns"]
    assert got.to_dict() == want.to_dict()
    assert len(bd) == len(w) * len(L.BUCKETS) and bd["bucket"].tolist()[: len(L.BUCKETS)] == list(L.BUCKETS)
    per_dev = bd.groupby(["rank", "device"])["ns"].sum().to_dict()
    assert per_dev == {(r, d): n for r, d, n in zip(w["rank"].tolist(), w["device"].tolist(), w["window_ns"].tolist())}
    assert (w["window_ns"] == w["end_ns"] - w["start_ns"]).all()
    assert np.allclose(bd["pct"], 100.0 * bd["ns"] / bd[["rank", "device"]].apply(tuple, axis=1).map(per_dev).clip(lower=1))
    pd.testing.assert_frame_equal(again.by_device, bd, check_exact=True)
    pd.testing.assert_frame_equal(again.windows, w, check_exact=True)
    assert list(bd.dtypes.astype(str)) == ["int64", "int64", "str", "int64", "float64"]


@pytest.mark.parametrize("case", CASES)
def test_deferred_gaps_frame_has_the_ledger_columns(timelines, case):
    """The gaps frame built on first read: its columns in order, int64 ns, the cause as the bucket with most ns."""
    from traceinsight.vocab.buckets import IDLE_BUCKETS

    led = Derived(timelines[case]).ledger
    gc = led.gap_columns  # read first: the frame is not needed for it
    g = led.gaps
    if not len(led.slices):
        return
    assert list(g.columns) == ["rank", "device", "start_ns", "end_ns", "dur_ns", "next_launch_end_ns", *IDLE_BUCKETS, "cause"]
    assert str(g["cause"].dtype) == ("str" if len(g) else "object") and str(g["next_launch_end_ns"].dtype) == "float64"
    per = g[list(IDLE_BUCKETS)].to_numpy()
    if len(g):
        assert g["cause"].tolist() == [IDLE_BUCKETS[i] for i in per.argmax(axis=1)]
        assert (per.sum(axis=1) == g["dur_ns"].to_numpy()).all()
    assert gc["cause"].tolist() == g["cause"].tolist()


@pytest.mark.parametrize("case", CASES)
def test_ledger_empty_without_the_slices(timelines, case):
    led = Derived(timelines[case]).ledger
    answer = led.empty
    if led._arrays is not None:  # built by build_ledger: the frame of slices is not made to answer
        assert not isinstance(vars(led)["_slices_frame"], pd.DataFrame)
    assert answer == led.slices.empty == dataclasses.replace(led).empty
    assert answer == (case == "gpu-free")


@pytest.mark.parametrize("case", CASES)
def test_pageable_copies_block_as_the_frame_says(timelines, case):
    """The copies into pageable memory the ledger books as blocking, against the launches joined to their rows on
    the frame (copy kind DtoH, pageable flag), whether or not any row is pageable."""
    v = Derived(timelines[case])
    ev, ln = v.events, v.launches
    got = sorted((int(r), int(s)) for p in L.blocking_parts(v) if p[3] == "copy to pageable host memory" for r, s in zip(p[0], p[1]))
    want = []
    if "pageable" in ev and len(ln):
        rows = ev.loc[ln["gpu_idx"].to_numpy()]
        m = (rows["copy_kind"].astype(object).to_numpy() == "DtoH") & rows["pageable"].to_numpy(dtype=bool)
        want = sorted((int(r), int(s)) for r, s in zip(ln["rank"].to_numpy()[m], ln["launch_start_ns"].to_numpy()[m]))
    assert got == want
    if case == "pageable":
        assert len(got) == 1
