"""The native kineto scanner against the general (msgspec) decoder: same timeline, whatever the input.

The scanner only speeds loading up; it must never change an answer. So every test here loads the same file
twice, once through each decoder (TRACEINSIGHT_PURE_PYTHON switches the native one off), and compares the
whole events frame, the warnings and the devices. Inputs: every corpus file, planted edge cases (escapes,
string ids, odd numbers, non-UTF-8 bytes, the bare-array form), documents the scanner declines, and a file cut
at every few bytes.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

import traceinsight
from traceinsight.vocab.errors import TraceReadError
from traceinsight.vocab import native
from traceinsight.ingest.kineto.columns import Declined, scan_columns

FORCE_PURE = native.PURE_ENV

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace

CORPUS_NAMES = [
    "hdai_gru_cudnn_rtx5070ti_laptop.json.gz",
    "hta_a100_rank0of16_5streams.json.gz",
    "hta_alexnet_a100_cudasync.json.gz",
    "hta_amd_mi250_minitoy_train.json.gz",
    "hta_cupti_range_profiler_a100.json.gz",
    "hta_ddp_v100_rank1of2.json.gz",
    "hta_event_sync_a100.json.gz",
    "hta_event_sync_multistream_a100.json.gz",
    "hta_gpu_user_annotation_gp100.json.gz",
    "hta_nccl_data_a100_rank0of2.json.gz",
    "hta_ns_resolution_v100_rank0.pt.trace.json.gz",
    "hta_sampled_128rank_job_rank0.json.gz",
    "hta_triton_example_a100.json.gz",
    "kineto_resnet50_nw0_v100.pt.trace.json.gz",
    "kineto_resnet50_nw4_v100.pt.trace.json.gz",
    "param_linear_rtx2080ti.json.gz",
    "tracelens_b200_eager_rank0of8.json.gz",
    "tracelens_h100_owlv2_inference.json.gz",
    "tracelens_h100_qwen1.5-0.5b_inference.json.gz",
    "tracelens_mi300x_resnet_act_ckpt_rank0of8.json.gz",
    "param_dlrm_v100_8ranks",
]


@pytest.fixture(autouse=True)
def native_built():
    if native.built("pytorch") is None:
        if os.environ.get("CI"):
            pytest.fail("the native kineto scanner was not built (is a C compiler installed?)")
        pytest.skip("the native kineto scanner is not built here (no C compiler at install time)")


def _load(path, pure: bool, monkeypatch):
    with monkeypatch.context() as m:
        if pure:
            m.setenv(FORCE_PURE, "1")
        else:
            m.delenv(FORCE_PURE, raising=False)
        try:
            return traceinsight.load(path, format="pytorch")
        except TraceReadError as exc:
            return str(exc)


def assert_same(path, monkeypatch):
    """Both decoders give the same timeline (or the same one-line error); returns the native result."""
    fast = _load(path, False, monkeypatch)
    slow = _load(path, True, monkeypatch)
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return fast
    pd.testing.assert_frame_equal(fast.events, slow.events)
    assert fast.meta.warnings == slow.meta.warnings
    assert [vars(d) for d in fast.meta.devices] == [vars(d) for d in slow.meta.devices]
    assert (fast.meta.world_size, fast.meta.ranks, fast.meta.start_unix_ns) == (slow.meta.world_size, slow.meta.ranks, slow.meta.start_unix_ns)
    return fast


def _json_bytes(path) -> bytes:
    import gzip

    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_same_timeline_and_scanned_natively(name, monkeypatch):
    path = corpus_file(f"pytorch/{name}")
    tl = assert_same(path, monkeypatch)
    assert not isinstance(tl, str) and len(tl.events) > 0
    # the fast path really ran: the scanner takes every real kineto file
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    for f in files[:2]:
        cols, where = scan_columns(_json_bytes(f))
        assert not where["truncated"]
        assert cols.n_events > len(cols.pid) > 0


def _small_trace() -> KinetoTrace:
    t = KinetoTrace()
    t.step(1, 0, 400)
    op = t.cpu_op("aten::mm", 10, 50, args={"Input Dims": [[64, 128], [128, 256]]})
    t.kernel("ampere_sgemm_128x64_nn", 70, 30, launch_us=20, op=op)
    t.memcpy("HtoD", 110, 12, nbytes=1 << 20, pageable=True, launch_us=100)
    t.runtime("cudaStreamSynchronize", 130, 40)
    return t


def test_edge_case_strings_ids_and_numbers(tmp_path, monkeypatch):
    doc = _small_trace().to_dict()
    ev = doc["traceEvents"]
    x = dict(next(e for e in ev if e.get("cat") == "cpu_op"))
    odd = [
        dict(x, name='quote " backslash \\ tab \t newline \n', ts=x["ts"] + 1),
        dict(x, name="caf\u00e9 \U0001f600 \u2028", ts=x["ts"] + 2),
        dict(x, name="exponent", ts=float(x["ts"]) + 3.25, dur=1.5e1),
        dict(x, name="seventeen digits", ts=x["ts"] + 0.12345678901234567, dur=12.000000000000002),
        dict(x, name="string ids", pid="Spans", tid="stream 7"),
        dict(x, name="numeric string tid", tid="12"),
        dict(x, name="null fields", dur=None, args=None),
        dict(x, name="big correlation", args={"correlation": 2**60, "External id": -3}),
        dict(x, name="no ts"),
    ]
    del odd[-1]["ts"]
    doc["traceEvents"] = ev + odd
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc, ensure_ascii=True, indent=1))
    tl = assert_same(path, monkeypatch)
    names = set(tl.events["name"].astype(str))
    assert 'quote " backslash \\ tab \t newline \n' in names
    assert "caf\u00e9 \U0001f600 \u2028" in names
    assert "no ts" not in names  # a complete event without a timestamp is not on the timeline
    row = tl.events[tl.events["name"] == "string ids"].iloc[0]
    assert row["tid"] == 7 and row["pid"] < 0
    assert (tl.events.loc[tl.events["name"] == "numeric string tid", "tid"] == 12).all()
    # the same document with raw UTF-8 instead of \u escapes
    path2 = tmp_path / "odd_utf8.json"
    path2.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert_same(path2, monkeypatch)


def test_non_utf8_bytes_are_replaced_with_a_warning(tmp_path, monkeypatch):
    data = json.dumps(_small_trace().to_dict()).encode().replace(b'"aten::mm"', b'"aten::mm\xff\xfe"')
    path = tmp_path / "latin.json"
    path.write_bytes(data)
    tl = assert_same(path, monkeypatch)
    assert "aten::mm\ufffd\ufffd" in set(tl.events["name"].astype(str))
    assert any("not UTF-8" in w for w in tl.meta.warnings)


def test_bare_array_form(tmp_path, monkeypatch):
    events = _small_trace().to_dict()["traceEvents"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(events))
    tl = assert_same(path, monkeypatch)
    assert (tl.events["kind"] == "kernel").sum() == 1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: dict(e, ts=str(e["ts"])),  # timestamps written as strings
        lambda e: dict(e, pid=1.5),  # a float pid
        lambda e: dict(e, args=[1, 2]),  # args that is not an object
        lambda e: dict(e, args={"device": True}),  # a numeric arg that is a boolean
    ],
    ids=["string-ts", "float-pid", "list-args", "bool-device"],
)
def test_documents_the_scanner_declines_take_the_general_path(tmp_path, monkeypatch, mutate):
    doc = _small_trace().to_dict()
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][i] = mutate(doc["traceEvents"][i])
    data = json.dumps(doc).encode()
    with pytest.raises(Declined):
        scan_columns(data)
    path = tmp_path / "declined.json"
    path.write_bytes(data)
    assert_same(path, monkeypatch)


def test_cut_anywhere_same_recovery(tmp_path, monkeypatch):
    data = json.dumps(_small_trace().to_dict(), indent=1).encode()
    start = data.index(b'"traceEvents"') - 40
    cuts = list(range(max(start, 1), len(data), 23)) + [len(data) - 1, len(data) - 2]
    recovered = []
    for cut in cuts:
        path = tmp_path / f"cut{cut}.json"
        path.write_bytes(data[:cut])
        tl = assert_same(path, monkeypatch)
        if not isinstance(tl, str):
            recovered.append(len(tl.events))
            assert any("truncated" in w for w in tl.meta.warnings)
    assert recovered == sorted(recovered) and recovered[-1] == 8  # more kept the later the cut; all at the end


def _cut_inside_a_last_event(doc: dict, event: bytes) -> bytes:
    """``doc`` with ``event`` (the text of an event object, cut short) after its last event: the file ends there."""
    events = doc.pop("traceEvents")
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    return (head + ",\n".join(json.dumps(e) for e in events)).encode() + b",\n" + event


@pytest.mark.parametrize("closed", [False, True], ids=["cut-inside-the-string", "string-closed-event-cut"])
def test_bytes_that_are_not_utf8_in_the_cut_event_warn_as_the_general_decoder_does(tmp_path, monkeypatch, closed):
    """The general decoder finds a string's end before it checks its bytes: a string cut short by the end of the
    file is only a cut (no warning), while a string that closed before the cut, in the event the cut ends, is
    checked in its first pass over the whole file and warned about. The scanner flags a bad byte when its string
    closes, so both paths agree. (Fuzzed: a thread_name event cut inside an args ``grid`` string holding such
    bytes warned on the native path only.)"""
    cut = b'{"ph": "X", "cat": "kernel", "name": "cut::k", "pid": 1, "tid": 2, "ts": 500, "dur": 1, "args": {"grid": "bad \xff byte'
    data = _cut_inside_a_last_event(_small_trace().to_dict(), cut + (b'", "device": 0' if closed else b""))
    path = tmp_path / "cut.json"
    path.write_bytes(data)
    tl = assert_same(path, monkeypatch)
    assert any("truncated" in w for w in tl.meta.warnings) and len(tl.events) == 8
    assert any("UTF-8" in w for w in tl.meta.warnings) is closed
    res = native.built("pytorch").scan(data, False, 0)
    assert res["truncated"] and res["bad_utf8"] is closed


def test_deep_nesting_is_declined_without_recursion_and_refused_on_both_paths(tmp_path, monkeypatch):
    """200,000 levels: the scanner declines at MAX_DEPTH (a fixed stack, no recursion), and both paths give
    msgspec's one-line error (tests/test_kineto_parity.py has the limit itself)."""
    blob = json.dumps(_small_trace().to_dict())
    deep = "[" * 200_000 + "]" * 200_000
    blob = blob.replace('"args": {"Op count": 0}', '"args": {"Op count": 0, "deep": ' + deep + "}")
    with pytest.raises(Declined, match="nesting deeper"):
        scan_columns(blob.encode())
    path = tmp_path / "deep.json"
    path.write_text(blob)
    assert assert_same(path, monkeypatch).endswith("nested too deeply)")


