"""Every report agrees with itself: the verdict follows from the findings, no nanosecond is claimed twice, a
severity below the scale says why, and each finding shows one figure in every output.

The properties are checked on every trace the project has (the samples, the H100 recordings, the corpus and the
judged traces) from what the reports *say*, recomputed here with plain arithmetic: the verdict's lever against
the findings' own figures, the severity scale written out again, interval arithmetic on the findings' instances,
and the figures read back from the text, Markdown, HTML and JSON outputs and the MCP server's page. Each checker
returns the violations it finds; the tests at the end break each property on purpose and expect a violation, so a
checker that cannot fail is caught too. Corpus traces skip when ``../shared`` is absent (``corpus`` fixture).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

import traceinsight
from traceinsight.render import render
from traceinsight.vocab.units import fmt_ns

from .conftest import CORPUS, REPO, have_corpus

#: The bar a finding's figure must clear to name a bound, and the busy share above which the GPU's own work does:
#: written here again, as the docs state them (docs/json-report.md), not read from the code under test.
BOUND_PCT = 5.0
BUSY_MOST_PCT = 50.0
KERNEL_GAIN_PCT = 10.0  # on a mostly busy GPU an idle lever must give back more than this share of busy time
#: The severity scale, as the README states it.
SCALE = ((20.0, "error"), (5.0, "warning"), (0.0, "info"))
RANK = {"info": 1, "warning": 2, "error": 3}
NO_BOUND = {"cannot_judge", "no_gpu", "unexplained"}
BUSY_BUCKETS = ("compute", "communication", "copy")


def _traces() -> list[Path]:
    samples = REPO / "sample_traces"
    out = sorted(p for p in samples.iterdir() if p.suffix in (".gz", ".sqlite"))
    out += sorted(p for p in (samples / "h100").glob("*.json.gz"))
    out += sorted((samples / "h100" / "nsys").glob("*.sqlite"))
    out += _logdirs(samples)  # TensorBoard/JAX profile folders: one trace each
    if have_corpus():
        for sub in ("pytorch", "nsys", "judged"):
            out += sorted(p for p in (CORPUS / sub).iterdir() if p.is_file() and p.suffix in (".gz", ".sqlite", ".pb"))
        out += sorted((CORPUS / "pytorch" / "param_dlrm_v100_8ranks").glob("*.json*"))[:2]
        out += _logdirs(CORPUS / "tf") + sorted(p for p in (CORPUS / "tf").rglob("*.xplane.pb") if "plugins" not in p.parts)
    return out


def _logdirs(root: Path) -> list[Path]:
    """Every folder that holds a ``plugins/profile`` run (a TensorBoard or JAX log folder)."""
    return sorted({p.parent.parent for p in root.rglob("plugins/profile")})


TRACES = _traces()


def _id(p: Path) -> str:
    try:
        return str(p.relative_to(CORPUS))
    except ValueError:
        return str(p.relative_to(REPO))


# --- the checkers: each returns what is wrong, [] when the report agrees with itself ------------------------
def expected_level(share: float) -> str:
    return next(sev for bar, sev in SCALE if share >= bar)


def verdict_follows_findings(report: dict) -> list[str]:
    """1. The verdict names the finding with the largest figure among those that can name a bound (at least 5 % of
    the steady state; on a mostly busy GPU an idle lever must also beat the compute headroom), and a bound never
    stands without one (unless the GPU is busy most of its steady state: then compute or copies)."""
    v, out = report["verdict"], []
    if v["category"] in ("cannot_judge", "no_gpu"):
        return out
    led = v["ledger_ns"]
    steady = sum(led.values()) - led.get("idle_warmup", 0)
    busy_pct = 100.0 * sum(led[b] for b in BUSY_BUCKETS) / steady if steady else 0.0
    headroom = KERNEL_GAIN_PCT / 100.0 * busy_pct if busy_pct >= BUSY_MOST_PCT else 0.0

    def can_bind(f: dict) -> bool:
        share = f["share_pct"] or 0.0
        busy_work = f["saving_kind"] == "modelled"
        return share >= BOUND_PCT and (busy_work or share > headroom)

    fs = [f for f in report["findings"] if f["category"] != "trace_quality" and f["fixes"] and (f["saving_ns"] or 0) > 0]
    fs = [f for f in fs if can_bind(f)]
    top = max((f["saving_ns"] for f in fs), default=0)
    best = [f for f in fs if f["saving_ns"] == top]
    if best:
        if v["lever"] not in {f["code"] for f in best}:
            out.append(f"verdict lever {v['lever']} is not the finding that gives back most ({[f['code'] for f in best]}, {fmt_ns(top)})")
        if v["lever_ns"] != top:
            out.append(f"verdict quotes {v['lever_ns']} ns for its lever, the card shows {top}")
        if not v["bound"]:
            out.append(f"a finding gives back {fmt_ns(top)} (>= {BOUND_PCT} %) but the verdict names no bound")
        return out
    if v["lever"] is not None:
        out.append(f"verdict names {v['lever']} although no finding can name a bound")
    if v["category"] in ("compute", "copy"):
        if busy_pct < BUSY_MOST_PCT - 0.05:
            out.append(f"'{v['headline']}' with no lever on a GPU busy only {busy_pct:.1f} % of its steady state")
    elif v["category"] != "unexplained":
        out.append(f"'{v['headline']}' stands with no finding that gives back {BOUND_PCT} % of the steady state")
    elif busy_pct >= BUSY_MOST_PCT + 0.05:
        out.append(f"'unexplained' on a GPU busy {busy_pct:.1f} % of its steady state")
    return out


def _subtract(s: np.ndarray, e: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> int:
    """Total length of the intervals (s, e) outside the union of (cs, ce)."""
    total = 0
    order = np.argsort(cs)
    cs, ce = cs[order], ce[order]
    for a, b in zip(s.tolist(), e.tolist()):
        inside = 0
        cur = a
        for x, y in zip(cs.tolist(), ce.tolist()):
            if y <= cur or x >= b:
                continue
            lo, hi = max(x, cur), min(y, b)
            if hi > lo:
                inside += hi - lo
                cur = hi
        total += (b - a) - inside
    return total


def one_claim_per_nanosecond(report: dict, tl) -> list[str]:
    """2. On each GPU the idle figures add up to no more than its idle time (measured here from the raw events)
    outside what is set aside (warm-up, or what a trace-quality finding says it sets aside); a symptom shows no
    more than what its cause leaves; and a window that cannot be judged claims nothing."""
    out = []
    ev = tl.events
    work = ev[ev["kind"].isin(["kernel", "memcpy", "memset"])]
    idle: dict[tuple[int, int], int] = {}
    for (r, d), g in work.groupby(["rank", "device"]):
        s = g["start_ns"].to_numpy(np.int64)
        e = s + g["dur_ns"].to_numpy(np.int64)
        o = np.argsort(s)
        s, e = s[o], e[o]
        busy, cur_s, cur_e = 0, int(s[0]), int(e[0])
        for a, b in zip(s[1:].tolist(), e[1:].tolist()):
            if a > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = a, b
            else:
                cur_e = max(cur_e, b)
        busy += cur_e - cur_s
        idle[(int(r), int(d))] = int(e.max() - s.min()) - busy
    # what is set aside on each GPU: the ledger's warm-up, or what a trace-quality finding there says it sets
    # aside, whichever is larger (that time is no finding's to claim)
    warm = {}
    for row in report["ledger"].get("by_device", []):
        warm[(row["rank"], row["device"])] = int(row["ns"].get("idle_warmup", 0) or 0)
    for f in report["findings"]:
        loc, aside = f["location"], int(f["metrics"].get("warmup_ns") or 0) if f["category"] == "trace_quality" else 0
        if aside and loc["rank"] is not None and loc["device"] is not None:
            k = (loc["rank"], loc["device"])
            warm[k] = max(warm.get(k, 0), aside)
    per_dev: dict[tuple[int, int], int] = {}
    for f in report["findings"]:
        if f["saving_kind"] != "idle" or not f["saving_ns"]:
            continue
        loc = f["location"]
        keys = [k for k in idle if (loc["rank"] is None or k[0] == loc["rank"]) and (loc["device"] is None or k[1] == loc["device"])]
        if len(keys) == 1:
            per_dev[keys[0]] = per_dev.get(keys[0], 0) + int(f["saving_ns"])
    for k, ns in per_dev.items():
        room = idle.get(k, 0) - warm.get(k, 0)
        if ns > room + 1000:  # 1 µs of rounding across findings
            out.append(f"rank {k[0]} GPU {k[1]}: findings claim {fmt_ns(ns)} of idle, it has {fmt_ns(room)} outside warm-up")
    by_fp = {f["fingerprint"]: f for f in report["findings"]}
    for f in report["findings"]:
        cause = by_fp.get(f["metrics"].get("explained_by") or "")
        if cause is not None and f["saving_kind"] == "idle" and f["saving_ns"] and f["impact_ns"]:
            explained = int(f["metrics"].get("explained_ns") or 0)
            if f["saving_ns"] >= f["impact_ns"] and explained > 0:
                out.append(f"{f['code']} shows {fmt_ns(f['saving_ns'])}, all of it, although {cause['code']} explains {fmt_ns(explained)}")
    if report["verdict"]["category"] == "cannot_judge":
        if report["kpis"]["est_savings_ns"] or report["kpis"]["modelled_speedup_ns"]:
            out.append("a window that cannot be judged shows a headline saving")
        loud = [f["code"] for f in report["findings"] if f["category"] != "trace_quality" and f["severity"] != "info"]
        if loud:
            out.append(f"the verdict keeps performance findings at info, yet {loud} are above it")
    return out


def severity_states_itself(report: dict) -> list[str]:
    """6. A finding graded below what its share gives on the scale says why on its card."""
    out = []
    for f in report["findings"]:
        if f["category"] == "trace_quality" or f["share_pct"] is None:
            continue
        want = expected_level(float(f["share_pct"]))
        if RANK[f["severity"]] < RANK[want]:
            basis = str(f["metrics"].get("severity_basis") or "")
            if not re.search(r"capped at|kept at|does not explain|graded .* on the common scale|declared", basis):
                out.append(f"{f['code']} is {f['severity']} at {f['share_pct']:.1f} % (the scale says {want}) and its card does not say why")
    return out


def one_figure_everywhere(report: dict, analysis, outputs: dict[str, str], mcp_page: dict | None) -> list[str]:
    """7. The figure a finding shows is the same record in the API, JSON, text, Markdown, HTML and the MCP page,
    and a message that quotes an estimate quotes the card's figure."""
    out = []
    for f, d in zip(analysis.findings, report["findings"]):
        if f.code != d["code"] or f.saving_ns != d["saving_ns"]:
            out.append(f"{d['code']}: API {f.code} {f.saving_ns} against JSON {d['saving_ns']}")
    for d in report["findings"]:
        if d["saving_kind"] == "none" or not d["saving_ns"]:  # a figure of 0 may be left unsaid
            continue
        shown = fmt_ns(d["saving_ns"])
        for fmt, text in outputs.items():
            if shown not in text:
                out.append(f"{d['code']} shows {shown} in JSON but not in the {fmt} output")
        est = fmt_ns(d["impact_ns"])
        if d["saving_kind"] == "modelled" and est != shown and f"est. {est}" in d["message"]:
            out.append(f"{d['code']}'s message quotes est. {est}, its card {shown}")
    if mcp_page is not None:
        got = [(x["code"], x.get("saving_ns")) for x in mcp_page["findings"]]
        want = [(d["code"], d["saving_ns"]) for d in report["findings"]][: len(got)]
        if got != want:
            out.append(f"the MCP findings page shows {got[:3]}..., the report {want[:3]}...")
    lever = report["verdict"].get("lever")
    if lever is not None and report["verdict"]["lever_ns"] not in {d["saving_ns"] for d in report["findings"] if d["code"] == lever}:
        out.append(f"the verdict quotes {report['verdict']['lever_ns']} ns for {lever}, no card of {lever} shows it")
    return out


