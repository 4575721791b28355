"""TI004 on host-only Keras traces: eligible layers and fallback variants are told apart by their loop bodies."""

from __future__ import annotations

import pytest

import traceinsight

from .conftest import corpus_file

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
