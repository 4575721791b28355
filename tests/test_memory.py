"""The memory table (``Timeline.memory``) from every reader, and the memory view built on it.

Corpus traces are checked against an independent reading of their raw JSON (the events' own totals, or a running
sum of ``Bytes`` for 2021 files), written here without the readers; synthetic traces come from the test writers
in the real formats (kineto JSON with CUDA and HIP device types, Nsight Systems SQLite with the memory and UM
tables, an XSpace with BFC allocator events).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

import traceinsight
from traceinsight.vocab import native
from traceinsight.model.timeline import MEMORY_COLUMNS, MEMORY_KINDS
from traceinsight.derive.derived import Derived

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace
from .helpers.nsys_writer import NsysTrace
from .helpers.xplane_writer import XSpaceTrace

GiB = 1 << 30

CORPUS = [
    "pytorch/hta_ddp_v100_rank1of2.json.gz",  # V100 DDP rank, totals recorded
    "pytorch/kineto_resnet50_nw0_v100.pt.trace.json.gz",  # 2021: Bytes only
    "pytorch/kineto_resnet50_nw4_v100.pt.trace.json.gz",
    "pytorch/tracelens_h100_owlv2_inference.json.gz",  # H100 inference runs
    "pytorch/tracelens_h100_qwen1.5-0.5b_inference.json.gz",
]


def _raw_peaks(path) -> dict[int, tuple[float, float | None]]:
    """Per GPU id: (peak allocated, peak reserved) straight from the JSON: the recorded totals, or the running
    maximum of the running sum of Bytes where no totals are written."""
    doc = json.loads(gzip.open(path).read())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    per: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("name") == "[memory]" and e.get("ph") == "i" and e["args"].get("Device Type") in (1, 6):
            per[int(e["args"]["Device Id"])].append(e)
    out = {}
    for dev, evs in per.items():
        evs.sort(key=lambda e: e["ts"])
        if "Total Allocated" in evs[0]["args"]:
            out[dev] = (max(e["args"]["Total Allocated"] for e in evs), max(e["args"]["Total Reserved"] for e in evs))
        else:
            level = peak = 0
            for e in evs:
                level += e["args"]["Bytes"]
                peak = max(peak, level)
            out[dev] = (peak, None)
    return out


@pytest.mark.parametrize("rel", CORPUS)
def test_corpus_peaks_match_raw_events(rel):
    path = corpus_file(rel)
    tl = traceinsight.load(path)
    raw = _raw_peaks(path)
    assert raw, "the corpus file has GPU memory events"
    devices = {d.device: d for d in Derived(tl).memory.devices}
    assert set(devices) == set(raw)
    for dev, (alloc, res) in raw.items():
        d = devices[dev]
        assert d.peak_allocated == pytest.approx(alloc, rel=0.01)
        if res is None:
            assert d.peak_reserved is None and d.relative
        else:
            assert d.peak_reserved == pytest.approx(res, rel=0.01)
        assert d.capacity and d.capacity > 10 * GiB  # deviceProperties.totalGlobalMem


@pytest.mark.parametrize("rel", CORPUS[:3])
def test_native_and_pure_readers_give_the_same_memory(rel, monkeypatch):
    if native.scanner("pytorch") is None:
        pytest.skip("the native kineto scanner is not built")
    path = corpus_file(rel)
    fast = traceinsight.load(path).memory
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native.scanner("pytorch") is None
    slow = traceinsight.load(path).memory
    assert len(fast) > 1000
    pd.testing.assert_frame_equal(fast, slow)


def test_corpus_memory_rows_are_placed():
    tl = traceinsight.load(corpus_file("pytorch/hta_ddp_v100_rank1of2.json.gz"))
    m = tl.memory
    assert list(m.columns) == list(MEMORY_COLUMNS)
    assert (m["step"] >= 0).mean() > 0.9  # the events fall inside ProfilerSteps
    assert m["op"].notna().mean() > 0.9  # and inside framework ops
    assert set(m["device_type"].astype(str)) == {"cpu", "cuda"}
    assert (m.loc[m["device_type"] == "cpu", "device"] == -1).all()


def _kineto(tmp_path, device_type=1, legacy=False, oom=False):
    t = KinetoTrace(memory_bytes=16 * GiB)
    level, reserved = 2 * GiB, 4 * GiB
    for s in range(3):
        t0 = s * 10_000
        t.step(s + 1, t0, 9_000)
        op = t.cpu_op("aten::empty", t0 + 100, 50)
        del op
        level += GiB
        t.memory(t0 + 120, GiB, allocated=level, reserved=reserved, device_type=device_type, legacy=legacy)
        t.kernel("gemm", t0 + 300, 5_000)
        level -= GiB
        t.memory(t0 + 8_000, -GiB, allocated=level, reserved=reserved, device_type=device_type, legacy=legacy)
    t.memory(500, 64, allocated=64, reserved=0, device_type=0, legacy=legacy)  # host memory: device -1
    if oom:
        t.out_of_memory(29_000, 20 * GiB, allocated=level, reserved=reserved, device_type=device_type)
    return traceinsight.load(t.write(tmp_path / "t.json"))


@pytest.mark.parametrize("device_type,expected", [(1, "cuda"), (6, "hip")])
def test_kineto_cuda_and_rocm(tmp_path, device_type, expected):
    tl = _kineto(tmp_path, device_type)
    m = tl.memory
    gpu = m[m["device"] == 0]
    assert set(gpu["device_type"].astype(str)) == {expected}
    assert gpu["kind"].astype(str).tolist() == ["alloc", "free"] * 3
    assert gpu["delta_bytes"].tolist() == [GiB, -GiB] * 3
    assert gpu["step"].tolist() == [1, 1, 2, 2, 3, 3]
    assert gpu["op"].astype(str).tolist()[::2] == ["aten::empty"] * 3  # the op running when it was allocated
    d = Derived(tl).memory.device(0, 0)
    assert d.peak_allocated == 3 * GiB and d.peak_reserved == 4 * GiB and d.capacity == 16 * GiB
    assert d.peak_step == 1 and d.peak_op == "aten::empty"
    assert (m.loc[m["device"] == -1, "device_type"].astype(str) == "cpu").all()


def test_kineto_2021_bytes_only_running_sum(tmp_path):
    tl = _kineto(tmp_path, legacy=True)
    gpu = tl.memory[tl.memory["device"] == 0]
    assert gpu["allocated"].tolist() == [GiB, 0, GiB, 0, GiB, 0]  # counted from the start of the profile
    assert gpu["reserved"].isna().all()
    assert any("no allocator totals" in w for w in tl.meta.warnings)
    assert Derived(tl).memory.device(0, 0).relative


def test_2021_running_sum_leaves_failed_requests_out(tmp_path):
    t = KinetoTrace()
    t.kernel("k", 100, 10)
    t.memory(10, GiB, legacy=True)
    t.out_of_memory(20, 30 * GiB, allocated=GiB, reserved=2 * GiB)
    t.memory(30, GiB, legacy=True)
    doc = t.to_dict()
    for e in doc["traceEvents"]:  # an [OutOfMemory] of the Bytes-only era: no totals either
        if e.get("name") == "[OutOfMemory]":
            e["args"] = {k: v for k, v in e["args"].items() if k in ("Device Type", "Device Id", "Bytes")}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    m = traceinsight.load(path).memory
    assert m["kind"].astype(str).tolist() == ["alloc", "oom", "alloc"]
    assert m["allocated"].tolist() == [GiB, GiB, 2 * GiB]


def test_kineto_out_of_memory(tmp_path):
    tl = _kineto(tmp_path, oom=True)
    oom = tl.memory[tl.memory["kind"] == "oom"]
    assert len(oom) == 1 and int(oom["delta_bytes"].iloc[0]) == 20 * GiB
    assert Derived(tl).memory.device(0, 0).oom_events == 1


def test_nsys_memory_and_um_tables(tmp_path):
    t = NsysTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 10_000_000)
    a = t.cuda_malloc(100_000, GiB)
    t.cuda_malloc(200_000, 2 * GiB)
    t.cuda_free(5_000_000, a, GiB)
    t.cuda_malloc(6_000_000, 100 << 20, mem_kind=1)  # pinned host memory
    t.kernel("k", 1_000_000, 1_000_000)
    t.um_cpu_fault(3_000_000)
    t.um_gpu_faults(4_000_000, 100_000, 12)
    tl = traceinsight.load(t.write(tmp_path / "m.sqlite"))
    m = tl.memory
    gpu = m[(m["device"] == 0) & m["kind"].isin(["alloc", "free"])]
    assert gpu["reserved"].tolist() == [GiB, 3 * GiB, 2 * GiB]
    assert gpu["op"].astype(str).tolist() == ["cudaMalloc", "cudaMalloc", "cudaFree"]  # via correlationId
    host = m[(m["device"] == -1) & (m["kind"] == "alloc")]
    assert host["delta_bytes"].tolist() == [100 << 20]
    faults = m[m["kind"].isin(["um_fault_cpu", "um_fault_gpu"])]
    assert sorted(zip(faults["kind"].astype(str), faults["count"], faults["dur_ns"])) == [("um_fault_cpu", 1, 0), ("um_fault_gpu", 12, 100_000)]
    d = Derived(tl).memory.device(0, 0)
    assert d.peak_reserved == 3 * GiB and d.capacity == 16 * GiB


def test_nsys_allocation_sorts_before_a_release_at_the_same_time(tmp_path):
    """A cudaFree and a cudaMalloc the driver records at the same nanosecond (the release written first): the
    allocation counts first, so the 2 GiB peak while both buffers are live shows (1 -> 3 -> 2 GiB), not 1 -> 0 -> 2."""
    t = NsysTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 10_000_000)
    a = t.cuda_malloc(100_000, GiB)
    t.kernel("k", 1_000_000, 1_000_000)
    t.cuda_free(3_000_000, a, GiB, dur_ns=30_000)  # recorded at 3.015 ms
    t.cuda_malloc(3_005_000, 2 * GiB, dur_ns=20_000)  # recorded at 3.015 ms too
    tl = traceinsight.load(t.write(tmp_path / "tie.sqlite"))
    m = tl.memory
    gpu = m[(m["device"] == 0) & m["kind"].isin(["alloc", "free"])]
    assert gpu["start_ns"].tolist()[1:] == [gpu["start_ns"].iloc[1]] * 2  # the tie
    assert gpu["kind"].astype(str).tolist() == ["alloc", "alloc", "free"]
    assert gpu["delta_bytes"].tolist() == [GiB, 2 * GiB, -GiB]
    assert gpu["reserved"].tolist() == [GiB, 3 * GiB, 2 * GiB]
    assert Derived(tl).memory.device(0, 0).peak_reserved == 3 * GiB


def test_nsys_memory_rows_say_where_they_are(tmp_path):
    """Each row's device and memory kind: a device allocation on GPU 1, pinned host memory on the host (-1, cpu),
    a CPU page fault on the host, a GPU's fault group on that GPU; the op that made each row by its correlation."""
    t = NsysTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 10_000_000)
    t.kernel("k", 1_000_000, 1_000_000)
    t.cuda_malloc(100_000, GiB, device=1)
    t.cuda_malloc(200_000, 1 << 20, mem_kind=1)
    t.um_cpu_fault(3_000_000)
    t.um_gpu_faults(4_000_000, 100_000, 12, device=1)
    m = traceinsight.load(t.write(tmp_path / "where.sqlite")).memory.sort_values("start_ns")
    got = list(zip(m["kind"].astype(str), m["device"].astype(int), m["device_type"].astype(str), m["count"].astype(int)))
    assert got == [("alloc", 1, "cuda", 1), ("alloc", -1, "cpu", 1), ("um_fault_cpu", -1, "cpu", 1), ("um_fault_gpu", 1, "cuda", 12)]
    assert m["op"].astype(str).tolist()[:2] == ["cudaMalloc", "cudaMalloc"]
    assert m["delta_bytes"].tolist() == [GiB, 1 << 20, 0, 0]
    assert set(m["pid"]) == {4242}  # the writer's process, from globalPid


