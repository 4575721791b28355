"""Row masks on event columns: which rows have these kinds, names matching a pattern, these category codes.

Floor 0. The one home of "rows in these categories": views, ledger, what-if and rules all ask through these, so a
pattern matches the same rows whoever asks, and a categorical column is tested once per distinct value.
"""

from __future__ import annotations

import re
import weakref

import numpy as np
import pandas as pd


#: Answers kept per categories object: which categories a pattern matches, which are one of some wanted kinds. The
#: ledger, the views and the rules ask the same few questions of subsets that share one set of categories, some
#: thirty times per analysis. Keyed by the object's id and held by a weak reference, so a reused id of a freed
#: object never answers for it.
_PER_CATEGORIES: dict[tuple, tuple["weakref.ref[pd.Index]", np.ndarray]] = {}


def _per_categories(cats: pd.Index, question: tuple, answer) -> np.ndarray:
    """``answer()`` for ``cats`` and ``question``, computed once per categories object (see ``_PER_CATEGORIES``)."""
    key = (id(cats), *question)
    got = _PER_CATEGORIES.get(key)
    if got is not None and got[0]() is cats:
        return got[1]
    hit = answer()
    if len(_PER_CATEGORIES) > 1024:
        _PER_CATEGORIES.clear()
    try:
        _PER_CATEGORIES[key] = (weakref.ref(cats), hit)
    except TypeError:  # not weakly referable: answer without keeping it
        pass
    return hit


#: Up to this many categories, ``category_hits`` also keeps its answers by the names themselves: a job's small
#: ranks each bring their own categories object, holding the same dozen names.
_FEW_NAMES = 64
_HITS_BY_NAMES: dict[tuple[str, int, tuple], np.ndarray] = {}


def category_hits(cats: pd.Index, rx: "re.Pattern[str]") -> np.ndarray:
    """Per category, whether ``rx`` finds a match in it: one regex search per distinct name, never per row."""
    return _per_categories(cats, ("pattern", rx.pattern, rx.flags), lambda: _search_categories(cats, rx))


def _search_categories(cats: pd.Index, rx: "re.Pattern[str]") -> np.ndarray:
    # a small rank's names are likely another rank's names, already tested: those answers are kept by the names
    by_value = (rx.pattern, rx.flags, tuple(cats.tolist())) if len(cats) <= _FEW_NAMES else None
    hit = _HITS_BY_NAMES.get(by_value) if by_value is not None else None
    if hit is None:
        hit = np.fromiter((rx.search(str(c)) is not None for c in cats), dtype=bool, count=len(cats))
        if by_value is not None:
            if len(_HITS_BY_NAMES) > 4096:
                _HITS_BY_NAMES.clear()
            _HITS_BY_NAMES[by_value] = hit
    return hit


#: Up to this many wanted categories, a mask is built by comparing the codes with each (one cheap pass per
#: category); above it, by one table lookup per row.
_FEW_CODES = 16


def codes_in(codes: np.ndarray, hit: np.ndarray, missing: bool = False) -> np.ndarray:
    """Per row, whether its category code is one of those ``hit`` marks (one bool per category); a missing value
    (code -1) gives ``missing``. The one home of "rows in these categories" for views, ledger and rules.

    Rules ask about one or two categories of a million rows: a comparison per wanted code, into one reused
    buffer, is several times cheaper than a table lookup, which first widens every small code to a full-length
    index array."""
    wanted = np.flatnonzero(hit)
    if len(wanted) > _FEW_CODES or missing:
        return np.append(np.asarray(hit, dtype=bool), missing).take(codes)  # code -1 reads the extra last entry
    if len(wanted) == 1:  # the usual question (one kind): one compare, a third of a table lookup's time
        return np.equal(codes, wanted[0])
    out = np.zeros(len(codes), dtype=bool)
    tmp = np.empty(len(codes), dtype=bool)
    for c in wanted.tolist():
        np.equal(codes, c, out=tmp)
        out |= tmp
    return out


