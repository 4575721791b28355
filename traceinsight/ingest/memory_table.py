"""The memory table's finishing, once for every format: the readers hand back raw allocator rows, this puts them on
the timeline's clock, sorts them, fills totals a source leaves out, numbers their steps and names the op behind
each.

Kept apart from ``ingest.load`` because none of it is needed by traces without memory rows, and none of it runs
for them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.model.plausible import DROPPED_KEY, check_memory
from traceinsight.model.timeline import KINDS, MEMORY_COLUMNS, TIME_LIMIT_NS, TraceMeta, build_memory, steps_at
from traceinsight.vocab.masks import runs, take_rows

#: Framework ops a memory row may be attributed to (the innermost enclosing one on the same host thread).
_OP_KINDS = ("cpu_op",)


def join(pieces: list[tuple[dict, int | None, int]], events: pd.DataFrame, origin: int, meta: TraceMeta) -> pd.DataFrame:
    """``pieces``: (memory columns, rank or None, clock shift already applied to that part's events). Returns the
    memory frame on the events' clock, sorted by (rank, device, start_ns), with ``allocated`` filled from a running
    sum where a source gives only deltas, ``step`` and ``op`` filled."""
    frames = []
    dropped = 0
    for cols, rank, shift in pieces:
        dropped += int(cols.get(DROPPED_KEY, 0))
        if not len(cols["start_ns"]):
            continue
        m = build_memory(cols)
        if rank is not None:
            m["rank"] = np.full(len(m), rank, dtype=np.int32)
        m["start_ns"] = m["start_ns"].to_numpy() - shift - origin
        frames.append(m)
    if not frames:
        check_memory(build_memory(), meta, dropped)
        return build_memory()
    mem = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    for col, dtype in MEMORY_COLUMNS.items():
        if dtype == "category" and not isinstance(mem[col].dtype, pd.CategoricalDtype):
            mem[col] = mem[col].astype("category")
    start = mem["start_ns"].to_numpy()
    bad = np.abs(start) > TIME_LIMIT_NS
    if bad.any():
        meta.warn(f"{int(bad.sum()):,} memory events with a time out of range were dropped")
        mem = mem[~bad]
    order = np.lexsort((mem["start_ns"].to_numpy(), mem["device"].to_numpy(), mem["rank"].to_numpy()))
    mem = take_rows(mem, order).reset_index(drop=True)  # column by column (a slice when already in order)
    mem = check_memory(mem, meta, dropped)
    if mem.empty:
        return build_memory()
    _running_totals(mem, meta)
    _steps(mem, events)
    _ops(mem, events)
    return mem


def _running_totals(mem: pd.DataFrame, meta: TraceMeta) -> None:
    """Where a device's rows carry no ``allocated`` (kineto files of 2021 write only ``Bytes``), the running sum of
    its deltas since the profile began: the level before the first event is unknown, so it counts from 0."""
    alloc = mem["allocated"].to_numpy()
    if not np.isnan(alloc).any():
        return
    key = mem["rank"].to_numpy().astype(np.int64) * (1 << 32) + mem["device"].to_numpy().astype(np.int64)
    cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True])
    delta = np.where((mem["kind"] == "oom").to_numpy(), 0, mem["delta_bytes"].to_numpy())  # a failed request adds nothing
    out = alloc.copy()
    filled = []
    for a, b in zip(cut[:-1], cut[1:]):
        if np.isnan(alloc[a:b]).all():
            out[a:b] = np.cumsum(delta[a:b].astype(np.float64))  # floats: a sum of int64 sizes could wrap
            filled.append(int(mem["device"].iat[a]))
    if filled:
        mem["allocated"] = out
        meta.extra["memory_allocated_from_deltas"] = sorted(set(filled))
        meta.warn("memory events carry no allocator totals (an older PyTorch profiler): allocated memory is counted "
                  "from the start of the profile, so memory already in use before it is not included")


def _steps(mem: pd.DataFrame, events: pd.DataFrame) -> None:
    step_rows = events[(events["kind"] == "step").to_numpy()]
    if step_rows.empty:
        return
    out = np.full(len(mem), -1, dtype=np.int32)
    rank = mem["rank"].to_numpy()
    t = mem["start_ns"].to_numpy()
    numbers = pd.to_numeric(step_rows["name"].astype(str).str.extract(r"(\d+)\s*$", expand=False), errors="coerce")
    numbers = numbers.fillna(pd.Series(np.arange(len(step_rows)), index=step_rows.index)).to_numpy(np.int32)
    s_rank = step_rows["rank"].to_numpy()
    for r in np.unique(rank):
        sel = s_rank == r
        if not sel.any():
            continue
        s = step_rows["start_ns"].to_numpy()[sel]
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = s + step_rows["dur_ns"].to_numpy()[sel][order]
        m = rank == r
        out[m] = steps_at(s, e, numbers[sel][order], t[m])
    mem["step"] = out


def _ops(mem: pd.DataFrame, events: pd.DataFrame) -> None:
    """The op behind each row that has none yet: the runtime call it belongs to (same correlation: Nsight
    Systems), else the innermost framework op running on the same host thread at its time (kineto). Worked on
    category codes: a million rows never become Python strings."""
    known = mem["op"].notna().to_numpy()
    if known.all() or events.empty:
        return
    names = events["name"]
    cats = names.cat.categories
    found = np.full(len(mem), -1, dtype=np.int64)  # codes into the events' name categories
    corr = mem["correlation"].to_numpy()
    kind = events["kind"].cat.codes.to_numpy()
    if (corr >= 0).any():
        rt = np.flatnonzero((kind == KINDS.index("runtime")) & (events["correlation"].to_numpy() >= 0))
        if len(rt):
            keys = pd.MultiIndex.from_arrays([events["rank"].to_numpy()[rt], events["correlation"].to_numpy()[rt]])
            lut = pd.Series(names.cat.codes.to_numpy()[rt].astype(np.int64), index=keys)
            lut = lut[~lut.index.duplicated()]
            hit = lut.reindex(pd.MultiIndex.from_arrays([mem["rank"].to_numpy(), corr])).to_numpy(dtype=float)
            use = (corr >= 0) & ~known & np.isfinite(hit)
            found[use] = hit[use].astype(np.int64)
    todo = ~known & (found < 0) & (mem["tid"].to_numpy() >= 0)
    op_rows = np.flatnonzero(np.isin(kind, [KINDS.index(k) for k in _OP_KINDS]))
    if todo.any() and len(op_rows):
        ops = {c: events[c].to_numpy()[op_rows] for c in ("rank", "pid", "tid", "start_ns", "dur_ns")}  # what it reads (a frame would copy)
        pos = innermost(ops, mem["rank"].to_numpy()[todo], mem["pid"].to_numpy()[todo], mem["tid"].to_numpy()[todo],
                        mem["start_ns"].to_numpy()[todo])
        codes = names.cat.codes.to_numpy()[op_rows]
        found[np.flatnonzero(todo)] = np.where(pos >= 0, codes[np.clip(pos, 0, None)], -1)
    if (found < 0).all():
        return
    new = pd.Categorical.from_codes(found, categories=cats, validate=False)
    if known.any():  # some rows named by the source: merge the two vocabularies
        merged = np.where(known, mem["op"].astype(object).to_numpy(), new.astype(object))
        mem["op"] = pd.Categorical(merged)
    else:
        mem["op"] = pd.Categorical.from_codes(*_compact(found, cats))


def _compact(codes: np.ndarray, cats: pd.Index) -> tuple[np.ndarray, pd.Index]:
    """Codes and categories without the categories no row uses."""
    used = np.bincount(codes[codes >= 0], minlength=len(cats)) > 0
    remap = np.append(np.cumsum(used) - 1, -1)
    return remap[codes], cats[used]


def _thread_codes(ops: list[np.ndarray], queries: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Thread codes (rank, pid, tid) for the ops and the queries (-1: a thread with no op). Rows come in runs of
    one thread (a thread's ops come together: the 2.3 M ops of the 1.9 GB replica are 80 runs), so each run's ids
    are read once (``vocab.masks.runs``): packed into one int64 when they fit in 16 / 24 / 24 bits and numbered by hashing, else through
    a MultiIndex. Codes only group rows: their order carries no meaning."""
    (o_head, o_len), (q_head, q_len) = runs(ops), runs(queries)
    r, p, t = (np.asarray(a)[o_head].astype(np.int64, copy=False) for a in ops)
    qr, qp, qt = (np.asarray(a)[q_head].astype(np.int64, copy=False) for a in queries)
    fits = all(len(a) == 0 or (a.min() >= 0 and a.max() < (1 << bits)) for a, bits in ((r, 15), (p, 24), (t, 24), (qr, 15), (qp, 24), (qt, 24)))
    if fits:
        codes, uniques = pd.factorize((r << 48) | (p << 24) | t)
        q_codes = pd.Index(uniques).get_indexer((qr << 48) | (qp << 24) | qt)
    else:
        codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([r, p, t]))
        q_codes = uniques.get_indexer(pd.MultiIndex.from_arrays([qr, qp, qt]))
    return np.repeat(codes.astype(np.int64), o_len), np.repeat(q_codes.astype(np.int64), q_len)


