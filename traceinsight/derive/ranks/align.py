"""Putting ranks recorded on different hosts on one clock.

Host clocks of different machines disagree by up to milliseconds, which is as large as the waits we want to
measure. A collective cannot finish on one rank before the last rank has joined, so its kernels end at nearly the
same instant everywhere: the offset of a rank's clock is the median, over the collectives it took part in, of its
end time minus the median end time of the same collective across ranks (two passes, so a few skewed ranks do not
bias the reference). The residual (how far ends still disagree after the shift) says how much to trust waits
shorter than it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class Alignment:
    method: str
    offsets_ns: dict[int, int] = field(default_factory=dict)  # rank -> ns subtracted from its (absolute) times
    collectives_used: int = 0
    unaligned_ranks: list[int] = field(default_factory=list)
    spread_before_ns: int = 0  # median over collectives of (latest - earliest end) on the trace clocks
    residual_p50_ns: int = 0  # |end - collective's median end| after alignment
    residual_p95_ns: int = 0
    residual_max_ns: int = 0

    def describe(self) -> str:
        if not self.collectives_used:
            return self.method
        offs = np.array(list(self.offsets_ns.values()) or [0])
        text = (
            f"{self.method}: {self.collectives_used} collective instances; clock offsets {_ms(offs.min())} to {_ms(offs.max())} "
            f"(collective ends disagreed by {_ms(self.spread_before_ns)} (median) on the trace clocks); residual after alignment "
            f"{_ms(self.residual_p50_ns)} median, {_ms(self.residual_p95_ns)} p95, {_ms(self.residual_max_ns)} max"
        )
        if self.unaligned_ranks:
            text += f"; ranks without collectives kept their trace clocks: {_short_list(self.unaligned_ranks)}"
        return text

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "description": self.describe(),
            "collectives_used": int(self.collectives_used),
            "offsets_ns": {str(k): int(v) for k, v in sorted(self.offsets_ns.items())},
            "unaligned_ranks": [int(r) for r in self.unaligned_ranks],
            "spread_before_ns": int(self.spread_before_ns),
            "residual_p50_ns": int(self.residual_p50_ns),
            "residual_p95_ns": int(self.residual_p95_ns),
            "residual_max_ns": int(self.residual_max_ns),
        }


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _short_list(values: list[int], n: int = 12) -> str:
    head = ", ".join(str(v) for v in values[:n])
    return head + (f" and {len(values) - n} more" if len(values) > n else "")


def align(ranks: list[int], matched: pd.DataFrame) -> Alignment:
    """Offsets per rank from ``matched`` collectives (columns rank, instance, end_ns on absolute trace clocks).

    Only instances seen on two or more ranks are used. Ranks with none keep offset 0.
    """
    if matched.empty:
        return Alignment(method="trace clocks as recorded (no collective seen on two ranks to align on)", offsets_ns={r: 0 for r in ranks})
    inst = matched["instance"].to_numpy()
    rank = matched["rank"].to_numpy()
    end = matched["end_ns"].to_numpy(np.int64)
    # Work relative to one reference so medians stay in float64's exact integer range.
    base = int(np.median(end))
    rel = (end - base).astype(np.float64)
    g = pd.Series(rel).groupby(inst)
    spread = g.max() - g.min()
    offsets = pd.Series(0.0, index=pd.Index(np.unique(rank)))
    for _ in range(2):
        shifted = rel - offsets.reindex(rank).to_numpy()
        ref = pd.Series(shifted).groupby(inst).transform("median").to_numpy()
        offsets = offsets + pd.Series(shifted - ref).groupby(rank).median()
    shifted = rel - offsets.reindex(rank).to_numpy()
    resid = np.abs(shifted - pd.Series(shifted).groupby(inst).transform("median").to_numpy())
    offs = {int(r): int(round(offsets.get(r, 0.0))) for r in ranks}
    return Alignment(
        method="aligned on collective end times (median offset per rank)",
        offsets_ns=offs,
        collectives_used=int(len(np.unique(inst))),
        unaligned_ranks=sorted(int(r) for r in ranks if r not in offsets.index),
        spread_before_ns=int(np.median(spread.to_numpy())),
        residual_p50_ns=int(np.median(resid)),
        residual_p95_ns=int(np.percentile(resid, 95)),
        residual_max_ns=int(resid.max()),
    )
