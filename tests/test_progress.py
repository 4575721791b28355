"""Progress on long work (issue 23): bytes read with rate and time left for a big file, ranks done for a job;
nothing on a stream that is not a terminal."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from rich.console import Console

from traceinsight.cli.app import ReadProgress
from traceinsight.ingest.byteio import read_bytes


def test_gzip_reading_reports_bytes_up_to_the_whole_file(tmp_path):
    raw = b'{"traceEvents": [' + b'{"ph": "X", "name": "k", "ts": 1, "dur": 2},' * 400_000 + b"{}]}"
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(raw, 1))
    seen: list[tuple[int, int]] = []
    data = read_bytes(p, [], on_bytes=lambda done, total: seen.append((done, total)))
    assert bytes(data) == raw
    assert seen and all(t == p.stat().st_size for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == p.stat().st_size


def test_read_progress_draws_bytes_rate_and_stage():
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=120)
    with ReadProgress("trace.json.gz", 100 << 20, console=con) as bar:
        bar.bytes(50 << 20, 100 << 20)
        bar("parsing JSON")
        bar._bar.refresh()
    out = buf.getvalue()
    assert "trace.json.gz: parsing JSON" in out and "MB" in out


def test_job_map_reports_ranks_done(tmp_path):
    from traceinsight.job.mapper import MapSettings
    from traceinsight.job.run import _map_local

    seen: list[tuple[int, int]] = []
    files = [str(tmp_path / f"missing{i}.json") for i in range(3)]  # unreadable ranks still count as done
    out = _map_local(files, MapSettings(), workers=1, progress=lambda d, t: seen.append((d, t)))
    assert len(out) == 3 and seen == [(1, 3), (2, 3), (3, 3)]
