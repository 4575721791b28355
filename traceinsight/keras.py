"""Keras callback: profile a few training batches, then analyse them with traceinsight.

TensorFlow is imported only when the callback is created, so ``import traceinsight`` stays light; the base class
is resolved lazily for the same reason (``keras.callbacks.Callback`` from Keras 3 or tf.keras).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _callback_base():
    try:
        import keras

        return keras.callbacks.Callback
    except ImportError:  # pragma: no cover - tf.keras only installs
        import tensorflow as tf

        return tf.keras.callbacks.Callback


def TraceInsightCallback(log_dir: str | os.PathLike, steps: tuple[int, int] = (2, 5), report: str | os.PathLike | None = "report.html",
                         fmt: str | None = None, **analyze_options: Any):  # noqa: N802 - reads like a class
    """Profile batches ``[start, stop)`` of the first epoch into ``log_dir``, then write a report.

    ``fmt`` defaults from the report suffix (an ``-o`` extension of ``traceinsight.render.FORMATS``: .html, .md, .json ...). After training the callback's ``analysis``
    and ``timeline`` attributes hold the results for programmatic use.
    """
    base = _callback_base()

    class _TraceInsightCallback(base):
        def __init__(self) -> None:
            super().__init__()
            self.log_dir = Path(log_dir)
            self.start, self.stop = int(steps[0]), int(steps[1])
            if self.stop <= self.start:
                raise ValueError(f"steps=(start, stop) needs stop > start, got {steps}")
            self.report = Path(report) if report else None
            suffix = self.report.suffix.lstrip(".").lower() if self.report else ""
            from traceinsight.render import for_extension

            self.fmt = fmt or for_extension("." + suffix) or suffix or "text"
            self.timeline = None
            self.analysis = None
            self._active = False
            self._done = False

        def on_train_batch_begin(self, batch, logs=None):
            if not self._done and not self._active and batch == self.start:
                import tensorflow as tf

                tf.profiler.experimental.start(str(self.log_dir))
                self._active = True

        def on_train_batch_end(self, batch, logs=None):
            if self._active and batch + 1 >= self.stop:
                self._finish()

        def on_train_end(self, logs=None):
            if self._active:
                self._finish()

        def _finish(self) -> None:
            import tensorflow as tf

            from traceinsight.ingest import load
            from traceinsight.pipeline.engine import analyze
            from traceinsight.render import render

            tf.profiler.experimental.stop()
            self._active = False
            self._done = True
            self.timeline = load(self.log_dir)
            self.analysis = analyze(self.timeline, **analyze_options)
            if self.report:
                self.report.parent.mkdir(parents=True, exist_ok=True)
                out = render(self.analysis, self.fmt)
                self.report.write_bytes(out) if isinstance(out, bytes) else self.report.write_text(out, encoding="utf-8")

    return _TraceInsightCallback()
