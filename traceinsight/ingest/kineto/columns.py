"""The kineto event fields traceinsight reads, as columns, from one of two decoders.

``scan_columns`` uses the native scanner (``_kineto_scan``, a C extension built at install time where a compiler
exists): one pass over the bytes, no Python object per event. ``struct_columns`` takes events decoded by msgspec
(the general path: any valid JSON, string timestamps, odd types). Both give the same ``EventColumns``, and
``tests/test_kineto_native.py`` checks that they agree on every corpus file, so the timeline never depends on
which one ran.

Rows are the complete (``ph: "X"``) events; metadata (``ph: "M"``) events give the thread names; other phases
(flows, instants, counters) are only counted. String columns are categoricals with sorted categories, as ``pd.Categorical(values)`` makes.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.ingest.byteio import InflatedBuffer
from traceinsight.vocab import native
from traceinsight.vocab.cpus import usable_cpus
from traceinsight.vocab.masks import join_keys, runs
from traceinsight.model.timeline import SMALL_MATCH, categorical, code_dtype

_FLOAT_FIELDS = ("ts", "dur", "correlation", "external_id", "external_id_legacy", "device", "stream", "bytes",
                 "registers", "shared_mem", "occupancy")


@dataclass
class EventColumns:
    """The complete (``ph: "X"``) events, one row each, plus the thread names from the metadata events."""

    n_events: int  # events in the file, any phase
    has_ts: np.ndarray  # rows whose timestamp is present (rows without one are not events on the timeline)
    cat: pd.Categorical
    name: pd.Categorical
    pid: np.ndarray
    tid: np.ndarray
    floats: dict[str, np.ndarray]  # _FLOAT_FIELDS, NaN where absent
    grid: pd.Categorical  # "x,y,z"
    block: pd.Categorical
    input_dims: pd.Categorical  # the raw JSON text of args["Input Dims"]
    input_types: pd.Categorical  # the raw JSON text of args["Input type"] (dtypes, read by the FLOPs model)
    concrete_inputs: pd.Categorical  # the raw JSON text of args["Concrete Inputs"] (stride, padding, equation ...)
    thread_names: dict[str, np.ndarray]  # pid, tid, thread_name (``_thread_name_table``: the last name of each thread)
    bad_utf8: bool = False
    bad_ids: np.ndarray | None = None  # rows whose pid or tid no int64 holds (dropped, counted)
    memory: dict[str, np.ndarray] | None = None  # the allocator instant events (``memory_instants``), None if none


def native_available() -> bool:
    return native.scanner("pytorch") is not None


# --- shared helpers -------------------------------------------------------------------------------------------


def _categorical(codes: np.ndarray, uniques: list[str | None], missing: str | None = None, *, own: bool = False) -> pd.Categorical:
    """Codes into a list of strings (-1 = absent; a None in the list is absent too) as a categorical whose
    categories are the distinct strings the rows use, sorted (as ``pd.Categorical(values)`` makes them).

    ``missing`` stands in for absent values (the struct decoder's default for absent strings is ""). ``own``: the
    codes are the caller's to give up (the scanner's column), so they are shifted in place; the new codes come in
    the narrowest integer type that holds them, as pandas would store them, so no second copy is made."""
    codes = np.asarray(codes)
    if len(codes) <= SMALL_MATCH:
        return _categorical_small(codes, uniques, missing)
    if not len(uniques):  # no row has the field (shapes not recorded): every row absent, nothing to count
        if missing is None or not len(codes):
            return categorical(np.full(len(codes), -1, dtype=np.int8), _NO_STRINGS)
        return categorical(np.zeros(len(codes), dtype=np.int8), [missing])
    in_place = own and codes.flags.writeable and codes.dtype.kind == "i"
    shifted = np.add(codes, 1, out=codes if in_place else None)  # code -1 (absent) reads slot 0 of the tables below
    counts = np.bincount(shifted, minlength=len(uniques) + 1).tolist()
    stand_in = missing if missing is not None and counts[0] else None
    # strings only other rows use (flow and metadata names) are not categories of these rows
    used = {u for u, k in zip(uniques, counts[1:]) if k and u is not None} | ({stand_in} if stand_in is not None else set())
    if not used:
        return categorical(np.full(len(codes), -1, dtype=np.int8), _NO_STRINGS)
    cats = sorted(used)  # what np.unique gives, without an object array's sort on a few dozen strings
    position = {c: i for i, c in enumerate(cats)}
    lut = np.array([position.get(stand_in, -1)] + [position[u] if k and u is not None else -1 for u, k in zip(uniques, counts[1:])], dtype=code_dtype(len(cats)))
    return categorical(lut[shifted], cats)


_NO_STRINGS = pd.Index([], dtype="str")


def _categorical_small(codes: np.ndarray, uniques: list[str], missing: str | None) -> pd.Categorical:
    """``_categorical`` of a few rows, row by row in Python: numpy's fixed cost per call is larger than the work."""
    table = list(uniques) + [missing]  # code -1 reads the last slot: the stand-in, or None (absent)
    labels = [table[c] for c in codes.tolist()]
    cats = sorted({x for x in labels if x is not None})
    if not cats:
        return categorical(np.full(len(codes), -1, dtype=np.int8), _NO_STRINGS)
    position = {c: i for i, c in enumerate(cats)}
    return categorical(np.array([position[x] if x is not None else -1 for x in labels], dtype=np.int32), cats)


