"""The jobs the multi-rank rule cases share (built once per session; they need the real-trace corpus)."""

from __future__ import annotations

import pytest

from bench.bench_job import build_job
from tests.conftest import corpus_file
from traceinsight.job import analyze_job

DLRM = "pytorch/param_dlrm_v100_8ranks"
DLRM0 = DLRM + "/worker0_step_12.1694128201545.pt.trace.json.gz"


@pytest.fixture(scope="session")
def straggler_job(tmp_path_factory):
    """4 copies of DLRM rank 0, clocks skewed by up to 3 ms, rank 2 reaching each of the 8 collectives 2 ms late."""
    out = tmp_path_factory.mktemp("job_straggler")
    build_job(corpus_file(DLRM0), 4, out, straggler=2, delay_ms=2.0, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


@pytest.fixture(scope="session")
def balanced_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("job_balanced")
    build_job(corpus_file(DLRM0), 4, out, straggler=None, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


@pytest.fixture(scope="session")
def dlrm_job():
    return analyze_job(str(corpus_file(DLRM)), workers=2)
