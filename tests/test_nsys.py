"""Nsight Systems ingestion: every real export in the corpus, checked against independent SQL, plus the writer."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import traceinsight
from traceinsight.vocab.errors import TraceReadError, UnknownFormatError
from traceinsight.ingest import detect
from traceinsight.derive.views import Views

from .conftest import corpus_file
from .helpers.nsys_writer import NsysTrace

CORPUS_FILES = [
    "nsys2026.2_fastvideo-infer_2xH100_1s-slice.sqlite",
    "nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite",
    "nsys2026.1_torch-tiny_rtx3080.sqlite",
    "nsys2025.5_vecadd-syncmemcpy_rtx3060.sqlite",
    "nsys2025.5_cudafortran-osrt-nokernels_rtx4060.sqlite",
    "nsys2024.6_nvfuser-pytorch_h200.sqlite",
    "nsys2022.1_dlprof-pytorch-cnn-cudnn_rtx2070s.sqlite",
    "nsys2022.1_dlprof-modified-extra-columns_rtx2070s.sqlite",
    "nsys2022.x_no-cuda-tables_rtxa2000.sqlite",
]

_LOADED: dict[str, traceinsight.Timeline] = {}


def nsys(name: str) -> Path:
    return corpus_file(f"nsys/{name}")


def load(name: str) -> traceinsight.Timeline:
    if name not in _LOADED:
        _LOADED[name] = traceinsight.load(nsys(name))
    return _LOADED[name]


def sql(path: Path):
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    return conn


def tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def count(conn, table: str, where: str = "") -> int:
    if table not in tables(conn):
        return 0
    return conn.execute(f"SELECT COUNT(*) FROM {table} {where}").fetchone()[0]


def union_busy_pct(intervals: list[tuple[int, int]]) -> float:
    """Busy share of [first start, last end] by a plain sort-and-sweep (independent of views.merge_intervals)."""
    intervals.sort()
    busy, cur_s, cur_e = 0, None, None
    for s, e in intervals:
        e = max(e, s)
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    window = max(e for _, e in intervals) - intervals[0][0]
    return 100.0 * busy / window if window > 0 else 0.0


# --- every corpus file ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_counts_match_sql(name):
    tl = load(name)
    conn = sql(nsys(name))
    counts = tl.events["kind"].value_counts()
    assert tl.meta.source_format == "nsys"
    assert counts.get("kernel", 0) == count(conn, "CUPTI_ACTIVITY_KIND_KERNEL") + count(conn, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert counts.get("memcpy", 0) == count(conn, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert counts.get("memset", 0) == count(conn, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert counts.get("gpu_sync", 0) == count(conn, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert counts.get("runtime", 0) == count(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")
    ranges = count(conn, "NVTX_EVENTS", "WHERE eventType IN (59, 60)")
    assert counts.get("annotation", 0) + counts.get("step", 0) == ranges
    osrt = tl.events[tl.events["category"] == "osrt"] if "category" in tl.events else tl.events.iloc[:0]
    assert len(osrt) == count(conn, "OSRT_API")
    # the schema contract: times rebased to 0, no negative durations
    if len(tl.events):
        assert tl.events["start_ns"].min() == 0
        assert (tl.events["dur_ns"] >= 0).all()


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_busy_percent_matches_independent_union(name):
    tl = load(name)
    conn = sql(nsys(name))
    per_device: dict[int, list[tuple[int, int]]] = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if table in tables(conn):
            for dev, s, e in conn.execute(f'SELECT deviceId, start, "end" FROM {table}'):
                per_device.setdefault(dev, []).append((s, e))
    util = Views(tl).utilization
    assert sorted(util["device"].tolist()) == sorted(per_device)
    for dev, intervals in per_device.items():
        ours = float(util.loc[util["device"] == dev, "busy_pct"].iloc[0])
        assert ours == pytest.approx(union_busy_pct(intervals), abs=0.1)


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_file_is_not_modified(name):
    path = nsys(name)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    traceinsight.load(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not Path(str(path) + "-journal").exists() and not Path(str(path) + "-wal").exists()


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_kernel_names_come_from_string_ids(name):
    tl = load(name)
    conn = sql(nsys(name))
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(conn):
        assert (tl.events["kind"] == "kernel").sum() == 0
        return
    raw = set(conn.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName").fetchall())
    short = set(conn.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName").fetchall())
    k = tl.of_kind("kernel")
    assert set(k["raw_name"].astype(str)) == {r[0] for r in raw}
    assert set(k["name"].astype(str)) == {r[0] for r in short}
    assert k["grid"].notna().all() and k["block"].notna().all() and (k["registers"] > 0).all()


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_launch_links_match_pid_aware_sql_join(name):
    """Runtime <-> GPU links on (pid, correlation), the join nsys' own rules get wrong across processes."""
    tl = load(name)
    conn = sql(nsys(name))
    have = tables(conn)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in have:
        return
    expected = 0
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in have:
            expected += conn.execute(
                f"SELECT COUNT(*) FROM {table} g WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                f"WHERE r.correlationId = g.correlationId AND ((r.globalTid >> 24) & 16777215) = ((g.globalPid >> 24) & 16777215))"
            ).fetchone()[0]
    assert len(Views(tl).launches) == expected


