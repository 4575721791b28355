"""TI001-TI004 on planted kineto traces (exact expectations) and on the real corpus (direction and ratios)."""

from __future__ import annotations

import pytest

import traceinsight
from tests.conftest import corpus_file
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.plugins import discover


def _one(path, code, min_impact=None, **options):
    a = traceinsight.analyze(path, select=[code], options={code: options} if options else None, min_impact=min_impact)
    return [f for f in a.findings if f.code == code]


def _busy_steps(t: KinetoTrace, steps: int, step_us: float, busy_us: float, *, first=0.0, kernel_us=50.0):
    """Steps whose first ``busy_us`` are back-to-back 50 µs kernels launched well ahead (a healthy GPU)."""
    for s in range(steps):
        t0 = first + s * step_us
        t.step(s, t0, step_us)
        n = int(busy_us // kernel_us)
        for i in range(n):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * kernel_us, kernel_us, launch_us=t0 + i * 0.5)


# --- TI001 -----------------------------------------------------------------------------------------------


# --- TI002 -----------------------------------------------------------------------------------------------


# --- TI003 -----------------------------------------------------------------------------------------------


# --- TI004 -----------------------------------------------------------------------------------------------


# --- docs ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["TI001", "TI002", "TI003", "TI004"])
def test_rule_docs_have_definition_and_fixes(code):
    rs = discover()
    cls = rs.rules[code]
    doc = cls.docs()
    for section in ("## Why it matters", "## What is measured", "## Options", "## Fix in PyTorch", "## Fix in TensorFlow", "```python"):
        assert section in doc, (code, section)
    assert all(o.help for o in cls.options.values())