def test_scanner_entry_point_directly():
    scan = native.built("pytorch").scan
    assert scan(b"")["fallback"]
    assert scan(b"   42 ")["fallback"]
    assert scan(b'{"a": 1}')["fallback"] == "the document has no traceEvents"
    res = scan(bytearray(b'{"traceEvents": [{"ph": "X", "ts": 1.5, "dur": 2, "name": "k", "pid": 1, "tid": 2}'))
    assert res["truncated"] and res["events"] == 1
    assert np.frombuffer(res["complete"]["f64"]["ts"]).tolist() == [1.5]
    assert res["strings"]["name"] == [b"k"]
    with pytest.raises(TypeError):
        scan("not bytes")


def test_gzip_members_and_inflaters_agree(tmp_path, monkeypatch):
    """A multi-member gzip (concatenated writes) loads whole; ISA-L and stdlib zlib give the same bytes."""
    import gzip
    import zlib

    from traceinsight.ingest import byteio

    data = json.dumps(_small_trace().to_dict()).encode()
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    one = tmp_path / "one.json.gz"
    one.write_bytes(gzip.compress(data))
    two = tmp_path / "two.json.gz"
    half = len(data) // 2
    two.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    expected = traceinsight.load(plain).events
    for path in (one, two):
        pd.testing.assert_frame_equal(traceinsight.load(path).events, expected)
    assert byteio.gunzip(two.read_bytes(), two, 1 << 30) == (data, True)
    monkeypatch.setattr(byteio, "_zlib", zlib)
    assert byteio.gunzip(one.read_bytes(), one, 1 << 30) == (data, True)
    assert byteio.gunzip(two.read_bytes(), two, 1 << 30) == (data, True)
    pd.testing.assert_frame_equal(traceinsight.load(one).events, expected)


