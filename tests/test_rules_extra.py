"""Rules TI005-TI010: one planted positive and one negative trace each, plus what the real corpus must give.

Synthetic traces go through the real kineto JSON format and the PyTorch parser, so a test fails if either
the rule or the way its inputs are parsed drifts. Expected values are derived in the comments from the
planted times, not copied from a run.
"""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _run(path, code, min_impact=None, **opts):
    a = traceinsight.analyze(path, select=[code], options={code: opts} if opts else None, min_impact=min_impact)
    assert not [w for w in a.warnings if code in w and "failed" in w], a.warnings
    return [f for f in a.findings if f.code == code]


# --- TI005 input-pipeline-bound ---------------------------------------------------------------------------


# --- TI006 pageable-memcpy --------------------------------------------------------------------------------


# --- TI007 no-tensor-cores --------------------------------------------------------------------------------


# --- TI008 small-grids ------------------------------------------------------------------------------------


# --- TI009 rank-imbalance ---------------------------------------------------------------------------------


# --- TI010 low-gpu-utilization ----------------------------------------------------------------------------


# --- real corpus ------------------------------------------------------------------------------------------


