"""Hostile and broken input through the readers (issue 14): every case below failed before its fix.

Each asserts on values: what was kept, what was dropped and counted, the one-line error, and that the native and
pure paths agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import traceinsight
from traceinsight.vocab.errors import TraceReadError, TraceTooLargeError
from traceinsight.vocab import native

from .helpers.kineto_writer import KinetoTrace

PURE = native.PURE_ENV


def _load_both(path, monkeypatch, **kw):
    """The timeline (or the one-line error) from the native and from the pure path."""
    out = []
    for pure in (False, True):
        with monkeypatch.context() as m:
            if pure:
                m.setenv(PURE, "1")
            else:
                m.delenv(PURE, raising=False)
            try:
                out.append(traceinsight.load(path, **kw))
            except TraceReadError as exc:
                assert "\n" not in str(exc)
                out.append(str(exc))
    return out


def _same(a, b):
    import pandas as pd

    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
    else:
        pd.testing.assert_frame_equal(a.events, b.events)
        assert a.meta.warnings == b.meta.warnings
        assert [d.name for d in a.meta.devices] == [d.name for d in b.meta.devices]


# --- item 4: truncation recovery in linear time, every complete event kept --------------------------------------


def _many_events(n: int, pad: str = "") -> tuple[bytes, list[int]]:
    """A kineto document of ``n`` kernel events, one per line, and the byte offset where each event ends."""
    head = b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [\n'
    parts, ends, pos = [head], [], len(head)
    for i in range(n):
        ev = (f'{{"ph": "X", "cat": "kernel", "name": "k{i % 97}{pad}", "pid": 0, "tid": 7, "ts": {1000 + 3 * i}.5, '
              f'"dur": 1.25, "args": {{"device": 0, "stream": 7, "correlation": {i}, "note": "a}}]\\\\\\"{{["}}}}')
        line = (ev + (",\n" if i < n - 1 else "\n")).encode()
        parts.append(line)
        ends.append(pos + len(ev))
        pos += len(line)
    parts.append(b"]}\n")
    return b"".join(parts), ends


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_cut_file_keeps_every_complete_event(tmp_path, monkeypatch, pure):
    """Every event before the cut is recovered (that recovery costs about one load: bench/bench_timing_guards.py)."""
    data, ends = _many_events(120_000)
    full = tmp_path / "full.json"
    full.write_bytes(data)
    cut_at = int(len(data) * 0.73)
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[:cut_at])
    if pure:
        monkeypatch.setenv(PURE, "1")
    whole = traceinsight.load(full)
    assert len(whole.events) == len(ends)
    tl = traceinsight.load(cut)
    complete = sum(1 for e in ends if e < cut_at)
    assert len(tl.events) == complete
    assert any(f"{complete:,} events before the cut were recovered" in w for w in tl.meta.warnings)


def test_recovery_when_the_native_scanner_declines(tmp_path, monkeypatch):
    """The native scanner declines numbers over 79 characters; the pure path then recovers the cut file alone."""
    data, ends = _many_events(3000)
    long_number = b"1" + b"0" * 90
    data = data.replace(b'"dur": 1.25', b'"dur": 1.25, "x": ' + long_number, 1)
    ends = [e + len(b', "x": ') + len(long_number) for e in ends]
    cut_at = int(len(data) * 0.5)
    (tmp_path / "c.json").write_bytes(data[:cut_at])
    fast, slow = _load_both(tmp_path / "c.json", monkeypatch)
    _same(fast, slow)
    assert len(fast.events) == sum(1 for e in ends if e < cut_at)


# --- item 5: non-regular files refused up front; an inflated-size ceiling checked while inflating ----------------


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "dev_null"])
@pytest.mark.parametrize("fmt", [None, "pytorch", "tensorflow-xplane", "nsys", "tensorflow-json"])
def test_non_regular_files_are_refused_before_reading(tmp_path, kind, fmt):
    if kind == "fifo":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)  # nobody writes: reading it would block forever
        what = "FIFO"
    else:
        path = Path("/dev/zero" if kind == "dev_zero" else "/dev/null")
        what = "character device"
    with pytest.raises(TraceReadError) as info:  # refused from its stat, never read (a read would block for ever)
        traceinsight.load(path, format=fmt)
    msg = str(info.value)
    assert "\n" not in msg and what in msg and str(path) in msg


def _bomb(path: Path, inflated: int) -> Path:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (16 << 20)
    parts = [c.compress(b'{"traceEvents": [')]
    for _ in range(inflated // len(block)):
        parts.append(c.compress(block))
    parts += [c.compress(b"]}"), c.flush()]
    path.write_bytes(b"".join(parts))
    return path


def test_gzip_bomb_stops_early_in_bounded_memory(tmp_path):
    """A 2 GiB-inflating gzip (a few MB) ends with one line and exit 3 long before it is inflated, well under 1 GB."""
    bomb = _bomb(tmp_path / "bomb.json.gz", 2 << 30)
    assert bomb.stat().st_size < 4 << 20
    code = ("import sys, traceinsight.cli.app as c\n"
            "try:\n    c.main()\nexcept SystemExit as e:\n    rc = e.code\n"
            # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it would report pytest's own peak
            "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]\n"
            "print('RSS', hwm, file=sys.stderr)\nsys.exit(rc)\n")
    # the subprocess' timeout is the hang guard; how fast: bench/bench_timing_guards.py --only hostile
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(bomb)], capture_output=True, text=True, timeout=120)
    err = [line for line in proc.stderr.splitlines() if not line.startswith("RSS")]
    rss_kb = int(next(line for line in proc.stderr.splitlines() if line.startswith("RSS")).split()[1])
    assert proc.returncode == 3, proc.stderr
    assert len(err) == 1 and "gzip bomb" in err[0]
    assert rss_kb < 1 << 20  # under 1 GiB


def test_explicit_ceiling_is_checked_while_inflating(tmp_path):
    import gzip

    data, _ = _many_events(20_000)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(data))
    assert len(traceinsight.load(gz, max_bytes=len(data) + 1).events) == 20_000
    with pytest.raises(TraceTooLargeError) as info:
        traceinsight.load(gz, max_bytes=len(data) // 3)
    assert "size ceiling" in str(info.value) and info.value.exit_code == 3
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    with pytest.raises(TraceTooLargeError):
        traceinsight.load(plain, max_bytes=1000)


def test_default_ceiling_follows_available_memory(monkeypatch):
    from traceinsight.ingest import byteio

    monkeypatch.setattr(byteio, "_available_memory", lambda: 16 << 30)
    assert byteio.default_max_bytes() == 8 << 30
    monkeypatch.setattr(byteio, "_available_memory", lambda: 1 << 20)
    assert byteio.default_max_bytes() == 1 << 30  # never below 1 GiB
    monkeypatch.setattr(byteio, "_available_memory", lambda: None)
    assert byteio.default_max_bytes() == 16 << 30


# --- items 6, 9, 10: one bad field drops its event (counted), never wraps, and both paths agree -------------------


def _doc_with(field: str, raw: str, where: str = "event") -> str:
    """A small written trace whose first kernel's ``field`` (in the event, or in its args) is the raw JSON ``raw``."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("gemm", 100, 50, launch_us=90)
    t.kernel("relu", 300, 20, launch_us=280)
    doc = t.to_dict()
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    (ev if where == "event" else ev["args"])[field] = "@@RAW@@"
    return json.dumps(doc).replace('"@@RAW@@"', raw)


