"""TI016 graph-breaks: positive (a .item() between two compiled regions every step), negative (one compiled
region per step), fix (the same step compiled as one graph), on kineto traces written by the test helpers."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace

GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
GRID = (216, 1, 1)


CASES = {
    "positive": ["test_ti016_positive_one_break_per_step"],
    "negative": ["test_ti016_negative_one_region_per_step"],
    "fix": ["test_ti016_fix_fullgraph"],
}


def _run(tmp_path, broken: bool, name: str = "t.json"):
    # 6 steps: a compiled forward (10 fused kernels); broken: then eager ops (an aten::nonzero that launches 3 small
    # kernels 150 µs apart, the host in Python between them) and a second compiled region of 10 kernels
    t = KinetoTrace()
    b = 0.0
    for s in range(6):
        t.step(s, b, 2_000.0)
        t.annotation("Torch-Compiled Region: 0/0", b + 5.0, 600.0)
        for k in range(10):
            t.kernel(GEMM, b + 20.0 + k * 55.0, 50.0, launch_us=b + 10.0 + k * 1.0, grid=GRID)
        if broken:
            for k in range(3):
                op = t.cpu_op("aten::nonzero", b + 620.0 + k * 150.0, 20.0)
                t.kernel("nonzero_kernel", b + 640.0 + k * 150.0, 20.0, launch_us=b + 625.0 + k * 150.0, op=op, grid=GRID)
            t.annotation("Torch-Compiled Region: 1/0", b + 1_100.0, 600.0)
            for k in range(10):
                t.kernel(GEMM, b + 1_115.0 + k * 55.0, 50.0, launch_us=b + 1_105.0 + k * 1.0, grid=GRID)
        else:
            for k in range(13):
                t.kernel(GEMM, b + 570.0 + k * 55.0, 50.0, launch_us=b + 15.0 + k * 1.0, grid=GRID)
        b += 2_010.0
    return traceinsight.analyze(t.write(tmp_path / name))


def _ti016(a):
    return [f for f in a.findings if f.code == "TI016"]


def test_ti016_positive_one_break_per_step(tmp_path):
    a = _run(tmp_path, True)
    (f,) = _ti016(a)
    assert f.metrics["breaks_per_step"] == 1 and f.metrics["breaks"] == 5  # steps 1..5 (step 0, where it compiles, is left out)
    assert f.metrics["eager_launches"] == 15
    assert f.impact_ns > 5 * 300_000  # the GPU waits between the eager kernels launched one by one
    # 2.45 ms of waits over the five steady steps, of an 11.69 ms window: 21 %, an error
    assert f.saving_ns == 2_450_000 and f.severity.value == "error"


def test_ti016_negative_one_region_per_step(tmp_path):
    assert _ti016(_run(tmp_path, False)) == []


def test_ti016_fix_fullgraph(tmp_path):
    bad, good = _run(tmp_path, True, "bad.json"), _run(tmp_path, False, "good.json")
    assert len(_ti016(bad)) == 1 and _ti016(good) == []