def _id_lut(strings: list[str], used: np.ndarray) -> np.ndarray:
    """The int64 id of each string pid/tid: numeric strings and "stream 7"-style strings give their number; any
    other string ("Spans", "GPU 0 Stream") a negative id, distinct per string, numbered in sorted order of the
    strings the rows use (so both decoders, which see strings in different orders, agree)."""
    lut = np.zeros(len(strings), dtype=np.int64)
    others = []
    for i, s in enumerate(strings):
        t = s.strip()
        try:
            lut[i] = int(float(t))
            continue
        except (ValueError, OverflowError):
            pass
        m = re.search(r"(\d+)$", t)
        if m:
            lut[i] = int(m.group(1))
        elif used[i]:
            others.append((s, i))
    for k, (_, i) in enumerate(sorted(others)):
        lut[i] = -(k + 2)
    return lut


def _resolve_ids(pairs: list[tuple[np.ndarray, np.ndarray]], strings: list[str]) -> list[np.ndarray]:
    """Each (numbers, string codes) id column as int64, string ids replaced through ``_id_lut``. The numbers'
    arrays are consumed: an int64 one is written in place (every caller passes its own: the scanner's column, a
    masked copy, a list made into an array), so a gigabyte trace's pid and tid are not copied again."""
    if not strings:
        return [nums.astype(np.int64, copy=False) for nums, _ in pairs]
    rows = [np.flatnonzero(codes >= 0) for _, codes in pairs]  # string ids are few: named threads, "Spans"
    used = np.zeros(len(strings), dtype=bool)
    for (_, codes), at in zip(pairs, rows):
        used[codes[at]] = True
    lut = _id_lut(strings, used)
    out = []
    for (nums, codes), at in zip(pairs, rows):
        ids = nums if nums.dtype == np.int64 and nums.flags.writeable else nums.astype(np.int64)
        ids[at] = lut[codes[at]]
        out.append(ids)
    return out