def name_mask(names: pd.Series, pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
    """Rows whose name matches ``pattern`` (searched anywhere), evaluated once per distinct name.

    A string pattern is case-insensitive unless ``case``; a compiled pattern keeps its own flags.
    """
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cat = names.array
        return codes_in(cat.codes, category_hits(cat.categories, rx))
    return np.fromiter((rx.search(str(n)) is not None for n in names), dtype=bool, count=len(names))


def kind_mask(kinds: pd.Series, wanted: "tuple[str, ...] | list[str]") -> np.ndarray:
    """Rows whose value (a kind, a copy kind: a few categories) is one of ``wanted``; on the category codes when
    the column is categorical. A fresh, writable array either way: callers combine masks in place (``&=``), and
    pandas' copy-on-write hands out read-only views of a plain column's result."""
    if isinstance(kinds.dtype, pd.CategoricalDtype):
        cat = kinds.array
        return codes_in(cat.codes, _kind_hits(cat.categories, tuple(wanted)))
    return kinds.isin(wanted).to_numpy(dtype=bool, copy=True)


def _kind_hits(cats: pd.Index, wanted: tuple) -> np.ndarray:
    """Per category, whether it is one of ``wanted`` (``np.isin`` on the categories), kept per categories object."""
    return _per_categories(cats, ("kinds", wanted), lambda: np.isin(np.asarray(cats, dtype=object), list(wanted)))


def texts_at(values: pd.Series, positions: np.ndarray) -> np.ndarray:
    """``values.iloc[positions].astype(str).to_numpy()`` (an object array of Python strings). With no missing value
    at ``positions``, each distinct value is turned to text once (``distinct_texts``) and looked up by code: no
    Series take or cast, and no pass over the categories of a big trace's names."""
    codes, texts = distinct_texts(values, positions)
    if not len(codes) or codes.min() >= 0:
        return texts[codes] if len(codes) else np.zeros(0, dtype=object)
    return values.iloc[positions].astype(str).to_numpy()


def distinct_texts(values: pd.Series, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``values`` at ``positions`` as (a code per row, the distinct texts those rows hold):
    ``texts[codes[i]]`` is ``values.iloc[positions].astype(str).iloc[i]``, and a missing value (NaN, None) gets
    code -1 (``astype(str)`` leaves it missing, and string tests answer False for it). Each distinct value is
    turned to text once (a categorical's codes are remapped, never expanded to per-row strings), so a test or
    rewrite of the texts costs one call per distinct name, then one lookup per row (``codes_in``)."""
    positions = np.asarray(positions, dtype=np.intp)
    if isinstance(values.dtype, pd.CategoricalDtype):
        cat = values.array
        codes = cat.codes[positions]
        present = codes >= 0
        used = np.flatnonzero(np.bincount(codes[present], minlength=len(cat.categories)))
        remap = np.full(len(cat.categories) + 1, -1, dtype=np.int64)  # code -1 reads the extra last entry
        remap[used] = np.arange(len(used))
        texts = np.array([str(c) for c in cat.categories.take(used).tolist()], dtype=object)
        return remap[codes], texts
    codes, uniq = pd.factorize(values.iloc[positions].to_numpy(dtype=object), use_na_sentinel=True)
    return codes.astype(np.int64, copy=False), np.array([str(u) for u in uniq], dtype=object)


#: Row count below which ``take_rows`` leaves the take to pandas (measured: 230 vs 410 µs at 200 rows of the events,
#: 550 vs 630 µs at 10,000).
SMALL_TAKE = 10_000


def take_rows(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """``frame.iloc[positions]``, column by column: a numpy take per column (of the codes for a categorical)
    into a frame built without a second copy. Same columns, dtypes, index labels and values as pandas' take,
    which on the events (a million rows, two dozen columns) costs about half as much again. Below
    ``SMALL_TAKE`` rows pandas' own take is cheaper (building a frame column by column has the larger fixed cost)."""
    step = _even_step(positions)
    if step and (step == 1 or len(positions) < SMALL_TAKE):
        # rows at an even stride (a run, or every other row where launches and kernels alternate): the same rows,
        # values, dtypes and labels as the take (pandas' take gives a RangeIndex back for such positions too), as
        # a slice, which shares the columns instead of copying them
        return frame.iloc[int(positions[0]) : int(positions[-1]) + 1 : step]
    if len(positions) < SMALL_TAKE or not frame.columns.is_unique or any(dt == object for dt in frame.dtypes):
        return frame.iloc[positions]  # a frame built from object arrays would infer their dtype again
    one_value = len(positions) >= CONSTANT_TAKE
    cols = {name: _take_column(col, positions, one_value) for name, col in frame.items()}
    out = pd.DataFrame(cols, index=frame.index.take(positions), columns=frame.columns, copy=False)
    return out.__finalize__(frame)


#: Takes of at least this many rows keep a column whose taken rows all hold one value as that value broadcast
#: (``np.broadcast_to``: a read-only array of stride 0, a few bytes whatever its length). On a gigabyte trace the
#: host rows' GPU-only columns (device, stream, bytes, registers, ...) are a third of the host view's memory and
#: all one value. Readers see the same values and dtypes; the views' arrays are read-only already.
CONSTANT_TAKE = 1 << 18
#: Rows of a take looked at before a column is compared whole (``_single_value``).
_SAMPLED_ROWS = 257


def _take_column(col: pd.Series, positions: np.ndarray, one_value: bool):
    """``col``'s values at ``positions`` (a numpy take, of the codes for a categorical), broadcast from one
    element when ``one_value`` and the taken values are all equal (bit for bit: NaN equals NaN)."""
    if isinstance(col.dtype, np.dtype):
        values = col.to_numpy()
        if one_value and values.dtype.kind in "biuf":
            same = _single_value(values, positions)
            if same is not None:
                return same
        return values.take(positions)
    arr = col.array
    if one_value and isinstance(arr, pd.Categorical):
        same = _single_value(arr.codes, positions)
        if same is not None:
            return pd.Categorical.from_codes(same, dtype=arr.dtype, validate=False)
    return arr.take(positions)


def _single_value(values: np.ndarray, positions: np.ndarray) -> np.ndarray | None:
    """``values`` at ``positions`` as one element broadcast to their number when they are all that element (bit
    for bit); else None. A few hundred rows spread over the take are looked at first, so a column of several
    values (a thread id, a correlation id that most rows lack) costs no pass."""
    n = len(positions)
    bits = values.view(np.uint8) if values.dtype == bool else values.view(f"i{values.dtype.itemsize}") if values.dtype.kind == "f" else values
    first = bits[positions[0]]
    if values.strides != (0,):
        if not bool((bits[positions[np.linspace(0, n - 1, min(n, _SAMPLED_ROWS)).astype(np.intp)]] == first).all()):
            return None
        # the whole column compared, then the flags of these rows read: a byte per row, not the values' width
        if not bool(np.equal(bits, first).take(positions).all()):
            return None
    return np.broadcast_to(values[positions[:1]], (n,))  # a fresh one-element array: no reference to ``values``


def _even_step(positions: np.ndarray) -> int:
    """The stride of ``positions`` when they ascend at one even step (a single position: 1), else 0."""
    n = len(positions)
    if n == 0:
        return 0
    if n == 1:
        return 1
    step = int(positions[1]) - int(positions[0])
    if step <= 0 or int(positions[-1]) - int(positions[0]) != step * (n - 1):
        return 0
    return step if n == 2 or bool((np.diff(positions) == step).all()) else 0


def join_keys(columns: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per row of two tables from several integer columns (each given as the pair of the two tables'
    arrays), equal exactly when all columns are equal. Mixed radix over each column's offset from its minimum
    while the product of the ranges stays far inside int64 (ranks, pids and correlation ids usually do); a
    column that would overflow is replaced by its codes (hashing), which is slower."""
    n_a, n_b = len(columns[0][0]), len(columns[0][1])
    key_a, key_b = np.zeros(n_a, np.int64), np.zeros(n_b, np.int64)
    room = 1
    for a, b in columns:
        a, b = a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)
        if n_a + n_b == 0:
            continue
        lo = min(int(a.min()) if n_a else int(b.min()), int(b.min()) if n_b else int(a.min()))
        hi = max(int(a.max()) if n_a else int(b.max()), int(b.max()) if n_b else int(a.max()))
        span = hi - lo + 1
        if room * span >= 2**62 and room > 1:  # compress the key so far to its distinct values (at most n rows)
            codes, uniq = pd.factorize(np.concatenate([key_a, key_b]))
            key_a, key_b, room = codes[:n_a].astype(np.int64), codes[n_a:].astype(np.int64), max(len(uniq), 1)
        if room * span >= 2**62:  # and this column to its distinct values: two factors of at most n each
            codes, uniq = pd.factorize(np.concatenate([a, b]))
            a, b, lo, span = codes[:n_a].astype(np.int64), codes[n_a:].astype(np.int64), 0, max(len(uniq), 1)
        if span == 1:  # a constant column adds nothing to the key
            continue
        # key * span + (column - lo), in place (the key is this function's own array)
        key_a *= span
        key_a += a
        key_a -= lo
        key_b *= span
        key_b += b
        key_b -= lo
        room *= span
    return key_a, key_b


def runs(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The runs of consecutive rows equal in every column: the first row of each run and its length. Rows of a
    trace come in runs of one thread or stream (a thread's ops, a stream's kernels), so a lookup per run instead
    of per row costs next to nothing (the 2.3 M ops of the 1.9 GB replica are 80 runs)."""
    n = len(columns[0])
    if not n:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in columns:
        change[1:] |= c[1:] != c[:-1]
    head = np.flatnonzero(change)
    return head, np.diff(np.append(head, n))


#: A table indexed by key is used while the keys' range is at most this many times the rows (and under
#: ``_TABLE_MAX`` slots): correlation ids are a profiler's counter, so a file's span little more than its rows.
_TABLE_DENSITY = 4
_TABLE_MAX = 1 << 28


def _key_table_span(keys: np.ndarray, rows: int) -> tuple[int, int] | None:
    """(lowest key, span) when the keys are dense enough for a table indexed by key, else None."""
    if not len(keys):
        return None
    lo, hi = int(keys.min()), int(keys.max())
    span = hi - lo + 1
    return (lo, span) if span <= min(_TABLE_DENSITY * max(rows, 1), _TABLE_MAX) else None


def first_of_key(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """For each key in ``dst``, the position in ``src`` of the first equal key, -1 where none (a left join that
    keeps each key's first row, as ``drop_duplicates`` then a merge would). Dense integer keys (the usual
    correlation ids) go through a table indexed by key: one pass over each side, no sort (on 1.3 M launches
    10 ms against 55 ms sorting and searching); others through a sort of the distinct ``src`` keys."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    out = np.full(len(dst), -1, dtype=np.int64)
    dense = _key_table_span(src, len(src) + len(dst))
    if dense is not None:
        lo, span = dense
        pos_type = np.int32 if len(src) < np.iinfo(np.int32).max else np.int64  # the table: 4 bytes a slot
        first = np.full(span, len(src), dtype=pos_type)
        np.minimum.at(first, src - lo, np.arange(len(src), dtype=pos_type))  # the smallest position per key
        inside = np.flatnonzero((dst >= lo) & (dst < lo + span))
        at = first[dst[inside] - lo]
        found = at < len(src)
        out[inside[found]] = at[found]
        return out
    if not len(src):
        return out
    uniq, first = np.unique(src, return_index=True)
    pos = np.minimum(np.searchsorted(uniq, dst), len(uniq) - 1)
    hit = uniq[pos] == dst
    out[hit] = first[pos[hit]]
    return out


def has_repeats(keys: np.ndarray) -> bool:
    """Whether some integer key occurs twice: counted in a table when the keys are dense, else told by a sort."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) < 2:
        return False
    dense = _key_table_span(keys, len(keys))
    if dense is not None:
        return bool(np.bincount(keys - dense[0], minlength=dense[1]).max() > 1)
    ordered = np.sort(keys)
    return bool((ordered[1:] == ordered[:-1]).any())


# --- coded columns: one test per distinct value, asked many times of one column ------------------------------
#: A kind or name column as (code per row, its distinct values as str, the categories of a categorical or None):
#: built once (``coded``), then each question (``coded_in``, ``coded_match``) costs one test per distinct value and
#: one pass over the codes. The what-if graph asks a dozen questions of each rank's host rows this way.
Coded = tuple[np.ndarray, list, "pd.Index | None"]


def coded(col: pd.Series) -> Coded:
    """``col`` as a ``Coded`` column: a categorical's own codes and categories (missing values get code -1 and
    match nothing, as in ``name_mask``); any other column factorized, NaN a value of its own (read as "nan")."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cat = col.array  # the Categorical itself: its codes and categories without the ``.cat`` accessor's Series
        return cat.codes, [str(c) for c in cat.categories], cat.categories
    codes, uniq = pd.factorize(col.to_numpy(), use_na_sentinel=False)
    return codes, [str(c) for c in uniq], None


def coded_rows(col: Coded, hit: np.ndarray) -> np.ndarray:
    """Per row: the per-value answer ``hit`` (code -1 reads False), by ``codes_in``."""
    return codes_in(col[0], hit)


def coded_in(col: Coded, values: tuple[str, ...]) -> np.ndarray:
    """Rows whose value is one of ``values`` (``kind_mask`` on a coded column)."""
    return coded_rows(col, np.fromiter((c in values for c in col[1]), bool, len(col[1])))


def coded_hits(col: Coded, rx: "re.Pattern[str]") -> np.ndarray:
    """Per distinct value of a coded column: does ``rx`` match it. A categorical's answers come from the
    per-categories cache (``category_hits``: the ledger and the rules test the same patterns on the same names)."""
    if col[2] is not None:
        return category_hits(col[2], rx)
    return np.fromiter((rx.search(c) is not None for c in col[1]), bool, len(col[1]))


def coded_match(col: Coded, pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
    """``name_mask`` (same flags, same answer) on a coded column: one regex search per distinct name."""
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    return coded_rows(col, coded_hits(col, rx))