def test_nsys_memory_table_without_its_optional_columns(tmp_path):
    """An export whose usage table has only start, bytes and the operation (older or trimmed exports): every row is
    device memory on GPU 0, of process 0, linked to no call, and the levels still add up per device."""
    import sqlite3

    t = NsysTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 10_000_000)
    t.kernel("k", 1_000_000, 1_000_000)
    a = t.cuda_malloc(100_000, GiB, device=1, mem_kind=1)
    t.cuda_malloc(200_000, 2 * GiB, device=1)
    t.cuda_free(5_000_000, a, GiB, device=1, mem_kind=1)
    path = t.write(tmp_path / "bare.sqlite")
    c = sqlite3.connect(path)
    for col in ("globalPid", "deviceId", "memKind", "correlationId"):
        c.execute(f"ALTER TABLE CUDA_GPU_MEMORY_USAGE_EVENTS DROP COLUMN {col}")
    c.commit()
    c.close()
    m = traceinsight.load(path).memory.sort_values("start_ns")
    assert m["kind"].astype(str).tolist() == ["alloc", "alloc", "free"]
    assert set(m["device"]) == {0} and set(m["device_type"].astype(str)) == {"cuda"}
    assert m["reserved"].tolist() == [GiB, 3 * GiB, 2 * GiB]
    assert m["correlation"].tolist() == [-1, -1, -1] and m["op"].isna().all() and set(m["pid"]) == {0}