DROPPED = [
    ("pid", "9223372036854775808", "event"),  # 2^63
    ("pid", "18446744073709551616", "event"),
    ("tid", "-9223372036854775809", "event"),
    ("ts", "1e400", "event"),
    ("dur", "1e400", "event"),
    ("dur", "1e300", "event"),
    ("ts", "9.3e15", "event"),  # µs: 9.3e18 ns, past what a span may hold
    ("dur", '"' + "1" * 70 + '"', "event"),  # a numeric string over 64 characters
    ("correlation", "1e30", "args"),
    ("device", "1e30", "args"),
    ("bytes", "1e300", "args"),
]


@pytest.mark.parametrize("field,raw,where", DROPPED)
def test_one_out_of_range_field_drops_its_event_only(tmp_path, monkeypatch, field, raw, where):
    path = tmp_path / "t.json"
    path.write_text(_doc_with(field, raw, where))
    fast, slow = _load_both(path, monkeypatch)
    _same(fast, slow)
    kernels = fast.events[fast.events["kind"] == "kernel"]
    assert kernels["name"].astype(str).tolist() == ["relu"]
    assert any("1 events with a number out of range" in w for w in fast.meta.warnings)
    ev = fast.events
    assert (ev["dur_ns"] >= 0).all() and (ev["start_ns"] >= 0).all() and fast.span_ns == 1_000_000


