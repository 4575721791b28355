"""Name and code queries on event columns: shorten a name, test names once per distinct value, pair ranks
with devices, read a launch's grid.

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.vocab.masks import category_hits, codes_in, kind_mask as views_kind_mask, name_mask


def short_name(name: str, width: int = 80) -> str:
    """Kernel names can be kilobytes of templates; evidence tables need the head of them."""
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def pair_codes(rank: np.ndarray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (rank, device) pairs, sorted (an (n, 2) array), and each row's pair index."""
    r0, d0 = int(rank.min()), int(device.min())
    span = int(device.max()) - d0 + 1
    if r0 == int(rank.max()) and span == 1:  # one device (one file): one pair, no key
        return np.array([[r0, d0]], dtype=np.int64), np.zeros(len(rank), np.int64)
    key = (rank.astype(np.int64) - r0) * span + (device.astype(np.int64) - d0)  # one int64 key, ordered as (rank, device)
    n_keys = (int(rank.max()) - r0 + 1) * span
    if n_keys <= 4 * len(key) + 1024:  # few possible pairs: counted, not sorted
        present = np.bincount(key, minlength=n_keys) > 0
        uk = np.flatnonzero(present)
        inv = (np.cumsum(present) - 1)[key]
    else:
        uk, inv = np.unique(key, return_inverse=True)
    return np.stack([uk // span + r0, uk % span + d0], axis=1), inv.reshape(-1)


def lookup(series: pd.Series, labels: np.ndarray) -> np.ndarray:
    """``series[label]`` for each label (None -> None), in one reindex."""
    labels = np.asarray(labels, dtype=object)
    valid = ~pd.isna(labels)
    out = np.full(len(labels), None, dtype=object)
    if valid.any():
        out[valid] = series.reindex(labels[valid].astype(np.int64)).astype(object).to_numpy()
    return out


def matches(text: str | None, pattern: str) -> bool:
    return bool(text) and re.search(pattern, str(text), flags=re.IGNORECASE) is not None


def grid_blocks(grid: pd.Series) -> np.ndarray:
    """Blocks per launch from the ``grid`` column ("x,y,z"); NaN where the source gave none."""
    if len(grid) == 0:
        return np.zeros(0, dtype=float)
    if isinstance(grid.dtype, pd.CategoricalDtype):
        # one regex search per distinct grid (a few), in Python: ``str.extract`` on the categories cost half a
        # millisecond whatever their number. (x * y) * z in floats, as the frame's row product multiplies.
        prod = np.array([_blocks_of(str(c)) for c in grid.cat.categories], dtype=float)
        codes = grid.cat.codes.to_numpy()
        out = np.full(len(grid), np.nan)
        ok = codes >= 0
        out[ok] = prod[codes[ok]]
        return out
    parts = grid.astype(str).str.extract(_GRID.pattern)
    return parts.astype(float).prod(axis=1, min_count=3).to_numpy()


#: A grid as the trace spells it ("x,y,z", "[x, y, z]", "x x y x z"): its three dimensions.
_GRID = re.compile(r"^\s*\[?\s*(\d+)\s*[, x]\s*(\d+)\s*[, x]\s*(\d+)")


def _blocks_of(text: str) -> float:
    """Blocks of one grid text (NaN when it is not one): the product ``grid_blocks`` takes per row."""
    m = _GRID.search(text)
    if m is None:
        return np.nan
    x, y, z = (float(g) for g in m.groups())
    return x * y * z


def kind_mask(frame: pd.DataFrame, kinds: "str | tuple[str, ...]") -> np.ndarray:
    """Rows of ``frame`` whose kind is one of ``kinds`` (``views.kind_mask`` on its kind column)."""
    return views_kind_mask(frame["kind"], (kinds,) if isinstance(kinds, str) else tuple(kinds))


def any_code_in(codes: np.ndarray, hit: np.ndarray) -> bool:
    """Does any row carry a code that ``hit`` marks? Code by code for the first few, stopping at the first
    present (a training trace names a backward op within the first few), then all the others at once."""
    wanted = np.flatnonzero(hit)
    tmp = np.empty(len(codes), dtype=bool)
    for c in wanted[:16].tolist():
        np.equal(codes, c, out=tmp)
        if tmp.any():
            return True
    if len(wanted) <= 16:
        return False
    rest = np.array(hit, dtype=bool)
    rest[wanted[:16]] = False
    return bool(codes_in(codes, rest).any())


def names_where(names: pd.Series, test) -> np.ndarray:
    """Rows whose name passes ``test(match)``, where ``match(pattern, case=False)`` answers as ``name_mask`` does
    and ``test`` combines such answers (``match(A) & ~match(B)``). On a categorical column the test runs on one row
    per category and the rows are compared on their codes: one pass over the rows, not one per pattern."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        return codes_in(names.cat.codes.to_numpy(), hits_per_category(names, test))
    return np.asarray(test(lambda p, case=False: name_mask(names, p, case=case)), dtype=bool)


def hits_per_category(names: pd.Series, test) -> np.ndarray:
    """``names_where``'s test once per category of a categorical name column (a bool per category)."""
    cats = names.cat.categories

    def match(pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:  # name_mask's rules, per category
        rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
        return category_hits(cats, rx).copy()  # the cache's own array stays untouched whatever the test does

    return np.asarray(test(match), dtype=bool)


def count_matching(names: pd.Series, rows: np.ndarray, pattern: "str | re.Pattern[str]", case: bool = False) -> int:
    """How many of the ``rows`` (a mask) have a name matching ``pattern`` (``name_mask``'s rules): one test per
    distinct name and one count per name code, no mask over every row."""
    if not rows.any():
        return 0
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return int((rows & name_mask(names, pattern, case=case)).sum())
    cats = names.cat.categories
    codes = names.cat.codes.to_numpy()
    counts = np.bincount(codes[rows & (codes >= 0)], minlength=len(cats))
    seen = np.flatnonzero(counts)
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    return int(sum(int(counts[i]) for i in seen if rx.search(str(cats[i])) is not None))