# --- what SOURCES.md says is notable ----------------------------------------------------------------------


def test_no_cuda_tables_file_loads_and_warns():
    tl = load("nsys2022.x_no-cuda-tables_rtxa2000.sqlite")
    assert len(tl.events) == 0
    assert tl.meta.tool_version is None
    assert any("no GPU activity" in w for w in tl.meta.warnings)
    assert [(d.index, d.name, d.sm_count) for d in tl.meta.devices] == [(0, "NVIDIA RTX A2000 12GB", 26)]
    assert tl.meta.start_unix_ns == 1677605638978958656


def test_cuda_runtime_without_kernels_warns():
    tl = load("nsys2025.5_cudafortran-osrt-nokernels_rtx4060.sqlite")
    counts = tl.events["kind"].value_counts()
    assert counts["kernel"] == 0 and counts["runtime"] == 23 and counts["memset"] == 1
    assert (tl.events["category"] == "osrt").sum() == 698
    osrt = tl.events.loc[tl.events["category"] == "osrt", "name"].astype(str).value_counts()
    assert (osrt["ioctl"], osrt["poll"], osrt["pthread_cond_wait"] > 0) == (464, 15, True)
    assert not any("no GPU activity" in w for w in tl.meta.warnings)  # the memset is GPU activity


def test_vecadd_sync_memcpy():
    tl = load("nsys2025.5_vecadd-syncmemcpy_rtx3060.sqlite")
    mc = tl.of_kind("memcpy").sort_values("start_ns")
    assert mc["copy_kind"].astype(str).tolist() == ["HtoD", "HtoD", "DtoH"]
    assert mc["pageable"].tolist() == [True, True, True]
    assert mc["bytes"].tolist()[:2] == [4 * 1024 * 1024] * 2
    launches = Views(tl).launches
    memcpy_calls = launches[launches["kind"] == "memcpy"]["launch_name"].astype(str).tolist()
    assert memcpy_calls == ["cudaMemcpy"] * 3  # synchronous copies, version suffix stripped
    raw = set(tl.of_kind("runtime")["raw_name"].astype(str))
    assert "cudaMemcpy_v3020" in raw and "cudaDeviceSynchronize_v3020" in raw
    sync = tl.of_kind("gpu_sync")
    assert sync["name"].astype(str).tolist() == ["Context Sync"]
    assert tl.meta.devices[0].name == "NVIDIA GeForce RTX 3060" and tl.meta.devices[0].compute_capability == "8.6"


