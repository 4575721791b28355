"""The kineto scanner's two-thread scan of a large event array gives exactly the one-thread result.

The second thread starts near the middle of what is left, where an event seems to begin; the first thread proves
the place an event boundary by landing on it, or drops the second thread's work and reads on alone. These tests
force the split (``split_after``: the events the first thread reads before it starts the second) on documents of
a few hundred events, and compare everything the scanner returns with the one-thread scan: every column byte for
byte, the string tables in order, the counts, the flags, the span, the reason a document is declined. The places
that make the first thread pass the second's start without landing on it (arrays of objects inside arguments),
a cut on either side of it, a declined or non-UTF-8 event after it, allocator records and metadata on both sides,
a document on one line (no place found) and estimates of the halves' rows that are too small (either thread
filling its share of the shared columns) are each planted.
"""

from __future__ import annotations

import gzip
import json
import re

import pandas as pd
import pytest

import traceinsight
from traceinsight.ingest.kineto import columns
from traceinsight.vocab import native

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace
from .test_kineto_native import native_built  # noqa: F401 - the fixture skips without the scanner

SPLITS = (1, 2, 5, 40, 333)


pytestmark = pytest.mark.usefixtures("native_built")  # skips (fails under CI) without the scanner


def _scan(data: bytes, split_after: int = 0):
    return native.built("pytorch").scan(data, False, split_after)


def _everything(res: dict) -> dict:
    """All the scanner returned, as comparable values (columns as their bytes)."""
    if res.get("fallback"):
        return {"fallback": res["fallback"]}
    out = {k: res[k] for k in ("events", "truncated", "span", "bad_utf8")}
    for group in ("complete", "metadata", "instant"):
        for typ, cols in res[group].items():
            for name, col in cols.items():
                out[(group, typ, name)] = bytes(memoryview(col))
    for name, col in res["instant_memory"].items():
        out[("memory", name)] = bytes(memoryview(col))
    for table, texts in res["strings"].items():
        out[("strings", table)] = list(texts)
    return out


def assert_split_same(data: bytes, splits=SPLITS) -> dict:
    """Every split gives the one-thread result; returns it."""
    one = _everything(_scan(data))
    for n in splits:
        got = _everything(_scan(data, n))
        if got != one:
            differ = sorted(str(k) for k in set(one) | set(got) if one.get(k) != got.get(k))
            pytest.fail(f"split after {n} events differs from one thread in {differ[:6]}")
    return one


def _trace(n: int = 120, *, with_memory: bool = True, arg_arrays: bool = False) -> KinetoTrace:
    """n steps of an op, its kernel, a copy and (optionally) allocator records: several hundred events of every
    kind the scanner keeps, on two host threads."""
    t = KinetoTrace()
    for i in range(n):
        base = 100.0 * i
        tid = 4242 if i % 3 else 4243
        args = {"Input Dims": [[64, i % 7 + 1]], "tensors": [{"shape": [i, 2]}, {"dtype": "f32"}]} if arg_arrays else None
        op = t.cpu_op(f"aten::op{i % 11}", base + 1, 30, tid=tid, args=args)
        t.kernel(f"kernel_{i % 13}", base + 40, 8, launch_us=base + 5, op=op)
        if i % 4 == 0:
            t.memcpy("HtoD", base + 60, 5, nbytes=4096 * (i + 1), launch_us=base + 50)
        if with_memory and i % 2 == 0:
            t.memory(base + 2, 512 * (i + 1), allocated=1 << 20, reserved=1 << 22, tid=tid)
    return t


def _pretty(t: KinetoTrace | dict) -> bytes:
    """As kineto writes it: one member per line (a place to start the second thread is found from a line break)."""
    doc = t.to_dict() if isinstance(t, KinetoTrace) else t
    return json.dumps(doc, indent=1).encode()


def test_split_scans_equal_one_thread_on_planted_traces():
    one = assert_split_same(_pretty(_trace()))
    assert one["events"] > 400 and not one["truncated"]


