"""How much two sets of step times differ, and how sure that is: the change in the median step with a bootstrap
confidence interval.

Step times are not normal (a slow data-loader step, a GC pause) and a profile holds few steps, so the estimate is
the difference of the medians (what a user reads off both reports) and its interval the 2.5th and 97.5th
percentiles of that difference over resamples of each side's steps (percentile bootstrap). The generator is
seeded, so the same traces give the same interval on every run, which a CI gate needs. With fewer than
``MIN_SAMPLES`` steps on a side there is no interval: the change is reported, its noise cannot be. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Confidence level of the interval.
CONFIDENCE = 0.95
#: Steps a side needs for an interval (below it, resampling sees too few distinct medians to mean anything).
MIN_SAMPLES = 3
#: Resamples, and the seed that makes them the same on every run.
RESAMPLES = 10_000
SEED = 20250
#: Samples drawn per resample matrix at most (memory): large sides get fewer resamples, never fewer than 1,000.
MAX_DRAWS = 4_000_000


@dataclass(frozen=True)
class Shift:
    """HEAD minus BASE, in the samples' unit: the median change and its interval (``None`` bounds: too few samples)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float = CONFIDENCE

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def excludes_zero(self) -> bool:
        return self.has_interval and (self.low > 0 or self.high < 0)  # type: ignore[operator]


def _medians(x: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """The medians of ``n`` resamples of ``x``, drawn in blocks of at most ``MAX_DRAWS`` samples: memory stays
    bounded whatever the step count (the generator's stream, hence every figure, is the same as one draw)."""
    rows = max(1, MAX_DRAWS // max(len(x), 1))
    if rows >= n:
        return np.median(x[rng.integers(len(x), size=(n, len(x)))], axis=1)
    out = np.empty(n)
    for a in range(0, n, rows):
        b = min(a + rows, n)
        out[a:b] = np.median(x[rng.integers(len(x), size=(b - a, len(x)))], axis=1)
    return out


def shift(base: "np.ndarray | list[float]", head: "np.ndarray | list[float]", confidence: float = CONFIDENCE) -> Shift:
    """The change of ``head`` against ``base`` (median(head) − median(base)) with its ``confidence`` interval."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(head, dtype=float)
    if not len(a) or not len(b):
        raise ValueError("shift: both sides need at least one sample")
    est = float(np.median(b) - np.median(a))
    if min(len(a), len(b)) < MIN_SAMPLES:
        return Shift(est, None, None, confidence)
    n = max(1000, min(RESAMPLES, MAX_DRAWS // max(len(a), len(b))))
    rng = np.random.default_rng(SEED)
    d = _medians(b, rng, n) - _medians(a, rng, n)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(d, [tail, 100 - tail])
    return Shift(est, float(min(low, est)), float(max(high, est)), confidence)
