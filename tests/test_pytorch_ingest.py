"""PyTorch Profiler ingestion, checked against an independent reading of each corpus file with the stdlib.

The reference below uses ``json`` + plain Python (sorting and a running maximum) and shares no code with the
parser or the views, so an agreement means the numbers are right, not merely self-consistent.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import traceinsight
from traceinsight.model.steps import OPTIMIZER_STEP
from traceinsight.model.timeline import COLUMNS, KINDS
from traceinsight.derive.views import Views

from .conftest import corpus_file, corpus_glob
from .helpers.kineto_writer import KinetoTrace

FILES = [Path(p).name for p in corpus_glob("pytorch/*.json.gz")]

_KIND = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
    "cuda_sync": "gpu_sync", "cuda_runtime": "runtime", "cuda_driver": "runtime", "runtime": "runtime",
    "cpu_op": "cpu_op", "operator": "cpu_op", "python_function": "python", "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
}  # fmt: skip


def _reference(path: Path) -> dict:
    """Counts by kind, span and per-device busy % from the raw JSON, computed the slow obvious way."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    counts: Counter = Counter()
    intervals: dict[int, list[tuple[float, float]]] = {}
    lo, hi = float("inf"), float("-inf")
    for e in events:
        kind = _KIND.get(str(e.get("cat", "")).lower(), "other")
        if kind in ("annotation", "cpu_op") and re.match(r"^ProfilerStep#\d+$", e["name"]):
            kind = "step"
        counts[kind] += 1
        ts, dur = float(e["ts"]), float(e.get("dur", 0) or 0)
        lo, hi = min(lo, ts), max(hi, ts + dur)
        if kind in ("kernel", "memcpy", "memset"):
            args = e.get("args", {})
            dev = int(args.get("device", e["pid"]))
            intervals.setdefault(dev, []).append((ts, ts + dur))
    busy = {}
    for dev, iv in intervals.items():
        iv.sort()
        total, cur_s, cur_e = 0.0, iv[0][0], iv[0][1]
        for s, e in iv[1:]:
            if s > cur_e:
                total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        total += cur_e - cur_s
        window = max(e for _, e in iv) - iv[0][0]
        busy[dev] = 100.0 * total / window if window else 0.0
    return {"counts": counts, "span_us": hi - lo, "busy": busy}


@pytest.mark.parametrize("name", FILES)
def test_corpus_file_matches_independent_reading(name):
    path = corpus_file(f"pytorch/{name}")
    tl = traceinsight.load(path)
    ref = _reference(path)
    # the iterations found from the optimizer's calls (a trace without step markers) are rows the reader derives,
    # not rows of the file: one per iteration, named so
    derived = tl.events["name"].astype(str).str.startswith(OPTIMIZER_STEP).to_numpy()
    assert not derived.any() or tl.meta.extra["steps_source"]["how"] == "optimizer"
    got = tl.events.loc[~derived, "kind"].value_counts()
    for kind in KINDS:
        assert int(got.get(kind, 0)) == ref["counts"].get(kind, 0), kind
    assert tl.span_ns / 1e3 == pytest.approx(ref["span_us"], abs=1.0)
    util = Views(tl).utilization
    assert {int(d): round(b, 2) for d, b in zip(util["device"], util["busy_pct"])} == pytest.approx(
        {d: round(b, 2) for d, b in ref["busy"].items()}, abs=0.05
    )
    # Schema: every required column with its dtype, times start at 0, host rows carry device -1.
    for col, dtype in COLUMNS.items():
        assert str(tl.events[col].dtype) == dtype, col
    assert int(tl.events["start_ns"].min()) == 0
    host = tl.events[tl.events["kind"].isin(["runtime", "cpu_op", "annotation", "python"])]
    assert (host["device"] == -1).all() and (host["stream"] == -1).all()


@pytest.fixture(scope="module")
def resnet_nw0():
    """The 2021 ResNet-50 kineto timeline, loaded once for the tests of this file (they only read it)."""
    return traceinsight.load(corpus_file("pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz"))