@pytest.mark.parametrize("pure", [False, True], ids=["native", "general"])
def test_mutated_documents_give_a_timeline_or_a_clear_error(tmp_path, monkeypatch, pure):
    """Random byte edits (seeded): the reader itself (not load()'s catch-all) returns or raises TraceReadError."""
    import random

    from traceinsight.ingest import assemble, kineto

    if pure:
        monkeypatch.setenv(FORCE_PURE, "1")
    base = json.dumps(_small_trace().to_dict(), indent=1).encode()
    rng = random.Random(7)
    alphabet = b'{}[]",:\\ 0123456789.eE-+ntfu\x00\xff'
    outcomes = {"timeline": 0, "error": 0}
    for i in range(150):
        b = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(b))
            op = rng.random()
            if op < 0.5:
                b[pos] = rng.choice(alphabet)
            elif op < 0.75:
                del b[pos : pos + rng.randint(1, 20)]
            else:
                b[pos:pos] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
        path = tmp_path / f"m{i}.json"
        path.write_bytes(bytes(b))
        try:
            tl = assemble(kineto.read(path))
        except TraceReadError as exc:
            assert "\n" not in str(exc)
            outcomes["error"] += 1
        else:
            assert list(tl.events.columns[:5]) == ["kind", "name", "raw_name", "start_ns", "dur_ns"]
            outcomes["timeline"] += 1
    assert outcomes["timeline"] > 0 and outcomes["error"] > 0


