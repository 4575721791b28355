"""The Markdown and text reports show a finding's what-if as "step A -> B ms (-x %)" when it has one."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.render import render
from traceinsight.assess import verdict
from traceinsight.derive import whatif


def _analysis(tmp_path):
    tr = KinetoTrace()
    t = 0.0
    for n in range(4):
        s0 = t
        tr.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 8_000.0)
        t += 8_010.0
        for k in range(20):
            tr.kernel("volta_sgemm_128x64_nn", t + 10.0, 50.0, launch_us=t)
            t += 60.0
        t += 100.0
        tr.step(n, s0, t - s0)
        t += 10.0
    return traceinsight.analyze(tr.write(tmp_path / "dl.json"), select=["TI005"])


def test_reports_show_what_if(tmp_path):
    a = _analysis(tmp_path)
    (f,) = [f for f in a.findings if f.code == "TI005"]
    f.what_if = whatif.what_if_for(a.views.graphs, "remove_data_wait")
    line = whatif.format_what_if(f.what_if)
    assert line.startswith("step ") and "−" in line
    md = render(a, "md")
    assert f"**If fixed:** {line}" in md and "ranges take no time" in md
    assert f"if fixed: {line}" in render(a, "text")


def test_reports_without_what_if(tmp_path):
    a = _analysis(tmp_path)
    for f in a.findings:
        f.what_if = None
    assert "if fixed" in a.verdict["sentence"]  # the engine's verdict quotes the cause's prediction
    verdict.assess(a)  # the verdict is data computed from the findings: assess the edited findings again
    assert "If fixed" not in render(a, "md")
    assert "if fixed" not in render(a, "text")
