"""TI004 rnn-cudnn-fallback: its positive, negative and fix cases, on planted traces and the real corpus."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import findings_of


#: positive: it fires; negative: it stays silent; fix: the LSTMCell loop fixed: the same LSTM through cuDNN.
CASES = {
    "positive": ["test_ti004_lstm_cell_fallback", "test_ti004_nsys_cell_kernels_without_framework_ops",
                 "test_ti004_overlapping_regions_are_unioned"],
    "negative": ["test_ti004_negative_cudnn", "test_ti004_nsys_negative_cudnn_kernels"],
    "fix": ["test_ti004_negative_cudnn"],
}


def _lstm_cell_loop(t: KinetoTrace, t0: float, steps: int, tid: int | None = None, stream: int = 7):
    for s in range(steps):
        c0 = t0 + s * 60.0
        cell = t.cpu_op("aten::lstm_cell", c0, 55.0, tid=tid)
        t.cpu_op("aten::mm", c0 + 2, 10.0, tid=tid)
        t.kernel("ampere_sgemm_32x32_sliced1x4_nn", c0 + 9, 4.0, launch_us=c0 + 4, tid=tid, stream=stream)
        t.cpu_op("aten::mm", c0 + 14, 10.0, tid=tid)
        t.kernel("ampere_sgemm_32x32_sliced1x4_nn", c0 + 21, 4.0, launch_us=c0 + 16, tid=tid, stream=stream)
        t.cpu_op("aten::_thnn_fused_lstm_cell", c0 + 26, 20.0, tid=tid)
        t.kernel("void at::native::(anonymous namespace)::lstm_cell_forward<float, float, int, 1>", c0 + 35, 3.0, launch_us=c0 + 30,
                 tid=tid, stream=stream)
    return cell


def test_ti004_lstm_cell_fallback(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    _lstm_cell_loop(t, 10.0, 20)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI004")
    assert f.metrics["cudnn_recognised"] is False and f.metrics["timesteps"] == 20
    assert f.metrics["kernels_per_timestep"] == pytest.approx(3.0)
    assert f.metrics["recurrent_region_ns"] == pytest.approx(19 * 60_000 + 55_000, rel=0.001)
    assert f.impact_ns == pytest.approx(f.metrics["recurrent_region_ns"] - 20 * 11_000, rel=0.01)
    assert "nn.LSTM" in f.fixes["pytorch"].text and "recurrent_dropout" in f.fixes["tensorflow"].text


def test_ti004_overlapping_regions_are_unioned(tmp_path):
    """Two host threads run recurrent loops that overlap in time (1,195 µs each, the second starting 300 µs after
    the first): the region is their union, 1,495 µs, never their 2,390 µs sum, which would outlast the trace."""
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    _lstm_cell_loop(t, 10.0, 20)
    _lstm_cell_loop(t, 310.0, 20, tid=2, stream=9)
    (f,) = findings_of(t.write(tmp_path / "t.json"), "TI004")
    assert f.metrics["recurrent_region_ns"] == pytest.approx(1_495_000, rel=0.001)
    assert "The recurrent region lasts 1.50 ms" in f.message
    assert f.impact_ns < f.metrics["recurrent_region_ns"]


def test_ti004_negative_cudnn(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 2000.0)
    t.cpu_op("aten::lstm", 10.0, 500.0)
    t.cpu_op("aten::_cudnn_rnn", 20.0, 480.0)
    t.kernel("_Z24RNN_blockPersist_fp_LSTMIfffLi128EEv17cudnnRNNStride_t", 60.0, 400.0, launch_us=30.0)
    t.kernel("_Z18persistRNN_addBiasIffEv14cudnnRNNMode_t", 40.0, 5.0, launch_us=25.0)
    assert findings_of(t.write(tmp_path / "t.json"), "TI004") == []


CELL_FORWARD = "void at::native::(anonymous namespace)::lstm_cell_forward<float, float, int, 1>"
CELL_BACKWARD = "void at::native::(anonymous namespace)::lstm_cell_backward<float, float, int, 1>"


def _nsys_cell_loop(path, cudnn: bool = False):
    """An Nsight capture (runtime calls and kernels only, no framework ops) of nn.LSTM with cuDNN off: per 3 ms NVTX
    step, 20 timesteps forward (a GEMM and ``lstm_cell_forward`` each) and 20 backward (a GEMM and
    ``lstm_cell_backward``), 60 µs apart; with ``cudnn``, a persistent cuDNN RNN kernel runs in each step as well."""
    from tests.helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    for s in range(3):
        b = s * 3_000_000
        t.step(s, b, 3_000_000)
        at = b + 10_000
        for cell, gemm in ((CELL_FORWARD, "ampere_sgemm_32x32_sliced1x4_nn"), (CELL_BACKWARD, "ampere_sgemm_32x32_sliced1x4_tn")):
            for _ in range(20):
                t.kernel(gemm, at + 9_000, 4_000, launch_ns=at + 4_000)
                t.kernel(cell.split("::")[-1].split("<")[0], at + 35_000, 3_000, launch_ns=at + 30_000, demangled=cell)
                at += 60_000
        if cudnn:
            t.kernel("RNN_blockPersist_fp_LSTM", at + 20_000, 400_000, launch_ns=at + 5_000,
                     demangled="_Z24RNN_blockPersist_fp_LSTMIfffLi128EEv17cudnnRNNStride_t")
    return t.write(path)


def test_ti004_nsys_cell_kernels_without_framework_ops(tmp_path):
    """Kernels alone say the RNN runs per timestep; the recurrent region is where the host launched the cell
    kernels: per step from the first forward cell's launch (40 µs) to the last backward cell's launch end
    (2 384 µs), 2.344 ms, three times."""
    found = findings_of(_nsys_cell_loop(tmp_path / "lstm.sqlite"), "TI004")
    assert len(found) == 1, "no finding on a trace with cell kernels and runtime calls only"
    f = found[0]
    assert f.metrics["timesteps"] == 60 and f.metrics["cell_kernels"] == 60 and f.metrics["cell_ops"] == 0
    assert f.metrics["recurrent_region_ns"] == 3 * 2_344_000
    assert f.metrics["kernels_per_timestep"] == pytest.approx(237 / 60, abs=0.01)  # 79 launches per step's region
    assert "lstm_cell_forward ×60" in f.message and "lstm_cell_backward ×60" in f.message
    assert f.impact_ns > 0.8 * f.metrics["recurrent_region_ns"]  # the GPU idles between the tiny per-timestep kernels


def test_ti004_nsys_negative_cudnn_kernels(tmp_path):
    assert findings_of(_nsys_cell_loop(tmp_path / "cudnn.sqlite", cudnn=True), "TI004") == []


def test_ti004_real_gru_cudnn_recognised():
    from traceinsight.rules.rnn_cudnn_fallback import detect_rnn

    p = corpus_file("pytorch/hdai_gru_cudnn_rtx5070ti_laptop.json.gz")
    det = detect_rnn(traceinsight.load(p).events)
    assert det.cudnn and det.cudnn_kernels > 0 and det.cudnn_ops > 0 and not det.fallback
    assert findings_of(p, "TI004") == []


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
    assert findings_of(tmp_path / "cell.json", "TI004") == []


# (corpus folder, expected severity, expected reason in the title or None for eligible)
CORPUS_CASES = [
    ("keras2-lstm_cudnn_eligible", "info", None),
    ("keras3-lstm_cudnn_eligible", "info", None),
    ("keras2-gru_cudnn_eligible", "info", None),
    ("keras3-gru_cudnn_eligible", "info", None),
    ("keras2-lstm_recurrent_dropout", "warning", "recurrent_dropout > 0"),
    ("keras3-lstm_recurrent_dropout", "warning", "recurrent_dropout > 0"),
    ("keras2-lstm_relu_activation", "warning", "activation is relu"),
    ("keras3-lstm_relu_activation", "warning", "activation is relu"),
    ("keras2-gru_reset_after_false", "warning", "reset_after=False"),
    ("keras3-gru_reset_after_false", "warning", "reset_after=False"),
]


def _ti004(path):
    findings = traceinsight.analyze(path, select=["TI004"]).findings
    assert len(findings) == 1, [f.title for f in findings]
    return findings[0]


@pytest.mark.parametrize("folder, severity, reason", CORPUS_CASES, ids=[c[0] for c in CORPUS_CASES])
def test_corpus_keras_variants(folder, severity, reason):
    f = _ti004(corpus_file(f"tf/generated-cpu/{folder}"))
    assert f.severity.value == severity
    assert f.metrics["host_only"] is True and f.metrics["layers"] == 1
    assert f.evidence["timesteps"].tolist() == [64]  # 4 steps x 16 timesteps
    if reason is None:
        assert f.metrics["ineligible_layers"] == 0 and f.evidence["cudnn_eligible"].all()
    else:
        assert reason in f.title and f.metrics["ineligible_layers"] == 1
        assert f.evidence["cell"].iloc[0] == ("GRU" if "gru" in folder else "LSTM")


@pytest.mark.slow
def test_recorded_with_tensorflow_cpu(tmp_path):
    """Record three LSTMs with tensorflow-cpu here and let the rule tell them apart."""
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 12, 4)).astype("float32")
    y = rng.standard_normal((64, 1)).astype("float32")
    variants = {
        "eligible": {},
        "dropout": {"recurrent_dropout": 0.25},
        "relu": {"activation": "relu"},
    }
    found = {}
    for name, kwargs in variants.items():
        model = tf.keras.Sequential([tf.keras.Input((12, 4)), tf.keras.layers.LSTM(8, **kwargs), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # warm up: trace the functions outside the profile
        logdir = tmp_path / name
        tf.profiler.experimental.start(str(logdir))
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        tf.profiler.experimental.stop()
        found[name] = _ti004(logdir)
    assert found["eligible"].severity.value == "info" and found["eligible"].metrics["ineligible_layers"] == 0
    assert found["dropout"].severity.value == "warning" and "recurrent_dropout > 0" in found["dropout"].title
    assert found["relu"].severity.value == "warning" and "activation is relu" in found["relu"].title
    for f in found.values():
        assert f.evidence["timesteps"].iloc[0] % 12 == 0  # whole sequences of 12 timesteps