def _last_reaching(p: np.ndarray, qt: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per query, the last op at or before position ``p`` (-1: none) whose end ``e`` reaches its time ``qt``, -1 for
    none: found by jumping back over blocks of 2^k ops that all ended before ``qt`` (a table of block-wise maximum
    ends), log2(n) vectorised steps for all queries at once."""
    n = len(e)
    tables = [e]
    width = 1
    while width * 2 <= n:
        prev = tables[-1]
        nxt = np.empty_like(prev)
        nxt[:width] = prev[:width]
        np.maximum(prev[width:], prev[:-width], out=nxt[width:])  # written once, not copied then overwritten
        tables.append(nxt)
        width *= 2
    for lvl in range(len(tables) - 1, -1, -1):
        size = 1 << lvl
        ok = p >= size - 1
        pc = np.clip(p, 0, None)
        jump = ok & (tables[lvl][pc] < qt)
        p = np.where(jump, p - size, p)
    pc = np.clip(p, 0, None)
    return np.where((p >= 0) & (e[pc] >= qt), p, -1)


def innermost(ops: "pd.DataFrame | dict[str, np.ndarray]", rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query (rank, pid, tid, t): the position in ``ops`` of the latest-starting op on that thread with
    start <= t <= end (for properly nested ops, the innermost one running at t), -1 where none.

    Ops sorted by (thread, start); a query's candidates are the prefix of its thread up to the last op starting by
    t, and the answer is the last of them whose end reaches t (``_last_reaching``). A walk up the chain of
    enclosing ops was tried instead: on a thread of a million sibling ops pointer jumping needs ~20 rounds over
    most of them, slower than the block search."""
    codes, q_codes = _thread_codes([np.asarray(ops["rank"]), np.asarray(ops["pid"]), np.asarray(ops["tid"])], [rank, pid, tid])
    o_start = np.asarray(ops["start_ns"], dtype=np.int64)
    order = np.lexsort((o_start, codes))
    k = codes[order].astype(np.int64)
    del codes
    s = o_start[order]
    e = np.asarray(ops["dur_ns"], dtype=np.int64)[order]
    e += s
    n = len(s)
    # combined sortable key: thread code, then start (starts are >= 0 after rebasing; shift to be safe); made in
    # place, as the tables of a gigabyte trace's ops are each a column of millions
    base = int(s.min()) if n else 0
    span = int(s.max()) - base + 2 if n else 1
    comb = k * span
    s -= base
    comb += s
    del s
    qt = np.asarray(t, np.int64)
    valid = q_codes >= 0
    qcomb = q_codes.astype(np.int64) * span + np.clip(qt - base, -1, span - 1)
    p = np.searchsorted(comb, qcomb, side="right") - 1
    p = np.where(valid & (qt >= base), p, -1)
    hit = np.where((p >= 0) & (e[np.clip(p, 0, None)] >= qt), p, -1)  # the latest op still runs: it (half the rows)
    rest = np.flatnonzero((hit < 0) & (p > 0))
    rest = rest[k[p[rest] - 1] == q_codes[rest]]  # an earlier op on the query's own thread: else it has none
    if len(rest):
        hit[rest] = _enclosing(p[rest] - 1, qt[rest], k, e, span, base)
    return np.where((hit >= 0) & (k[np.clip(hit, 0, None)] == q_codes) & valid, order[np.clip(hit, 0, None)], -1)


def _enclosing(at: np.ndarray, qt: np.ndarray, k: np.ndarray, e: np.ndarray, span: int, base: int) -> np.ndarray:
    """``_last_reaching`` for queries whose latest op has ended (at: the op before it, on the query's thread),
    searched among the ops some such query falls in only: an op that holds none of their times answers none of
    them and hides no answer (the search keeps the latest op reaching the time), so it is left out of the block
    tables, which take log2(n) column-sized arrays (2.3 M ops: 22 levels, 400 MB). An op is kept when the earliest
    query time at or after its start on its thread (a reverse running minimum over the queries placed at their
    positions, keyed by thread so another thread's times never count) is within its end."""
    first = np.full(len(e), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, at, k[at] * span + (qt - base))  # keyed by thread as ``comb``: a later thread's are larger
    back = first[::-1]
    np.minimum.accumulate(back, out=back)  # in place: each element read before it is written
    reach = k * span  # the op's end, keyed as the queries are
    reach += e
    reach -= base
    kept = np.flatnonzero(first <= reach)
    del reach
    if not len(kept):
        return np.full(len(at), -1, dtype=np.int64)
    at_kept = np.searchsorted(kept, at, side="right") - 1  # the last kept op at or before each query's position
    found = _last_reaching(at_kept, qt, e[kept])
    return np.where(found >= 0, kept[np.clip(found, 0, None)], -1)