@pytest.mark.parametrize("field,raw,where", [("stream", "[1]", "args"), ("grid", "[1, 1, 1e400]", "args"),
                                             ("device", "-5", "args")])
def test_odd_but_harmless_fields_keep_the_event(tmp_path, monkeypatch, field, raw, where):
    path = tmp_path / "t.json"
    path.write_text(_doc_with(field, raw, where))
    fast, slow = _load_both(path, monkeypatch)
    _same(fast, slow)
    assert (fast.events["kind"] == "kernel").sum() == 2


def test_header_fields_out_of_range_are_ignored_with_a_warning(tmp_path, monkeypatch):
    doc = json.loads(_doc_with("dur", "50"))
    doc["baseTimeNanoseconds"] = 2**70
    doc["distributedInfo"] = {"backend": "nccl", "rank": 1e30, "world_size": 2}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    fast, slow = _load_both(path, monkeypatch)
    _same(fast, slow)
    assert (fast.events["kind"] == "kernel").sum() == 2 and fast.meta.start_unix_ns is None
    assert any("baseTimeNanoseconds is not a usable time" in w for w in fast.meta.warnings)
    assert any("distributedInfo.rank is not a rank number" in w for w in fast.meta.warnings)


def test_invalid_utf8_in_a_header_field_same_on_both_paths(tmp_path, monkeypatch):
    data = _doc_with("dur", "50").replace('"trace_id": "0123456789ABCDEF0123456789ABCDEF"', '"trace_id": "@@"').encode()
    path = tmp_path / "t.json"
    path.write_bytes(data.replace(b"@@", b"\xff\xfe"))
    fast, slow = _load_both(path, monkeypatch)
    _same(fast, slow)
    assert (fast.events["kind"] == "kernel").sum() == 2
    assert any("not UTF-8" in w for w in fast.meta.warnings)


def test_invalid_json_inside_grid_is_the_same_one_line_error(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(_doc_with("grid", "[1, 1, tru]", "args"))
    fast, slow = _load_both(path, monkeypatch)
    assert isinstance(fast, str) and fast == slow and "not valid JSON" in fast


# --- nsys: committed WAL content, out-of-range rows, TRACEINSIGHT_NSYS --------------------------------------------


def _nsys(tmp_path, n: int = 2) -> Path:
    from .helpers.nsys_writer import NsysTrace

    t = NsysTrace()
    for i in range(n):
        t.kernel(f"k{i}", 10_000 + i * 1_000, 500)
    return t.write(tmp_path / "t.sqlite")


def test_nsys_reads_committed_rows_still_in_the_wal_and_writes_nothing(tmp_path):
    import shutil
    import sqlite3

    path = _nsys(tmp_path)
    before = traceinsight.load(path)
    # a writer in WAL mode adds a kernel and keeps the connection open: the row is committed, but only in -wal
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    cols = [r[1] for r in writer.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    row = list(writer.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone())
    row[cols.index("start")] += 50_000
    row[cols.index("end")] += 50_000
    writer.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(row))})", row)
    writer.commit()
    snap = tmp_path / "snap"
    snap.mkdir()
    for suffix in ("", "-wal"):  # what a user copies from a running job: the database and its log
        shutil.copyfile(str(path) + suffix, str(snap / "t.sqlite") + suffix)
    writer.close()
    target = snap / "t.sqlite"
    assert Path(str(target) + "-wal").stat().st_size > 0
    listing = sorted(p.name for p in snap.iterdir())
    stamps = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in snap.iterdir()}
    tl = traceinsight.load(target)
    assert (tl.events["kind"] == "kernel").sum() == (before.events["kind"] == "kernel").sum() + 1
    assert sorted(p.name for p in snap.iterdir()) == listing  # no -shm, no journal next to the input
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in snap.iterdir()} == stamps


