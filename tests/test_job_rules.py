"""Cross-rank rules (TI020 stragglers, TI021 exposed communication, TI009 rank imbalance) on written traces, on
synthetic jobs made of real corpus ranks, and on the real multi-rank corpus."""

from __future__ import annotations


import pytest

import traceinsight
from traceinsight.config import Config
from bench.bench_job import build_job
from traceinsight.job import analyze_job

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace

DLRM = "pytorch/param_dlrm_v100_8ranks"
DLRM0 = DLRM + "/worker0_step_12.1694128201545.pt.trace.json.gz"


def _codes(findings, code):
    return [f for f in findings if f.code == code]


def _run(tl, code, **kw):
    return [f for f in traceinsight.analyze(tl, select=[code], **kw).findings if f.code == code]


# --- synthetic jobs from a real rank ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory):
    """4 copies of DLRM rank 0, clocks skewed by up to 3 ms, rank 2 reaching each of the 8 collectives 2 ms late."""
    out = tmp_path_factory.mktemp("job_straggler")
    build_job(corpus_file(DLRM0), 4, out, straggler=2, delay_ms=2.0, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


@pytest.fixture(scope="module")
def balanced_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("job_balanced")
    build_job(corpus_file(DLRM0), 4, out, straggler=None, skew_ms=3.0)
    return analyze_job(str(out), workers=2)


# --- written traces -----------------------------------------------------------------------------------------


# --- real corpus ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dlrm_job():
    return analyze_job(str(corpus_file(DLRM)), workers=2)


