"""How XPlane GPU stream lines are read: a stream that only copies makes copies of all its events; a stream that
also computes (XLA's single stream while it compiles and autotunes, as a JAX recording on an H100 showed) is
judged event by event, so its kernels stay kernels."""

from __future__ import annotations

import traceinsight

from .helpers.xplane_writer import XSpaceTrace


def _trace(tmp_path, line_name: str):
    tr = XSpaceTrace()
    tr.gpu.lines[0] = (line_name, 0, [])
    tr.step(0, 0, 1_000_000)
    tr.op("jit_step", 0, 900_000)
    tr.kernel("loop_multiply_fusion", 10_000, 200_000)
    tr.kernel("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", 300_000, 300_000)
    tr.kernel("MemcpyH2D", 700_000, 50_000)
    tr.kernel("Memset", 800_000, 10_000)
    return traceinsight.load(tr.write(tmp_path / "t.xplane.pb"))


def _kinds(tl) -> dict[str, str]:
    g = tl.events[tl.events["device"].to_numpy() >= 0]
    return dict(zip(g["name"].astype(str), g["kind"].astype(str)))


def test_a_mixed_stream_keeps_its_kernels(tmp_path):
    k = _kinds(_trace(tmp_path, "Stream #14(MemcpyOther,Compute,Memset,MemcpyH2D)"))
    assert k == {"loop_multiply_fusion": "kernel", "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8": "kernel",
                 "MemcpyH2D": "memcpy", "Memset": "memset"}


def test_a_copy_stream_makes_copies_of_everything(tmp_path):
    k = _kinds(_trace(tmp_path, "Stream #17(MemcpyD2H)"))
    assert k["loop_multiply_fusion"] == "memcpy" and k["MemcpyH2D"] == "memcpy"
    k = _kinds(_trace(tmp_path, "Stream #18(MemcpyH2D, MemcpyD2D)"))
    assert k["sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8"] == "memcpy"


def test_a_compute_stream_is_kernels(tmp_path):
    k = _kinds(_trace(tmp_path, "Stream #7(Compute)"))
    assert k["loop_multiply_fusion"] == "kernel" and k["Memset"] == "memset"