def _thread_name_table(pid: np.ndarray, tid: np.ndarray, is_thread_name: np.ndarray, names: list[str | None]) -> dict[str, np.ndarray]:
    """pid, tid and the last non-empty ``thread_name`` of each thread (an object array), in the order of those last
    rows (what ``drop_duplicates(["pid", "tid"], keep="last")`` keeps), picked on one int64 key per row."""
    keep = is_thread_name & np.array([bool(n) for n in names], dtype=bool)
    p, t = pid[keep], tid[keep]
    texts = np.array(names, dtype=object)[keep] if len(names) else np.zeros(0, dtype=object)
    if len(p) <= SMALL_MATCH:  # a few metadata events: the last row of each thread from a dict
        last = {k: j for j, k in enumerate(zip(p.tolist(), t.tolist()))}
        rows = np.array(sorted(last.values()), dtype=np.intp)
    else:
        key, _ = join_keys([(p, p[:0]), (t, t[:0])])
        _, first_from_end = np.unique(key[::-1], return_index=True)
        rows = np.sort(len(key) - 1 - first_from_end)
    return {"pid": p[rows], "tid": t[rows], "thread_name": texts[rows]}


def _thread_names(pid: np.ndarray, tid: np.ndarray, is_thread_name: np.ndarray, names: list[str | None]) -> pd.DataFrame:
    """``_thread_name_table`` as a frame (pid, tid, thread_name)."""
    table = _thread_name_table(pid, tid, is_thread_name, names)
    return pd.DataFrame({"pid": table["pid"], "tid": table["tid"], "thread_name": pd.Series(table["thread_name"], dtype=object)})


def _thread_runs(pid: np.ndarray, tid: np.ndarray, names) -> tuple[np.ndarray, np.ndarray]:
    """The rows as runs of one thread (a thread's ops, a stream's kernels come together): per run, the position in
    ``names`` (a thread-name table or frame: one row per thread) of its (pid, tid), -1 for none, and its length.
    Each run is looked up once, on one int64 key; few rows (or names) through a dict."""
    n_pid, n_tid = np.asarray(names["pid"]), np.asarray(names["tid"])
    if not len(pid) or not len(n_pid):
        return np.full(1 if len(pid) else 0, -1, dtype=np.int64), np.array([len(pid)] if len(pid) else [], dtype=np.int64)
    if len(pid) + len(n_pid) <= SMALL_MATCH:  # few rows: a dict of the threads (the first of a repeated one)
        position: dict[tuple, int] = {}
        for i, k in enumerate(zip(n_pid.tolist(), n_tid.tolist())):
            position.setdefault(k, i)
        return np.array([position.get(k, -1) for k in zip(pid.tolist(), tid.tolist())], dtype=np.int64), np.ones(len(pid), dtype=np.int64)
    head, lengths = runs([pid, tid])
    k_rows, k_names = join_keys([(pid[head], n_pid), (tid[head], n_tid)])
    order = np.argsort(k_names, kind="stable")
    sorted_keys = k_names[order]
    at = np.minimum(np.searchsorted(sorted_keys, k_rows), len(sorted_keys) - 1)
    return np.where(sorted_keys[at] == k_rows, order[at], -1), lengths


def _thread_rows(pid: np.ndarray, tid: np.ndarray, names) -> np.ndarray:
    """Per row, the position in ``names`` of its (pid, tid), -1 for none (``_thread_runs`` spread over the rows)."""
    found, lengths = _thread_runs(pid, tid, names)
    return np.repeat(found, lengths)


def thread_name_of(pid: np.ndarray, tid: np.ndarray, names) -> np.ndarray:
    """Per row, the name ``names`` (``_thread_name_table`` or ``_thread_names``) gives its (pid, tid), NaN for
    none: the column a left merge on pid and tid gives."""
    out = np.full(len(pid), np.nan, dtype=object)
    at = _thread_rows(pid, tid, names)
    hit = at >= 0
    out[hit] = np.asarray(names["thread_name"], dtype=object)[at[hit]]
    return out