# --- running them ---------------------------------------------------------------------------------------------
def _analyse(path: Path):
    a = traceinsight.analyze(str(path))
    report = json.loads(render(a, "json"))
    return a, report


def _outputs(a) -> dict[str, str]:
    return {fmt: render(a, fmt) for fmt in ("text", "md", "html")}


def _mcp_page(path: Path, tmp_path) -> dict:
    from traceinsight.agent.tools import Session

    s = Session([path.parent])
    first = s.analyze(path.name, limit=1)
    return s.findings(first["analysis_id"], limit=200)


@pytest.mark.parametrize("path", TRACES, ids=[_id(p) for p in TRACES])
def test_every_report_agrees_with_itself(path, tmp_path):
    if not path.exists():
        pytest.skip(f"{path} is absent")
    a, report = _analyse(path)
    with_mcp = path.is_file() and ("judged" in path.parts or "sample_traces" in path.parts)
    problems = (
        verdict_follows_findings(report)
        + one_claim_per_nanosecond(report, a.timeline)
        + severity_states_itself(report)
        + one_figure_everywhere(report, a, _outputs(a), _mcp_page(path, tmp_path) if with_mcp else None)
    )
    assert not problems, "\n".join(problems)


# --- each property broken on purpose: its checker must object ---------------------------------------------------
@pytest.fixture(scope="module")
def sample():
    a, report = _analyse(REPO / "sample_traces" / "sync_stalls.json.gz")
    return a, report


