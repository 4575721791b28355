"""``vocab.masks.take_rows`` on large takes: a column whose taken rows hold one value is kept broadcast, with the
same values, dtypes and labels as pandas' own take."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.vocab import masks


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(masks, "SMALL_TAKE", 4)
    monkeypatch.setattr(masks, "CONSTANT_TAKE", 8)
    monkeypatch.setattr(masks, "_SAMPLED_ROWS", 3)  # first, middle and last row sampled: the whole-column check decides


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    other = np.full(n, np.nan)
    other[44] = 1.5  # one row differs: not one value over the takes that include it (not among the rows sampled first)
    return pd.DataFrame(
        {
            "ints": rng.integers(0, 5, n),
            "minus_one": np.full(n, -1, np.int32),
            "nan": np.full(n, np.nan),
            "one_differs": other,
            "flag": np.zeros(n, bool),
            "names": pd.Categorical(rng.choice(["a", "b"], n)),
            "missing": pd.Categorical([None] * n, categories=["x", "y"]),
            "one_name": pd.Categorical(["y"] * n, categories=["x", "y"]),
        },
        index=pd.RangeIndex(100, 100 + n),
    )


def _is_broadcast(col: pd.Series) -> bool:
    a = col.array.codes if isinstance(col.dtype, pd.CategoricalDtype) else col.to_numpy()
    return a.strides == (0,)


def test_one_value_columns_are_broadcast_with_the_same_values(small_thresholds):
    df = _frame(60)
    for pos in (np.r_[0:20, 30:50, 55], np.r_[1, 3, 8, 9, 11, 40, 44, 50, 57, 59], np.r_[2:59:7, 58]):
        got = masks.take_rows(df, pos)
        pd.testing.assert_frame_equal(got, df.iloc[pos], check_exact=True)
        flat = {c for c in got if _is_broadcast(got[c])}
        assert {"minus_one", "nan", "flag", "missing", "one_name"} <= flat
        assert "ints" not in flat and "names" not in flat
        assert ("one_differs" in flat) == (44 not in pos)
        # a take of the taken frame (kernels from GPU activity) gives the same rows again
        sub = np.arange(0, len(pos), 2)
        pd.testing.assert_frame_equal(masks.take_rows(got, sub), df.iloc[pos[sub]], check_exact=True)


def test_small_takes_copy_every_column(small_thresholds):
    df = _frame(60)
    got = masks.take_rows(df, np.r_[0, 2, 3, 7, 9])  # above SMALL_TAKE, under CONSTANT_TAKE
    pd.testing.assert_frame_equal(got, df.iloc[[0, 2, 3, 7, 9]], check_exact=True)
    assert not any(_is_broadcast(got[c]) for c in got)


def test_a_broadcast_column_holds_no_reference_to_the_source(small_thresholds):
    df = _frame(60)
    got = masks.take_rows(df, np.r_[0:20, 25:45])
    col = got["minus_one"].to_numpy()
    base = col
    while base.base is not None:
        base = base.base
    assert base.size == 1  # one element kept, not the source column
