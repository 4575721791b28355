"""Warm-up regions: host time that belongs to one-time work, not to steady state (the ledger's warm-up bucket,
``vocab.buckets.WARMUP_BUCKET``): outlier first calls per name and per recorded shape, plus what the steady-state
model recognises."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from traceinsight.vocab.intervals import Coverage
from traceinsight.vocab.masks import category_hits, codes_in, kind_mask, name_mask
from traceinsight.vocab.patterns import COPY_CALL, DATA_WAIT_PRIMARY, SYNC_CALL, SYNC_OP
from traceinsight.derive.steady import WARMUP_MIN_NS, WARMUP_RATIO, empty_regions, host_arrays, one_time_regions
from traceinsight.derive.ledger.host import blocking_parts
from traceinsight.derive.ledger.intervals import EMPTY

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.views import Views


def warmup_regions(views: "Views", blocking: "list[tuple[np.ndarray, np.ndarray, np.ndarray, str]] | None" = None) -> pd.DataFrame:
    """Host time ranges (rank, start_ns, end_ns, reason) that belong to warm-up, not to steady state.

    Two principles, both about repetition: steady state repeats itself, one-time work does not.

    * A first call that is an outlier: the first occurrence of a framework op or runtime call (by name, per rank)
      lasting at least ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median of its later occurrences: cuDNN
      autotuning inside the first convolution, lazy CUDA/library init inside the first call, JIT compilation.
      Where input shapes are recorded, the same per (name, shapes) for a shape that recurs: autotuning and
      per-shape caches pay once per shape, so every convolution of a first step is its own first call.
      Calls whose time is mostly waiting for the GPU (syncs, copies, ops spent mostly inside blocking or copy
      calls) are left out: their length measures the queue ahead of them, not one-time work.
    * Everything else the steady-state model (``traceinsight.derive.steady.one_time_regions``) recognises wherever it
      sits: first launches that load a kernel's module, named set-up calls (library handles, autotuning, JIT,
      graph capture and instantiation), allocator growth before the second step, a blocking call at the window's
      start, the program's start-up before its first step, and leading warm-up steps.
    """
    cols = ["rank", "start_ns", "end_ns", "reason"]
    host = views.host_events
    parts = []
    if not host.empty:
        ha = host_arrays(views)
        names, kinds = ha["name"], ha["kind"]
        h_rank, h_start, h_dur = ha["rank"], ha["start_ns"], ha["dur_ns"]
        cand = _warmup_candidates(names, kinds, h_dur)
        fi = _outlier_first_calls(names, cand, h_rank, h_start, h_dur) if len(cand) else cand  # host positions, in (rank, name) order
        if "input_shapes" in host.columns and len(cand):
            per_shape = _outlier_first_calls_per_shape(names, host["input_shapes"], cand, h_rank, h_start, h_dur)
            if len(per_shape):
                fi = np.concatenate([fi, per_shape[~np.isin(per_shape, fi)]])
        if len(fi):
            s, e = h_start[fi], h_start[fi] + h_dur[fi]
            blk = blocking if blocking is not None else blocking_parts(views)
            copy_call = np.flatnonzero(name_mask(names, COPY_CALL) & kind_mask(kinds, ("runtime",)))
            b_rank = np.concatenate([p[0] for p in blk] + [h_rank[copy_call].astype(np.int64)])
            b_start = np.concatenate([p[1] for p in blk] + [h_start[copy_call].astype(np.int64)])
            b_end = np.concatenate([p[2] for p in blk] + [(h_start[copy_call] + h_dur[copy_call]).astype(np.int64)])
            blocked = np.zeros(len(fi), np.int64)
            fr = h_rank[fi].astype(np.int64)
            for r in np.unique(fr):
                m = fr == r
                b = b_rank == r
                blocked[m] = Coverage(b_start[b], b_end[b]).overlap(s[m], e[m])
            keep = blocked * 2 < h_dur[fi]
            fi = fi[keep]
            reason = np.asarray(["first call of " + str(n) for n in names.take(fi).to_numpy()], dtype=object)
            parts.append(pd.DataFrame({"rank": h_rank[fi].astype(np.int64), "start_ns": h_start[fi], "end_ns": h_start[fi] + h_dur[fi], "reason": reason}))
    parts.append(one_time_regions(views, blocking if blocking is not None else blocking_parts(views)))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_regions()
    return pd.concat(parts, ignore_index=True)[cols]


#: A shape's first call counts as warm-up only when the shape comes back at least this many times after it: the
#: steady state repeats its shapes, so a shape seen once or twice (a variable-length batch) is not set aside, and
#: an autotuning cost paid again for every new shape stays in the steady-state figures, where it belongs.
WARMUP_SHAPE_REPEATS = 2


def _outlier_first_calls_per_shape(names: pd.Series, shapes: pd.Series, cand: np.ndarray, rank: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Positions of candidate rows that are the first call of their (rank, name, input shapes) and an outlier
    against that group's later calls (the same test as ``_outlier_first_calls``).

    Autotuning and per-shape caches (cuDNN's ``benchmark`` search, cuBLAS-Lt heuristics, Triton and XLA
    specialisation) pay once per distinct shape, not once per op name: the first step of a ResNet runs twenty
    convolutions of different shapes, each searching for its algorithm, and only the first of them is the first
    call of ``aten::cudnn_convolution``. Rows without recorded shapes are not looked at here (the name-only pass
    covers them), and a group must come back ``WARMUP_SHAPE_REPEATS`` times after its first call."""
    sh = shapes.cat.codes.to_numpy() if isinstance(shapes.dtype, pd.CategoricalDtype) else pd.factorize(shapes.to_numpy())[0]
    pos = cand[sh[cand] >= 0]  # ``cand``: ascending positions (``_warmup_candidates``)
    if not len(pos):
        return pos
    nm = names.cat.codes.to_numpy()[pos] if isinstance(names.dtype, pd.CategoricalDtype) else pd.factorize(names.to_numpy()[pos])[0]
    key = nm.astype(np.int64) * (int(sh.max()) + 2) + sh[pos].astype(np.int64)
    codes, _ = pd.factorize(key)
    r_codes, r_uniq = pd.factorize(rank[pos])
    # a shape must come back on its own rank: eight ranks each seeing a shape twice do not make it repeat
    codes, uniq = pd.factorize(codes.astype(np.int64) * len(r_uniq) + r_codes)
    counts = np.bincount(codes, minlength=len(uniq))
    keep = counts[codes] > WARMUP_SHAPE_REPEATS
    pos, codes = pos[keep], codes[keep]
    if not len(pos):
        return pos
    groups = pd.Series(pd.Categorical.from_codes(codes, categories=np.arange(len(uniq))))
    fi = _outlier_first_calls(groups, np.arange(len(pos)), rank[pos], start[pos], dur[pos])
    return pos[fi]