def test_a_verdict_that_names_the_wrong_lever_is_caught(sample):
    _, report = sample
    r = copy.deepcopy(report)
    assert verdict_follows_findings(r) == []
    r["verdict"]["lever"] = "TI999"
    assert verdict_follows_findings(r)
    r = copy.deepcopy(report)
    for f in r["findings"]:  # no finding prices anything: a bound must not stand
        f["saving_ns"], f["share_pct"] = 0, 0.0
    r["verdict"].update(category="host_sync", headline="Bound by host syncs", lever=None, lever_ns=None)
    assert verdict_follows_findings(r)


def test_a_nanosecond_claimed_twice_is_caught(sample):
    a, report = sample
    assert one_claim_per_nanosecond(report, a.timeline) == []
    r = copy.deepcopy(report)
    idle = next(f for f in r["findings"] if f["saving_kind"] == "idle" and f["saving_ns"])
    twin = copy.deepcopy(idle)  # the same idle claimed by a second finding on the same GPU
    twin["code"], twin["fingerprint"], twin["metrics"] = "TI998", "0" * 16, {}
    twin["saving_ns"] = idle["saving_ns"] * 10
    r["findings"].append(twin)
    assert one_claim_per_nanosecond(r, a.timeline)
    r = copy.deepcopy(report)  # a trace-quality finding that sets aside the GPU's whole window
    idle = next(f for f in r["findings"] if f["saving_kind"] == "idle" and f["saving_ns"] and f["location"]["device"] is not None)
    r["findings"].append({**copy.deepcopy(idle), "code": "TI013", "category": "trace_quality", "saving_kind": "none", "saving_ns": 0,
                          "metrics": {"warmup_ns": 10**12}})
    assert one_claim_per_nanosecond(r, a.timeline)


def test_an_unstated_cap_is_caught(sample):
    _, report = sample
    r = copy.deepcopy(report)
    f = next(f for f in r["findings"] if f["category"] != "trace_quality")
    f["share_pct"], f["severity"] = 30.0, "info"
    f["metrics"].pop("severity_basis", None)
    assert severity_states_itself(r)
    f["metrics"]["severity_basis"] = "capped at info: modelled headroom, not time the GPU lost"
    assert severity_states_itself(r) == []


def test_two_figures_for_one_finding_are_caught(sample):
    a, report = sample
    outputs = _outputs(a)
    assert one_figure_everywhere(report, a, outputs, None) == []
    r = copy.deepcopy(report)
    f = next(f for f in r["findings"] if f["saving_kind"] == "idle" and f["saving_ns"])
    f["saving_ns"] += 7_777_777  # the JSON says one figure, the other outputs another
    assert one_figure_everywhere(r, a, outputs, None)
    page = {"findings": [{"code": d["code"], "saving_ns": d["impact_ns"] + 1} for d in report["findings"]]}
    assert one_figure_everywhere(report, a, outputs, page)
