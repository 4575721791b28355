"""TI001-TI004 on planted kineto traces (exact expectations) and on the real corpus (direction and ratios)."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.plugins import discover


def _one(path, code, min_impact=None, **options):
    a = traceinsight.analyze(path, select=[code], options={code: options} if options else None, min_impact=min_impact)
    return [f for f in a.findings if f.code == code]


def _busy_steps(t: KinetoTrace, steps: int, step_us: float, busy_us: float, *, first=0.0, kernel_us=50.0):
    """Steps whose first ``busy_us`` are back-to-back 50 µs kernels launched well ahead (a healthy GPU)."""
    for s in range(steps):
        t0 = first + s * step_us
        t.step(s, t0, step_us)
        n = int(busy_us // kernel_us)
        for i in range(n):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * kernel_us, kernel_us, launch_us=t0 + i * 0.5)


# --- TI001 -----------------------------------------------------------------------------------------------


# --- TI002 -----------------------------------------------------------------------------------------------


# --- TI003 -----------------------------------------------------------------------------------------------


# --- TI004 -----------------------------------------------------------------------------------------------
def _lstm_cell_loop(t: KinetoTrace, t0: float, steps: int):
    for s in range(steps):
        c0 = t0 + s * 60.0
        cell = t.cpu_op("aten::lstm_cell", c0, 55.0)
        t.cpu_op("aten::mm", c0 + 2, 10.0)
        t.kernel("ampere_sgemm_32x32_sliced1x4_nn", c0 + 9, 4.0, launch_us=c0 + 4)
        t.cpu_op("aten::mm", c0 + 14, 10.0)
        t.kernel("ampere_sgemm_32x32_sliced1x4_nn", c0 + 21, 4.0, launch_us=c0 + 16)
        t.cpu_op("aten::_thnn_fused_lstm_cell", c0 + 26, 20.0)
        t.kernel("void at::native::(anonymous namespace)::lstm_cell_forward<float, float, int, 1>", c0 + 35, 3.0, launch_us=c0 + 30)
    return cell


def test_ti004_lstm_cell_fallback(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    _lstm_cell_loop(t, 10.0, 20)
    (f,) = _one(t.write(tmp_path / "t.json"), "TI004")
    assert f.metrics["cudnn_recognised"] is False and f.metrics["timesteps"] == 20
    assert f.metrics["kernels_per_timestep"] == pytest.approx(3.0)
    assert f.metrics["recurrent_region_ns"] == pytest.approx(19 * 60_000 + 55_000, rel=0.001)
    assert f.impact_ns == pytest.approx(f.metrics["recurrent_region_ns"] - 20 * 11_000, rel=0.01)
    assert "nn.LSTM" in f.fixes["pytorch"].text and "recurrent_dropout" in f.fixes["tensorflow"].text


def test_ti004_negative_cudnn(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    t.cpu_op("aten::lstm", 10.0, 500.0)
    t.cpu_op("aten::_cudnn_rnn", 20.0, 480.0)
    t.kernel("_Z24RNN_blockPersist_fp_LSTMIfffLi128EEv17cudnnRNNStride_t", 60.0, 400.0, launch_us=30.0)
    t.kernel("_Z18persistRNN_addBiasIffEv14cudnnRNNMode_t", 40.0, 5.0, launch_us=25.0)
    assert _one(t.write(tmp_path / "t.json"), "TI004") == []


def test_ti004_real_gru_cudnn_recognised():
    from traceinsight.rules.rnn_cudnn_fallback import detect_rnn

    p = corpus_file("pytorch/hdai_gru_cudnn_rtx5070ti_laptop.json.gz")
    det = detect_rnn(traceinsight.load(p).events)
    assert det.cudnn and det.cudnn_kernels > 0 and det.cudnn_ops > 0 and not det.fallback
    assert _one(p, "TI004") == []


@pytest.mark.slow
def test_ti004_torch_cpu_lstm_vs_lstmcell(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from traceinsight.rules.rnn_cudnn_fallback import detect_rnn

    T, x = 12, torch.randn(12, 4, 16)
    lstm, cell = torch.nn.LSTM(16, 32), torch.nn.LSTMCell(16, 32)
    with torch.no_grad():
        with profile(activities=[ProfilerActivity.CPU]) as p1:
            lstm(x)
        p1.export_chrome_trace(str(tmp_path / "lstm.json"))
        with profile(activities=[ProfilerActivity.CPU]) as p2:
            h = c = torch.zeros(4, 32)
            for i in range(T):
                h, c = cell(x[i], (h, c))
        p2.export_chrome_trace(str(tmp_path / "cell.json"))
    d_lstm = detect_rnn(traceinsight.load(tmp_path / "lstm.json").events)
    d_cell = detect_rnn(traceinsight.load(tmp_path / "cell.json").events)
    assert d_cell.fallback and d_cell.cell_ops == T and d_cell.timesteps == T
    assert not d_lstm.fallback and d_lstm.cell_ops == 0
    # CPU-only traces are not a cuDNN question: the rule itself stays silent
    assert _one(tmp_path / "cell.json", "TI004") == []


# --- docs ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["TI001", "TI002", "TI003", "TI004"])
def test_rule_docs_have_definition_and_fixes(code):
    rs = discover()
    cls = rs.rules[code]
    doc = cls.docs()
    for section in ("## Why it matters", "## What is measured", "## Options", "## Fix in PyTorch", "## Fix in TensorFlow", "```python"):
        assert section in doc, (code, section)
    assert all(o.help for o in cls.options.values())
