"""The native kineto scanner and the general (msgspec) decoder agree on every input: the same events, the same
warnings, the same one-line error. Each case here is a class the reader fuzzer (tests/fuzz/fuzz_readers.py) found
where they did not: malformed JSON inside values the scanner skips, nesting millions deep, escapes, bytes that are
not UTF-8 where one path decodes and the other does not, a cut file with a foreign tail.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from traceinsight.vocab import native
from traceinsight.ingest.kineto import decode as kdecode
from traceinsight.ingest.kineto.columns import Declined, scan_columns

from .helpers.kineto_writer import KinetoTrace
from .test_kineto_native import _small_trace, assert_same, native_built  # noqa: F401 - the fixture skips without the scanner

ODD = '"__ODD__"'


def _trace() -> KinetoTrace:
    return _small_trace()


def _doc_with(where: str, key: str, raw: bytes, cat: str = "kernel") -> bytes:
    """The small trace with one member ``key: raw`` (raw bytes, valid JSON or not) in the kernel event itself
    (``where="event"``), in its args (``"args"``) or at the top level (``"top"``); a member already there is
    replaced in place, a new one comes last."""
    doc = _trace().to_dict()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    target = {"event": kernel, "args": kernel["args"], "top": doc}[where]
    target[key] = "__ODD__"
    return json.dumps(doc).encode().replace(ODD.encode(), raw)


def _write(tmp_path, data: bytes, name: str = "t.json"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _kernel(tl):
    return tl.events[tl.events["kind"] == "kernel"].iloc[0]


N_ROWS = 8  # complete events of the small trace (the scanner's rows)


# --- malformed JSON where the scanner skips: refused on both paths, with the general decoder's message ----------

MALFORMED = {
    "trailing-comma-object": (b'{"a": 1,}', "trailing comma in object"),
    "trailing-comma-array": (b"[1, 2,]", "trailing comma in array"),
    "missing-colon": (b'{"a" 1}', "expected ':'"),
    "mismatched-bracket": (b"[1, {}}", "expected ',' or ']'"),
    "invalid-escape": (b'"a\\qb"', "invalid escaped character"),
    "bad-unicode-escape": (b'"\\u12G4"', "invalid character in unicode escape"),
    "control-character": (b'"a\x01b"', "invalid character"),
    "leading-zero": (b"[01]", "invalid number"),
    "bare-dot": (b"[1.]", "invalid number"),
    "nan": (b"[NaN]", "invalid character"),
    "vertical-tab": (b"[\x0b1]", "invalid character"),
    "bad-literal": (b"[ture]", "invalid character"),
}


@pytest.mark.parametrize("where", ["event", "args", "top"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_json_in_a_skipped_value_is_refused_on_both_paths(tmp_path, monkeypatch, case, where):
    raw, words = MALFORMED[case]
    data = _doc_with(where, "unread", raw)
    with pytest.raises(Declined):  # the scanner no longer skips it unread
        scan_columns(data)
    err = assert_same(_write(tmp_path, data), monkeypatch)
    assert isinstance(err, str) and "not valid JSON" in err and words in err


@pytest.mark.parametrize("where", ["event", "args", "top"])
@pytest.mark.parametrize("raw", [b'"\\udc00"', b'"\\ud800\\u0041"'])
def test_lone_surrogate_in_a_skipped_value_is_replaced_on_both_paths(tmp_path, monkeypatch, where, raw):
    """One unpaired surrogate escape costs one character (U+FFFD, with a warning), not the whole trace."""
    tl = assert_same(_write(tmp_path, _doc_with(where, "unread", raw)), monkeypatch)
    assert not isinstance(tl, str) and _kernel(tl)["name"] == "ampere_sgemm_128x64_nn"
    assert any("lone UTF-16 surrogate" in w for w in tl.meta.warnings)


@pytest.mark.parametrize("where", ["event", "args", "top"])
def test_unusual_but_valid_json_in_a_skipped_value_is_read_natively(tmp_path, monkeypatch, where):
    raw = b'["\\ud83d\\ude00", "\\/", -0, 1E+2, 0.5e-3, [], {}, "", {"k": [true, false, null]}, "\\u00e9\\t"]'
    data = _doc_with(where, "unread", raw)
    cols, where_ = scan_columns(data)  # taken, not declined
    assert not where_["truncated"] and len(cols.pid) == N_ROWS
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert _kernel(tl)["name"] == "ampere_sgemm_128x64_nn"


def test_bytes_after_the_document_are_an_error_on_both_paths(tmp_path, monkeypatch):
    data = json.dumps(_trace().to_dict()).encode() + b" x"
    with pytest.raises(Declined):
        scan_columns(data)
    err = assert_same(_write(tmp_path, data), monkeypatch)
    assert isinstance(err, str) and "trailing characters" in err


def test_bare_array_after_long_leading_whitespace(tmp_path, monkeypatch):
    data = b" " * 5000 + json.dumps(_trace().to_dict()["traceEvents"]).encode()
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert not isinstance(tl, str) and (tl.events["kind"] == "kernel").sum() == 1


# --- nesting: one limit on both paths ------------------------------------------------------------------------------


def test_the_depth_limit_is_one_number_on_both_paths():
    assert native.built("pytorch").MAX_DEPTH == kdecode.MAX_DEPTH == 256


@pytest.mark.parametrize("where,levels_outside", [("event", 3), ("args", 4), ("top", 1)])
def test_nesting_past_the_scanners_limit_is_left_to_msgspec_and_both_paths_agree(tmp_path, monkeypatch, where, levels_outside):
    room = kdecode.MAX_DEPTH - levels_outside  # containers the value itself may open
    plain = len(assert_same(_write(tmp_path, _doc_with(where, "deep", b"1"), "plain.json"), monkeypatch).events)
    ok = _doc_with(where, "deep", b"[" * room + b"]" * room)
    scan_columns(ok)  # taken natively
    tl = assert_same(_write(tmp_path, ok, "ok.json"), monkeypatch)
    assert not isinstance(tl, str) and len(tl.events) == plain

    over = _doc_with(where, "deep", b"[" * (room + 1) + b"]" * (room + 1))
    with pytest.raises(Declined):
        scan_columns(over)  # declined natively, read by msgspec: the same timeline on both paths
    tl = assert_same(_write(tmp_path, over, "over.json"), monkeypatch)
    assert not isinstance(tl, str) and len(tl.events) == plain


def test_five_million_deep_nesting_is_a_quick_one_line_error_exit_3(tmp_path, monkeypatch):
    deep = b"[" * 5_000_000 + b"]" * 5_000_000
    data = _doc_with("args", "deep", deep)
    path = _write(tmp_path, data)
    err = assert_same(path, monkeypatch)  # how fast: bench/bench_timing_guards.py --only hostile
    assert err.endswith("not valid JSON (nested too deeply)")
    # unclosed (a cut inside the nesting) is the same error, not a truncation
    err = assert_same(_write(tmp_path, data[: len(data) // 2], "cut.json"), monkeypatch)
    assert err.endswith("not valid JSON (nested too deeply)")
    code = "import sys, traceinsight.cli.app as c\nsys.exit(c.main())"
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1 and "nested too deeply" in proc.stderr


# --- escapes: keys and phases are compared after unescaping, as msgspec does -------------------------------------


def test_escaped_keys_and_phase_read_as_their_text(tmp_path, monkeypatch):
    doc = _trace().to_dict()
    text = json.dumps(doc)
    i = text.index('"cat": "kernel"')
    j = text.rindex('{"ph": "X"', 0, i)
    text = text[:j] + '{"p\\u0068": "\\u0058"' + text[j + len('{"ph": "X"'):]
    text = text.replace('"correlation"', '"corr\\u0065lation"', 1)
    data = text.encode()
    scan_columns(data)  # native
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert (tl.events["kind"] == "kernel").sum() == 1 and _kernel(tl)["correlation"] >= 0


@pytest.mark.parametrize("raw,want", [(b'"007"', 7), (b'"00.5e1"', 5), (b'"1\\u0030"', 10), (b'"\xd9\xa3"', 0),
                                      (b'"0x10"', 0), (b'"12 "', 0)])
def test_numeric_strings_agree(tmp_path, monkeypatch, raw, want):
    """A copy's byte count written as a string: leading zeros read as the general decoder's pattern reads them,
    ASCII digits only, escapes unescaped first (the scanner leaves those to the general decoder)."""
    data = _doc_with("args", "bytes", raw, cat="gpu_memcpy")
    try:
        scan_columns(data)
    except Declined:
        assert b"\\" in raw
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert tl.events.loc[tl.events["kind"] == "memcpy", "bytes"].tolist() == [want]


@pytest.mark.parametrize("extra,corr", [(b"{}", -1), (b"null", -1), (b'{"correlation": 9}', 9)])
def test_a_repeated_or_null_args_replaces_the_earlier_one(tmp_path, monkeypatch, extra, corr):
    data = _doc_with("event", "args2", extra).replace(b'"args2"', b'"args"')  # after the kernel's own args
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert _kernel(tl)["correlation"] == corr


# --- UTF-8: a warning exactly where the general decoder decodes the bytes ---------------------------------------

UTF8_WARNS = {
    "args-number-string": ("args", "correlation", b'"\xff1"'),
    "grid-not-a-list": ("args", "grid", b'"\xff"'),
    "grid-list": ("args", "grid", b'["\xff", 1, 1]'),
    "grid-dict-key": ("args", "block", b'{"\xff": 1}'),
    "args-name-list": ("args", "name", b'["\xc0\xaf"]'),
    "phase": ("event", "ph", b'"X\xed\xa0\x80"'),
}
UTF8_SILENT = {
    "input-dims": ("args", "Input Dims", b'[["\xff"]]'),
    "skipped-args-value": ("args", "unread", b'"\xff"'),
    "skipped-event-value": ("event", "unread", b'["\xf4\x90\x80\x80"]'),
    "skipped-key": ("args", "\xff", b"1"),
}


@pytest.mark.parametrize("case", sorted(UTF8_WARNS) + sorted(UTF8_SILENT))
def test_non_utf8_bytes_warn_on_both_paths_exactly_where_they_are_decoded(tmp_path, monkeypatch, case):
    where, key, raw = {**UTF8_WARNS, **UTF8_SILENT}[case]
    data = _doc_with(where, "__KEY__", raw).replace(b"__KEY__", key.encode("latin-1"))
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert not isinstance(tl, str)
    warned = any("not UTF-8" in w for w in tl.meta.warnings)
    assert warned == (case in UTF8_WARNS)


def test_non_utf8_bytes_and_an_out_of_range_number_together(tmp_path, monkeypatch):
    """Found by the fuzzer: the general path repaired one fault or the other, never both."""
    data = _doc_with("args", "name", b'["\xd1", [-1e400]]')
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert not isinstance(tl, str) and (tl.events["kind"] == "kernel").sum() == 1 and any("not UTF-8" in w for w in tl.meta.warnings)


# --- cuts -------------------------------------------------------------------------------------------------------


def test_a_cut_after_a_header_key_named_traceEvents_recovers_the_real_array(tmp_path, monkeypatch):
    """Found by the fuzzer: the general path looked for the first "traceEvents" text, inside distributedInfo."""
    doc = _trace().to_dict()
    doc["distributedInfo"] = {"traceEvents": [], "rank": 0}
    data = json.dumps(doc).encode()
    data = data[: data.rindex(b'"cat": "cuda_runtime"')]
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert not isinstance(tl, str) and (tl.events["kind"] == "kernel").sum() == 1
    assert any("truncated" in w for w in tl.meta.warnings)


def _many_kernels(n: int) -> bytes:
    t = KinetoTrace()
    t.step(1, 0, n * 100 + 100)
    for i in range(n):
        t.kernel("k", 10 + i * 100, 50)
    return json.dumps(t.to_dict()).encode()


@pytest.mark.parametrize("glue", [b'{"ph": "X", "na', b"\x00" * 4096, b'"}garbage'])
def test_a_cut_file_with_a_foreign_tail_keeps_every_complete_event(tmp_path, monkeypatch, glue):
    """A writer killed mid-event, then other bytes after the cut (a restarted writer, a block of NULs): still a
    truncation. Every complete event before the cut is kept, with the truncation warning, on both paths."""
    data = _many_kernels(300)
    for cut in (len(data) - 5000, len(data) - 5001, len(data) - 5017):
        doc = data[:cut] + glue
        complete = doc[: doc.rindex(b"}, {", 0, cut) + 1]  # up to the last event closed before the cut
        want = complete.count(b'"cat": "kernel"')
        tl = assert_same(_write(tmp_path, doc), monkeypatch)
        assert not isinstance(tl, str), tl
        assert (tl.events["kind"] == "kernel").sum() == want > 250
        assert any("truncated" in w and "recovered" in w for w in tl.meta.warnings)


def test_damage_followed_by_more_events_is_still_an_error(tmp_path, monkeypatch):
    """The foreign-tail rule does not stretch to damage with intact events after it (the middle of the file)."""
    data = _many_kernels(300)
    mid = len(data) // 2
    doc = data[:mid] + b'{"ph": "X", "na' + data[mid + 40: len(data) - 10]  # damaged in the middle, then cut
    err = assert_same(_write(tmp_path, doc), monkeypatch)
    assert isinstance(err, str) and "not valid JSON" in err


def test_foreign_tail_recovery_is_linear(tmp_path, monkeypatch):
    """One structural pass and one decode of the part kept, wherever the cut falls (the old search re-decoded the
    file for each of its last 200 ``}`` and then kept nothing): counted, not timed, so a loaded machine cannot fail
    it."""
    data = _many_kernels(60_000)
    doc = data[: len(data) - 5000] + b'{"ph": "X", "na'
    path = _write(tmp_path, doc)
    decodes = []
    real = kdecode._decode_any
    monkeypatch.setattr(kdecode, "_decode_any", lambda d: (decodes.append(len(d)), real(d))[1])
    tl = assert_same(path, monkeypatch)
    assert (tl.events["kind"] == "kernel").sum() > 59_900
    assert len(decodes) == 4  # per path: the document (refused), then the part before the cut


def test_an_out_of_range_number_clamps_outside_strings_only(tmp_path, monkeypatch):
    """Found in review: the general path's clamp of 1e400 rewrote a name reading "mm[1e400]" too."""
    data = _doc_with("args", "correlation", b"1e400").replace(b'"aten::mm"', b'"mm[1e400]"')
    tl = assert_same(_write(tmp_path, data), monkeypatch)
    assert "mm[1e400]" in set(tl.events["name"].astype(str))
    assert (tl.events["kind"] == "kernel").sum() == 0  # the kernel's correlation is out of range: dropped, counted
    assert any("out of range" in w for w in tl.meta.warnings)
    assert kdecode.clamp_huge_numbers(b'{"a": [1e400, "x:1e400,", -1E+999], "b\\"": "[1e400]"}') == \
        b'{"a": [1e300, "x:1e400,", -1e300], "b\\"": "[1e400]"}'
