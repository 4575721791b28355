"""Standing fuzz targets for every reader, as property tests: whatever the bytes, a reader gives a timeline or a
one-line TraceReadError, never a traceback, and the native and pure paths give the same answer.

Derandomized with fixed example counts so the suite stays fast and repeatable (a few seconds per reader); the
coverage-guided, time-boxed search lives in ``tests/fuzz/`` and is run by hand.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import zlib
from pathlib import Path

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import traceinsight  # noqa: E402
from traceinsight.vocab.errors import TraceReadError  # noqa: E402
from traceinsight.vocab import native  # noqa: E402
from traceinsight.ingest.byteio import gunzip  # noqa: E402
from traceinsight.ingest.kineto.decode import last_complete_event  # noqa: E402

from .helpers.kineto_writer import KinetoTrace  # noqa: E402
# at import, not inside a @given test: importing a module that defines @given tests from inside one trips
# Hypothesis' nested-given check (the test then passed only when collection had imported it first)
from .test_xplane_native import ODD_EVENTS, STREAM_EVENTS, _space  # noqa: E402

FAST = settings(derandomize=True, deadline=None, max_examples=60, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _outcome(path: Path, pure: bool, monkeypatch, **kw):
    with monkeypatch.context() as m:
        if pure:
            m.setenv(native.PURE_ENV, "1")
        else:
            m.delenv(native.PURE_ENV, raising=False)
        try:
            tl = traceinsight.load(path, **kw)
        except TraceReadError as exc:
            msg = str(exc)
            assert "\n" not in msg and "\r" not in msg and len(msg) < 2000, msg
            return msg
    ev = tl.events
    assert (ev["dur_ns"] >= 0).all() and (ev["start_ns"] >= 0).all()
    assert 0 <= tl.span_ns < 1 << 63
    return tl


def _assert_native_equals_pure(path: Path, monkeypatch, same_message: bool = True, **kw):
    fast = _outcome(path, False, monkeypatch, **kw)
    slow = _outcome(path, True, monkeypatch, **kw)
    assert isinstance(fast, str) == isinstance(slow, str), (fast, slow)
    if isinstance(fast, str):
        if same_message:
            assert fast == slow
        return fast
    pd.testing.assert_frame_equal(fast.events, slow.events)
    assert fast.meta.warnings == slow.meta.warnings
    return fast


# --- PyTorch Profiler JSON -------------------------------------------------------------------------------------------

#: Absent and non-finite numbers, drawn as often as all other tokens together: the two readers once disagreed on
#: a null timestamp, which a uniform draw over every token hardly ever produced.
_NON_FINITE = ["null", "NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
_NUMBER_TOKENS = ["0", "-1", "7", "1.5", "1e400", "-1e400", "1e300", "9223372036854775808", "-9223372036854775809",
                  "18446744073709551616", "1" * 70, "0.000001", "3e15", "NaN", '"12"', '"x"', '"' + "9" * 70 + '"',
                  "[1]", "{}", "null", "true", '""', "[1, 2, 1e400]"]
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_NUMERIC = ["ts", "dur", "pid", "tid", "args.correlation", "args.device", "args.stream", "args.bytes", "args.External id",
            "args.external id", "args.registers per thread", "args.shared memory", "args.est. achieved occupancy %"]
_FIELDS = _NUMERIC + ["args.grid", "args.block", "name", "cat", "ph"]


def _kineto_doc() -> dict:
    t = KinetoTrace(rank=0, world_size=2)
    t.step(1, 0, 2000)
    op = t.cpu_op("aten::mm", 10, 400)
    t.kernel("_Z4gemmPfS_i", 100, 50, launch_us=90, op=op)
    t.kernel("relu", 300, 20, launch_us=280)
    t.memcpy("HtoD", 500, 30, 4096, launch_us=480)
    return t.to_dict()


@st.composite
def kineto_bytes(draw) -> bytes:
    doc = _kineto_doc()
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    raw: dict[str, str] = {}
    for k in range(draw(st.integers(0, 4))):
        ev = draw(st.sampled_from(events))
        if draw(st.booleans()):
            field, token = draw(st.sampled_from(_NUMERIC)), draw(st.sampled_from(_NON_FINITE))
        else:
            field = draw(st.sampled_from(_FIELDS))
            token = draw(st.one_of(st.sampled_from(_NUMBER_TOKENS), _TEXT.map(json.dumps)))
        marker = f"@@{k}@@"
        if field.startswith("args."):
            ev.setdefault("args", {})[field[5:]] = marker
        else:
            ev[field] = marker
        raw[json.dumps(marker)] = token
    for key in draw(st.lists(st.sampled_from(["baseTimeNanoseconds", "distributedInfo", "deviceProperties"]), max_size=2)):
        doc[key] = "@@h@@" + key
        raw[json.dumps(doc[key])] = draw(st.sampled_from(_NUMBER_TOKENS + ['{"rank": 1e30}', '[{"id": 1e30}]']))
    text = json.dumps(doc)
    for marker, token in raw.items():
        text = text.replace(marker, token)
    data = text.encode()
    if draw(st.booleans()):  # and a few raw byte edits or a cut
        for _ in range(draw(st.integers(0, 3))):
            pos = draw(st.integers(0, len(data) - 1))
            data = data[:pos] + draw(st.binary(min_size=0, max_size=3)) + data[pos + 1:]
        if draw(st.booleans()):
            data = data[: draw(st.integers(1, len(data)))]
    return data


@FAST
@given(data=kineto_bytes())
def test_kineto_any_document(tmp_path, monkeypatch, data):
    path = tmp_path / "t.json"
    path.write_bytes(data)
    _assert_native_equals_pure(path, monkeypatch, format="pytorch")


@st.composite
def kineto_odd_numbers(draw) -> bytes:
    """The document with 1 to 4 numeric fields of its events absent or not finite, and nothing else changed."""
    doc = _kineto_doc()
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    text_of: dict[str, str] = {}
    for k in range(draw(st.integers(1, 4))):
        ev, field = draw(st.sampled_from(events)), draw(st.sampled_from(_NUMERIC))
        marker = f"@@{k}@@"
        if field.startswith("args."):
            ev.setdefault("args", {})[field[5:]] = marker
        else:
            ev[field] = marker
        text_of[json.dumps(marker)] = draw(st.sampled_from(_NON_FINITE))
    text = json.dumps(doc)
    for marker, token in text_of.items():
        text = text.replace(marker, token)
    return text.encode()


@FAST
@given(data=kineto_odd_numbers())
def test_kineto_null_and_non_finite_numbers(tmp_path, monkeypatch, data):
    path = tmp_path / "t.json"
    path.write_bytes(data)
    _assert_native_equals_pure(path, monkeypatch, format="pytorch")


@FAST
@given(data=kineto_bytes(), cut=st.floats(0.05, 1.0))
def test_kineto_any_gzip(tmp_path, monkeypatch, data, cut):
    gz = gzip.compress(data)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gz[: max(10, int(len(gz) * cut))])
    _assert_native_equals_pure(path, monkeypatch, format="pytorch")


# --- XPlane ----------------------------------------------------------------------------------------------------------


def _xspace() -> bytes:
    return _space(ODD_EVENTS, STREAM_EVENTS)


@FAST
@given(edits=st.lists(st.tuples(st.floats(0, 1), st.binary(max_size=4)), max_size=4), cut=st.floats(0.2, 1.0))
def test_xplane_any_bytes(tmp_path, monkeypatch, edits, cut):
    data = bytearray(_xspace())
    for where, new in edits:
        pos = int(where * (len(data) - 1))
        data[pos: pos + 1] = new
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(bytes(data[: max(1, int(len(data) * cut))]))
    # the two decoders word their errors differently (upb vs the C walker); their outcome must agree
    _assert_native_equals_pure(path, monkeypatch, same_message=False, format="tensorflow-xplane")


# --- Nsight Systems --------------------------------------------------------------------------------------------------

_I64 = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([0, -1, 1 << 62, -(1 << 62), (1 << 63) - 1]),
                 st.none(), st.floats(allow_nan=True), st.text(max_size=5))


@FAST
@given(cells=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["start", "end", "deviceId", "streamId",
                                                                        "correlationId", "shortName"]), _I64),
                      max_size=6))
def test_nsys_any_cells(tmp_path, cells):
    from .helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    t.step(1, 0, 100_000)
    for i in range(4):
        t.kernel(f"k{i}", 10_000 + i * 1_000, 500)
    path = t.write(tmp_path / "t.sqlite")
    with sqlite3.connect(path) as c:
        ids = [r[0] for r in c.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
        for row, col, value in cells:
            try:
                c.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{col}" = ? WHERE rowid = ?', (value, ids[row]))
            except sqlite3.IntegrityError:  # a NOT NULL column: the writer's schema refuses, as nsys's does
                pass
    c.close()
    before = path.read_bytes()
    out = _outcome(path, False, pytest.MonkeyPatch())
    assert path.read_bytes() == before  # the reader never writes to the input
    if not isinstance(out, str):
        assert set(out.events["kind"].astype(str)) <= {"kernel", "runtime", "step"}


# --- the pieces ------------------------------------------------------------------------------------------------------


_ALPHABET = b'{}[]"\\ab,:\\'  # JSON structure, escapes (doubled, so runs of them come up) and filler


def _reference_last_complete(data: bytes, start: int):
    in_string, run, depth, array_depth, bracket, last = False, 0, 0, None, -1, -1
    for i, c in enumerate(data):
        if c == 92:
            run += 1
            continue
        real_quote = c == 34 and run % 2 == 0
        run = 0
        if real_quote:
            in_string = not in_string
            continue
        if in_string:
            continue
        if c in (123, 91):
            depth += 1
            if array_depth is None and c == 91 and i >= start:
                array_depth, bracket = depth, i
        elif c in (125, 93):
            depth -= 1
            if array_depth is not None:
                if depth == array_depth:
                    last = i
                elif depth < array_depth:
                    return bracket, last
    return None if array_depth is None else (bracket, last)


@settings(derandomize=True, deadline=None, max_examples=400, database=None)
@given(data=st.binary(max_size=80).map(lambda b: bytes(_ALPHABET[x % len(_ALPHABET)] for x in b)),
       start=st.integers(0, 8), step=st.sampled_from([1, 2, 5, 1 << 26]))
def test_last_complete_event_matches_a_byte_by_byte_reading(data, start, step):
    import traceinsight.ingest.kineto.decode as decode

    old = decode._STEP
    decode._STEP = step
    try:
        got = last_complete_event(data, start)
        assert (got[:2] if got else got) == _reference_last_complete(data, start)
    finally:
        decode._STEP = old


@settings(derandomize=True, deadline=None, max_examples=100, database=None)
@given(parts=st.lists(st.binary(max_size=2000), min_size=1, max_size=3), cut=st.floats(0.1, 1.0))
def test_gunzip_agrees_with_zlib(parts, cut):
    raw = b"".join(gzip.compress(p) for p in parts)
    n = max(1, int(len(raw) * cut))
    try:
        got, complete = gunzip(raw[:n], Path("t.gz"), 1 << 30)
    except TraceReadError:
        assert n < len(raw)  # only a cut stream may be refused (a cut inside the header)
        return
    expected, rest, ended = b"", raw[:n], True
    while rest:
        d = zlib.decompressobj(31)
        try:
            expected += d.decompress(rest)
        except zlib.error:
            break
        ended = d.eof
        if not d.eof:
            break
        rest = d.unused_data
    assert got == expected
    assert complete == ended  # a cut on a member boundary leaves whole members: complete
