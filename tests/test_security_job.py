"""Whole-job inputs and the scheduler (issue 28, items 8 and 10).

Rank files that could not be read or were skipped (unreadable, a FIFO, a link to a file outside the folder) are
listed in the report, and the run exits EXIT_RANKS_MISSING unless ``--allow-missing-ranks``. A malformed or
unreachable scheduler address is one line within 15 s with EXIT_SCHEDULER; ``TRACEINSIGHT_SCHEDULER`` does not
send a single trace to a cluster; the report says where the map ran.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from typer.testing import CliRunner

from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app
from traceinsight.vocab.errors import EXIT_RANKS_MISSING, EXIT_SCHEDULER
from traceinsight.job.run import SCHEDULER_ENV

runner = CliRunner()


def _rank(path, r, n=4):
    t = KinetoTrace(rank=r, world_size=n)
    t.step(1, 0.0, 2000.0)
    t.kernel("gemm", 100.0, 500.0)
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1000.0, 300.0)
    return t.write(path)


@pytest.fixture
def job(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    for r in range(3):
        _rank(d / f"rank{r}.json", r)
    return d


def test_complete_job_exits_0(job):
    res = runner.invoke(app, ["analyze", str(job), "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["missing_rank_files"] == []


def test_fifo_and_outside_link_are_listed_and_fail_the_run(job, tmp_path):
    os.mkfifo(job / "rank3.json")
    outside = _rank(tmp_path / "elsewhere.json", 9)
    (job / "rank4.json").symlink_to(outside)
    res = runner.invoke(app, ["analyze", str(job), "-f", "json"])
    assert res.exit_code == EXIT_RANKS_MISSING, res.output
    rep = json.loads(res.stdout)
    missing = rep["missing_rank_files"]
    assert any("rank3.json" in m and "FIFO" in m for m in missing)
    assert any("rank4.json" in m and "outside" in m for m in missing)
    assert rep["summary"]["ranks"] == 3  # the link was not read as a rank
    assert "2 rank file(s) not analysed" in res.stderr
    ok = runner.invoke(app, ["analyze", str(job), "-f", "md", "--allow-missing-ranks"])
    assert ok.exit_code == 0 and "rank3" in ok.stdout and "not analysed" in ok.stdout


def test_rank_named_files_that_are_not_traces_are_listed_not_dropped(job):
    """A broken rank (garbage or empty, with a rank file's name) in a job folder is a missing rank, like a corrupt one
    in a glob; it used to vanish from the job without a word and the run exited 0."""
    (job / "rank3.json").write_text("garbage, not JSON\n")
    (job / "rank4.json").write_text("")
    res = runner.invoke(app, ["analyze", str(job), "-f", "json"])
    assert res.exit_code == EXIT_RANKS_MISSING, res.output
    rep = json.loads(res.stdout)
    assert rep["summary"]["ranks"] == 3
    assert sorted(m.rsplit("/", 1)[-1] for m in rep["missing_rank_files"]) == [
        "rank3.json: not a PyTorch Profiler trace (its first bytes are not a kineto trace)", "rank4.json: empty"]
    assert runner.invoke(app, ["analyze", str(job), "-f", "json", "--allow-missing-ranks"]).exit_code == 0


def test_a_folder_read_as_one_trace_names_the_files_it_left_out(tmp_path):
    """One trace and a file that is not one: read as a single trace (one rank is no job), with a warning naming the
    left-out file; the rank-order warning gives its real reason (no distributedInfo.rank), not "ranks repeat"."""
    import traceinsight

    d = tmp_path / "one"
    d.mkdir()
    t = KinetoTrace()
    t.step(1, 0.0, 2000.0)
    t.kernel("gemm", 100.0, 500.0)
    t.write(d / "a.json")
    (d / "b.json").write_text("garbage")
    warnings = traceinsight.load(d).meta.warnings
    assert "one: 1 .json file(s) left out, not PyTorch Profiler traces: b.json" in warnings
    assert "one: some files have no distributedInfo.rank; ranks were assigned in file-name order (0..0)" in warnings


def test_unreadable_ranks_in_a_glob_fail_the_gate(job):
    for i in range(5):
        (job / f"bad{i}.json").write_text('{"traceEvents": [}, {"ph": "X"}], "x": 1}')  # kineto-looking, corrupt
    res = runner.invoke(app, ["analyze", str(job / "*.json"), "-f", "json", "--fail-on", "error"])
    assert res.exit_code == EXIT_RANKS_MISSING, res.output
    assert len(json.loads(res.stdout)["missing_rank_files"]) == 5


@pytest.mark.parametrize("address", ["tcp://", "not an address", "tcp://host:99999", "http://x:1/../../"])
def test_malformed_scheduler_is_one_line(job, address):
    res = runner.invoke(app, ["analyze", str(job), "--scheduler", address])
    assert res.exit_code == EXIT_SCHEDULER, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) <= 2


def test_unreachable_scheduler_within_15_s(job):
    pytest.importorskip("distributed")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    t0 = time.monotonic()
    res = runner.invoke(app, ["analyze", str(job)], env={SCHEDULER_ENV: f"tcp://127.0.0.1:{port}"})
    assert time.monotonic() - t0 < 15
    assert res.exit_code == EXIT_SCHEDULER, res.output
    assert "no Dask scheduler answered" in res.stderr and "Traceback" not in res.output


def test_env_scheduler_does_not_take_a_single_trace(job):
    res = runner.invoke(app, ["analyze", str(job / "rank0.json"), "-f", "json"], env={SCHEDULER_ENV: "tcp://127.0.0.1:1"})
    assert res.exit_code == 0, res.output
    assert "findings" in json.loads(res.stdout)


def test_report_says_where_the_map_ran(job):
    distributed = pytest.importorskip("distributed")
    res = runner.invoke(app, ["analyze", str(job), "-f", "md"])
    assert "local processes on this machine" in res.stdout
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        res = runner.invoke(app, ["analyze", str(job), "-f", "md", "--scheduler", cluster.scheduler_address])
    assert res.exit_code == 0, res.output
    assert "Dask cluster at" in res.stdout and "trusted code" in res.stdout
