"""The workload block of the JSON report: top-level framework ops, their GPU work, shapes, batch, warm-up steps."""

from __future__ import annotations

import pytest

import traceinsight
from traceinsight.derive import workload

from .helpers.kineto_writer import KinetoTrace


def of(a) -> dict:
    """The workload block of an analysis, as the JSON report builds it."""
    return workload.of(a.views.views, a.ledger.warmup)


def _trace(tmp_path, *, first_step_us: float = 900.0, batch: int = 16):
    t = KinetoTrace()
    at = 0.0
    for s in range(5):
        dur = first_step_us if s == 0 else 900.0
        # aten::linear wraps the vendor op aten::addmm that launches the GEMM; aten::relu launches its own kernel
        t.cpu_op("aten::linear", at + 10, 300, args={"Input Dims": [[batch, 128], [128, 128], [128]]})
        t.cpu_op("aten::addmm", at + 20, 200, args={"Input Dims": [[128], [batch, 128], [128, 128]]})
        t.kernel("ampere_sgemm_64x32_tn", at + 60, 150, launch_us=at + 40)
        t.cpu_op("aten::relu", at + 400, 50, args={"Input Dims": [[batch, 128]]})
        t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::ReluFunctor<float>>()", at + 430, 20, launch_us=at + 410)
        t.memcpy("DtoH", at + 500, 10, 4096)  # launched outside every op
        t.step(s + 1, at, dur)
        at += dur + 10
    return t.write(tmp_path / "t.json")


def test_gpu_work_is_tied_to_the_outermost_op(tmp_path):
    w = of(traceinsight.analyze(_trace(tmp_path)))
    ops = {o["name"]: o for o in w["ops"]}
    assert set(ops) == {"aten::linear", "aten::relu"}  # aten::addmm is inside aten::linear: not top level
    assert ops["aten::linear"]["per_step"] == 1 and ops["aten::linear"]["gpu_ns_per_step"] == pytest.approx(150_000)
    k = {x["name"]: x for x in w["kernels"]}
    assert k["ampere_sgemm_64x32_tn"]["op"] == "aten::linear" and k["ampere_sgemm_64x32_tn"]["class"] == "gemm"
    copy = next(x for x in w["kernels"] if x["class"] == "copy")
    assert copy["op"] == "" and copy["count"] == 5
    assert w["batch"] == 16
    assert {(s["name"], s["shapes"]) for s in w["shapes"]} == {("aten::linear", "[[16, 128], [128, 128], [128]]"), ("aten::relu", "[[16, 128]]")}


def test_a_warm_up_first_step_is_marked_and_left_out_of_per_step(tmp_path):
    w = of(traceinsight.analyze(_trace(tmp_path, first_step_us=20_000)))
    assert [s["warmup"] for s in w["steps"]] == [True, False, False, False, False]
    assert w["steady_steps"] == 4
    k = {x["name"]: x for x in w["kernels"]}
    assert k["ampere_sgemm_64x32_tn"]["count"] == 5 and k["ampere_sgemm_64x32_tn"]["per_step"] == 1


def test_no_batch_without_two_dimensional_inputs(tmp_path):
    t = KinetoTrace()
    for s in range(3):
        t.cpu_op("aten::add", s * 100 + 10, 20, args={"Input Dims": [[128], [128]]})
        t.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()", s * 100 + 40, 10, launch_us=s * 100 + 15)
        t.step(s + 1, s * 100, 90)
    w = of(traceinsight.analyze(t.write(tmp_path / "t.json")))
    assert w["batch"] is None and w["ops"][0]["name"] == "aten::add"


def test_ops_that_build_the_batch_inside_the_data_wait_are_not_the_workload(tmp_path):
    """A loader on the training thread (``num_workers=0``) traces the batch's construction inside
    ``enumerate(DataLoader)#...``: 65 ops per step against the model's 12. They leave with the loader's workers, so
    they are not the workload, and the fix diffs as the same model, faster."""
    from traceinsight.delta import diff

    from .helpers.model_traces import write_model

    main = write_model(tmp_path / "main_thread.json", data_wait_us=3000, loader_ops=True, seed=1)
    workers = write_model(tmp_path / "workers.json", seed=2)
    ops = {o["name"]: o["per_step"] for o in of(traceinsight.analyze(main))["ops"]}
    assert ops == {"aten::linear": 6, "aten::relu": 6}  # no aten::to / aten::div / aten::stack
    assert of(traceinsight.analyze(main))["batch"] == 32  # the samples' [3, 32, 32] are not the batch
    d = diff(main, workers).data
    assert d["comparability"]["comparable"] and d["comparability"]["in_common_pct"] == 100.0
    assert d["verdict"] == "faster" and d["step"]["change_pct"] < -50


