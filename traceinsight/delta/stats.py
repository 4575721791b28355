"""How much two sets of samples (step times, one ledger bucket per step) differ, and how sure that is, by ranks.

Step times are not normal (a slow data-loader step, a GC pause) and a profile holds few steps, so the estimate is
the **Hodges–Lehmann shift**: the median of every HEAD − BASE pairwise difference. One outlier moves it by at most
one pair in ``n·m``, where it would move a mean (or widen a bootstrap of the median) by its whole size. Its
interval is the **distribution-free one from the Mann–Whitney statistic**: the ``c+1``-th smallest and largest
pairwise differences, ``c`` the largest count with ``P(U ≤ c) ≤ (1 − confidence) / 2`` under no shift (exact
counts for small sides, the normal approximation for large ones). The test of "no shift" is the **permutation
test of the rank sum** (mid-ranks for ties), exact by counting every split of the pooled samples while they are
few, normal with the tie correction beyond. No randomness: the same traces give the same answer on every run.

Few samples set a floor no method can lower: with 3 and 3 steps every one of the 20 splits has probability 1/20,
so nothing is ever significant at 95 %; an interval needs ``2 / C(n+m, n) ≤ 1 − confidence`` (4 and 4 steps, or
3 and 5). ``power`` says what a given pair of sample counts can detect. numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Confidence level of the interval (and 1 − the significance level of the test).
CONFIDENCE = 0.95
#: Samples per side, with the same count on both, that can give a 95 % interval at all (3 and 3 cannot).
MIN_SAMPLES = 4
#: Pooled samples up to which the null distributions are counted exactly (beyond: normal approximation).
EXACT_MAX_POOLED = 60
#: Pairwise differences formed at most (1,000 samples a side); larger sides are thinned to 1,000 evenly spaced
#: quantiles first, which moves the estimate and interval by less than the spacing of those quantiles.
MAX_PAIRS = 1_000_000
#: Power the detectable change is quoted at (a change this large is caught 4 times in 5).
POWER = 0.8
#: The "record N steps" advice is for this change (%).
TARGET_PCT = 5.0


@dataclass(frozen=True)
class Shift:
    """HEAD minus BASE, in the samples' unit: the Hodges–Lehmann shift, its interval (``None`` bounds: too few
    samples for one), the two-sided p-value of the rank test, and ``separated`` (-1: every HEAD sample is below
    every BASE sample, +1: above, 0: the sides overlap)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float = CONFIDENCE
    p_value: float | None = None
    separated: int = 0

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def excludes_zero(self) -> bool:
        return self.has_interval and (self.low > 0 or self.high < 0)  # type: ignore[operator]

    def significant(self) -> bool:
        """The rank test rejects "no shift" at ``1 − confidence``."""
        return self.p_value is not None and self.p_value <= 1.0 - self.confidence


def _u_counts(n: int, m: int) -> np.ndarray:
    """Splits of n + m distinct values into n and m with each Mann–Whitney U = 0..n·m (float counts): the
    coefficients of the Gaussian binomial prod_{i=1..n} (1 − q^{m+i}) / (1 − q^i)."""
    size = n * m + 1
    poly = np.zeros(size)
    poly[0] = 1.0
    for i in range(1, n + 1):
        k = m + i
        if k < size:
            poly[k:] -= poly[:-k].copy()
        for j in range(i, size):  # divide by (1 − q^i): a running sum with stride i
            poly[j] += poly[j - i]
    return poly


def _critical(n: int, m: int, confidence: float) -> int | None:
    """The largest c with P(U ≤ c) ≤ (1 − confidence) / 2 under no shift; None when even U = 0 is likelier."""
    tail = (1.0 - confidence) / 2
    if n + m <= EXACT_MAX_POOLED:
        counts = _u_counts(n, m)
        cdf = np.cumsum(counts) / counts.sum()
        ok = np.flatnonzero(cdf <= tail * (1 + 1e-12))
        return int(ok[-1]) if len(ok) else None
    z = _z(1.0 - tail)
    c = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12) - 0.5)
    return c if c >= 0 else None