def test_legacy_2021_schema_string_streams(resnet_nw0):
    tl = resnet_nw0
    k = tl.events[tl.events["kind"] == "kernel"]
    assert len(k) == 8772
    assert set(k["stream"].unique()) == {7}  # "stream 7" in the file
    assert (tl.events["kind"] == "step").sum() == 6
    assert tl.meta.devices[0].name == "Tesla V100-DGXS-32GB" and tl.meta.devices[0].sm_count == 80
    # Kernels are linked to their launches and inherit the launch's step.
    v = Views(tl)
    assert len(v.launches) >= 0.99 * len(k)
    assert set(k["step"].unique()) - {-1} <= set(range(5, 11))
    assert (k["step"] >= 0).mean() > 0.9


def test_memcpy_direction_and_pageable(resnet_nw0):
    tl = resnet_nw0
    m = tl.events[tl.events["kind"] == "memcpy"]
    assert len(m) == 12
    assert set(m["copy_kind"].astype(str)) == {"HtoD"}
    assert (m["pageable"].to_numpy() == m["name"].astype(str).str.contains("Pageable").to_numpy()).all()
    assert (m["bytes"] > 0).all()


def test_ns_resolution_floats_keep_sub_microsecond_durations():
    tl = traceinsight.load(corpus_file("pytorch/hta_ns_resolution_v100_rank0.pt.trace.json.gz"))
    k = tl.events[tl.events["kind"] == "kernel"]
    assert (k["dur_ns"] % 1000 != 0).mean() > 0.5  # ns precision survives (HTA rounds to µs)
    assert (k["dur_ns"] >= 0).all()


def test_base_time_nanoseconds_gives_absolute_start():
    tl = traceinsight.load(corpus_file("pytorch/hta_nccl_data_a100_rank0of2.json.gz"))
    assert tl.meta.start_unix_ns is not None
    # unix ns = ts * 1000 + baseTimeNanoseconds; the earliest event of this trace is in 2024.
    assert 1_704_067_200 * 10**9 <= tl.meta.start_unix_ns < 1_735_689_600 * 10**9
    assert tl.meta.world_size == 2 and tl.meta.ranks == [0]


def test_amd_and_b200_without_metadata():
    amd = traceinsight.load(corpus_file("pytorch/tracelens_mi300x_resnet_act_ckpt_rank0of8.json.gz"))
    assert amd.meta.devices[0].vendor == "AMD" and "MI300X" in amd.meta.devices[0].name
    assert (amd.events["kind"] == "kernel").sum() == 2995
    b200 = traceinsight.load(corpus_file("pytorch/tracelens_b200_eager_rank0of8.json.gz"))
    assert (b200.events["kind"] == "kernel").sum() == 768
    assert (b200.events["kind"] == "python").sum() > 10_000


def test_cupti_range_profiler_trace_loads_and_says_why_no_kernels():
    tl = traceinsight.load(corpus_file("pytorch/hta_cupti_range_profiler_a100.json.gz"))
    assert (tl.events["kind"] == "kernel").sum() == 0
    assert any("range-profiler" in w for w in tl.meta.warnings)
    assert Views(tl).utilization.empty


def test_mangled_kernel_names_are_demangled_and_raw_kept():
    tl = traceinsight.load(corpus_file("pytorch/hdai_gru_cudnn_rtx5070ti_laptop.json.gz"))
    k = tl.events[tl.events["kind"] == "kernel"]
    raw = k["raw_name"].astype(str)
    shown = k["name"].astype(str)
    mangled = raw.str.startswith("_Z")
    assert mangled.any()
    import shutil

    if shutil.which("c++filt"):
        assert not shown[mangled].str.startswith("_Z").any()
        assert shown[mangled].str.contains("RNN_blockPersist").any()


def test_rank_folder_reads_ranks_from_distributed_info():
    tl = traceinsight.load(corpus_file("pytorch/param_dlrm_v100_8ranks"))
    assert tl.meta.ranks == list(range(8))
    assert sorted(tl.events["rank"].unique().tolist()) == list(range(8))
    per_rank = tl.events[tl.events["kind"] == "kernel"].groupby("rank").size()
    assert per_rank.sum() == 2104
    util = Views(tl).utilization
    assert len(util) == 8
    assert util["busy_pct"].round(1).tolist() == [50.7, 65.7, 37.9, 56.8, 46.4, 44.4, 38.2, 24.2]