def test_fastvideo_train_slice():
    name = "nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite"
    tl = load(name)
    ev = tl.events
    mc = tl.of_kind("memcpy")
    pageable = mc[mc["pageable"]]
    assert len(pageable) == 34 and set(pageable["copy_kind"].astype(str)) == {"HtoD"}
    assert (mc["copy_kind"] == "DtoD").sum() == 986
    rt = tl.of_kind("runtime")
    syncs = rt[rt["name"] == "cudaStreamSynchronize"]
    assert len(syncs) == 33
    assert syncs["dur_ns"].sum() / 1e6 == pytest.approx(325, abs=1.0)
    assert sorted(ev.loc[ev["device"] >= 0, "pid"].unique().tolist()) == [144, 145]
    assert set(tl.of_kind("kernel").groupby("pid")["device"].unique().map(tuple)) == {(0,), (1,)}
    # GPU sync records say device 0 for both processes; the reader moves them to the device of their stream
    sync = tl.of_kind("gpu_sync")
    assert set(sync.loc[sync["pid"] == 145, "device"]) == {1} and set(sync.loc[sync["pid"] == 144, "device"]) == {0}
    # correlation ids collide across the two processes: a correlation-only join over-links
    conn = sql(nsys(name))
    naive = conn.execute(
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"
    ).fetchone()[0]
    links = Views(tl).launches
    assert 0 < len(links[links["kind"] == "kernel"]) < naive
    assert tl.meta.extra["clock"] == "target system clock"
    assert any("time-window slice" in w for w in tl.meta.warnings)
    assert {d.index for d in tl.meta.devices} == {0, 1} and all(d.name is None for d in tl.meta.devices)
    names = set(tl.of_kind("kernel")["name"].astype(str))
    assert "flash_fwd_kernel" in names and "ncclDevKernel_SendRecv" in names
    ann = set(tl.of_kind("annotation")["name"].astype(str))
    assert "ncclGroupStart" in ann or any(a.startswith("nccl") for a in ann)


def test_fastvideo_infer_slice():
    tl = load("nsys2026.2_fastvideo-infer_2xH100_1s-slice.sqlite")
    mc = tl.of_kind("memcpy")
    assert int(mc["pageable"].sum()) == 4
    assert (mc["copy_kind"] == "HtoD").sum() == 450
    rt = tl.of_kind("runtime")
    assert (rt["name"] == "cudaStreamSynchronize").sum() == 8
    assert set(tl.of_kind("gpu_sync")["name"].astype(str)) == {"Stream Wait Event", "Stream Sync"}
    ann = tl.of_kind("annotation")
    assert (ann["raw_name"].astype(str).str.contains(", op_id = ")).all()
    assert "aten::mul" in set(ann["name"].astype(str))  # emit_nvtx label shown as the op
    k = tl.of_kind("kernel")
    assert ((k["dur_ns"] < 10_000).mean()) == pytest.approx(0.906, abs=0.005)


def test_legacy_2022_exports():
    for name in ("nsys2022.1_dlprof-pytorch-cnn-cudnn_rtx2070s.sqlite", "nsys2022.1_dlprof-modified-extra-columns_rtx2070s.sqlite"):
        tl = load(name)
        assert tl.meta.tool == "Nsight Systems" and tl.meta.tool_version == "2022.1.3.3"
        assert tl.meta.extra["schema_version"] == "2.9.1"
        assert tl.meta.devices[0].name == "NVIDIA GeForce RTX 2070 SUPER" and tl.meta.devices[0].memory_bytes == 8368816128
        mc = tl.of_kind("memcpy")
        assert mc["pageable"].all() and set(mc["copy_kind"].astype(str)) == {"HtoD"}
        names = set(tl.of_kind("kernel")["name"].astype(str))
        assert any("scudnn" in n for n in names)
        assert set(tl.of_kind("gpu_sync")["name"].astype(str)) == {"Event Sync", "Stream Wait Event", "Stream Sync"}
        assert tl.meta.extra["clock"] == "capture-relative"


def test_start_unix_ns_capture_relative():
    name = "nsys2026.1_torch-tiny_rtx3080.sqlite"
    tl = load(name)
    conn = sql(nsys(name))
    first = min(conn.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "PROFILER_OVERHEAD", "CUPTI_ACTIVITY_KIND_OVERHEAD"))
    utc = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    assert tl.meta.start_unix_ns == utc + first
    assert tl.meta.extra["clock"] == "capture-relative"
    assert tl.meta.devices[0].sm_count == 68


# --- .nsys-rep --------------------------------------------------------------------------------------------


def _fake_report(tmp_path: Path) -> Path:
    p = tmp_path / "my run.nsys-rep"
    p.write_bytes(b"NVIDIA Tegra Profiler Report 1.0\x00" + bytes(range(256)) * 4)
    return p


def test_nsys_rep_without_nsys_gives_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("TRACEINSIGHT_NSYS", raising=False)
    rep = _fake_report(tmp_path)
    assert detect(rep) == "nsys"
    with pytest.raises(TraceReadError) as exc:
        traceinsight.load(rep)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.endswith("nsys export --type sqlite -o 'my run.sqlite' " + repr(str(rep)).replace('"', "'"))


