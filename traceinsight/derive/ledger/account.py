"""The ``Ledger`` record: per (rank, device) the window's slices, its totals per device and per step, the gaps,
and the claims findings make on them (``claims``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS, BUCKETS, BUSY_BUCKETS, IDLE_BUCKETS
from traceinsight.derive.ledger import claims


# --- the ledger ------------------------------------------------------------------------------------------
class Later:
    """A frame built on first read: ``fn(*args)``, a module-level function and its arrays (so a ledger still pickles)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __call__(self) -> pd.DataFrame:
        return self.fn(*self.args)


class _FrameField:
    """A ``Ledger`` frame given as a frame or as a ``Later`` that builds it on first read: ``build_ledger`` defers
    the frames most analyses never read (a whole job's ranks read neither the per-device table nor the windows, and
    a small rank paid their fixed cost for nothing). A required field of the dataclass either way."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_frame"

    def __get__(self, obj: Any, objtype: Any = None) -> pd.DataFrame:
        if obj is None:
            raise AttributeError(self.slot)  # no default: the dataclass keeps the field required
        value = obj.__dict__[self.slot]
        if isinstance(value, Later):
            value = obj.__dict__[self.slot] = value()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class Ledger:
    """Per (rank, device), the device's active window split into buckets (see the module docstring).

    ``slices``: rank, device, step, start_ns, end_ns, bucket (contiguous, disjoint, covering each window).
    ``by_device``: rank, device, bucket, ns, pct (of the window); every bucket listed, zeros included.
    ``by_step``: rank, device, step, bucket, ns, pct (of the step's window on that device); step -1 = outside steps.
    ``windows``: rank, device, start_ns, end_ns, window_ns.
    ``gaps``: one row per idle gap: rank, device, start_ns, end_ns, dur_ns, next_launch_end_ns, the ns of each
    idle bucket inside it, and ``cause`` (the bucket with the most ns).
    ``warmup``: the warm-up regions used (rank, start_ns, end_ns, reason).
    """

    slices: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    by_device: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    by_step: pd.DataFrame
    windows: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    gaps: pd.DataFrame = _FrameField()  # type: ignore[assignment]
    warmup: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: What ``build_ledger`` already holds as arrays (the slices' and gaps' columns, ``device_arrays``), so the
    #: claims do not read them back from its frames (a dozen column reads cost more than a small rank's claim).
    #: None for a ledger made of frames alone (or copied with ``dataclasses.replace``): then they are read from
    #: the frames.
    _arrays: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """No device window (no slices): what ``slices.empty`` says, without building the frame of slices."""
        if self._arrays is not None:
            return not len(self._arrays["slices"]["start"])
        return self.slices.empty

    # --- totals ------------------------------------------------------------------------------------------
    def window_ns(self, rank: int | None = None, device: int | None = None) -> int:
        """The window of one (rank, device), or the sum over the devices matching the filters."""
        w = self.windows
        m = np.ones(len(w), dtype=bool)
        if rank is not None:
            m &= w["rank"].to_numpy() == rank
        if device is not None:
            m &= w["device"].to_numpy() == device
        return int(w.loc[m, "window_ns"].sum())

    def totals(self, rank: int | None = None, device: int | None = None) -> dict[str, int]:
        """ns per bucket (every bucket, in ``BUCKETS`` order), summed over the matching devices."""
        r, dev, bucket, ns = self.device_arrays  # a few rows per device: summed in Python, no frame per call
        m = np.ones(len(r), dtype=bool)
        if rank is not None:
            m &= r == rank
        if device is not None:
            m &= dev == device
        out = dict.fromkeys(BUCKETS, 0)
        for b, n in zip(bucket[m].tolist(), ns[m].tolist()):
            if b in out:
                out[b] += n
        return out

    @cached_property
    def device_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``by_device`` as plain arrays (rank, device, bucket, ns), for callers that filter it many times."""
        if self._arrays is not None:
            return self._arrays["device"]
        d = self.by_device
        return (d["rank"].to_numpy(np.int64), d["device"].to_numpy(np.int64), d["bucket"].astype(str).to_numpy(object), d["ns"].to_numpy(np.int64))

    @cached_property
    def gap_columns(self) -> dict[str, np.ndarray]:
        """``gaps``' columns as arrays (read-only, shared by every caller): rank, device, start_ns, end_ns, dur_ns
        (int64), next_launch_end_ns (float), the ns of each idle bucket (int64) and cause (objects). Taken from
        the arrays ``build_ledger`` made the frame of, else read from the frame once."""
        a = self._arrays
        if a is not None and "gap_columns" in a:
            out = dict(a["gap_columns"])
        else:
            gp = self.gaps
            out = {c: gp[c].to_numpy(np.int64) for c in ("rank", "device", "start_ns", "end_ns", "dur_ns")}
            for b in IDLE_BUCKETS:
                if b in gp:  # a bucket column of a frame made elsewhere may hold NaN: none booked
                    col = gp[b]
                    out[b] = col.to_numpy(np.int64) if isinstance(col.dtype, np.dtype) and col.dtype.kind == "i" else col.fillna(0).to_numpy(np.int64)
            out["next_launch_end_ns"] = gp["next_launch_end_ns"].to_numpy(dtype=float)
            out["cause"] = gp["cause"].to_numpy(dtype=object)
        out = {k: v.view() for k, v in out.items()}  # read-only views: the frames' own arrays stay writeable
        for v in out.values():
            v.flags.writeable = False
        return out

    @cached_property
    def busy_ns(self) -> int:
        t = self.totals()
        return sum(t[b] for b in BUSY_BUCKETS)

    @cached_property
    def avoidable_ns(self) -> int:
        t = self.totals()
        return sum(t[b] for b in AVOIDABLE_BUCKETS)

    # --- claims ------------------------------------------------------------------------------------------
    def claimed(
        self,
        buckets: str | Iterable[str],
        rank: int | None = None,
        device: int | None = None,
        within: Any = None,
    ) -> pd.DataFrame:
        """The slices (rank, device, step, start_ns, end_ns, bucket) in ``buckets``, optionally limited to one
        rank/device and to what the time ranges ``within`` (a finding's instances) point at.

        Busy slices are clipped to the ranges. Idle slices are taken per gap: a range that touches a gap claims
        that gap's slices in ``buckets`` whole, because the ledger already split each gap by cause and the cause
        owns all of its part (a sync that drained the queue owns the idle until new work arrives, not only the
        time it blocked; a stall during which the GPU stayed busy touches no gap and claims nothing).

        ``within`` is a DataFrame with start_ns and end_ns (and optionally rank/device, which then restrict each
        range to its own rank/device), a list of objects with ``start_ns``/``end_ns`` (and optional ``rank``/
        ``device``) such as ``rule_api.Instance``, or a list of (start_ns, end_ns) pairs.
        """
        return claims.claimed(self, buckets, rank, device, within)

    def claim(self, buckets: str | Iterable[str], rank: int | None = None, device: int | None = None, within: Any = None) -> int:
        """ns of ``buckets`` (on ``rank``/``device``, inside ``within``): what a finding may call its impact."""
        return sum(self.claimed_ns(buckets, rank=rank, device=device, within=within).values())

    def claimed_ns(
        self,
        buckets: str | Iterable[str],
        rank: int | None = None,
        device: int | None = None,
        within: Any = None,
    ) -> dict[tuple[int, int, str], int]:
        """The ns of ``claimed(...)`` per (rank, device, bucket), in (rank, device, bucket name) order, zeros left
        out: what a finding's claim needs, without making the frame of slices.

        Idle slices are claimed per gap, and ``gaps`` already holds each gap's ns per idle bucket (its slices
        summed by the gap they start in, as ``claimed`` takes them), so the ranges are searched among the gaps
        they touch and those gaps' columns summed: nothing proportional to all slices is read per claim. Busy
        slices are clipped to the ranges as in ``claimed``.
        """
        return claims.claimed_ns(self, buckets, rank, device, within)

    @cached_property
    def _layout(self) -> dict[str, Any] | None:
        """Where each (rank, device) sits in ``slices`` and ``gaps``, and their columns as arrays, for
        ``claimed_ns``: ``build_ledger`` writes each device's rows together and in time order, devices in (rank,
        device) order, buckets as codes of ``BUCKETS``. None for frames laid out otherwise."""
        return claims.layout(self)

    # --- reports -----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form: buckets, then per device and per step ns and % (steps outside markers are step -1)."""
        by_device = []
        for (r, d), g in self.by_device.groupby(["rank", "device"], sort=True):
            win = self.window_ns(int(r), int(d))
            by_device.append(
                {
                    "rank": int(r),
                    "device": int(d),
                    "window_ns": win,
                    "ns": {str(b): int(n) for b, n in zip(g["bucket"], g["ns"])},
                    "pct": {str(b): round(float(p), 3) for b, p in zip(g["bucket"], g["pct"])},
                }
            )
        by_step = _step_dicts(self.by_step)
        t = self.totals()
        total = sum(t.values())
        return {
            "buckets": list(BUCKETS),
            "avoidable_buckets": list(AVOIDABLE_BUCKETS),
            "total": {"window_ns": total, "ns": t, "pct": {b: round(100.0 * n / total, 3) if total else 0.0 for b, n in t.items()}},
            "by_device": by_device,
            "by_step": by_step,
        }


def _step_dicts(by_step: pd.DataFrame) -> list[dict[str, Any]]:
    """``Ledger.to_dict``'s ``by_step``: per (rank, device, step), in that order, its window and its buckets' ns and
    % (zeros left out). Integer keys are grouped on arrays (one stable sort, the rows of a group in frame order,
    as ``groupby(sort=True)`` gives them): a frame per group costs more than the group's dozen values."""
    keys = [by_step[c].to_numpy() for c in ("rank", "device", "step", "ns")]
    if not all(k.dtype.kind in "iu" for k in keys):  # (whole ns add up alike in any order; other frames: pandas' sums)
        return [_step_dict(r, d, s, g["bucket"], g["ns"], g["pct"], int(g["ns"].sum()))
                for (r, d, s), g in by_step.groupby(["rank", "device", "step"], sort=True)]
    keys = keys[:3]
    order = np.lexsort(keys[::-1])
    r, d, s = (k[order] for k in keys)
    heads = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1]) | (s[1:] != s[:-1])]) if len(order) else order
    bucket = by_step["bucket"].to_numpy(dtype=object)[order].tolist()
    ns, pct = by_step["ns"].to_numpy()[order].tolist(), by_step["pct"].to_numpy()[order].tolist()
    bounds = [*heads.tolist(), len(order)]
    return [_step_dict(r[a], d[a], s[a], bucket[a:b], ns[a:b], pct[a:b], sum(ns[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]


def _step_dict(r: Any, d: Any, s: Any, bucket: Iterable, ns: Iterable, pct: Iterable, window_ns: int) -> dict[str, Any]:
    return {
        "rank": int(r),
        "device": int(d),
        "step": int(s),
        "window_ns": int(window_ns),
        "ns": {str(b): int(n) for b, n in zip(bucket, ns) if n},
        "pct": {str(b): round(float(p), 3) for b, p in zip(bucket, pct) if p},
    }
