"""Groups of rows by several key columns without a grouped frame: the group of each row, numbered the way
``DataFrame.groupby(keys, sort=False)`` orders its groups (first appearance), and each group's key values as
the groupby's result index holds them.
Also, for the same reason: the row order of a descending one-column sort (``descending_order``) and per-group
float sums (``group_float_sums``), each equal to what the frame operation it replaces gives.

A pandas groupby with named aggregations costs a few milliseconds however small the frame, which a rule that
groups a dozen rows pays on every analysis; these are a handful of vectorized factorizations.

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def first_seen_groups(keys: "list[pd.Series]") -> tuple[np.ndarray, list[pd.Index]]:
    """(group of each row, each key's value per group): groups numbered in order of first appearance of their key
    tuple and key values typed as in the result of ``groupby(keys, sort=False)`` (the keys' factorized uniques).
    The keys hold strings or numbers (a categorical key groups by its categories in a groupby; convert it first)
    and no missing value (a groupby would drop those rows): ValueError otherwise."""
    n = len(keys[0])
    combined = np.zeros(n, np.int64)
    room = 1
    factors = []
    for k in keys:
        codes, uniques = pd.factorize(k, sort=False)
        if n and codes.min() < 0:
            raise ValueError("a group key is missing")
        factors.append((codes, uniques))
        width = max(len(uniques), 1)
        if room * width >= 2**62:  # keep the combined key inside int64: renumber what is combined so far
            combined, seen = pd.factorize(combined, sort=False)
            combined, room = combined.astype(np.int64), max(len(seen), 1)
        combined = combined * width + codes
        room *= width
    group, _ = pd.factorize(combined, sort=False)
    first = np.unique(group, return_index=True)[1] if n else np.zeros(0, np.intp)
    # typed as the groupby types its result index: strings held as objects become the string dtype
    return group.astype(np.intp), [pd.Index(uniques.take(codes[first]).to_numpy()) for codes, uniques in factors]


def descending_order(values: np.ndarray) -> np.ndarray:
    """The row order ``frame.sort_values(column, ascending=False)`` gives for a column holding ``values`` (no
    missing value): pandas' own recipe for a descending sort of one column (the values reversed, a quicksort
    argsort, the result reversed back), so tied rows come out in the same order as from the frame's sort, which
    costs a tenth of a millisecond however few the rows."""
    idx = np.arange(len(values))[::-1]
    return idx[np.asarray(values)[::-1].argsort(kind="quicksort")][::-1]


def group_float_sums(code: np.ndarray, columns: "tuple[np.ndarray, ...]") -> "list[np.ndarray]":
    """Per group (``code``: each row's group, 0..n-1, every group present) the sum of each float column, bit for
    bit as ``DataFrame(columns).groupby(code, sort=True).sum()`` gives it, whose summation order a plain numpy sum
    does not reproduce in the last bits. With the groups in row order and no NaN, pandas sums the frame's one
    2-D block with ``np.add.reduceat`` at the group starts, done here on the same block without the groupby (half
    a millisecond however few the rows); otherwise the groupby itself (its compensated sums)."""
    block = np.stack(columns)
    if len(code) and not np.isnan(block).any() and (code[1:] >= code[:-1]).all():
        starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
        sums = np.add.reduceat(block, starts, axis=1)
        return [sums[i] for i in range(len(columns))]
    by = pd.DataFrame({i: c for i, c in enumerate(columns)}).groupby(code, sort=True).sum()
    return [by[i].to_numpy() for i in range(len(columns))]