def test_the_second_threads_strings_get_the_codes_one_scan_gives():
    """Names first seen after the split take the next codes in the order the second half meets them, after every
    name of the first half; names seen on both sides keep their first code."""
    t = _trace(60)
    for i in range(60):
        t.cpu_op(f"late::op{59 - i}", 100.0 * (60 + i), 10)
        t.cpu_op("aten::op3", 100.0 * (60 + i) + 20, 10)
    one = assert_split_same(_pretty(t))
    names = one[("strings", "name")]
    assert names.index(b"late::op59") > names.index(b"aten::op3")
    assert names.index(b"late::op0") == len(names) - 1 or names.index(b"late::op0") > names.index(b"late::op59")


def test_arrays_of_objects_in_arguments_make_false_starts_that_are_dropped():
    """Every op carries an array of objects in its args: many places that look like an event's start lie inside
    an event. The first thread passes such a place without landing on it and reads on alone."""
    assert_split_same(_pretty(_trace(arg_arrays=True)))


def test_a_document_on_one_line_is_read_by_one_thread():
    data = json.dumps(_trace().to_dict()).encode()
    assert b"\n" not in data
    assert_split_same(data)


@pytest.mark.parametrize("where", [0.3, 0.5, 0.52, 0.7, 0.95, 0.999])
def test_a_cut_on_either_side_of_the_split_recovers_the_same_events(where):
    data = _pretty(_trace())
    one = assert_split_same(data[: int(len(data) * where)])
    assert one.get("truncated") or "fallback" in one


def test_a_cut_every_few_bytes_recovers_the_same_events():
    """Cuts every few bytes of the event array: the early ones leave the second thread (started halfway through
    what is left) inside its first event, so it completes none and the last complete event is the first thread's."""
    data = _pretty(_trace(40))
    for cut in range(data.index(b'"traceEvents"'), len(data), 23):
        assert_split_same(data[:cut], splits=(5,))


@pytest.mark.parametrize("where", [0.2, 0.8])
def test_an_event_the_scanner_declines_declines_the_document_either_way(where):
    doc = _trace().to_dict()
    ev = doc["traceEvents"]
    i = next(j for j in range(int(len(ev) * where), len(ev)) if ev[j].get("cat") == "kernel")
    ev[i] = dict(ev[i], ts=str(ev[i]["ts"]))  # a timestamp written as a string
    one = assert_split_same(_pretty(doc))
    assert "fallback" in one


@pytest.mark.parametrize("where", [0.2, 0.8])
def test_bytes_that_are_not_utf8_are_flagged_either_way(where):
    doc = _trace().to_dict()
    ev = doc["traceEvents"]
    i = next(j for j in range(int(len(ev) * where), len(ev)) if ev[j].get("cat") == "kernel")
    ev[i] = dict(ev[i], args=dict(ev[i]["args"], grid="MARKER"))  # a value the general decoder decodes
    one = assert_split_same(_pretty(doc).replace(b'"MARKER"', b'"bad \xff byte"'))
    assert one["bad_utf8"] is True


@pytest.mark.parametrize("closed", [False, True])
def test_a_bad_byte_in_an_event_cut_after_the_split_is_flagged_as_by_one_thread(closed):
    """The last event lies in the second thread's half and is cut: a bad byte in a string the cut ends is no bad
    UTF-8 (the general decoder sees only a cut), one in a string that closed before it is; either way the split
    result is the one-thread result."""
    data = _pretty(_trace())
    events_end = data.rindex(b"\n ]")  # just after the last event's closing brace
    cut = b',\n  {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 2, "ts": 99999, "dur": 1, "args": {"grid": "bad \xff byte'
    one = assert_split_same(data[:events_end] + cut + (b'", "device": 0' if closed else b""))
    assert one["truncated"] and one["bad_utf8"] is closed


