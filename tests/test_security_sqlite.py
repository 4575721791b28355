"""Nsight SQLite within bounds (issue 28, items 4 and 5).

A small export must not make the reader build gigabytes (a generated column or computed default that SQLite
evaluates on read), and a timestamp that is not an integer (TEXT ``'12x'``, a BLOB, a REAL) must not be read as a
number: such rows are dropped and counted, with the reason, in a warning TI014 reports.
"""

from __future__ import annotations

import sqlite3

import pytest
from typer.testing import CliRunner

import traceinsight
from tests.helpers.nsys_writer import NsysTrace
from traceinsight.cli.app import app
from traceinsight.vocab.errors import EXIT_UNREADABLE, TraceReadError
from traceinsight.ingest.nsys.sql import MAX_NAME_CHARS

runner = CliRunner()


def _export(tmp_path, name="t.sqlite", n=4):
    t = NsysTrace()
    for i in range(n):
        t.kernel("gemm", 1_000_000 + i * 300_000, 200_000)
    return t.write(tmp_path / name)


def _sql(path, *statements):
    c = sqlite3.connect(path)
    for s in statements:
        c.execute(s)
    c.commit()
    c.close()


def test_generated_string_column_is_refused(tmp_path):
    """Refused from the schema, before any row is read (how fast: bench/bench_timing_guards.py --only hostile)."""
    p = _export(tmp_path)
    _sql(p, "ALTER TABLE StringIds RENAME TO S0",
         "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, v0 TEXT, value TEXT GENERATED ALWAYS AS (printf('%.*c', 50000000, 'x')) VIRTUAL)",
         "INSERT INTO StringIds (id, v0) SELECT id, value FROM S0", "DROP TABLE S0")
    with pytest.raises(TraceReadError, match="generated column"):
        traceinsight.load(p)
    res = runner.invoke(app, ["analyze", str(p)])
    assert res.exit_code == EXIT_UNREADABLE and "generated column" in res.stderr


def test_computed_default_is_refused(tmp_path):
    """Rows written before ``ALTER TABLE ADD COLUMN`` read the default, evaluated on every read."""
    p = _export(tmp_path)
    c = sqlite3.connect(p)
    (sql,) = c.execute("SELECT sql FROM sqlite_master WHERE name = 'StringIds'").fetchone()
    crafted = sql.rstrip().rstrip(")") + ", extra TEXT DEFAULT (printf('%.*c', 900000000, 'x')))"
    c.execute("PRAGMA writable_schema = ON")  # what ALTER TABLE refuses, a crafted file holds
    c.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'StringIds'", (crafted,))
    c.commit()
    c.close()
    with pytest.raises(TraceReadError, match="computed default"):
        traceinsight.load(p)


def test_huge_stored_value_is_capped(tmp_path):
    """A value SQLite would have to build past MAX_VALUE_BYTES fails as one line, without building it."""
    p = _export(tmp_path)
    _sql(p, "CREATE VIEW big AS SELECT 1")  # views are never read
    tl = traceinsight.load(p)
    assert tl.summary if hasattr(tl, "summary") else True
    c = sqlite3.connect(p)
    c.execute("INSERT INTO StringIds (id, value) VALUES (999, ?)", ("k" * (1 << 20),))  # a 1 MiB kernel name: kept, cut
    c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999 WHERE rowid = 1")
    c.commit()
    c.close()
    tl = traceinsight.load(p)
    assert max(len(str(n)) for n in tl.events["name"].cat.categories) <= MAX_NAME_CHARS


@pytest.mark.parametrize("column,value,why", [
    ("start", "12x", "TEXT"), ("end", b"\x00\xff", "BLOB"), ("start", 1_500_000.5, "REAL"), ("end", "1300000abc", "TEXT"),
])
def test_untyped_times_are_dropped_with_the_reason(tmp_path, column, value, why):
    p = _export(tmp_path, n=4)
    c = sqlite3.connect(p)
    c.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{column}" = ? WHERE rowid = 2', (value,))
    c.commit()
    c.close()
    a = traceinsight.analyze(p)
    kernels = a.timeline.events[a.timeline.events["kind"] == "kernel"]
    assert len(kernels) == 3
    assert kernels["dur_ns"].max() == 200_000  # nothing read '12x' or a blob as a time
    lost = [w for w in a.timeline.meta.warnings if "not an integer" in w]
    assert lost and lost[0].startswith("1 CUPTI_ACTIVITY_KIND_KERNEL rows")
    ti014 = [f for f in a.findings if f.code == "TI014"]
    assert ti014 and "not an integer" in ti014[0].message