def thread_name_column(pid: np.ndarray, tid: np.ndarray, names) -> pd.Categorical:
    """``pd.Categorical(thread_name_of(pid, tid, names))``, factorized per thread instead of per row: categories
    are the distinct names the rows use, sorted; rows without a name are missing."""
    at, lengths = _thread_runs(pid, tid, names)
    if not (at >= 0).any():
        return pd.Categorical(np.full(len(pid), np.nan, dtype=object))
    texts = np.asarray(names["thread_name"], dtype=object)
    if len(pid) <= SMALL_MATCH:  # few rows: the names they use, sorted, and each row's code, in Python
        rows = np.repeat(at, lengths).tolist()
        cats = sorted({texts[a] for a in rows if a >= 0})
        position = {c: i for i, c in enumerate(cats)}
        return categorical(np.array([position[texts[a]] if a >= 0 else -1 for a in rows], dtype=np.int64), cats)
    used = np.unique(at[at >= 0])  # the threads the runs name, in order
    cats, inverse = np.unique(texts[used], return_inverse=True)
    code_of = np.full(len(texts) + 1, -1, dtype=code_dtype(len(cats)))  # position -1 reads the last slot: no name
    code_of[used] = inverse.reshape(-1)
    return categorical(np.repeat(code_of[at], lengths), cats.tolist())  # a code per run, spread over its rows


def format_dims(v: Any) -> str | None:
    """A kernel's grid/block list ``[x, y, z]`` as ``"x,y,z"``."""
    if not isinstance(v, list):
        return None
    return ",".join(str(int(x)) if isinstance(x, int) and not isinstance(x, bool) or isinstance(x, float) and x.is_integer()
                    else str(x) for x in v)


def _dims_text(raw: bytes) -> str | None:
    """A grid/block value the scanner passed through as raw JSON, read as the general decoder reads it. Text that
    is not JSON means the document is not either: the general decoder then gives the error."""
    from traceinsight.ingest.kineto.decode import clamp_huge_numbers

    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:  # the scanner flagged it; the general decoder reads it after the same replacement
        raw = raw.decode("utf-8", "replace").encode("utf-8")
    try:
        return format_dims(msgspec.json.decode(raw))
    except msgspec.ValidationError:  # a number past a double's range: the general path clamps it the same way
        try:
            return format_dims(msgspec.json.decode(clamp_huge_numbers(b"[" + raw + b"]"))[0])
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Declined("a grid or block value that is not JSON") from None
    except msgspec.DecodeError:
        raise Declined("a grid or block value that is not JSON") from None


# --- native path ----------------------------------------------------------------------------------------------


class Declined(Exception):
    """The native scanner does not model something in this document; the general decoder takes over."""


#: A document at least this large has its event array scanned by two threads (the scanner's ``split_after``), when
#: the process may use ``SPLIT_MIN_CPUS`` CPUs and the caller is not reading several files at once already (a rank
#: folder's pool). The result is the same; the time is less, the CPU more.
SPLIT_MIN_BYTES = 256 << 20
#: Measured on the 2-CPU machines this project's CI and benchmarks run on (bench/README.md, "Gigabyte traces,
#: fourth pass"), on the 1.9 GB replica: with the second thread on the only other CPU the load took 0.5-0.8 s less
#: (3.1 -> 2.3-2.7 s) for 0.06-0.7 s more CPU (five benchmark runs, median +0.54 s: two threads faulting in fresh
#: pages at once contend in the kernel), about as much CPU spent as time saved. So the split waits for a third
#: CPU, where the second thread takes a core that is spare; the Nsight Systems reader, whose threads each read
#: their own part of a database, uses every usable CPU.
SPLIT_MIN_CPUS = 3
#: The events the first thread reads before it starts the second: enough to be past the header (the scanner sizes
#: its columns at the same point).
SPLIT_AFTER_EVENTS = 32768


#: What the scanner may give back of the buffer as it passes: nothing (bytes), every page of a file mapping (read
#: again from the page cache if touched), or the event array's pages of an inflated gzip file (they read as zeros
#: afterwards: ``pages_given_back`` tells the caller to read the file again should it need the bytes whole).
RELEASE_NONE, RELEASE_FILE, RELEASE_EVENTS = 0, 1, 2