@pytest.mark.parametrize("pure", [False, True])
def test_xplane_allocator_events(tmp_path, monkeypatch, pure):
    if pure:
        monkeypatch.setenv(native.PURE_ENV, "1")
    t = XSpaceTrace(memory_bytes=16 * GiB)
    for s in range(3):
        t0 = s * 10_000_000
        t.step(s, t0, 9_000_000)
        t.op("conv:Conv2D", t0 + 100_000, 2_000_000)
        t.alloc(t0 + 200_000, GiB, op="conv:Conv2D", grow_to=4 * GiB)
        t.kernel("implicit_gemm", t0 + 300_000, 3_000_000)
        t.free(t0 + 5_000_000, GiB, op="conv:Conv2D")
    tl = traceinsight.load(t.write(tmp_path / "host.xplane.pb"))
    m = tl.memory
    assert len(m) == 6 and set(m["device"]) == {0}
    assert m["delta_bytes"].tolist() == [GiB, -GiB] * 3
    # reserved = heap + stack (bytes_allocated + bytes_reserved), as XProf adds them
    assert m["allocated"].tolist() == [GiB, 0] * 3 and m["reserved"].tolist() == [5 * GiB, 4 * GiB] * 3
    assert set(m["op"].astype(str)) == {"conv:Conv2D"}
    assert m["step"].tolist() == [0, 0, 1, 1, 2, 2]
    d = Derived(tl).memory.device(0, 0)
    assert d.capacity == 16 * GiB and d.peak_reserved == 5 * GiB