#: Every number the readers take from a complete event (top level and args), by its JSON name.
NUMERIC_FIELDS = ["ts", "dur", "pid", "tid"] + [
    f"args.{k}"
    for k in ("correlation", "External id", "external id", "device", "stream", "bytes", "registers per thread",
              "shared memory", "est. achieved occupancy %")
]
#: Non-finite or absent numbers as a writer may emit them (NaN/Infinity are what Python's json writes).
ODD_NUMBERS = ["null", "NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


def _with_odd_number(cat: str, field: str, literal: str) -> bytes:
    """The small trace with one event of ``cat`` carrying ``literal`` (raw JSON text) in ``field``."""
    doc = _small_trace().to_dict()
    e = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    if field.startswith("args."):
        e.setdefault("args", {})[field[5:]] = "@ODD@"
    else:
        e[field] = "@ODD@"
    return json.dumps(doc).replace('"@ODD@"', literal).encode()


@pytest.mark.parametrize("literal", ODD_NUMBERS)
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
@pytest.mark.parametrize("cat", ["kernel", "cpu_op", "gpu_memcpy", "cuda_runtime"])
def test_null_and_non_finite_numbers_read_alike(tmp_path, monkeypatch, cat, field, literal):
    path = tmp_path / "odd.json"
    path.write_bytes(_with_odd_number(cat, field, literal))
    assert_same(path, monkeypatch)


@pytest.mark.parametrize("pure", [False, True], ids=["native", "general"])
@pytest.mark.parametrize("literal", ["null", "NaN", "Infinity", "-Infinity"])
def test_an_event_without_a_real_timestamp_is_dropped(tmp_path, monkeypatch, pure, literal):
    # the kernel runs 70-100 µs; with its ts null (or not a number) it must vanish, not move to t=0 and stretch
    # the GPU window over the whole trace
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(_small_trace().to_dict()))
    path = tmp_path / "odd.json"
    path.write_bytes(_with_odd_number("kernel", "ts", literal))
    base = _load(clean, pure, monkeypatch)
    tl = _load(path, pure, monkeypatch)
    if isinstance(tl, str):  # a document no JSON reader takes: one line, the same on both paths (tested above)
        assert literal != "null" and "\n" not in tl
        return
    assert (tl.events["kind"] == "kernel").sum() == 0
    assert (base.events["kind"] == "kernel").sum() == 1
    assert len(tl.events) == len(base.events) - 1
    assert tl.events["start_ns"].min() == base.events["start_ns"].min()