def release_mode(data: bytes | mmap.mmap) -> int:
    if isinstance(data, InflatedBuffer):
        return RELEASE_EVENTS
    return RELEASE_FILE if isinstance(data, mmap.mmap) else RELEASE_NONE


def pages_given_back(data: bytes | mmap.mmap) -> bool:
    """Whether a scan of ``data`` may have zeroed some of its bytes (then only the header around the event array is
    still there)."""
    return release_mode(data) == RELEASE_EVENTS


def scan_columns(data: bytes | mmap.mmap, split: bool = True) -> tuple[EventColumns, dict[str, Any]]:
    """Columns from the native scanner, plus where the event array lies (``span``) and whether the file is cut.

    A file mapping (``byteio.read_bytes(mapped=True)``) has its pages given back as the scan passes them, so a
    file of gigabytes is not resident beside its columns; its bytes stay readable (the page cache holds them).
    ``split``: a large document's events may be scanned by two threads (the same result, in less time)."""
    split_after = SPLIT_AFTER_EVENTS if split and len(data) >= SPLIT_MIN_BYTES and usable_cpus() >= SPLIT_MIN_CPUS else 0
    res = native.built("pytorch").scan(data, release_mode(data), split_after)
    if res["fallback"]:
        raise Declined(res["fallback"])
    strings = res["strings"]
    bad = False

    def texts(raw: list[bytes], json_string: bool = True) -> list[str]:
        """The strings of a table: unescaped (the scanner checked the escapes), bytes that are not UTF-8 replaced
        as the general decoder replaces them. ``json_string=False``: raw JSON text (Input Dims), which the general
        decoder keeps as raw bytes too, so its bytes raise no warning there either."""
        nonlocal bad
        out = []
        for b in raw:
            try:
                t = b.decode("utf-8")
            except UnicodeDecodeError:
                bad = bad or json_string
                t = b.decode("utf-8", "replace")
                b = t.encode("utf-8")
            out.append(msgspec.json.decode(b'"' + b + b'"') if json_string and "\\" in t else t)
        return out

    def arrays(group: dict) -> tuple[dict, dict, dict]:
        return ({k: np.frombuffer(v, dtype=np.int32) for k, v in group["i32"].items()},
                {k: np.frombuffer(v, dtype=np.int64) for k, v in group["i64"].items()},
                {k: np.frombuffer(v, dtype=np.float64) for k, v in group["f64"].items()})

    i32, i64, floats = arrays(res["complete"])
    m32, m64, _ = arrays(res["metadata"])
    pid, tid, mpid, mtid = _resolve_ids(
        [(i64["pid"], i32["pid_str"]), (i64["tid"], i32["tid_str"]), (m64["pid"], m32["pid_str"]), (m64["tid"], m32["tid_str"])],
        texts(strings["ids"]),
    )
    names = texts(strings["name"])
    arg_names = texts(strings["arg_name"]) + [None]  # code -1 maps to the appended None
    thread_names = _thread_name_table(
        mpid, mtid, m32["name"] == (names.index("thread_name") if "thread_name" in names else -2),
        [arg_names[c] for c in m32["arg_name"].tolist()],
    )
    dim3 = [_dims_text(b) if b else None for b in strings["dim3"]]  # raw texts -> "x,y,z" (several raw, one text)
    cols = EventColumns(
        n_events=res["events"],
        has_ts=~np.isnan(floats["ts"]),
        cat=_categorical(i32["cat"], texts(strings["cat"]), missing="", own=True),
        name=_categorical(i32["name"], names, missing="", own=True),
        pid=pid,
        tid=tid,
        floats=floats,
        grid=_categorical(i32["grid"], dim3, own=True),
        block=_categorical(i32["block"], dim3, own=True),
        input_dims=_categorical(i32["input_dims"], texts(strings["input_dims"], json_string=False), own=True),
        input_types=_categorical(i32["input_types"], texts(strings["input_types"], json_string=False), own=True),
        concrete_inputs=_categorical(i32["concrete_inputs"], texts(strings["concrete_inputs"], json_string=False), own=True),
        thread_names=thread_names,
    )
    cols.bad_utf8 = bad or bool(res.get("bad_utf8"))
    cols.memory = _native_memory(res, names, strings, texts)
    return cols, {"span": res["span"], "truncated": res["truncated"]}


