"""The ledger's frames, built from the int64 blocks ``build_ledger`` fills (on first read: ``account._Later``)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import BUCKETS, IDLE_BUCKETS
from traceinsight.derive.ledger.account import Ledger

#: The slices' bucket dtype, made once: a categorical dtype built per ledger (its categories Index validated) cost
#: more than the rest of a small rank's slices frame.
_BUCKET_DTYPE = pd.CategoricalDtype(list(BUCKETS))
#: The int64 columns of the slices, windows and gaps frames, each an Index made once: a frame built on a block
#: with a ready Index costs a third of one whose column names are checked and converted again.
_SLICE_COLS = pd.Index(["rank", "device", "step", "start_ns", "end_ns"])
_WINDOW_COLS = pd.Index(["rank", "device", "start_ns", "end_ns", "window_ns"])
GAP_INT_COLS = pd.Index(["rank", "device", "start_ns", "end_ns", "dur_ns", *IDLE_BUCKETS])


@cache
def _idle_names() -> Any:
    """The idle bucket names as the array type a column of them gets (inferred once), for ``take`` by code."""
    return pd.Series(np.asarray(IDLE_BUCKETS, dtype=object)).array


def slices_frame(sl_block: np.ndarray, label: np.ndarray) -> pd.DataFrame:
    """``Ledger.slices`` of ``build_ledger``'s int64 block (rank, device, step, start_ns, end_ns) and bucket codes."""
    slices = pd.DataFrame(sl_block.T, columns=_SLICE_COLS, copy=False)
    slices.insert(5, "bucket", pd.Categorical.from_codes(label, dtype=_BUCKET_DTYPE))
    return slices


def gaps_frame(block: np.ndarray, next_launch_end_ns: np.ndarray, cause: np.ndarray) -> pd.DataFrame:
    """``Ledger.gaps`` of ``build_ledger``'s int64 block (rank, device, start_ns, end_ns, dur_ns, the idle buckets),
    the next launch's end and each gap's cause (codes of ``IDLE_BUCKETS``)."""
    gaps = pd.DataFrame(block.T, columns=GAP_INT_COLS, copy=False)
    gaps.insert(5, "next_launch_end_ns", next_launch_end_ns)
    # the names as the column's own array type (inferred once from the bucket names) taken by index: no 10^5
    # strings to check one by one
    gaps["cause"] = _idle_names().take(cause) if len(cause) else np.zeros(0, dtype=object)
    return gaps


def windows_frame(w_block: np.ndarray) -> pd.DataFrame:
    """``Ledger.windows`` of the int64 block (rank, device, start_ns, end_ns, window_ns) ``build_ledger`` made."""
    return pd.DataFrame(w_block.T, columns=_WINDOW_COLS, copy=False)


def by_device_frame(k_rank: np.ndarray, k_dev: np.ndarray, mat: np.ndarray, window_ns: np.ndarray) -> pd.DataFrame:
    """``Ledger.by_device``: one row per (device, bucket), zeros included, from the ns per device and bucket."""
    nb = len(BUCKETS)
    return pd.DataFrame(
        {
            "rank": np.repeat(k_rank, nb),
            "device": np.repeat(k_dev, nb),
            "bucket": np.tile(np.array(BUCKETS, dtype=object), len(k_rank)),
            "ns": mat.ravel(),
            "pct": (100.0 * mat / np.maximum(window_ns, 1)[:, None]).ravel(),
        }
    )


def first_max_row(m: np.ndarray) -> np.ndarray:
    """``m.argmax(axis=0)`` (the first row holding each column's maximum) of a few long rows, a row at a time:
    numpy's argmax across rows of a C-ordered block walks it column by column."""
    best = m[0].copy()
    arg = np.zeros(m.shape[1], np.intp)
    more = np.empty(m.shape[1], dtype=bool)
    for k in range(1, m.shape[0]):
        np.greater(m[k], best, out=more)  # strictly: ties keep the first row, as argmax does
        np.copyto(arg, k, where=more)
        np.maximum(best, m[k], out=best)
    return arg


def empty_ledger() -> Ledger:
    def frame(cols: dict[str, str]) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})

    return Ledger(
        slices=frame({"rank": "int64", "device": "int64", "step": "int64", "start_ns": "int64", "end_ns": "int64", "bucket": "object"}),
        by_device=frame({"rank": "int64", "device": "int64", "bucket": "object", "ns": "int64", "pct": "float64"}),
        by_step=frame({"rank": "int64", "device": "int64", "step": "int64", "bucket": "object", "ns": "int64", "pct": "float64"}),
        windows=frame({"rank": "int64", "device": "int64", "start_ns": "int64", "end_ns": "int64", "window_ns": "int64"}),
        gaps=frame({"rank": "int64", "device": "int64", "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64", "next_launch_end_ns": "float64", "cause": "object"}),
        warmup=frame({"rank": "int64", "start_ns": "int64", "end_ns": "int64", "reason": "object"}),
    )
