"""The severity scale (traceinsight.assess.severity) and the headline busy %, pinned at their exact boundaries.

Each threshold is inclusive (``>=``): a finding costing exactly 20 % of its window is an error, exactly 5 % a
warning, exactly 1 % info and still reported. The grade is taken on planted kineto traces whose GPU windows are
known to the nanosecond, so the base each finding is measured against is pinned too.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.helpers.rule_cases import steady_after, with_warmup
from traceinsight.assess import severity
from traceinsight.render import render
from traceinsight.rule_api import Finding, Location, Rule, Severity
from traceinsight.derive.derived import Derived

MS = 1_000_000


@pytest.mark.parametrize(
    ("share", "expected"),
    [
        (100.0, Severity.ERROR),
        (20.0, Severity.ERROR),
        (19.999, Severity.WARNING),
        (5.0, Severity.WARNING),
        (4.999, Severity.INFO),
        (1.0, Severity.INFO),
        (0.999, Severity.INFO),
        (0.0, Severity.INFO),
    ],
)
def test_level_thresholds_are_inclusive(share, expected):
    assert severity.level(share) is expected


def test_scale_and_floor():
    assert severity.SCALE == ((20.0, Severity.ERROR), (5.0, Severity.WARNING), (1.0, Severity.INFO))
    assert severity.DEFAULT_MIN_IMPACT_PCT == 1.0


def _two_devices(tmp_path) -> Derived:
    """Device 0: a 10 ms window (10 µs to 10.01 ms), 9 ms busy; device 1: a 4 ms window, 1 ms busy. No warm-up."""
    t = KinetoTrace(devices=2)
    t.step(0, 0.0, 10_020.0)
    for i in range(9):  # 9 x 1 ms kernels on device 0 with 125 µs between them
        t.kernel("volta_sgemm_128x64_nn", 10.0 + i * 1125.0, 1000.0, launch_us=i * 0.5)
    for i in range(2):  # device 1: 0.5 ms kernels at 100 µs and 3.6 ms: a 4 ms window, 1 ms busy
        t.kernel("volta_sgemm_128x64_nn", 100.0 + i * 3500.0, 500.0, launch_us=10.0 + i, device=1)
    return Derived(traceinsight.load(t.write(tmp_path / "t.json")))


def _finding(impact_ns, rank=0, device=0, code="XT900"):
    return Finding(code=code, title="t", severity=Severity.WARNING, message="", impact_ns=impact_ns, location=Location(rank=rank, device=device), category="gpu_idle")


class _Builtin(Rule):
    code = "XT900"
    category = "gpu_idle"


@pytest.fixture
def views(tmp_path):
    v = _two_devices(tmp_path)
    u = v.utilization.set_index("device")
    assert (int(u.loc[0, "window_ns"]), int(u.loc[1, "window_ns"])) == (10 * MS, 4 * MS)
    assert severity.steady_windows(v)["window_ns"].tolist() == [10 * MS, 4 * MS]
    return v


def test_base_is_the_findings_own_window(views):
    assert severity.base_ns(_finding(1, 0, 0), views) == 10 * MS
    assert severity.base_ns(_finding(1, 0, 1), views) == 4 * MS
    assert severity.base_ns(_finding(1, 0, None), views) == 10 * MS  # a rank only: its longest window
    assert severity.base_ns(_finding(1, None, None), views) == 14 * MS  # no place: the windows add up
    assert severity.base_ns(_finding(1, 7, None), views) == 10 * MS  # an unknown rank: all windows, the longest
    assert severity.share_pct(_finding(2 * MS, 0, 1), views) == 50.0


@pytest.mark.parametrize(
    ("impact_ns", "device", "expected"),
    [
        (2 * MS, 0, "error"),  # exactly 20 % of 10 ms
        (2 * MS - 1, 0, "warning"),
        (MS // 2, 0, "warning"),  # exactly 5 %
        (MS // 2 - 1, 0, "info"),
        (MS // 10, 0, "info"),  # exactly 1 %: kept
        (MS // 10 - 1, 0, None),  # below the floor: dropped
        (MS // 5, 1, "warning"),  # 5 % of device 1's 4 ms window, 2 % of device 0's
        (4 * MS // 5, 1, "error"),
    ],
)
def test_grade_at_each_boundary(views, impact_ns, device, expected):
    f = _finding(impact_ns, device=device)
    out = severity.grade([f], views, {"XT900": _Builtin()})
    assert [x.severity.value for x in out] == ([] if expected is None else [expected])


def test_min_impact_floor_is_inclusive(views):
    f = _finding(MS // 2)  # 5 %
    assert severity.grade([f], views, {}, min_impact_pct=5.0) == [f]
    assert severity.grade([_finding(MS // 2 - 1)], views, {}, min_impact_pct=5.0) == []
    assert [x.severity for x in severity.grade([_finding(1)], views, {}, min_impact_pct=0.0)] == [Severity.INFO]


def test_cap_override_withheld_and_ungraded(views):
    class Capped(_Builtin):
        max_severity = "warning"

    class Plain(_Builtin):
        severity = Severity.INFO

    (f,) = severity.grade([_finding(5 * MS)], views, {"XT900": Capped()})
    assert f.severity is Severity.WARNING  # 50 %, capped
    (f,) = severity.grade([_finding(5 * MS)], views, {"XT900": Plain()}, overridden=["xt900"])
    assert f.severity is Severity.INFO  # the user's severity beats the scale
    quality = Finding(code="XT901", title="q", severity=Severity.WARNING, message="", category="trace_quality", metrics={"withholds_judgement": True})
    out = severity.grade([_finding(5 * MS), quality], views, {"XT900": _Builtin()})
    assert [x.severity for x in out] == [Severity.INFO, Severity.WARNING]  # judgement withheld; quality untouched
    # a plugin finding with no cost estimate is not graded: it keeps its rule's severity and is never dropped
    (f,) = severity.grade([_finding(0, code="XP1")], views, {"XP1": object()})
    assert f.severity is Severity.WARNING


def test_busy_pct_is_weighted_by_each_devices_window(views, tmp_path):
    u = views.utilization.set_index("device")
    busy0, busy1 = int(u.loc[0, "busy_ns"]), int(u.loc[1, "busy_ns"])
    assert (busy0, busy1) == (9 * MS, MS)
    a = traceinsight.analyze(tmp_path / "t.json")
    # weighted by window: 10 of 14 ms (71.4 %), not the mean of 90 % and 25 % (57.5 %)
    expected = 100.0 * (busy0 + busy1) / (14 * MS)
    assert a.summary.gpu_busy_pct == pytest.approx(expected, abs=1e-9)
    assert abs(a.summary.gpu_busy_pct - (u["busy_pct"].mean())) > 5
    assert json.loads(render(a, "json"))["summary"]["gpu_busy_pct"] == round(expected, 3)


def test_graded_on_the_steady_state_window(tmp_path):
    # five 3 ms steps; the first aten::conv2d lasts 1.5 ms (30x its later calls): the ledger books it as warm-up
    t = KinetoTrace()
    for s in range(5):
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1015.0, 1980.0)
        t.cpu_op("aten::conv2d", t0 + 1100.0, 1500.0 if s == 0 else 50.0)
    v = Derived(traceinsight.load(t.write(tmp_path / "t.json")))
    assert int(v.utilization["window_ns"].iloc[0]) == 13 * MS
    assert severity.steady_windows(v)["window_ns"].tolist() == [13 * MS - 1_500_000]
    # 2.3 ms is 20 % of the 11.5 ms steady window (17.7 % of the whole one)
    (f,) = severity.grade([_finding(2_300_000)], v, {"XT900": _Builtin()})
    assert f.severity is Severity.ERROR


def test_base_for_a_device_without_a_rank(views):
    assert severity.base_ns(_finding(1, None, 1), views) == 4 * MS


def test_share_edges(views):
    assert severity.share_pct(_finding(0), views) == 0.0
    assert severity.share_pct(_finding(-5 * MS), views) == 0.0  # a negative estimate costs nothing
    one = pd.DataFrame({"rank": [0], "device": [0], "window_ns": [1]})
    assert severity.share_pct(_finding(1), views, one) == 100.0
    none = pd.DataFrame({"rank": [0], "device": [0], "window_ns": [0]})  # a window that is all warm-up
    assert severity.share_pct(_finding(1), views, none) is None


def test_no_gpu_window_keeps_the_rules_severity(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    t.cpu_op("aten::add", 10.0, 100.0)
    v = Derived(traceinsight.load(t.write(tmp_path / "cpu.json")))
    assert severity.steady_windows(v).empty and severity.base_ns(_finding(1), v) == 0
    f = _finding(1)
    assert severity.share_pct(f, v) is None
    g = _finding(2, code="XT901")
    out = severity.grade([f, g], v, {"XT900": _Builtin()})
    assert len(out) == 2 and out[0] is f and out[1] is g
    assert f.severity is Severity.WARNING


def test_ungraded_findings_pass_through_in_order(views):
    class NotGraded(_Builtin):
        code = "XT902"
        graded = False

    class Graded(_Builtin):
        code = "XT903"
        graded = True

    quiet = _finding(1, code="XT902")  # 0.00001 %: kept, ungraded
    loud = _finding(5 * MS, code="XT900")
    forced = _finding(1, code="XT903")  # graded although a plugin: below the floor, dropped
    out = severity.grade([quiet, loud, forced], views, {"XT900": _Builtin(), "XT902": NotGraded(), "XT903": Graded()})
    assert [id(x) for x in out] == [id(quiet), id(loud)]
    assert (quiet.severity, loud.severity) == (Severity.WARNING, Severity.ERROR)


def test_plugins_without_a_cost_are_not_graded_but_builtins_are(views):
    class Plugin(Rule):
        code = "XP9"

    class Builtin(Rule):
        code = "XB9"

    Builtin.__module__ = "traceinsight.rules.fake_builtin"
    plugin, builtin = _finding(0, code="XP9"), _finding(0, code="XB9")
    out = severity.grade([plugin, builtin], views, {"XP9": Plugin(), "XB9": Builtin()})
    assert [id(x) for x in out] == [id(plugin)]  # the built-in's 0 % is graded and falls below the floor; the plugin's is kept
    assert plugin.severity is Severity.WARNING


def test_category_from_the_rule_when_the_finding_has_none(views):
    class Quality(_Builtin):
        code = "XT904"
        category = "trace_quality"

    f = _finding(1, code="XT904")
    f.category = ""
    assert [id(x) for x in severity.grade([f], views, {"XT904": Quality()})] == [id(f)]  # trace quality: never graded or dropped
    g = _finding(1, code="XT905")
    g.category = ""
    assert severity.grade([g], views, {}) == []  # no category anywhere: graded, 0.00001 % is dropped
    # a finding that says it withholds judgement withholds nothing unless it is a trace-quality finding
    h = _finding(5 * MS)
    h.metrics["withholds_judgement"] = True
    assert [x.severity for x in severity.grade([h], views, {"XT900": _Builtin()})] == [Severity.ERROR]


def test_override_without_a_rule_and_a_bad_cap(views):
    f = _finding(5 * MS, code="XT906")
    f.severity = Severity.INFO
    (g,) = severity.grade([f], views, {}, overridden=["XT906"])
    assert g.severity is Severity.INFO  # no rule to take a severity from: the finding's stays

    class BadCap(_Builtin):
        max_severity = "catastrophic"

    (h,) = severity.grade([_finding(5 * MS)], views, {"XT900": BadCap()})
    assert h.severity is Severity.ERROR  # a cap that is no severity caps nothing


PLANTED_COST = '''
from traceinsight.rule_api import Rule

class PlantedCost(Rule):
    code = "ZZ901"
    name = "planted-cost"
    category = "gpu_idle"
    summary = "One finding costing 1.3 ms."

    def check(self, ctx):
        yield ctx.finding(title="planted", message="1.3 ms", impact_ns=1_300_000)
'''


def test_a_plugins_cost_is_graded_on_the_steady_state_window(tmp_path):
    """A cost is judged against the window less the ledger's warm-up, as the verdict judges causes: 1.3 ms is 5.0 %
    of the 26.06 ms window but 21 % of the 6.06 ms steady state, where fixing it would show."""
    t = KinetoTrace()
    with_warmup(t, init=False)
    (tmp_path / "planted.py").write_text(PLANTED_COST)
    a = traceinsight.analyze(t.write(tmp_path / "warm.json"), rules=[tmp_path / "planted.py"])
    assert int(a.ledger.by_device.set_index("bucket").loc["idle_warmup", "ns"]) == 20_000_000
    (f,) = [x for x in a.findings if x.code == "ZZ901"]
    from traceinsight.assess.severity import base_ns, level, share_pct

    views = a.derived if hasattr(a, "derived") and a.derived is not None else a.views
    assert level(share_pct(f, views)) is Severity.ERROR  # the rule's 1.3 ms on the steady window: 21 %
    # the page grades the figure it shows (traceinsight.assess.savings): the idle the ledger holds for the finding, on the
    # same steady window
    assert f.share_pct == pytest.approx(100.0 * f.saving_ns / base_ns(f, views), abs=1e-3)
    assert f.severity is level(f.share_pct)
    plain = KinetoTrace()  # the same loop without the warm-up step: the same 1.3 ms is 21 % of it too
    steady_after(plain, 0.0)
    b = traceinsight.analyze(plain.write(tmp_path / "plain.json"), rules=[tmp_path / "planted.py"])
    (g,) = b.findings
    assert level(share_pct(g, b.derived if getattr(b, "derived", None) is not None else b.views)) is Severity.ERROR


def test_a_dropped_finding_does_not_stop_grading(views):
    small, big = _finding(1), _finding(5 * MS, code="XT907")
    out = severity.grade([small, big], views, {"XT900": _Builtin()})
    assert [id(x) for x in out] == [id(big)] and big.severity is Severity.ERROR