# --- allocator instant events -----------------------------------------------------------------------------------

#: Instant events that are allocator records, and the field names both decoders give their args.
MEMORY_EVENT_NAMES = ("[memory]", "[OutOfMemory]")
OUT_OF_MEMORY = MEMORY_EVENT_NAMES[1]  # an allocation that failed: the rows carry it as the flag "oom"
MEMORY_FIELDS = ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id")


def _native_memory(res: dict, names: list[str], strings: dict, texts) -> dict[str, np.ndarray] | None:
    inst = res.get("instant")
    if not inst or not memoryview(inst["f64"]["ts"]).nbytes:
        return None
    code = np.frombuffer(inst["i32"]["name"], dtype=np.int32)
    wanted = np.array([n in MEMORY_EVENT_NAMES for n in names] + [False])
    keep = wanted[code]
    if not keep.any():
        return None
    pid, tid = _resolve_ids([(np.frombuffer(inst["i64"]["pid"], dtype=np.int64)[keep], np.frombuffer(inst["i32"]["pid_str"], dtype=np.int32)[keep]),
                             (np.frombuffer(inst["i64"]["tid"], dtype=np.int64)[keep], np.frombuffer(inst["i32"]["tid_str"], dtype=np.int32)[keep])],
                            texts(strings["ids"]))
    is_oom = np.array([n == OUT_OF_MEMORY for n in names] + [False])  # per name (two spellings may read the same)
    out = {"oom": is_oom[code[keep]], "ts": np.frombuffer(inst["f64"]["ts"], dtype=np.float64)[keep], "pid": pid, "tid": tid}
    for f in MEMORY_FIELDS:
        out[f] = np.frombuffer(res["instant_memory"][f], dtype=np.float64)[keep]
    return out


def _struct_memory(events: list[Any]) -> dict[str, np.ndarray] | None:
    from traceinsight.ingest.kineto.decode import Args

    inst = [e for e in events if e.ph in ("i", "I") and e.name in MEMORY_EVENT_NAMES]
    if not inst:
        return None
    strings: dict[str, int] = {}
    pid, tid = _resolve_ids([_ids_of([e.pid for e in inst], strings), _ids_of([e.tid for e in inst], strings)], list(strings))
    noarg = Args()
    args = [e.args or noarg for e in inst]
    return {"oom": np.array([e.name == OUT_OF_MEMORY for e in inst], dtype=bool), "ts": _num([e.ts for e in inst]), "pid": pid, "tid": tid,
            **{f: _num([getattr(a, "mem_" + f) for a in args]) for f in MEMORY_FIELDS}}


# --- general path ---------------------------------------------------------------------------------------------


_NUMBER_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")  # ASCII digits, as the native scanner reads


def _as_float(v: Any) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):  # "bytes": "1024"; "0x0" or "auto" count as absent
        return float(v)
    return np.nan


def _num(values: list[Any]) -> np.ndarray:
    """Numbers from a list that may hold None, numbers or strings (the native scanner applies the same rule)."""
    if not any(isinstance(v, str) for v in values):
        try:
            return np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            pass
    return np.array([_as_float(v) for v in values], dtype=np.float64)