def test_a_first_half_with_more_rows_than_estimated_is_read_by_one_thread():
    """The first thread's share of the shared columns ends at the estimate of its rows: here the estimate, made
    from the phases it can read, is far too small (the first half's phase keys are escaped, so the sampled
    windows find none, and the events before the split were allocator records), so it fills its share, drops the
    second thread and reads on alone."""
    t = KinetoTrace()
    for i in range(40):
        t.memory(float(i), 512, allocated=1 << 20, reserved=1 << 22)
    for i in range(16000):
        t.cpu_op(f"op{i % 5}", 100.0 + i, 0.5)
    data = _pretty(t)
    head, tail = data[: len(data) * 3 // 4], data[len(data) * 3 // 4:]
    data = head.replace(b'"ph": "X"', b'"p\\u0068": "X"') + tail
    one = assert_split_same(data, splits=(40, 41))
    assert len(one[("complete", "f64", "ts")]) // 8 == 16001


def test_a_second_half_with_more_rows_than_estimated_is_read_again_by_the_first_thread():
    """The second thread's share ends at the estimate of its rows: here the sampled windows of the second half find
    one phase in a hundred (the others' keys are escaped), so it fills its share, and the first thread, on
    landing, reads the second half itself."""
    t = KinetoTrace()
    for i in range(40000):
        t.cpu_op("op", float(i), 0.5)
    data = _pretty(t)
    seen = iter(range(1 << 30))

    def phase(m: re.Match) -> bytes:
        k = next(seen)
        return m.group(0) if k < 20000 or k % 100 == 0 else b'"p\\u0068": "X"'

    data = re.sub(rb'"ph": "X"', phase, data)
    one = assert_split_same(data, splits=(30, 59))
    assert len(one[("complete", "f64", "ts")]) // 8 == 40001


def test_an_array_of_objects_after_the_events_is_not_taken_for_them():
    """A header member after ``traceEvents`` holding objects: a place found there lies past the array's end, so
    the first thread closes the array before reaching it and drops the second thread."""
    doc = _trace(20).to_dict()
    events = doc.pop("traceEvents")
    doc["traceEvents"] = events
    doc["zzz"] = [{"a": i, "b": {"c": [i]}} for i in range(3000)]
    assert_split_same(_pretty(doc))


def test_an_empty_first_name_is_read():
    """An empty text interned first (the table has no block of its own yet) was taken for a failed allocation."""
    t = _trace(5)
    t.events.insert(0, {"ph": "X", "cat": "cpu_op", "name": "", "pid": t.pid, "tid": t.tid, "ts": t._ts(0), "dur": 1})
    one = assert_split_same(_pretty(t))
    assert b"" in one[("strings", "name")]


@pytest.mark.parametrize("name", ["hta_ddp_v100_rank1of2.json.gz", "kineto_resnet50_nw0_v100.pt.trace.json.gz",
                                  "tracelens_h100_owlv2_inference.json.gz"])
def test_split_scans_equal_one_thread_on_real_traces(name):
    path = corpus_file(f"pytorch/{name}")
    assert_split_same(gzip.decompress(path.read_bytes()), splits=(1, 1000, 20000))


def test_load_with_two_threads_equals_load_with_one(tmp_path, monkeypatch):
    """Through the reader: a file the size and machine qualify is scanned with the split, and gives the same
    timeline; a rank folder's files (read by a pool already) are each scanned by one thread."""
    path = tmp_path / "t.json"
    path.write_bytes(_pretty(_trace()))
    one = traceinsight.load(path)
    seen = []
    real = native.built("pytorch")

    class Spy:
        def scan(self, data, release=False, split_after=0):
            seen.append(split_after)
            return real.scan(data, release, split_after)

    monkeypatch.setattr(columns.native, "built", lambda fmt: Spy())
    monkeypatch.setattr(columns, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(columns, "SPLIT_AFTER_EVENTS", 7)
    monkeypatch.setattr(columns, "usable_cpus", lambda: columns.SPLIT_MIN_CPUS)
    two = traceinsight.load(path)
    assert seen == [7]
    pd.testing.assert_frame_equal(one.events, two.events)
    pd.testing.assert_frame_equal(one.memory, two.memory)
    assert one.meta.warnings == two.meta.warnings
    # too few CPUs, too small a file: one thread
    seen.clear()
    monkeypatch.setattr(columns, "usable_cpus", lambda: columns.SPLIT_MIN_CPUS - 1)
    traceinsight.load(path)
    monkeypatch.setattr(columns, "usable_cpus", lambda: columns.SPLIT_MIN_CPUS)
    monkeypatch.setattr(columns, "SPLIT_MIN_BYTES", path.stat().st_size + 1)
    traceinsight.load(path)
    assert seen == [0, 0]
    # a rank folder: its pool reads the files at once, each with one thread
    monkeypatch.setattr(columns, "SPLIT_MIN_BYTES", 0)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(2):
        t = _trace(30)
        t.rank, t.world_size = r, 2
        (folder / f"rank{r}.json").write_bytes(_pretty(t))
    seen.clear()
    traceinsight.load(folder)
    assert seen == [0, 0]