# --- repeated regions: matched once per distinct name, the same rows as matching every row --------------------
def _repeats_per_row(views) -> list:
    """The per-row reference ``workload.repeats`` replaced: every row's name cast to text and matched."""
    import re

    import numpy as np

    from traceinsight.vocab.masks import kind_mask

    host, ln = views.host_events, views.launches
    out, taken = [], set()
    for kind, kinds, pattern in workload.REPEAT_KINDS:
        pos = np.flatnonzero(kind_mask(host["kind"], kinds))
        if not len(pos):
            continue
        raw = host["name"].iloc[pos].astype(str)
        hit = raw.str.contains(pattern, regex=True).to_numpy() & ~raw.str.startswith("ProfilerStep").to_numpy()
        pos, raw = pos[hit], raw[hit]
        if not len(pos):
            continue
        names = raw.str.replace(re.compile(workload._REPEAT_NOISE.pattern), "", regex=True).to_numpy().astype(str)
        uniq, inv, counts = np.unique(names, return_inverse=True, return_counts=True)
        total = np.bincount(inv, weights=host["dur_ns"].to_numpy()[pos].astype(np.float64), minlength=len(uniq))
        keep = [i for i in np.argsort(-total, kind="stable").tolist() if counts[i] >= 2 and str(uniq[i]) not in taken][:3]
        for i in keep:
            times = _occurrence_times_every_launch(host, ln, pos[inv == i])
            if len(times) >= 2:
                taken.add(str(uniq[i]))
                out.append({"kind": kind, "name": str(uniq[i]), "count": int(len(times)), "dur_ns": [int(t) for t in times[:5000]]})
    return out


def _occurrence_times_every_launch(host, ln, sel):
    """The reference occurrence times: each thread's occurrences against every launch of the trace."""
    import numpy as np
    import pandas as pd

    rank = host["rank"].to_numpy()[sel].astype(np.int64)
    tid = host["tid"].to_numpy()[sel].astype(np.int64)
    start = host["start_ns"].to_numpy()[sel].astype(np.int64)
    end = start + host["dur_ns"].to_numpy()[sel].astype(np.int64)
    order = np.lexsort((-end, start, tid, rank))
    rank, tid, start, end = rank[order], tid[order], start[order], end[order]
    new = np.r_[True, (rank[1:] != rank[:-1]) | (tid[1:] != tid[:-1])]
    reach = pd.Series(end).groupby(np.cumsum(new)).cummax().to_numpy()
    outer = new.copy()
    outer[1:] |= start[1:] >= reach[:-1]
    rank, tid, start, end = rank[outer], tid[outer], start[outer], end[outer]
    first = np.full(len(start), np.iinfo(np.int64).max)
    last = np.full(len(start), np.iinfo(np.int64).min)
    l_rank, l_tid, l_t = (ln[c].to_numpy().astype(np.int64) for c in ("rank", "tid", "launch_start_ns"))
    g_s = ln["gpu_start_ns"].to_numpy().astype(np.int64)
    g_e = g_s + ln["gpu_dur_ns"].to_numpy().astype(np.int64)
    for i in range(len(start)):
        on = (l_rank == rank[i]) & (l_tid == tid[i]) & (l_t >= start[i]) & (l_t < end[i])
        if on.any():
            first[i], last[i] = g_s[on].min(), g_e[on].max()
    times = np.where(last > np.iinfo(np.int64).min, last - first, end - start)
    return times[np.argsort(start, kind="stable")]


def _repeats_trace(tmp_path):
    t = KinetoTrace()
    at = 0.0
    for s in range(4):
        t.step(s + 1, at, 900)
        t.annotation(f"ProfilerStep#{s + 1}", at, 900)  # a step marker is never a repeat
        t.annotation("ProfilerStep (outer)", at + 1, 800)  # nor a range named like one, however often it repeats
        t.cpu_op(f"Torch-Compiled Region: {s % 2}/0", at + 10, 300)  # one region whatever its counter
        t.kernel("triton_poi_fused_0", at + 60, 150, launch_us=at + 40)
        t.annotation("## Call CompiledFxGraph abc ##", at + 20, 200)  # also a user range: listed once
        t.annotation("forward", at + 350, 200)
        t.annotation("forward", at + 360, 50)  # nested in the same name: the same call
        t.annotation(f"once {s}", at + 600, 20)  # seen once: not a repeat
        t.runtime("cudaGraphLaunch", at + 700, 10)
        at += 1000
    return t.write(tmp_path / "r.json")


