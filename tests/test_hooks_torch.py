"""The torch.profiler hook, on a real CPU profile of a small model."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest


def test_import_traceinsight_does_not_import_torch():
    code = "import sys, traceinsight, traceinsight.render; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


class _LongestHostOp:
    """Built lazily: a CPU-only profile has no GPU findings, so this test rule names the costliest real op."""

    @staticmethod
    def make():
        from traceinsight.rule_api import Rule, Severity

        class LongestHostOp(Rule):
            code = "TST001"
            name = "longest-host-op"
            severity = Severity.INFO
            summary = "Names the host op with the most total time."

            def check(self, ctx):
                ops = ctx.events[ctx.events["kind"] == "cpu_op"]
                top = ops.groupby("name", observed=True)["dur_ns"].sum().sort_values().index[-1]
                yield ctx.finding(title=f"longest host op: {top}", message=f"{top} takes the most host time", impact_ns=1)

        return LongestHostOp


@pytest.mark.slow
def test_report_handler_writes_trace_and_report(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    from traceinsight.torch import report_handler

    handler = report_handler(tmp_path / "prof", fmt="html", worker_name="w0", extra_rules=[_LongestHostOp.make()])
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1), on_trace_ready=handler) as prof:
        for _ in range(3):
            model(torch.randn(8, 32)).sum().backward()
            prof.step()

    assert len(handler.paths) == 1
    trace, report = handler.paths[0]
    assert trace.name.startswith("w0.") and trace.name.endswith(".pt.trace.json.gz")
    assert trace.is_file() and not trace.with_suffix("").exists()  # only the gzipped copy is kept
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(e.get("name") == "aten::addmm" for e in events)
    assert report.is_file() and report.name == trace.name.replace(".pt.trace.json.gz", ".traceinsight.html")
    text = report.read_text(encoding="utf-8")
    assert text.lstrip().lower().startswith("<!doctype html")
    assert "error" not in report.name
    import html
    import re

    m = re.search(r"longest host op: ([^<\n\"]+)", html.unescape(text))
    assert m, "the report should carry the finding of the rule passed through analyze_kwargs"
    op_names = {e.get("name") for e in events if e.get("cat") == "cpu_op"}
    assert m.group(1).strip() in op_names, f"{m.group(1)!r} is not an op of the recorded trace"
