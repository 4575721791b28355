"""Is it an Nsight Systems export: an ``.nsys-rep`` report, or a SQLite file with nsys tables. A SQLite file is
opened to list its tables; anything else is answered from the first bytes. The reader is not imported, nor
sqlite3 and the SQL layer unless the file is SQLite (every other trace is sniffed here first)."""

from __future__ import annotations

from pathlib import Path

from traceinsight.vocab.errors import TraceReadError

SQLITE_MAGIC = b"SQLite format 3\x00"
REP_MAGIC = b"NVIDIA Tegra Profiler Report"
REP_SUFFIXES = (".nsys-rep", ".qdrep")


def sniff(path: Path, head: bytes) -> bool:
    """An nsys SQLite export (SQLite magic + an nsys marker table) or a ``.nsys-rep`` report."""
    if head.startswith(REP_MAGIC) or REP_MAGIC in head[:256]:
        return True
    if path.is_file() and path.name.lower().endswith(REP_SUFFIXES):
        return True
    if not head.startswith(SQLITE_MAGIC):
        return False
    import sqlite3

    from traceinsight.ingest.nsys import schema as S
    from traceinsight.ingest.nsys.sql import connect

    try:
        conn = connect(path)  # table names: a sniff needs no committed-but-unmerged rows
    except TraceReadError:
        return False
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()
    return bool(names & set(S.MARKER_TABLES)) or any(n.startswith("CUPTI_ACTIVITY_KIND_") for n in names)
