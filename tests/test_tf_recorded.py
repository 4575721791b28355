"""Record real TF profiles with tensorflow-cpu and read them back (slow: each records a few Keras steps)."""

from __future__ import annotations

import os

import pytest

import traceinsight
from traceinsight.derive.tf_signals import recurrent_loop_signature

pytestmark = pytest.mark.slow
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _data(n=64, t=16, f=8):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.standard_normal((n, t, f)).astype("float32"), rng.standard_normal((n, 1)).astype("float32")


def _model(**lstm):
    m = keras.Sequential([keras.Input((16, 8)), keras.layers.LSTM(32, **lstm), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    return m


def _record(tmp_path, **lstm):
    x, y = _data()
    m = _model(**lstm)
    m.fit(x, y, batch_size=32, epochs=1, verbose=0)  # warm-up: tracing is not what we measure
    logdir = tmp_path / "logs"
    tf.profiler.experimental.start(str(logdir))
    m.fit(x, y, batch_size=16, epochs=1, verbose=0)  # 4 steps
    tf.profiler.experimental.stop()
    return traceinsight.load(logdir)


@pytest.mark.parametrize("variant,lstm", [
    ("eligible", {}),
    ("recurrent_dropout", {"recurrent_dropout": 0.2}),
    ("relu", {"activation": "relu"}),
])
def test_recorded_lstm_variants(tmp_path, variant, lstm):
    tl = _record(tmp_path, **lstm)
    assert tl.meta.source_format == "tensorflow-xplane"  # the files' format; the logdir is in extra
    assert tl.meta.extra["logdir"] == str(tmp_path / "logs") and tl.meta.extra["run"]
    sig = recurrent_loop_signature(tl)
    fwd = sig[sig["direction"] == "forward"]
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if variant == "eligible" and has_gpu:
        # the cuDNN path: one fused op instead of a per-timestep loop
        assert (sig["cudnn_ops"] > 0).all() or fwd.empty
        return
    # CPU (or a fallback variant): the generic while loop, one iteration per timestep per step
    assert len(fwd) == 1
    row = fwd.iloc[0]
    assert row["iterations"] == 4 * 16
    act = "relu" if variant == "relu" else "tanh"
    assert row[act] == 2 * 64 and row["sigmoid"] == 3 * 64
    if variant == "recurrent_dropout":
        assert row["matmul_per_iteration"] >= 4  # the recurrent kernel is applied per gate on dropped-out states
    else:
        assert row["matmul_per_iteration"] == 2.0


def test_keras_callback_writes_report(tmp_path):
    from traceinsight.keras import TraceInsightCallback

    fmt = "html"
    x, y = _data()
    cb = TraceInsightCallback(tmp_path / "logs", steps=(1, 3), report=tmp_path / f"report.{fmt}", fmt=fmt)
    _model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    assert cb.timeline is not None and cb.analysis is not None
    runs = list((tmp_path / "logs").glob("plugins/profile/*/*.xplane.pb"))
    assert len(runs) == 1
    report = (tmp_path / f"report.{fmt}").read_text()
    assert report.lstrip().lower().startswith("<!doctype html") and "traceinsight" in report
    sig = recurrent_loop_signature(cb.timeline)
    # 2 profiled batches x 16 timesteps through the CPU while loop
    assert int(sig.loc[sig["direction"] == "forward", "iterations"].iloc[0]) == 2 * 16