def test_repeats_match_once_per_name_as_every_row_would(tmp_path):
    from traceinsight.derive.views import Views

    tl = traceinsight.load(_repeats_trace(tmp_path))
    got = workload.repeats(Views(tl))
    assert got == _repeats_per_row(Views(tl))
    by = {(r["kind"], r["name"]): r for r in got}
    assert by[("compiled_region", "Torch-Compiled Region")]["count"] == 4
    assert by[("user_range", "forward")]["count"] == 4  # the nested one left out
    assert by[("graph_replay", "cudaGraphLaunch")]["count"] == 4
    assert not any(r["name"].startswith(("ProfilerStep", "once")) for r in got)
    # names missing on some rows (NaN in the categorical) match nothing, per row or per name
    ev = tl.events.copy()
    ann = ev.index[ev["kind"].astype(str).eq("annotation") & ev["name"].astype(str).eq("forward")]
    ev.loc[ann[:3], "name"] = None
    tl2 = type(tl)(ev, tl.meta)
    got2 = workload.repeats(Views(tl2))
    assert len(ann) == 8
    assert got2 == _repeats_per_row(Views(tl2))
    assert {r["name"]: r["count"] for r in got2}["forward"] == 3  # the first call and its nested one are unnamed


def test_distinct_texts_are_the_cast_values_with_missing_as_minus_one():
    import numpy as np
    import pandas as pd

    from traceinsight.vocab.masks import distinct_texts

    cat = pd.Series(pd.Categorical(["b", "a", "b", None, "c"], categories=["a", "b", "c", "unused"]))
    plain = pd.Series(["b", None, "a", np.nan, "b", 3], dtype=object)
    for s in (cat, plain):
        for rows in (np.array([], np.int64), np.array([3]), np.arange(len(s)), np.array([4, 0, 0, 3, 1])):
            codes, texts = distinct_texts(s, rows)
            want = s.iloc[rows].astype(str)
            assert len(codes) == len(rows) and len(set(texts.tolist())) == len(texts)
            assert [None if c < 0 else texts[c] for c in codes] == [None if pd.isna(w) else w for w in want]
            if len(rows):  # only the values these rows hold, each once
                assert sorted(texts.tolist()) == sorted(set(w for w in want if not pd.isna(w)))


def test_largest_pair_is_the_groupby_sorted_and_deduplicated():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(12)
    for trial in range(60):
        n = int(rng.integers(1, 400))
        n_c, n_o = (7, 5) if trial % 2 else (5000, 5000)  # a table of pairs, or too many pairs for one: the groupby
        c = rng.integers(0, n_c, n)
        o = rng.integers(0, n_o if trial % 2 else 6, n)
        d = rng.integers(0, 4, n).astype(np.float64) * 1000.0  # whole ns, many ties
        g = pd.DataFrame({"c": c, "o": o, "d": d}).groupby(["c", "o"], sort=True)["d"].sum().reset_index()
        best = g.sort_values("d", ascending=False, kind="stable").drop_duplicates("c")
        want = dict(zip(best["c"].tolist(), best["o"].tolist()))
        got_c, got_o = workload._largest_pair(c, o, d, n_c, n_o)
        assert dict(zip(got_c.tolist(), got_o.tolist())) == want and len(got_c) == len(want), trial


def test_occurrence_times_take_each_occurrences_own_launches(tmp_path):
    """Each occurrence is timed by the launches inside it on its own thread, whatever lies around it: several
    launches (earliest GPU start to latest GPU end), launches between occurrences and on another thread (none of
    its), an occurrence that launched nothing (its host time) and one of no length; as every launch would be
    looked at one by one."""
    from traceinsight.derive.views import Views

    t = KinetoTrace()
    at = 0.0
    for s in range(5):
        t.step(s + 1, at, 900)
        t.annotation("region", at + 10, 300)  # the main thread's occurrence
        t.annotation("region", at + 400, 100, tid=9)  # the other thread's, launching only in odd steps
        t.annotation("region", at + 600, 0)  # no length: launches at its start are not inside it
        for k in range(3):
            t.kernel(f"k{k}", at + 700 + 40 * k + 5 * s, 30 + k, launch_us=at + 20 + 50 * k)
        t.kernel("between", at + 800, 10, launch_us=at + 350)  # between occurrences: no occurrence's
        t.kernel("at_zero", at + 850, 10, launch_us=at + 600)
        if s % 2:
            t.kernel("other", at + 880, 5 + s, launch_us=at + 450, tid=9)
        at += 1000
    tl = traceinsight.load(t.write(tmp_path / "o.json"))
    got = workload.repeats(Views(tl))
    assert got == _repeats_per_row(Views(tl))
    times = {r["name"]: r["dur_ns"] for r in got}["region"]
    assert len(times) == 15
    # per step, in start order: the main thread's (k0's GPU start to k2's end: 700..812 µs, each step's kernels 5 µs
    # later), the other thread's (its kernel's length in odd steps, else its host time), the empty one (0)
    assert times[:6] == [112_000, 100_000, 0, 112_000, 6_000, 0]
    assert times[-3:] == [112_000, 100_000, 0]