def test_nsys_rows_that_end_before_they_start_or_overflow_are_dropped_and_counted(tmp_path):
    import sqlite3

    path = _nsys(tmp_path, n=4)
    with sqlite3.connect(path) as c:
        ids = [r[0] for r in c.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
        c.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 100 WHERE rowid = ?', (ids[0],))
        c.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775000, "end" = 9223372036854775000 '
                  "WHERE rowid = ?", (ids[1],))
    c.close()
    tl = traceinsight.load(path)
    kernels = tl.events[tl.events["kind"] == "kernel"]
    assert kernels["name"].astype(str).tolist() == ["k2", "k3"]
    assert (tl.events["dur_ns"] >= 0).all() and 0 < tl.span_ns < 10**9
    assert any("2 events with a negative duration or a time out of range were dropped" in w for w in tl.meta.warnings)


@pytest.mark.parametrize("name", ["sh", "python3", "nsys-evil"])
def test_traceinsight_nsys_runs_nothing_but_nsys(tmp_path, monkeypatch, name):
    marker = tmp_path / "ran"
    tool = tmp_path / name
    tool.write_text(f"#!/bin/sh\ntouch {marker}\n")
    tool.chmod(0o755)
    rep = tmp_path / "t.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Profiler Report" + bytes(64))
    monkeypatch.setenv("TRACEINSIGHT_NSYS", str(tool))
    with pytest.raises(TraceReadError) as info:
        traceinsight.load(rep)
    assert "TRACEINSIGHT_NSYS must name the nsys executable" in str(info.value)
    assert not marker.exists()


def test_traceinsight_nsys_named_nsys_is_used(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "nsys"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'export failed on purpose' >&2\nexit 7\n")
    tool.chmod(0o755)
    rep = tmp_path / "t.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Profiler Report" + bytes(64))
    monkeypatch.setenv("TRACEINSIGHT_NSYS", str(tool))
    with pytest.raises(TraceReadError) as info:
        traceinsight.load(rep)
    assert "nsys export failed: export failed on purpose" in str(info.value)


def test_numpy_warnings_never_reach_stderr(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(_doc_with("dur", "1e308"))
    code = "import sys, traceinsight; traceinsight.load(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0 and "RuntimeWarning" not in proc.stderr, proc.stderr


def test_a_document_damaged_in_the_middle_is_an_error_on_both_paths_not_a_cut(tmp_path, monkeypatch):
    """Found by tests/fuzz: the native scanner took a missing ':' inside an event for a cut file and kept the
    events before it, while the general decoder (rightly) refused the document."""
    text = _doc_with("dur", "50")
    i = text.index('"labels": "GPU 0"') + len('"labels"')
    j = text.index('"stream 7 "') + len('"strea')
    text = text[:i] + text[j:]  # {"labels"m 7 "}}, {"ph": "X", ...: the ':' and a stretch of events gone
    path = tmp_path / "t.json"
    path.write_text(text)
    fast, slow = _load_both(path, monkeypatch)
    assert isinstance(fast, str) and fast == slow and "expected ':'" in fast