def test_nsys_rep_cli_exit_code(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from traceinsight.cli.app import app

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("TRACEINSIGHT_NSYS", raising=False)
    rep = _fake_report(tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(rep)])
    assert result.exit_code == 3, result.output
    err = getattr(result, "stderr", None) or result.output
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nsys export --type sqlite -o" in lines[0]


def test_nsys_rep_with_nsys_on_path(tmp_path, monkeypatch):
    """A stand-in ``nsys`` that writes a real export: the reader runs the documented command and reads it."""
    src = NsysTrace()
    src.kernel("k", 1_000, 2_000)
    made = src.write(tmp_path / "made.sqlite")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$1" = export ] || exit 9\n'
        'while [ $# -gt 0 ]; do if [ "$1" = --output ]; then out="$2"; fi; shift; done\n'
        f'cp "{made}" "$out"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir), prepend=":")
    rep = _fake_report(tmp_path)
    tl = traceinsight.load(rep)
    assert tl.meta.path == str(rep) and (tl.events["kind"] == "kernel").sum() == 1


# --- writer round trip ------------------------------------------------------------------------------------


def _planted(legacy: bool = False, raw_clock: bool = False) -> NsysTrace:
    t = NsysTrace(legacy=legacy, raw_clock=raw_clock)
    t.step(1, 0, 10_000_000)
    t.kernel("gemm", 100_000, 2_000_000, grid=(64, 2, 1), block=(256, 1, 1), registers=96, shared_memory=4096)
    t.sync(2_200_000, 3_000_000)  # host blocked 3 ms
    for i in range(5):  # tiny kernels
        t.kernel("tiny", 5_300_000 + i * 10_000, 2_000)
    t.memcpy("DtoH", 6_000_000, 400_000, 1 << 20, pageable=True)
    t.memcpy("HtoD", 6_500_000, 100_000, 4096, sync=True)
    t.kernel("late", 9_000_000, 500_000, launch=False)  # its launch fell outside a sliced capture
    t.annotation("forward", 50_000, 2_000_000)
    t.osrt("poll", 2_200_000, 2_900_000)
    return t


@pytest.mark.parametrize("legacy,raw_clock", [(False, False), (True, False), (False, True)])
def test_writer_round_trip(tmp_path, legacy, raw_clock):
    t = _planted(legacy, raw_clock)
    tl = traceinsight.load(t.write(tmp_path / "planted.sqlite"))
    ev = tl.events
    counts = ev["kind"].value_counts()
    assert (counts["kernel"], counts["memcpy"], counts["gpu_sync"], counts["step"], counts["annotation"]) == (7, 2, 1, 1, 1)
    assert counts["runtime"] == 1 + 1 + 5 + 2  # launches, sync, memcpys (the "late" kernel has none)
    gemm = ev[ev["name"] == "gemm"].iloc[0]
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["device"], gemm["stream"]) == (100_000, 2_000_000, 0, 7)
    assert (gemm["grid"], gemm["block"], gemm["registers"], gemm["shared_mem"]) == ("64,2,1", "256,1,1", 96.0, 4096.0)
    assert gemm["raw_name"] == "void gemm<float>(float *, int)" and gemm["step"] == 1
    sync_call = ev[ev["name"] == "cudaStreamSynchronize"].iloc[0]
    assert (sync_call["start_ns"], sync_call["dur_ns"], sync_call["raw_name"]) == (2_200_000, 3_000_000, "cudaStreamSynchronize_v3020")
    gsync = ev[ev["kind"] == "gpu_sync"].iloc[0]
    assert gsync["name"] == "Stream Sync" and gsync["correlation"] == sync_call["correlation"] and gsync["pid"] == sync_call["pid"]
    mc = ev[ev["kind"] == "memcpy"].sort_values("start_ns")
    assert mc["copy_kind"].astype(str).tolist() == ["DtoH", "HtoD"]
    assert mc["pageable"].tolist() == [True, False] and mc["bytes"].tolist() == [1 << 20, 4096]
    links = Views(tl).launches
    assert set(links["launch_name"].astype(str)) == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpy"}
    assert len(links) == 6 + 2
    assert ev.loc[ev["name"] == "late", "step"].iloc[0] == 1
    assert ev.loc[ev["category"] == "osrt", "name"].astype(str).tolist() == ["poll"]
    assert (ev.loc[ev["kind"] == "runtime", "thread_name"] == "python").all()
    assert tl.meta.start_unix_ns == 1_700_000_000_000_000_000 + 1_000_000_000
    assert tl.meta.tool_version == ("2022.1.3.3" if legacy else "2026.1.1.204")
    assert tl.meta.devices[0].name == "NVIDIA A100-SXM4-80GB" and tl.meta.devices[0].sm_count == 108
    util = Views(tl).utilization.iloc[0]
    busy = 2_000_000 + 5 * 2_000 + 400_000 + 100_000 + 500_000
    assert util["busy_pct"] == pytest.approx(100 * busy / (9_500_000 - 100_000))


