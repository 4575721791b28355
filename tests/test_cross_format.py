"""Cross-format agreement: the same planted workload written as kineto JSON and as Nsight Systems SQLite must give
the same timeline and the same diagnosis.

The workload (3 steps of 7.6 ms, one GPU, times in µs from the start of each step):

* 20 back-to-back FP32 sgemm kernels of 100 µs (``t0+10 .. t0+2010``), launched early; a pinned HtoD copy and a
  memset run on a second stream underneath them (busy time unchanged);
* the host blocks in ``cudaStreamSynchronize`` from ``t0+50`` to ``t0+2012`` (with its GPU sync record), then spends
  ~2 ms before the next launch: GPU idle ``t0+2010 .. t0+4018`` (sync stall);
* a burst of 300 tiny 2 µs kernels launched 8 µs apart (``t0+4018 + 8 i``): each waits ~6 µs on its launch
  (launch-bound);
* a 4 MB DtoH copy to pageable memory, 1 ms (4 GB/s), whose ``cudaMemcpyAsync`` blocks the host until it ends.

Expected (derived from the times above, not copied from a run): 960 kernels; busy per step 2000 + 300 x 2 + 1000 µs
= 3.6 ms, so 10.8 ms busy over the 22.69 ms active window (10 µs .. 22.7 ms) = 47.598 %; findings TI001 (idle gaps),
TI002 (sync stalls), TI003 (launch-bound), TI006 (pageable copy) and TI007 (sgemm on an A100). (TI010, < 50 % busy,
saves nothing by itself, so the common severity scale leaves it out unless ``min_impact`` is 0; the verdict
carries the busy %.)

**Tolerance.** Both writers receive the same integer-ns times: kineto stores µs floats with 3 decimals (exact ns after
the parser's conversion) and nsys stores integer ns, so a correct pair of parsers agrees *exactly*. Impacts may still
differ by ``max(20 µs, 2 %)`` per code: 20 µs is ~3 of the smallest planted effects (a 6 µs launch wait) and covers
any legitimate 1-ns rounding summed over the ~2,000 rows; 2 % keeps the check meaningful for the ms-sized impacts
while allowing a writer to gain harmless jitter later. The looser impact check is backed by exact checks that would
catch what it could hide: row-by-row equality of the timelines, exact kernel counts per name, busy % within 0.1 pp.

Every nsys layout the writer can produce that carries GPU properties is compared (2026.1, 2022.1 ``legacy``, 2026.2
``raw_clock``); ``gpu_info=False`` captures lack the compute capability, and TI007 must still fire there, from the
Volta-tagged kernel names (one phenomenon, one code, with or without device properties).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.nsys_writer import NsysTrace

STEP_US = 7_600
STEPS = 3
GEMM = "volta_sgemm_128x64_nn"
TINY = "vectorized_elementwise_kernel"
GRID, BLOCK = (216, 1, 1), (256, 1, 1)  # 2 blocks per SM on 108 SMs: no small-grid finding (TI008)

EXPECTED_CODES = {"TI001", "TI002", "TI003", "TI006", "TI007"}
EXPECTED_BUSY_PCT = 100.0 * 10_800 / 22_690
IMPACT_ABS_NS = 20_000
IMPACT_REL = 0.02


def pattern() -> list[tuple]:
    """The workload as format-neutral operations, times in µs (see the module docstring)."""
    ops: list[tuple] = []
    for s in range(STEPS):
        t0 = s * STEP_US
        ops.append(("step", s, t0, STEP_US))
        for i in range(20):
            ops.append(("kernel", GEMM, t0 + 10 + i * 100, 100, t0 + i * 2, 1.5))
        ops.append(("copy", "HtoD", False, t0 + 100, 200, 2_000_000, t0 + 45, 3, 13))  # pinned, 10 GB/s
        ops.append(("memset", t0 + 500, 50, 1 << 20, t0 + 48, 13))
        ops.append(("sync", t0 + 50, 1_962))  # ends 2 µs after the last sgemm
        for i in range(300):
            ops.append(("kernel", TINY, t0 + 4_018 + i * 8, 2, t0 + 4_012 + i * 8, 5))
        ops.append(("copy", "DtoH", True, t0 + 6_500, 1_000, 4_000_000, t0 + 6_495, 1_010, 7))
    return ops


def write_kineto(path: Path) -> Path:
    t = KinetoTrace()
    for op in pattern():
        if op[0] == "step":
            t.step(op[1], op[2], op[3])
        elif op[0] == "kernel":
            _, name, start, dur, launch, launch_dur = op
            t.kernel(name, start, dur, launch_us=launch, launch_dur_us=launch_dur, grid=GRID, block=BLOCK)
        elif op[0] == "copy":
            _, kind, pageable, start, dur, nbytes, launch, launch_dur, stream = op
            t.memcpy(kind, start, dur, nbytes, pageable=pageable, launch_us=launch, launch_dur_us=launch_dur, stream=stream)
        elif op[0] == "memset":
            _, start, dur, nbytes, launch, stream = op
            t.memset(start, dur, nbytes, launch_us=launch, stream=stream)
        elif op[0] == "sync":
            corr = t.runtime("cudaStreamSynchronize", op[1], op[2])
            t.gpu_sync(op[1], op[2], correlation=corr)
    return t.write(path)


def _ns(us: float) -> int:
    return int(round(us * 1_000))


def write_nsys(path: Path, **layout) -> Path:
    t = NsysTrace(**layout)
    for op in pattern():
        if op[0] == "step":
            t.step(op[1], _ns(op[2]), _ns(op[3]))
        elif op[0] == "kernel":
            _, name, start, dur, launch, launch_dur = op
            # demangled=name: kineto shows the name CUPTI gave, so both sides carry the same string
            t.kernel(name, _ns(start), _ns(dur), launch_ns=_ns(launch), launch_dur_ns=_ns(launch_dur), grid=GRID, block=BLOCK, demangled=name)
        elif op[0] == "copy":
            _, kind, pageable, start, dur, nbytes, launch, launch_dur, stream = op
            t.memcpy(kind, _ns(start), _ns(dur), nbytes, pageable=pageable, launch_ns=_ns(launch), launch_dur_ns=_ns(launch_dur), stream=stream)
        elif op[0] == "memset":
            _, start, dur, nbytes, launch, stream = op
            t.memset(_ns(start), _ns(dur), nbytes, launch_ns=_ns(launch), stream=stream)
        elif op[0] == "sync":
            t.sync(_ns(op[1]), _ns(op[2]))
    return t.write(path)


LAYOUTS = {"nsys2026.1": {}, "nsys2022.1-legacy": {"legacy": True}, "nsys2026.2-raw-clock": {"raw_clock": True}}


@pytest.fixture(scope="module")
def kineto(tmp_path_factory):
    p = write_kineto(tmp_path_factory.mktemp("xf") / "pattern.pt.trace.json")
    return traceinsight.analyze(p)


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def nsys(request, tmp_path_factory):
    p = write_nsys(tmp_path_factory.mktemp("xf") / "pattern.sqlite", **LAYOUTS[request.param])
    return traceinsight.analyze(p)


def _by_code(analysis) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in analysis.findings:
        out.setdefault(f.code, []).append(f)
    return out


def _rows(analysis) -> pd.DataFrame:
    ev = analysis.timeline.events
    ev = ev[ev["kind"].isin(["kernel", "memcpy", "memset", "gpu_sync", "runtime", "step"])]
    cols = ["kind", "name", "start_ns", "dur_ns", "device", "stream", "step", "bytes", "copy_kind", "pageable"]
    df = ev[cols].astype({"kind": str, "name": str, "copy_kind": str})
    return df.sort_values(["kind", "start_ns", "stream", "name"]).reset_index(drop=True)


def test_sources_are_what_we_think(kineto, nsys):
    assert kineto.timeline.meta.source_format == "pytorch"
    assert nsys.timeline.meta.source_format == "nsys"
    assert not kineto.warnings and not nsys.warnings
    assert not kineto.timeline.meta.warnings and not nsys.timeline.meta.warnings


def test_timelines_agree_row_by_row(kineto, nsys):
    k, n = _rows(kineto), _rows(nsys)
    # per step: 320 kernels, 2 copies, 1 memset, 1 sync (each a host call + a GPU row) and 1 step marker
    assert len(k) == len(n) == STEPS * ((320 + 2 + 1 + 1) * 2 + 1)
    pd.testing.assert_frame_equal(k, n, check_categorical=False)


def test_same_kernel_counts(kineto, nsys):
    for a in (kineto, nsys):
        kernels = a.timeline.events[a.timeline.events["kind"] == "kernel"]
        assert kernels["name"].astype(str).value_counts().to_dict() == {TINY: 900, GEMM: 60}
        copies = a.timeline.events[a.timeline.events["kind"] == "memcpy"]
        assert sorted(copies["copy_kind"].astype(str)) == ["DtoH"] * 3 + ["HtoD"] * 3
        assert copies.loc[copies["copy_kind"] == "DtoH", "pageable"].all()
        assert not copies.loc[copies["copy_kind"] == "HtoD", "pageable"].any()
    assert kineto.summary.to_dict()["kernel_count"] == nsys.summary.to_dict()["kernel_count"] == 960
    assert kineto.summary.to_dict()["kernel_time_ns"] == nsys.summary.to_dict()["kernel_time_ns"] == 3 * (2_000_000 + 600_000)


def test_busy_pct_per_device(kineto, nsys):
    kd = {(d["rank"], d["device"]): d for d in kineto.summary.devices}
    nd = {(d["rank"], d["device"]): d for d in nsys.summary.devices}
    assert set(kd) == set(nd) == {(0, 0)}
    for key in kd:
        assert kd[key]["busy_pct"] == pytest.approx(nd[key]["busy_pct"], abs=0.1)
        assert kd[key]["busy_pct"] == pytest.approx(EXPECTED_BUSY_PCT, abs=0.01)
        assert kd[key]["busy_ns"] == nd[key]["busy_ns"] == 3 * 3_600_000


def test_same_finding_codes(kineto, nsys):
    assert set(_by_code(kineto)) == EXPECTED_CODES
    assert set(_by_code(nsys)) == set(_by_code(kineto))
    assert {c: len(v) for c, v in _by_code(nsys).items()} == {c: len(v) for c, v in _by_code(kineto).items()}


def test_impacts_agree(kineto, nsys):
    k, n = _by_code(kineto), _by_code(nsys)
    for code in sorted(k):
        ki, ni = sum(f.impact_ns for f in k[code]), sum(f.impact_ns for f in n.get(code, []))
        assert abs(ki - ni) <= max(IMPACT_ABS_NS, IMPACT_REL * ki), (code, ki, ni)
        assert [f.severity for f in k[code]] == [f.severity for f in n.get(code, [])], code


def test_planted_magnitudes(kineto, nsys):
    """The agreement is about the right numbers, not two parsers making the same mistake."""
    for a in (kineto, nsys):
        f = _by_code(a)
        # sync gap 2010 -> 4018 µs per step; plus two 110 µs step-boundary gaps (7500 -> 7610)
        assert f["TI001"][0].impact_ns == 3 * 2_008_000 + 2 * 110_000
        assert f["TI001"][0].metrics["top_cause"] == "host synchronization"
        assert f["TI002"][0].metrics["by_call"]["cudaStreamSynchronize"] > 0
        # 299 tiny kernels per step wait 6 µs on their launch; the first one's wait is part of the sync gap
        assert f["TI003"][0].metrics["launch_bound_kernels"] == 900
        assert f["TI006"][0].metrics["count"] == 3 and f["TI006"][0].metrics["bytes"] == 12_000_000
        assert f["TI006"][0].metrics["achieved_gbps"] == pytest.approx(4.0)
        assert f["TI007"][0].metrics["gemm_kernels"] == 60


@pytest.mark.parametrize("field", ["stalls", "blocked_ns", "gpu_idle_ns", "gpu_sync_rows"])
def test_ti002_metrics_agree(kineto, nsys, field):
    assert _by_code(kineto)["TI002"][0].metrics[field] == _by_code(nsys)["TI002"][0].metrics[field]


def test_no_gpu_properties_keeps_every_code(tmp_path, kineto):
    """Without GPU properties TI007 still knows the GPU has tensor cores: volta_sgemm only runs on Volta or newer."""
    a = traceinsight.analyze(write_nsys(tmp_path / "nogpu.sqlite", gpu_info=False))
    assert set(_by_code(a)) == EXPECTED_CODES


def test_data_loading_on_two_gpus_agrees(tmp_path):
    """A second pattern: a record_function range (kineto ``user_annotation``) vs the same NVTX push/pop range, and
    two GPUs with unequal work. 4 steps of 10 ms: 3 ms waiting for data, then one kernel per GPU (6 ms on GPU 0,
    4 ms on GPU 1). Input-bound share 3/10 = 30 % on both; busy % 24/36 = 66.667 % and 16/34 = 47.059 %."""
    dl = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    k, n = KinetoTrace(devices=2), NsysTrace(devices=2)
    for i in range(4):
        s = i * 10_000
        k.step(i, s, 10_000)
        n.step(i, _ns(s), _ns(10_000))
        k.annotation(dl, s, 3_000)
        n.annotation(dl, _ns(s), _ns(3_000))
        for d in (0, 1):
            dur = 6_000 - d * 2_000
            k.kernel("k", s + 3_000, dur, launch_us=s + 2_900, device=d, grid=GRID, block=BLOCK)
            n.kernel("k", _ns(s + 3_000), _ns(dur), launch_ns=_ns(s + 2_900), device=d, grid=GRID, block=BLOCK, demangled="k")
    ka = traceinsight.analyze(k.write(tmp_path / "dl.pt.trace.json"))
    na = traceinsight.analyze(n.write(tmp_path / "dl.sqlite"))
    kf = sorted((f.code, f.impact_ns, f.location.device) for f in ka.findings)
    nf = sorted((f.code, f.impact_ns, f.location.device) for f in na.findings)
    assert kf == nf
    assert {c for c, _, _ in kf} >= {"TI001", "TI005"}
    (t5,) = [f for f in na.findings if f.code == "TI005"]
    assert t5.metrics["share_pct"] == pytest.approx(30.0)
    def busy(a):
        return {d["device"]: d["busy_pct"] for d in a.summary.devices}

    assert busy(ka) == pytest.approx(busy(na), abs=0.1)
    assert busy(na) == pytest.approx({0: 100 * 24 / 36, 1: 100 * 16 / 34}, abs=0.01)