def _warmup_candidates(names: pd.Series, kinds: pd.Series, dur: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the host rows warm-up may look at: framework ops and runtime calls, not copies,
    syncs or data waits, and only of names that have a candidate call of at least ``WARMUP_MIN_NS``: a first call
    shorter than that is no warm-up, so the other names' calls are never needed (most rows, tested here only
    through their name)."""
    long = np.flatnonzero(dur >= WARMUP_MIN_NS)
    if not len(long):  # no call is long enough to be warm-up: no name needs testing
        return EMPTY
    if isinstance(names.dtype, pd.CategoricalDtype) and isinstance(kinds.dtype, pd.CategoricalDtype):
        # on the codes: per kind and per name a table, read for the rows asked about
        n_codes, k_codes = names.cat.codes.to_numpy(), kinds.cat.codes.to_numpy()
        cats = names.cat.categories

        def hits(pattern: "str | re.Pattern[str]", case: bool = False) -> np.ndarray:
            rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
            return np.append(category_hits(cats, rx), False)  # a missing name (code -1) reads the last entry

        def kind_table(kind: str) -> np.ndarray:
            return np.append(np.asarray(kinds.cat.categories, dtype=object) == kind, False)

        is_rt, is_op = kind_table("runtime"), kind_table("cpu_op")
        long = long[(is_rt | is_op)[k_codes[long]]]  # the kinds first: long step markers and annotations are no candidates
        if not len(long):
            return EMPTY
        excluded = hits(SYNC_CALL) | hits(SYNC_OP) | hits(DATA_WAIT_PRIMARY, case=True)
        rt_ok, op_ok = ~(excluded | hits(COPY_CALL)), ~excluded

        def cand(rows: np.ndarray) -> np.ndarray:
            n, k = n_codes[rows], k_codes[rows]
            return (is_rt[k] & rt_ok[n]) | (is_op[k] & op_ok[n])

    else:

        def cand(rows: np.ndarray) -> np.ndarray:
            n, k = names.take(rows), kinds.take(rows)
            is_rt = kind_mask(k, ("runtime",))
            ok = (is_rt & ~name_mask(n, COPY_CALL)) | kind_mask(k, ("cpu_op",))
            ok &= ~(name_mask(n, SYNC_CALL) | name_mask(n, SYNC_OP) | name_mask(n, DATA_WAIT_PRIMARY, case=True))
            return ok

    long = long[cand(long)]
    if not len(long):
        return EMPTY
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()
        hit = np.zeros(len(names.cat.categories) + 1, dtype=bool)
        hit[codes[long]] = True  # a missing name (code -1) marks the extra last entry
        rows = np.flatnonzero(codes_in(codes, hit[:-1], missing=bool(hit[-1])))
    else:
        rows = np.flatnonzero(names.isin(names.take(long).unique()).to_numpy())
    return rows[np.flatnonzero(cand(rows))]


def _outlier_first_calls(names: pd.Series, cand: np.ndarray, rank: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Positions of the candidate rows (``cand``: a mask, or ascending positions) that are the first call of
    their (rank, name), last at least ``WARMUP_MIN_NS`` and ``WARMUP_RATIO`` times the median of the later
    calls; in (rank, name code) order.

    The first call of a group is its earliest start, the first listed among equal starts. Groups are dense
    integers (the name's category code when most rows of one rank are candidates, else a key of rank and name
    code, hashed when its range is large), so nothing is sorted and, with dense candidates on one rank, no
    candidate-sized copy of the columns is made (fresh memory is what costs most at 10^6 rows).
    """
    categorical = isinstance(names.dtype, pd.CategoricalDtype)
    if cand.dtype != bool and 4 * len(cand) > len(names):  # positions of most rows: as a mask (the dense path)
        mask = np.zeros(len(names), dtype=bool)
        mask[cand] = True
        cand = mask
    if cand.dtype == bool and categorical and len(rank) and rank.min() == rank.max() and 4 * np.count_nonzero(cand) > len(cand):
        # one rank: the group of a row is its name code (+1: a missing name is a group too); others in a spare one
        n_groups = len(names.cat.categories) + 2
        group = np.where(cand, names.cat.codes.to_numpy().astype(np.int32) + 1, n_groups - 1)
        pos_start, pos_dur, spare = start, dur, n_groups - 1
        idx = None
    else:
        idx = np.flatnonzero(cand) if cand.dtype == bool else cand
        if not len(idx):
            return idx
        code = names.cat.codes.to_numpy()[idx].astype(np.int64) if categorical else pd.factorize(names.to_numpy()[idx])[0].astype(np.int64)
        # one int64 key for (rank, name code): itself the group when its range is small (a few ranks, names
        # as category codes), else grouped by hashing; no sort of the 10^6 candidates either way. Built in
        # place in the code array (one rank: the code alone)
        rc = code
        rc += 1
        if len(rank) and rank.min() != rank.max():
            r = rank[idx].astype(np.int64)
            r -= r.min()
            r *= int(rc.max()) + 1
            rc += r
        if int(rc.max()) < 4 * len(rc) + 4096:
            group, n_groups = rc, int(rc.max()) + 1
        else:
            group, uniq = pd.factorize(rc)
            n_groups = len(uniq)
        spare = -1
        pos_start, pos_dur = start[idx], dur[idx]
    first_start = np.full(n_groups, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_start, group, pos_start)
    at_first = np.flatnonzero(pos_start == first_start[group])
    g_first, pos = np.unique(group[at_first], return_index=True)
    first_of = at_first[pos]  # per group (ascending group), the position of its first call
    if spare >= 0:
        first_of = first_of[g_first != spare]
    # only groups whose first call is long enough can be warm-up: the median of the rest is needed there only
    long_first = first_of[pos_dur[first_of] >= WARMUP_MIN_NS]
    lf_group = np.zeros(n_groups, dtype=bool)
    lf_group[group[long_first]] = True
    rest = lf_group[group]
    rest[first_of] = False
    if not rest.any():
        return np.zeros(0, np.int64)
    at_rest = np.flatnonzero(rest)  # positions: the rest of a few names' calls are scattered among all rows
    med = pd.Series(pos_dur[at_rest]).groupby(group[at_rest]).median()
    if idx is not None and group is not rc:
        long_first = long_first[np.argsort(rc[long_first])]  # in (rank, name) order (the key itself is in order)
    m_rest = med.reindex(group[long_first]).to_numpy()
    ok = ~np.isnan(m_rest) & (pos_dur[long_first] >= WARMUP_RATIO * np.nan_to_num(m_rest))
    fi = long_first[ok]
    return fi if idx is None else idx[fi]