def test_traces_without_memory_have_an_empty_table(tmp_path):
    t = KinetoTrace()
    t.kernel("k", 100, 10)
    tl = traceinsight.load(t.write(tmp_path / "t.json"))
    assert tl.memory.empty and list(tl.memory.columns) == list(MEMORY_COLUMNS)
    assert set(tl.memory["kind"].cat.categories) == set(MEMORY_KINDS)
    assert Derived(tl).memory.devices == []


def test_series_reduction_keeps_the_peak():
    from traceinsight.derive.memory import _reduce

    n = 100_000
    t = np.arange(n, dtype=np.int64) * 1000
    level = np.sin(np.arange(n) / 500.0) * GiB + 2 * GiB
    level[77_777] = 9 * GiB
    s = _reduce(t, level, np.full(n, np.nan))
    assert len(s) <= 2000 and s["allocated"].max() == 9 * GiB and s["start_ns"].is_monotonic_increasing


@pytest.mark.parametrize("seed", range(5))
def test_innermost_op_matches_a_direct_search(seed):
    """The op a memory row is attributed to: the latest-starting op on its thread whose [start, end] holds it."""
    from traceinsight.ingest.memory_table import innermost

    rng = np.random.default_rng(seed)
    rows = []
    for tid in (1, 2, 1 << 30):  # the last one does not pack: the MultiIndex path
        t = 0
        for _ in range(40):  # properly nested ops: a parent and a few children
            dur = int(rng.integers(50, 200))
            rows.append((0, 7, tid, t, dur))
            c = t + 5
            while c + 20 < t + dur:
                cd = int(rng.integers(5, 20))
                rows.append((0, 7, tid, c, cd))
                c += cd + int(rng.integers(0, 10))
            t += dur + int(rng.integers(0, 30))
    ops = pd.DataFrame(rows, columns=["rank", "pid", "tid", "start_ns", "dur_ns"]).sample(frac=1, random_state=seed).reset_index(drop=True)
    q_tid = rng.choice([1, 2, 3, 1 << 30], 300)
    q_t = rng.integers(0, 8000, 300)
    got = innermost(ops, np.zeros(300, np.int64), np.full(300, 7), q_tid, q_t)
    s, e = ops["start_ns"].to_numpy(), ops["start_ns"].to_numpy() + ops["dur_ns"].to_numpy()
    for i in range(300):
        ok = np.flatnonzero((ops["tid"].to_numpy() == q_tid[i]) & (s <= q_t[i]) & (e >= q_t[i]))
        want = ok[np.argmax(s[ok])] if len(ok) else -1
        assert got[i] == want or (want >= 0 and s[got[i]] == s[want] and e[got[i]] >= q_t[i]), (i, got[i], want)