def _z(p: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01, -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - lo:
        return -_z(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


def _midranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    sx = x[order]
    first = np.r_[True, sx[1:] != sx[:-1]]
    grp = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(sx)]
    mid = (starts + ends + 1) / 2.0  # ranks start at 1
    out = np.empty(len(x))
    out[order] = mid[grp]
    return out


def rank_test(base: np.ndarray, head: np.ndarray) -> float:
    """Two-sided p-value of the permutation test of HEAD's rank sum (mid-ranks): exact while the pooled samples
    are few (a count over every way to split them), the normal approximation with the tie correction beyond."""
    n, m = len(base), len(head)
    pooled = np.concatenate([base, head])
    r = _midranks(pooled)
    observed = float(r[n:].sum())
    mean = m * (n + m + 1) / 2.0
    if np.all(pooled == pooled[0]):
        return 1.0
    if n + m <= EXACT_MAX_POOLED:
        scores = np.rint(2 * r).astype(np.int64)  # mid-ranks are multiples of 1/2
        total = int(scores.sum())
        # ways[k, s]: subsets of size k with doubled-rank sum s
        ways = np.zeros((m + 1, total + 1))
        ways[0, 0] = 1.0
        for sc in scores.tolist():
            ways[1:, sc:] += ways[:-1, : total + 1 - sc].copy()
        dist = ways[m]
        dev = np.abs(np.arange(total + 1) / 2.0 - mean)
        far = dev >= abs(observed - mean) - 1e-9
        return float(min(1.0, dist[far].sum() / dist.sum()))
    _, counts = np.unique(pooled, return_counts=True)
    var = n * m / 12.0 * ((n + m + 1) - float((counts**3 - counts).sum()) / ((n + m) * (n + m - 1)))
    if var <= 0:
        return 1.0
    zval = (abs(observed - mean) - 0.5) / math.sqrt(var)
    return float(min(1.0, math.erfc(max(zval, 0.0) / math.sqrt(2))))


def _thin(x: np.ndarray, k: int) -> np.ndarray:
    if len(x) <= k:
        return x
    return np.quantile(np.sort(x), (np.arange(k) + 0.5) / k)


def shift(base: "np.ndarray | list[float]", head: "np.ndarray | list[float]", confidence: float = CONFIDENCE) -> Shift:
    """The change of ``head`` against ``base`` (Hodges–Lehmann) with its ``confidence`` interval and rank test."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(head, dtype=float)
    if not len(a) or not len(b):
        raise ValueError("shift: both sides need at least one sample")
    side = int(math.sqrt(MAX_PAIRS))
    ta, tb = _thin(a, side), _thin(b, side)
    d = np.subtract.outer(tb, ta).ravel()
    n = len(d)
    c = _critical(len(ta), len(tb), confidence)
    mid = [(n - 1) // 2, n // 2]
    kth = sorted(set(mid + ([c, n - 1 - c] if c is not None else [])))
    d = np.partition(d, kth)  # only the order statistics needed: linear, not a sort of n·m differences
    est = float((d[mid[0]] + d[mid[1]]) / 2)
    sep = -1 if b.max() < a.min() else (1 if b.min() > a.max() else 0)
    p = rank_test(a, b)
    if c is None:
        return Shift(est, None, None, confidence, p, sep)
    low, high = float(d[c]), float(d[n - 1 - c])
    return Shift(est, min(low, est), max(high, est), confidence, p, sep)


def interval_possible(n: int, m: int, confidence: float = CONFIDENCE) -> bool:
    """Can n and m samples give an interval at all (``2 / C(n+m, n) ≤ 1 − confidence``)?"""
    return n > 0 and m > 0 and _critical(n, m, confidence) is not None


def spread_pct(x: np.ndarray, ref: float) -> float:
    """A robust step-to-step spread (1.4826 × median absolute deviation, the standard deviation for normal data
    that one outlier cannot inflate) as % of ``ref``."""
    if len(x) < 2 or not ref:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))) / abs(ref) * 100.0)


@dataclass(frozen=True)
class Power:
    """What n and m samples with this spread can tell: ``detectable_pct``, the smallest change caught with
    probability ``POWER`` (None: no change at all, too few samples for a test), and ``steps_for_target``, the
    samples per side needed to catch ``TARGET_PCT``."""

    n_base: int
    n_head: int
    spread_pct: float
    detectable_pct: float | None
    steps_for_target: int


def power(base: np.ndarray, head: np.ndarray, confidence: float = CONFIDENCE) -> Power:
    """Normal-theory sample size with the rank test's efficiency (3/π of the t-test's on normal data): the
    detectable change is (z_{1−α/2} + z_power) · σ · sqrt(1/n + 1/m) · sqrt(π/3), σ the pooled robust spread."""
    n, m = len(base), len(head)
    ref = float(np.median(base)) if n else 0.0
    s = math.sqrt((spread_pct(base, ref) ** 2 + spread_pct(head, ref) ** 2) / 2)
    k = (_z(1 - (1 - confidence) / 2) + _z(POWER)) * math.sqrt(math.pi / 3)
    detect = k * s * math.sqrt(1 / n + 1 / m) if interval_possible(n, m, confidence) else None
    need = MIN_SAMPLES
    if s > 0:
        need = max(need, math.ceil(2 * (k * s / TARGET_PCT) ** 2))
    return Power(n, m, round(s, 2), None if detect is None else round(detect, 1), need)