def test_writer_edge_cases(tmp_path):
    t = NsysTrace(gpu_info=False, devices=2)
    t.kernel("k0", 0, 1_000, device=0)
    t.kernel("k1", 0, 1_000, device=1, stream=13)
    t.graph_launch(5_000, 10_000, graph_id=3, device=1)
    t.annotation("never closed", 2_000, None)
    t.annotation("registered", 3_000, 100, registered=True)
    t.mark("checkpoint", 4_000)
    t.gpu_sync(20_000, 1_000, kind="context_synchronize")
    p = t.write(tmp_path / "edge.sqlite")
    with sqlite3.connect(p) as conn:  # a non-UTF-8 kernel name, as old exports carry in their strings
        conn.execute("UPDATE StringIds SET value = CAST(x'6b30ff' AS TEXT) WHERE value = 'k0'")
    tl = traceinsight.load(p)
    ev = tl.events
    assert "k0\ufffd" in set(ev["name"].astype(str))
    assert [d.index for d in tl.meta.devices] == [0, 1] and tl.meta.devices[1].name is None
    graph = ev[ev["category"] == "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].iloc[0]
    assert (graph["kind"], graph["name"], graph["device"], graph["dur_ns"]) == ("kernel", "CUDA graph 3", 1, 10_000)
    assert ev.loc[ev["name"] == "never closed", "dur_ns"].iloc[0] == 21_000 - 2_000  # open until the last event
    assert ev.loc[ev["name"] == "registered", "kind"].iloc[0] == "annotation"
    assert ev.loc[ev["name"] == "checkpoint", ["kind", "dur_ns"]].values.tolist() == [["other", 0]]
    sync = ev[ev["kind"] == "gpu_sync"].iloc[0]
    assert (sync["name"], sync["stream"], sync["correlation"]) == ("Context Sync", -1, -1)
    assert any("still open" in w for w in tl.meta.warnings)


def test_non_nsys_sqlite_is_not_claimed(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(UnknownFormatError):
        traceinsight.load(p)
    with pytest.raises(TraceReadError, match="without Nsight Systems tables"):
        traceinsight.load(p, format="nsys")


def test_truncated_export_is_a_read_error(tmp_path):
    t = NsysTrace()
    for i in range(2000):
        t.kernel("k", i * 10_000, 1_000)
    p = t.write(tmp_path / "full.sqlite")
    data = p.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceReadError) as exc:
        traceinsight.load(cut)
    assert "\n" not in str(exc.value)


def test_bulk_kernels_match_single_calls(tmp_path):
    a, b = NsysTrace(), NsysTrace()
    starts = np.arange(0, 100_000, 10_000)
    a.kernels_bulk(["k"] * len(starts), starts.tolist(), [1_000] * len(starts))
    for s in starts.tolist():
        b.kernel("k", s, 1_000, grid=(128, 1, 1), block=(256, 1, 1))
    ta, tb = traceinsight.load(a.write(tmp_path / "a.sqlite")), traceinsight.load(b.write(tmp_path / "b.sqlite"))
    cols = ["kind", "name", "raw_name", "start_ns", "dur_ns", "device", "stream", "correlation", "grid", "block"]
    assert ta.events[cols].astype(str).values.tolist() == tb.events[cols].astype(str).values.tolist()


# --- columnar reads (nsys.sql) ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_parallel_ranges_match_one_scan(name, monkeypatch):
    """Many tiny rowid ranges on 4 threads give exactly the frame of one single-threaded scan."""
    from traceinsight.ingest.nsys import sql as nsys_sql

    monkeypatch.setattr(nsys_sql, "usable_cpus", lambda: 1)
    monkeypatch.setattr(nsys_sql, "MIN_RANGE", 1 << 40)
    one = traceinsight.load(nsys(name)).events
    monkeypatch.setattr(nsys_sql, "usable_cpus", lambda: 4)
    monkeypatch.setattr(nsys_sql, "MIN_RANGE", 1)
    monkeypatch.setattr(nsys_sql, "MAX_RANGE", 7)
    many = traceinsight.load(nsys(name)).events
    assert many.equals(one)


def test_read_int_columns_exact_nulls_and_no_rowid(tmp_path, monkeypatch):
    from traceinsight.ingest.nsys import sql as nsys_sql

    p = tmp_path / "ints.sqlite"
    values = [2**63 - 1, -(2**63), -1, 0, 1, None, 2**53 + 1, 123456789012345678]
    with sqlite3.connect(p) as conn:
        conn.execute("CREATE TABLE t (v INTEGER, w INTEGER)")
        conn.execute("CREATE TABLE nr (k INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(v, i) for i, v in enumerate(values)])
        conn.executemany("INSERT INTO nr VALUES (?, ?)", [(i, v) for i, v in enumerate(values)])
        conn.execute("DELETE FROM t WHERE w = 3")  # a gap in the rowids
        conn.execute("CREATE TABLE empty (v INTEGER)")
    conn.close()
    monkeypatch.setattr(nsys_sql, "usable_cpus", lambda: 3)
    monkeypatch.setattr(nsys_sql, "MIN_RANGE", 1)
    monkeypatch.setattr(nsys_sql, "MAX_RANGE", 2)
    expect = [v if v is not None else -5 for i, v in enumerate(values) if i != 3]
    c = sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True)
    v, w = nsys_sql.read_int_columns(c, "t", ["ifnull(v, -5)", "w"])
    assert v.dtype == np.int64 and v.tolist() == expect and w.tolist() == [0, 1, 2, 4, 5, 6, 7]
    (odd,) = nsys_sql.read_int_columns(c, "t", ["ifnull(v, -5)"], "w % 2 = 1")
    assert odd.tolist() == [expect[i] for i, x in enumerate([0, 1, 2, 4, 5, 6, 7]) if x % 2]
    (nr,) = nsys_sql.read_int_columns(c, "nr", ["ifnull(v, -5)"])
    assert nr.tolist() == [v if v is not None else -5 for v in values]
    (e,) = nsys_sql.read_int_columns(c, "empty", ["v"])
    assert e.dtype == np.int64 and len(e) == 0
    c.close()


# -- hostile metadata cells (issue 14): SQLite keeps whatever type a cell was given; a bad cell loses its fact --------


@pytest.mark.parametrize("table,column,value", [
    ("TARGET_INFO_GPU", "smCount", "x"), ("TARGET_INFO_GPU", "totalMemory", float("inf")),
    ("TARGET_INFO_GPU", "id", b"\xff\x00"), ("TARGET_INFO_GPU", "name", b"\xff"),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", float("inf")),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", (1 << 63) - 1),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "\x1b[2J"),
    ("ThreadNames", "globalTid", "x"), ("ThreadNames", "nameId", 1e300),
    ("PROCESSES", "pid", "x"), ("PROCESSES", "name", b"\xff"),
    ("StringIds", "id", -(1 << 62)), ("StringIds", "id", 1 << 62), ("StringIds", "value", b"\xff\x00"),
    ("NVTX_EVENTS", "text", b"\xff\xfe"),
])
def test_hostile_metadata_cell_loads(tmp_path, table, column, value):
    t = NsysTrace()
    t.step(1, 0, 100_000)
    t.annotation("region", 1_000, 50_000)
    for i in range(3):
        t.kernel(f"k{i}", 10_000 + i * 1_000, 500)
    path = t.write(tmp_path / "t.sqlite")
    with sqlite3.connect(path) as c:
        assert c.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = (SELECT min(rowid) FROM "{table}")',
                         (value,)).rowcount == 1
    c.close()
    tl = traceinsight.load(path)
    assert (tl.events["kind"] == "kernel").sum() == 3
    if table == "TARGET_INFO_SESSION_START_TIME":
        assert tl.meta.start_unix_ns is None or 0 <= tl.meta.start_unix_ns < 1 << 63