def _raw_xplane_peaks(data: bytes) -> dict[str, tuple[int, int]]:
    """Per allocator name: (peak bytes_allocated, peak bytes_allocated + bytes_reserved) over the host planes'
    MemoryAllocation / MemoryDeallocation events, read with the test's own wire reader (no schema module)."""
    from .helpers.xplane_wire import all_of, first, fields

    def entries(plane: bytes, num: int) -> dict[int, str]:
        out = {}
        for e in all_of(plane, num):
            key = first(e, 1)
            val = first(e, 2)
            out[key] = (first(val, 2) or b"").decode() if val is not None else ""
        return out

    peaks: dict[str, list[int]] = {}
    for plane in all_of(data, 1):
        if not (first(plane, 2) or b"").decode().startswith("/host:CPU"):
            continue
        ev_names, stat_names = entries(plane, 4), entries(plane, 5)
        for line in all_of(plane, 3):
            for ev in all_of(line, 4):
                if ev_names.get(first(ev, 1)) not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {}
                for st in all_of(ev, 4):
                    name = stat_names.get(first(st, 1))
                    for num, _, val in fields(st):
                        if num in (3, 4):
                            stats[name] = val
                        elif num == 5:
                            stats[name] = val.decode()
                        elif num == 7:  # a reference: the string is the name of a stat metadata entry
                            stats[name] = stat_names.get(val, "")
                alloc, res = stats.get("bytes_allocated"), stats.get("bytes_reserved", 0)
                if alloc is None:
                    continue
                p = peaks.setdefault(stats.get("allocator_name", ""), [0, 0])
                p[0], p[1] = max(p[0], alloc), max(p[1], alloc + res)
    return {k: (v[0], v[1]) for k, v in peaks.items()}


def test_corpus_xplane_peaks_match_raw_events():
    path = corpus_file("tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12/instance-ecbm.xplane.pb")
    raw = _raw_xplane_peaks(path.read_bytes())
    assert "GPU_0_bfc" in raw
    d = Derived(traceinsight.load(path)).memory.device(0, 0)
    alloc, res = raw["GPU_0_bfc"]
    assert d.peak_allocated == pytest.approx(alloc, rel=0.01) and d.peak_reserved == pytest.approx(res, rel=0.01)
    assert d.capacity and d.capacity > 10 * GiB and d.peak_op


def test_perfetto_export_has_memory_counters(tmp_path):
    from traceinsight.render.perfetto import to_chrome_trace

    t = KinetoTrace(memory_bytes=16 * GiB)
    t.step(1, 0, 9_000)
    t.kernel("gemm", 300, 5_000)
    t.memory(120, GiB, allocated=3 * GiB, reserved=4 * GiB)
    t.memory(8_000, -GiB, allocated=2 * GiB, reserved=4 * GiB)
    doc = to_chrome_trace(traceinsight.analyze(t.write(tmp_path / "t.json")))
    counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert [e["args"] for e in counters] == [{"allocated": 3 * GiB, "reserved": 4 * GiB}, {"allocated": 2 * GiB, "reserved": 4 * GiB}]
    assert all(e["pid"] == 0 and e["name"] == "GPU memory" for e in counters)


def test_rank_folder_memory_per_rank(tmp_path):
    folder = tmp_path / "job"
    for rank, peak in ((0, 3 * GiB), (1, 5 * GiB)):
        t = KinetoTrace(rank=rank, world_size=2, memory_bytes=16 * GiB)
        t.step(1, 0, 9_000)
        t.kernel("gemm", 300, 5_000)
        t.memory(120, GiB, allocated=peak, reserved=peak + GiB)
        t.write(folder / f"rank{rank}.json")
    tl = traceinsight.load(folder)
    assert sorted(set(zip(tl.memory["rank"], tl.memory["device"]))) == [(0, 0), (1, 0)]
    devs = {(d.rank, d.device): d for d in Derived(tl).memory.devices}
    assert devs[(0, 0)].peak_allocated == 3 * GiB and devs[(1, 0)].peak_reserved == 6 * GiB
    assert devs[(1, 0)].capacity == 16 * GiB