def _factorized(values: list[Any]) -> tuple[np.ndarray, list]:
    """Codes (-1 for None) and the distinct values in order of first appearance, as ``pd.factorize`` gives them;
    a few values (strings or None) through a dict."""
    if len(values) <= SMALL_MATCH:
        index: dict[Any, int] = {}
        codes = [index.setdefault(v, len(index)) if v is not None else -1 for v in values]
        return np.array(codes, dtype=np.int32), list(index)
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    return codes.astype(np.int32), list(uniques)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _ids_of(values: list[Any], strings: dict[str, int], bad: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integer ids and, for string ids, codes into ``strings`` (shared by pid and tid, first appearance first).
    Numbers no int64 holds are flagged in ``bad`` (their events are dropped and counted)."""
    try:
        return np.array(values, dtype=np.int64), np.full(len(values), -1, dtype=np.int32)
    except (TypeError, ValueError, OverflowError):
        pass
    nums = np.zeros(len(values), dtype=np.int64)
    codes = np.full(len(values), -1, dtype=np.int32)
    for i, v in enumerate(values):
        if isinstance(v, str):
            codes[i] = strings.setdefault(v, len(strings))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            if isinstance(v, float) and v in (float("inf"), float("-inf")) or not _INT64_MIN <= v <= _INT64_MAX:
                if bad is not None:
                    bad[i] = True
            else:
                nums[i] = int(v)
    return nums, codes


def struct_columns(events: list[Any]) -> EventColumns:
    """Columns from msgspec-decoded events (``Event`` / ``LooseEvent`` structs)."""
    from traceinsight.ingest.kineto.decode import Args

    evs = [e for e in events if e.ph == "X"]
    meta = [e for e in events if e.ph == "M"]
    strings: dict[str, int] = {}
    bad_ids = np.zeros(len(evs), dtype=bool)
    id_cols = [_ids_of([e.pid for e in evs], strings, bad_ids), _ids_of([e.tid for e in evs], strings, bad_ids),
               _ids_of([e.pid for e in meta], strings), _ids_of([e.tid for e in meta], strings)]
    pid, tid, mpid, mtid = _resolve_ids(id_cols, list(strings))
    noarg = Args()
    args = [e.args or noarg for e in evs]
    floats = {
        "ts": _num([e.ts for e in evs]),
        "dur": _num([e.dur for e in evs]),
        "correlation": _num([a.correlation for a in args]),
        "external_id": _num([a.external_id for a in args]),
        "external_id_legacy": _num([a.external_id_legacy for a in args]),
        "device": _num([a.device for a in args]),
        "stream": _num([a.stream for a in args]),
        "bytes": _num([a.nbytes for a in args]),
        "registers": _num([a.registers for a in args]),
        "shared_mem": _num([a.shared_mem for a in args]),
        "occupancy": _num([a.occupancy for a in args]),
    }
    cats = [e.cat if isinstance(e.cat, str) else ("" if e.cat is None else str(e.cat)) for e in evs]
    names = [e.name if isinstance(e.name, str) else ("" if e.name is None else str(e.name)) for e in evs]
    dims = [(bytes(a.input_dims) or bytes(a.input_dims_legacy)).decode("utf-8", "replace") or None for a in args]
    types = [bytes(a.input_types).decode("utf-8", "replace") or None for a in args]
    concrete = [bytes(a.concrete_inputs).decode("utf-8", "replace") or None for a in args]
    margs = [e.args.name if e.args is not None and isinstance(e.args.name, str) else None for e in meta]
    return EventColumns(
        n_events=len(events),
        has_ts=np.array([e.ts is not None for e in evs], dtype=bool),
        cat=_categorical(*_factorized(cats)),
        name=_categorical(*_factorized(names)),
        pid=pid,
        tid=tid,
        floats=floats,
        grid=_categorical(*_factorized([format_dims(a.grid) for a in args])),
        block=_categorical(*_factorized([format_dims(a.block) for a in args])),
        input_dims=_categorical(*_factorized(dims)),
        input_types=_categorical(*_factorized(types)),
        concrete_inputs=_categorical(*_factorized(concrete)),
        thread_names=_thread_name_table(mpid, mtid, np.array([e.name == "thread_name" for e in meta], dtype=bool), margs),
        bad_ids=bad_ids if bad_ids.any() else None,
        memory=_struct_memory(events),
    )
