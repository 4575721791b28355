"""How a finding's severity follows what it saves (``traceinsight.assess.savings.assess``), by value on planted traces:

* a symptom is graded on the part of its idle its root cause does not explain (TI001 explained 90 % by TI005 is no
  warning, though its whole share would make it an error);
* a modelled speed-up saves what the what-if replay gives the steps back, never more than the rule's estimate;
* a finding whose replay gives the step back less than ``NO_CHANGE_PCT`` % of it "changes nothing" and is info.

Every expected figure is worked out from the planted trace (gaps, kernels, steps), not read from the code.
Kept apart from tests/test_severity.py (the scale itself) so that changes to the grading of symptoms stay local.
"""

from __future__ import annotations

import copy

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from tests.test_whatif import plant
from traceinsight.assess import savings
from traceinsight.rule_api import Finding, Location, Rule, Severity

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    """Five 4 ms steps: 3 ms of back-to-back 50 µs kernels, then a 1 ms gap in which the host spends 900 µs inside
    the DataLoader. The GPU window: 10 µs to 19.01 ms = 19 ms; idle between the steps: 4 gaps of 1 ms."""
    t = KinetoTrace()
    for s in range(5):
        t0 = s * 4000.0
        t.step(s, t0, 4000.0)
        for i in range(60):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.annotation(LOADER, t0 + 3010.0, 900.0)
    return traceinsight.analyze(t.write(tmp_path_factory.mktemp("loader") / "t.json"))


def _one(a, code):
    (f,) = [f for f in a.findings if f.code == code]
    return f


def test_a_symptom_is_graded_on_what_its_cause_leaves(loader):
    """TI001 finds the 4 ms of idle (21 % of the 19 ms window: an error on its own). TI005 explains the 3.6 ms of
    it spent in the DataLoader (90 %); what is left, 0.4 ms, is 2.1 % of the window: the symptom shows only that
    (no nanosecond claimed twice) and is graded on it: info, not a warning."""
    idle, data = _one(loader, "TI001"), _one(loader, "TI005")
    assert loader.ledger.windows["window_ns"].tolist() == [19_000_000]
    assert idle.saving_ns == 400_000 and data.saving_ns == 3_600_000
    assert idle.metrics["explained_by"] == data.fingerprint and idle.metrics["explained_share_pct"] == 90.0
    assert idle.share_pct == pytest.approx(100 * 0.4 / 19, abs=1e-3)  # the share shown is what the cause leaves
    assert idle.severity is Severity.INFO  # graded on 0.4 ms / 19 ms = 2.1 %, not on 21 %
    basis = idle.metrics["severity_basis"]  # the figures it was graded on, whatever the words around them
    assert "400.0 µs" in basis and "TI005" in basis and "(2.1 % of the GPU window)" in basis
    assert data.severity is Severity.WARNING  # the cause: 3.6 ms / 19 ms = 18.9 %
    # the cause comes first and carries the alarm of the time both name
    codes = [f.code for f in loader.findings]
    assert codes.index("TI001") == codes.index("TI005") + 1


@pytest.fixture(scope="module")
def gpu_bound(tmp_path_factory):
    """Six steps of 40 kernels of 400 µs launched 34 µs apart (the GPU is the bound) behind a 300 µs copy, and a sync
    on the last kernel: shortening GPU work shortens the step by as much."""
    return traceinsight.analyze(plant(tmp_path_factory.mktemp("gpu") / "g.json", kernels=40, kernel_us=400.0,
                                      launch_gap_us=30.0, sync_at=39, tail_us=100.0))