def _mapping_rss_kb(address: int) -> int | None:
    """Resident KiB of the mapping that holds ``address`` (from /proc/self/smaps), None where there is no smaps."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "Rss:":
            return int(line.split()[1])
    return None


def test_a_mapped_file_is_given_back_as_it_is_scanned_with_the_same_columns(tmp_path):
    """The scanner gives a file mapping's pages back behind its cursor (32 MiB at a time): a 100 MB file is not
    resident once scanned, and the columns equal those scanned from the same bytes in memory, strings included
    (a name first seen at the start is compared again at the end, after its page was given back)."""
    import mmap

    t = _small_trace()
    for i in range(4000):  # the same few names throughout, so interned strings point at the released start
        t.cpu_op("aten::mm", 1000 + 10 * i, 5, args={"Input Dims": [[64, 128], [128, 256]]})
    doc = t.to_dict()
    events = doc["traceEvents"]
    doc["traceEvents"] = events * 100  # ~100 MB of events, several release steps
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    assert path.stat().st_size > 90 << 20
    scan = native.built("pytorch").scan
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        released = scan(view, True)
        rss = _mapping_rss_kb(np.frombuffer(view, dtype=np.uint8).ctypes.data)
        kept = scan(view)  # no release: every page it read stays resident
        rss_kept = _mapping_rss_kb(np.frombuffer(view, dtype=np.uint8).ctypes.data)
    in_memory = scan(path.read_bytes())
    for res in (released, kept):
        assert res["events"] == in_memory["events"] == len(doc["traceEvents"])
        assert res["strings"] == in_memory["strings"]
        for group in ("complete", "metadata", "instant"):
            for width in ("i32", "i64", "f64"):
                for key, col in in_memory[group][width].items():
                    assert bytes(res[group][width][key]) == bytes(col), (group, key)
    if rss is not None:
        assert rss < 40 << 10  # KiB: at most the last step and the tail, not the file's 100 MB
        assert rss_kept > 80 << 10


#: Number texts around the scanner's eight-digit words: 7-9, 15-17 and 18-20 digits before or after the point, a
#: digit run broken by a non-digit inside a word, leading zeros in the fraction, and runs past 19 digits (strtod).
DIGIT_RUNS = ["1234567", "12345678", "123456789", "1669783691124.938", "1669783691124.93812345", "0.00000001234567",
              "99999999.99999999", "123456789012345678", "1234567890123456789", "12345678901234567890.5", "7.12345678e3",
              "18446744073709551615", "0.123456789012345678901", "-87654321.87654321", "1e5", "31.5"]


@pytest.mark.parametrize("text", DIGIT_RUNS)
def test_numbers_read_in_eight_digit_words_equal_python_floats(text):
    """ts and dur parsed by the scanner's eight-digit words equal Python's correctly rounded float of the text."""
    scan = native.built("pytorch").scan
    doc = b'{"traceEvents": [{"ph": "X", "ts": ' + text.encode() + b', "dur": ' + text.lstrip("-").encode() + b', "name": "k", "pid": 1, "tid": 2}]}'
    res = scan(doc)
    assert not res["fallback"]
    assert np.frombuffer(res["complete"]["f64"]["ts"]).tolist() == [float(text)]
    assert np.frombuffer(res["complete"]["f64"]["dur"]).tolist() == [float(text.lstrip("-"))]


def test_strings_equal_in_content_share_a_code_wherever_they_lie():
    """The intern table's hash reads a string's tail as one word (past the span where the buffer allows): the same
    text at any offset, of any length around 8 bytes, and at the very end of the buffer gets one code."""
    scan = native.built("pytorch").scan
    names = ["k", "abcdefg", "abcdefgh", "abcdefghi", "x" * 31, "x" * 32, "x" * 33, "abcdefgh" * 5 + "z"]
    events = []
    for pad in range(3):  # the same names again, shifted by a key of another length
        for n in names:
            events.append('{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 2, "%s": 0, "name": "%s"}' % ("p" * pad, n))
    doc = ('{"traceEvents": [' + ", ".join(events) + '], "last": "abcdefg"}').encode()
    res = scan(doc)
    assert res["strings"]["name"] == [n.encode() for n in names]
    assert np.frombuffer(res["complete"]["i32"]["name"], dtype=np.int32).tolist() == list(range(len(names))) * 3
    tail = scan(b'[{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 2, "name": "ab"}, {"ph": "X", "ts": 2, "dur": 1, "name": "ab"')
    assert tail["strings"]["name"] == [b"ab"]


def test_pytorch_1_8_input_dims_spelling_is_read_on_both_paths(tmp_path, monkeypatch):
    """PyTorch 1.8 wrote recorded shapes as ``"Input dims"`` (lower-case d): both decoders read them as the later
    ``"Input Dims"``, so FLOPs and MFU are not lost on old traces; where an event carries both spellings, the newer
    spelling ("Input Dims") wins on both paths, in either order."""
    t = KinetoTrace()
    t.cpu_op("aten::mm", 0, 10, args={"Input dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]})
    t.cpu_op("aten::mm", 20, 10, args={"Input Dims": [[8, 8], [8, 8]], "Input dims": [[1, 1], [1, 1]]})
    t.cpu_op("aten::mm", 40, 10, args={"Input dims": [[2, 2], [2, 2]], "Input Dims": [[4, 4], [4, 4]]})
    t.kernel("k", 100, 10, launch_us=90)
    tl = assert_same(t.write(tmp_path / "old.json"), monkeypatch)
    ops = tl.events[(tl.events["kind"] == "cpu_op").to_numpy()].sort_values("start_ns")
    assert [str(s).replace(" ", "") for s in ops["input_shapes"]] == ["[[64,32],[32,16]]", "[[8,8],[8,8]]", "[[4,4],[4,4]]"]
