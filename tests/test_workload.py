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