@pytest.fixture(scope="module")
def host_bound(tmp_path_factory):
    """Five 2 ms steps of 20 kernels of 5 µs, each behind a 90 µs launch call: the host is the bound."""
    t = KinetoTrace()
    at = 0.0
    for s in range(5):
        t.step(s, at, 2000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", at + 100 * i + 95, 5.0, launch_us=at + 100 * i, launch_dur_us=90.0)
        at += 2000.0
    return traceinsight.analyze(t.write(tmp_path_factory.mktemp("host") / "h.json"))


def _modelled(impact_ns):
    return Finding(code="XT901", title="faster kernels", severity=Severity.WARNING, message="", impact_ns=impact_ns,
                   location=Location(rank=0, device=0), category="compute")


def test_a_modelled_saving_is_what_the_replay_gives_back_capped_by_the_estimate(gpu_bound):
    """6 ms faster GPU work over 6 GPU-bound steps gives each step 1 ms back (the replay's rounding makes it a few ns
    more): the saving is the rule's 6 ms, not the replay's 6.00003 ms."""
    (f,) = savings.assess([_modelled(6_000_000)], gpu_bound.views, {})
    assert f.saving_kind == "modelled"
    gain = f.what_if["baseline_step_ns"] - f.what_if["step_ns"]
    assert 999_000 <= gain <= 1_001_000 and gain * 6 > 6_000_000  # the replay alone would claim more
    assert f.saving_ns == 6_000_000
    assert f.metrics["saving_basis"] == "the replay with this work 6.00 ms faster gives back 1.00 ms per step × 6 step(s)"


def test_a_modelled_speed_up_off_the_critical_path_saves_nothing(host_bound):
    """The same 1 ms estimate on host-bound steps: the kernels finish earlier and the GPU waits longer for the next
    launch, so the replay gives the steps nothing back and the saving is 0, graded info."""
    (f,) = savings.assess([_modelled(1_000_000)], host_bound.views, {})
    assert f.what_if["baseline_step_ns"] == f.what_if["step_ns"] == 2_000_000
    assert (f.saving_ns, f.share_pct, f.severity) == (0, 0.0, Severity.INFO)
    assert f.metrics["saving_basis"].endswith("off the step's critical path (the GPU would wait longer instead)")


@pytest.mark.parametrize(("base", "step", "nothing"), [
    (1_000_000, 1_000_000, True),
    (1_000_000, 990_001, True),  # 9,999 ns back: under 1 % of the step
    (1_000_000, 990_000, False),  # exactly 1 %: a change
    (1_000_000, 1_200_000, True),  # longer: nothing back
    (0, 0, False),  # no step to compare with: no judgement
])
def test_changes_nothing_below_one_percent_of_the_step(base, step, nothing):
    assert savings.NO_CHANGE_PCT == 1.0
    assert savings._changes_nothing({"baseline_step_ns": base, "step_ns": step}) is nothing
    assert savings._changes_nothing(None) is False and savings._changes_nothing({"baseline_step_ns": 1, "step_ns": None}) is False


@pytest.mark.parametrize(("step_ns", "severity", "note"), [
    (3_990_001, Severity.INFO, True),  # 9,999 ns of a 4 ms step back: changes nothing
    (3_960_000, Severity.WARNING, False),  # 40 µs back, exactly 1 %: graded on its 18.9 %
])
def test_a_cause_whose_replay_changes_nothing_is_info(loader, step_ns, severity, note):
    """TI005's 3.6 ms (18.9 % of the window: a warning), with a what-if that gives the 4 ms step back less than 1 %
    of it, is info and says why; at exactly 1 % it keeps its warning."""
    fs = copy.deepcopy(loader.findings)
    data = _one(type("A", (), {"findings": fs}), "TI005")
    data.what_if = {**data.what_if, "baseline_step_ns": 4_000_000, "step_ns": step_ns}
    data.metrics.pop("what_if_note", None)
    out = savings.assess(fs, loader.views, {})
    data = next(f for f in out if f.code == "TI005")
    assert data.saving_ns == 3_600_000 and data.severity is severity
    assert (data.metrics.get("what_if_note") == "the replay gives the step nothing back, so this is not a warning") is note


# --- what a rule declares, and what the replay is compared with ------------------------------------------------
class _Capped:
    """A rule that caps its findings at info (a modelled headroom, say)."""

    max_severity = "info"


class _Declared(Rule):
    code = "XT901"
    severity = Severity.ERROR
    category = "compute"


class _Ungraded:
    graded = False


def test_a_rules_cap_and_declared_severity_and_opting_out(gpu_bound):
    """The 6 ms modelled saving is 6.05 % of the window: a warning on the scale; capped at info by a rule that says
    so; a rule that declares error is told why it got a warning; a rule that opts out keeps its own severity."""
    window = int(gpu_bound.ledger.windows["window_ns"].iloc[0])
    (f,) = savings.assess([_modelled(6_000_000)], gpu_bound.views, {})
    assert f.share_pct == pytest.approx(100 * 6_000_000 / window, abs=1e-3) and f.severity is Severity.WARNING
    (f,) = savings.assess([_modelled(6_000_000)], gpu_bound.views, {"XT901": _Capped()})
    assert f.severity is Severity.INFO
    (f,) = savings.assess([_modelled(6_000_000)], gpu_bound.views, {"XT901": _Declared()})
    assert f.severity is Severity.WARNING
    assert f.metrics["severity_basis"] == f"graded warning on the common scale: {100 * 6_000_000 / window:.1f} % of the GPU window; declared error"
    g = _modelled(6_000_000)
    g.severity = Severity.ERROR
    (f,) = savings.assess([g], gpu_bound.views, {"XT901": _Ungraded()})
    assert f.severity is Severity.ERROR and f.saving_ns == 6_000_000


def test_a_failed_replay_falls_back_to_the_estimate_and_says_why(gpu_bound, monkeypatch):
    from traceinsight.derive import whatif

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(whatif, "what_if_faster", boom)
    (f,) = savings.assess([_modelled(6_000_000)], gpu_bound.views, {})
    assert f.saving_ns == 6_000_000 and f.metrics["what_if_error"] == "RuntimeError: boom"
    assert f.metrics["saving_basis"] == "the rule's estimate (no steps to replay it on)"


def test_nothing_is_saved_in_a_window_that_cannot_be_judged(tmp_path):
    """Module loading fills 19 ms of a 30 ms window with one steady step left: no saving, and info."""
    from tests.test_steady_state import _steps_trace

    a = _steps_trace(tmp_path, [10_000] * 3, "one.json", loads=[(0, 10_000), (10_000, 9_000)])
    (f,) = savings.assess([_modelled(3_000_000)], a.views, {})
    assert (f.saving_ns, f.severity) == (0, Severity.INFO)
    assert f.metrics["saving_basis"].startswith("this window cannot be judged")


def _with_replay(claim_ns, base_ns, step_ns):
    f = Finding(code="XT902", title="t", severity=Severity.WARNING, message="", impact_ns=claim_ns,
                location=Location(rank=0, device=0), category="input_pipeline")
    f.saving_ns = claim_ns
    f.what_if = {"baseline_step_ns": base_ns, "step_ns": step_ns}
    return f


@pytest.mark.parametrize(("claim_ns", "step_ns", "agrees", "why"), [
    (1_000_000, 900_000, True, ""),  # 100 µs x 10 steps = the 1 ms claimed
    (750_000, 900_000, True, ""),  # 1 ms against 750 µs: 25 % of the larger, the limit
    (700_000, 900_000, False, "the replay gives back 1.00 ms over 10 step(s), more than the 700.0 µs of idle this finding claims: "),
    (1_400_000, 900_000, False, "the replay gives back 1.00 ms over 10 step(s), less than the 1.40 ms of idle this finding claims: "),
    (99_000, 1_000_000, True, ""),  # 0 against 99 µs: under 1 % of the 10 ms of steps, too little to matter
    (100_000, 1_000_000, False, "the replay gives back 0 ns over 10 step(s), less than the 100.0 µs of idle this finding claims: "),
])
def test_the_replay_is_put_next_to_the_claim(claim_ns, step_ns, agrees, why):
    f = _with_replay(claim_ns, 1_000_000, step_ns)
    savings._compare(f, 10)
    w = f.what_if
    assert (w["saving_ns"], w["steps_in_window"], w["agrees"]) == (10 * (1_000_000 - step_ns), 10, agrees)
    assert w["why"].startswith(why) and (w["why"] == "") is agrees


# --- page order ------------------------------------------------------------------------------------------------
def _f(code, kind, saving, sev=Severity.WARNING, explained_by=None):
    f = Finding(code=code, title=code, severity=sev, message="", impact_ns=saving, location=Location(rank=0, device=0),
                category="gpu_idle", key=code)
    f.saving_kind, f.saving_ns = kind, saving
    if explained_by is not None:
        f.metrics["explained_by"] = explained_by.fingerprint
        explained_by.explains.append(f.fingerprint)
    return f


def test_page_order_measured_idle_then_modelled_then_quality_each_cause_before_its_symptoms():
    """Measured idle first, largest figure first, a higher severity first on a tie; then modelled speed-ups; then
    trace quality; each root cause followed by the symptoms it explains, largest first."""
    a = _f("XA001", "idle", 5_000_000, Severity.WARNING)
    b = _f("XB001", "idle", 5_000_000, Severity.ERROR)
    m = _f("XM001", "modelled", 90_000_000, Severity.ERROR)
    q = _f("XQ001", "none", 99_000_000, Severity.INFO)
    s1 = _f("XS001", "idle", 1_000_000, explained_by=a)
    s2 = _f("XS002", "idle", 6_000_000, explained_by=a)  # more than its cause shows: still after it
    c = _f("XC001", "idle", 7_000_000)
    got = savings.order([q, s1, m, a, s2, b, c])
    assert [f.code for f in got] == ["XC001", "XB001", "XA001", "XS002", "XS001", "XM001", "XQ001"]


def test_the_verdicts_finding_and_its_symptoms_lead_the_page():
    a = _f("XA001", "idle", 9_000_000)
    b = _f("XB001", "idle", 5_000_000)
    s = _f("XS001", "idle", 1_000_000, explained_by=b)
    page = type("Page", (), {})()
    page.findings = [a, b, s]
    page.verdict = {"root_cause": None, "claimed_by": b.fingerprint}
    assert savings.lead_with_verdict(page) is True
    assert [f.code for f in page.findings] == ["XB001", "XS001", "XA001"]
    assert savings.lead_with_verdict(page) is False  # already first: nothing moves
    page.verdict = {"root_cause": s.fingerprint, "claimed_by": None}  # a symptom never leads on its own
    assert savings.lead_with_verdict(page) is False and [f.code for f in page.findings] == ["XB001", "XS001", "XA001"]


def _gappy(tmp_path, gap_us: float, name: str):
    """Five 4 ms steps: back-to-back 50 µs kernels, then one ``gap_us`` gap in which the host runs a framework op
    (no launch): GPU idle (host busy) of gap_us per step."""
    t = KinetoTrace()
    for s in range(5):
        t0 = s * 4000.0
        t.step(s, t0, 4000.0)
        n = int((4000.0 - gap_us) // 50)
        for i in range(n):
            t.kernel("volta_sgemm_128x64_nn", t0 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        t.cpu_op("aten::nonzero", t0 + n * 50 + 5, gap_us - 10)
    return traceinsight.analyze(t.write(tmp_path / name))


def test_idle_on_a_mostly_busy_gpu_below_the_kernel_headroom_is_info(tmp_path):
    """The verdict's rule graded the same way on the card: on a GPU busy ~92.5 % of its steady state, gaps of 300 µs
    per 4 ms step (about 6-7.5 % of idle the finding claims) are less than the ~9.4 % faster kernels would give back
    (10 % of busy time): info, and the card says why. Gaps of 1,200 µs (30 %, a GPU busy 70 %) are not: warning or above."""
    small = _one(_gappy(tmp_path, 300.0, "small.json"), "TI001")
    assert small.severity is Severity.INFO
    import re

    m = re.match(r"kept at info: the GPU is busy ([\d.]+) % of its steady state, and this idle \(([\d.]+) %\) is less than "
                 r"faster kernels would plausibly give back \(10 % of busy time", small.metrics["severity_basis"])
    assert m, small.metrics["severity_basis"]
    busy, idle = float(m.group(1)), float(m.group(2))
    assert 90 < busy < 96 and 4 < idle < 8 and idle <= 0.1 * busy and small.share_pct == pytest.approx(idle, abs=0.05)
    large = _one(_gappy(tmp_path, 1200.0, "large.json"), "TI001")
    assert large.severity.rank >= Severity.WARNING.rank
    assert not large.metrics.get("severity_basis", "").startswith("kept at info")