def test_rank_folder_without_rank_info_uses_file_order(tmp_path):
    from .helpers.kineto_writer import KinetoTrace

    for i in range(2):
        t = KinetoTrace()
        t.kernel("k", 100.0 + i, 10.0)
        path = t.write(tmp_path / f"worker{i}.json")
        doc = json.loads(path.read_text())
        doc.pop("distributedInfo", None)
        path.write_text(json.dumps(doc))
    tl = traceinsight.load(tmp_path)
    assert tl.meta.ranks == [0, 1]
    assert any("file-name order" in w for w in tl.meta.warnings)


def test_detection_is_by_content_not_extension(tmp_path):
    odd = tmp_path / "trace.data"
    odd.write_bytes(gzip.decompress((corpus_file("pytorch/hta_event_sync_a100.json.gz")).read_bytes()))
    assert traceinsight.ingest.detect(odd) == "pytorch"
    tl = traceinsight.load(odd)
    assert (tl.events["kind"] == "kernel").sum() == 4


def test_events_are_int64_ns_and_sorted_columns_are_consistent():
    tl = traceinsight.load(corpus_file("pytorch/hta_event_sync_a100.json.gz"))
    ev = tl.events
    assert ev["start_ns"].dtype == np.int64 and ev["dur_ns"].dtype == np.int64
    assert (ev["dur_ns"] >= 0).all()
    syncs = ev[ev["kind"] == "gpu_sync"]["name"].astype(str).tolist()
    assert sorted(syncs) == ["Context Sync", "Event Sync", "Event Sync", "Stream Sync"]


@pytest.mark.slow
def test_trace_recorded_here_with_torch_profiler_on_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 32)
    path = tmp_path / "cpu.pt.trace.json"
    expected: dict[str, int] = {}

    def ready(p):
        p.export_chrome_trace(str(path))
        # The profiler's own counts of what it recorded (3 active steps, 2 Linear layers each).
        expected.update({e.key: e.count for e in p.key_averages() if e.key in ("aten::addmm", "aten::relu")})

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3), record_shapes=True, on_trace_ready=ready) as prof:
        for _ in range(4):
            with record_function("my_forward"):
                model(x).sum().backward()
            prof.step()
    tl = traceinsight.load(path)
    ev = tl.events
    ops = ev[ev["kind"] == "cpu_op"]["name"].astype(str)
    assert expected == {"aten::addmm": 6, "aten::relu": 3}
    assert expected and {k: int((ops == k).sum()) for k in expected} == expected
    steps = ev[ev["kind"] == "step"]["name"].astype(str).tolist()
    assert len(steps) == 3 and all(s.startswith("ProfilerStep#") for s in steps)
    assert (ev[ev["kind"] == "annotation"]["name"].astype(str) == "my_forward").sum() == 3
    assert (ev.loc[ev["kind"] == "cpu_op", "step"] >= 0).all()
    shapes = set(ev.loc[ev["name"] == "aten::addmm", "input_shapes"].astype(str))
    assert shapes == {"[[64], [16, 32], [32, 64], [], []]", "[[8], [16, 64], [64, 8], [], []]"}
    assert tl.meta.devices == [] and any("no GPU kernels" in w for w in tl.meta.warnings)


def test_pageable_flag_row_by_row(tmp_path):
    # pinned and pageable copies of each direction, interleaved: the flag must follow each row's own label
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    plan = [("HtoD", True), ("HtoD", False), ("DtoH", False), ("DtoH", True), ("HtoD", True), ("DtoD", False)]
    for i, (kind, pageable) in enumerate(plan):
        t.memcpy(kind, 10.0 + i * 100, 20.0, 4096, launch_us=5.0 + i * 100, pageable=pageable)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    m = tl.events[tl.events["kind"] == "memcpy"].sort_values("start_ns")
    assert m["pageable"].tolist() == [p for _, p in plan]
    assert m["copy_kind"].astype(str).tolist() == [k for k, _ in plan]
