"""The round-3 reproducer set (issue 28), run through the command line and tallied per class.

Not collected by pytest (run it by hand or in a nightly job)::

    python tests/fuzz/round3.py            # every case; prints one table row per class
    python tests/fuzz/round3.py -v         # also one line per case

Every case writes its inputs into a fresh folder, runs ``python -m traceinsight.cli.app analyze ...`` in a subprocess
with a timeout, and is judged on four counts:

* traceback: a Python traceback on stderr, or the run hit the timeout;
* silent pass: an exit code other than the one the case expects (a rule failure, a bad option, a missing rank
  that exits 0 or 1), or an expected warning/line missing;
* injection: a trace string reaching Markdown as live syntax (``<img``, ``](http``, a heading, a table row, an
  ``@`` mention) or any output as a raw escape/bidi character;
* wrong result: a case-specific figure off (kernels kept, steps counted, span, names, report not written).

All four must be 0 in every class.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.kineto_writer import KinetoTrace  # noqa: E402
from tests.helpers.nsys_writer import NsysTrace  # noqa: E402

HOSTILE = [
    "<img src=http://evil.test/b.png>",
    "[click](http://evil.test/c)",
    "x\n# FAKE HEADING\n| fake | table |\n|---|---|",
    "@victim",
    "\x1b]0;pwned\x07\x1b[2J",
    "\u202eevil",
    "![i](http://evil.test/i.png) <script>alert(1)</script>",
]


@dataclass
class Case:
    cls: str
    name: str
    build: Callable[[Path], list[str]]  # writes inputs, returns the CLI arguments after "analyze"
    expect_rc: int
    check: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None  # wrong result -> reason
    stderr_has: str | None = None
    env: dict = field(default_factory=dict)
    timeout: float = 120


# --- builders -------------------------------------------------------------------------------------------------
def kineto(path: Path, *, names=("gemm",), rank=None, world=None, device="NVIDIA A100-SXM4-80GB", n=20) -> Path:
    t = KinetoTrace(device_name=device, rank=rank, world_size=world)
    t.step(1, 0.0, 20_000.0)
    at = 100.0
    for i in range(n):
        t.kernel(names[i % len(names)], at, 2.0 if len(names) > 1 else 300.0)
        at += 400.0
    t.runtime("cudaStreamSynchronize", at + 10, 3000.0)
    return t.write(path)


def hostile_single(d: Path) -> Path:
    return kineto(d / "hostile.json", names=HOSTILE, device=HOSTILE[0] + HOSTILE[4], n=400)


def hostile_job(d: Path) -> Path:
    j = d / "job<img src=x onerror=alert(1)>"
    j.mkdir()
    for r in range(2):
        kineto(j / f"rank{r}.json", names=HOSTILE, rank=r, world=2, device=HOSTILE[0], n=400)
    return j


def job(d: Path, n=3) -> Path:
    j = d / "job"
    j.mkdir()
    for r in range(n):
        kineto(j / f"rank{r}.json", rank=r, world=n)
    return j


RULE = textwrap.dedent(
    """
    import math, sys, time
    from traceinsight.rule_api import Rule, Finding, Severity

    class Bad(Rule):
        code = "ZZ001"
        name = "bad"
        def check(self, ctx):
    {body}
    """
)
BODIES = {
    "sys.exit(0)": "        sys.exit(0)",
    "SystemExit": "        raise SystemExit",
    "raises": "        raise RuntimeError('boom')",
    "strings": "        return ['x']",
    "a str": "        return 'oops'",
    "NaN impact": "        return [Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_ns=math.nan)]",
    "inf share": "        return [Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_pct_span=math.inf)]",
    "negative": "        return [Finding(code='ZZ001', title='t', severity=Severity.WARNING, message='m', impact_ns=-5)]",
    "busy loop": "        while True:\n            pass",
    "sleep": "        time.sleep(3600)",
}


def rule_case(body: str, on_job: bool) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        r = d / "rule.py"
        r.write_text(RULE.format(body=BODIES[body]))
        src = job(d) if on_job else kineto(d / "t.json")
        return [str(src), "--rules", str(r), "--rule-timeout", "2", "--fail-on", "info", "-o", str(d / "out.json")]
    return build


def report_written(d: Path, p: subprocess.CompletedProcess) -> str | None:
    out = d / "out.json"
    if not out.is_file():
        return "no report written"
    rep = json.loads(out.read_text())
    if not any("ZZ001" in w or "rule.py" in w for w in rep.get("warnings", [])):
        return "report does not show the failure"
    lines = [ln for ln in p.stderr.splitlines() if "ZZ001" in ln or "rule.py" in ln]
    return None if len(lines) == 1 else f"{len(lines)} stderr lines name the rule"


def sqlite_case(kind: str) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        t = NsysTrace()
        for i in range(4):
            t.kernel("gemm", 1_000_000 + i * 300_000, 200_000)
        p = t.write(d / "t.sqlite")
        c = sqlite3.connect(p)
        if kind == "generated column":
            c.executescript("ALTER TABLE StringIds RENAME TO S0; CREATE TABLE StringIds (id INTEGER PRIMARY KEY, v0 TEXT, "
                            "value TEXT GENERATED ALWAYS AS (printf('%.*c', 20000000, 'x')) VIRTUAL); "
                            "INSERT INTO StringIds (id, v0) SELECT id, value FROM S0; DROP TABLE S0;")
        elif kind == "computed default":
            (sql,) = c.execute("SELECT sql FROM sqlite_master WHERE name = 'StringIds'").fetchone()
            c.execute("PRAGMA writable_schema = ON")
            c.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'StringIds'",
                      (sql.rstrip().rstrip(")") + ", extra TEXT DEFAULT (printf('%.*c', 900000000, 'x')))",))
        else:
            col, val = {"TEXT start": ("start", "12x"), "BLOB end": ("end", b"\x00\xff"), "REAL start": ("start", 1_500_000.5)}[kind]
            c.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{col}" = ? WHERE rowid = 2', (val,))
        c.commit()
        c.close()
        return [str(p), "-f", "json"]
    return build


def three_kernels(d: Path, p: subprocess.CompletedProcess) -> str | None:
    rep = json.loads(p.stdout)
    if rep["summary"]["kernel_count"] != 3:
        return f"{rep['summary']['kernel_count']} kernels kept"
    if not any("not an integer" in w for w in rep["trace"]["warnings"]):
        return "no warning with the reason"
    return None if any(f["code"] == "TI014" for f in rep["findings"]) else "TI014 missing"


def odd_kineto(kind: str) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        t = KinetoTrace()
        if kind == "overlapping steps":
            for i in range(2000):
                t.step(i, (i % 11) * 1000.0 + (i // 11) * 0.001, 1000.0)
            t.kernel("gemm", 100.0, 5000.0)
        elif kind == "repeated step numbers":
            for i in range(200):
                t.step(1, i * 1000.0, 900.0)
                t.kernel("gemm", i * 1000.0 + 100, 500.0)
        else:
            t.step(1, 0.0, 5000.0)
            t.kernel("gemm", 100.0, 1000.0)
            t.kernel("gemm", 2000.0, 1000.0)
            if kind == "far kernel":
                t.kernel("far", 1e12, 100.0)
            if kind == "negative duration":
                t.kernel("NEG", 3000.0, 100.0)
            if kind == "shared correlation":
                for i in range(500):
                    t.kernel("k", 3100.0 + i * 2, 1.0)
        doc = t.to_dict()
        for e in doc["traceEvents"]:
            if kind == "negative duration" and e.get("name") == "NEG" and e.get("cat") == "kernel":
                e["dur"] = -500.0
            if kind == "shared correlation":
                if "correlation" in e.get("args", {}):
                    e["args"]["correlation"] = 7
                if e.get("cat") == "ac2g":
                    e["id"] = 7
        p = d / "t.json"
        p.write_text(json.dumps(doc))
        return [str(p), "-f", "json", "--min-impact", "0"]
    return build


def odd_check(kind: str):
    def check(d: Path, p: subprocess.CompletedProcess) -> str | None:
        rep = json.loads(p.stdout)
        w = " ".join(rep["trace"]["warnings"])
        s = rep["summary"]
        if kind == "overlapping steps":
            return None if s["steps"]["count"] == 11 and "overlap an earlier step" in w else f"steps {s['steps']['count']}"
        if kind == "repeated step numbers":
            return None if s["steps"]["count"] == 200 and "repeat an earlier step" in w else f"steps {s['steps']['count']}"
        if kind == "far kernel":
            return None if s["span_ns"] < 10**9 and "from the rest of the trace" in w else f"span {s['span_ns']}"
        if kind == "negative duration":
            return None if s["kernel_count"] == 2 and "negative duration" in w else f"kernels {s['kernel_count']}"
        if kind == "shared correlation":
            return None if "share 1 correlation ids" in w else "no correlation warning"
        return None
    return check


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def missing_check(n: int):
    def check(d: Path, p: subprocess.CompletedProcess) -> str | None:
        rep = json.loads(p.stdout)
        return None if len(rep["missing_rank_files"]) == n and rep["summary"]["ranks"] == 3 else f"{rep['missing_rank_files']}"
    return check


def fifo_and_link(d: Path) -> list[str]:
    j = job(d)
    os.mkfifo(j / "rank3.json")
    (j / "rank4.json").symlink_to(kineto(d / "outside.json", rank=9))
    return [str(j), "-f", "json"]


def corrupt_ranks(d: Path) -> list[str]:
    j = job(d)
    for i in range(20):
        (j / f"bad{i:02d}.json").write_text('{"traceEvents": [}, {"ph": "X"}], "x": 1}')
    return [str(j / "*.json"), "-f", "json", "--fail-on", "error"]


def baseline_case(doc: dict) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        b = d / "b.json"
        b.write_text(json.dumps(doc))
        return [str(kineto(d / "t.json")), "--baseline", str(b), "-f", "md"]
    return build


def surrogate(d: Path) -> list[str]:
    t = KinetoTrace()
    t.step(1, 0.0, 2000.0)
    t.kernel("XSURX", 100.0, 300.0)
    p = d / "t.json"
    p.write_text(json.dumps(t.to_dict()).replace("XSURX", "ab\\ud800cd"))
    return [str(p), "-f", "json"]


def big_name(d: Path) -> list[str]:
    return [str(kineto(d / "t.json", names=("K" * 50_000_000, "gemm"))), "-f", "json"]


# --- judging --------------------------------------------------------------------------------------------------
def injected(text: str, markdown: bool) -> bool:
    if re.search(r"[\x1b\x07\u202e]", text):
        return True
    if not markdown:
        return bool(re.search(r"(?m)^# FAKE", text))
    return bool("<img" in text or "<script" in text or re.search(r"\]\(http", text) or re.search(r"(?m)^\s*#+\s*FAKE", text)
                or re.search(r"(?m)^\|\s*fake\s*\|", text) or "@victim" in text)


def cases() -> list[Case]:
    out: list[Case] = []
    for src_name, src in (("single", hostile_single), ("job", hostile_job)):
        for fmt in ("md", "text", "html", "json"):
            out.append(Case("1 escaping", f"{src_name} -f {fmt}", lambda d, src=src, fmt=fmt: [str(src(d)), "-f", fmt, "--min-impact", "0"], 0))
        out.append(Case("1 escaping", f"{src_name} -o folder (4 formats)",
                        lambda d, src=src: [str(src(d)), "-f", "md,text,html,json", "-o", str(d / "out"), "--min-impact", "0"], 0))
    for body in BODIES:
        for on_job in (False, True):
            out.append(Case("2-3 user rules", f"{body} ({'job' if on_job else 'single'})", rule_case(body, on_job), 6, report_written))

    def exits_on_import(d: Path) -> list[str]:
        (d / "r.py").write_text("import sys\nsys.exit(0)\n")
        return [str(kineto(d / "t.json")), "--rules", str(d / "r.py"), "--fail-on", "info"]
    out.append(Case("2-3 user rules", "sys.exit(0) on import", exits_on_import, 6, stderr_has="sys.exit(0)"))
    out.append(Case("2-3 user rules", "missing --rules file", lambda d: [str(kineto(d / "t.json")), "--rules", str(d / "nope.py")], 6))
    for kind in ("generated column", "computed default"):
        out.append(Case("4-5 SQLite", kind, sqlite_case(kind), 3, stderr_has=kind.split()[-1], timeout=30))
    for kind in ("TEXT start", "BLOB end", "REAL start"):
        out.append(Case("4-5 SQLite", kind, sqlite_case(kind), 0, three_kernels))
    bad_sets = ["TI001.min_gap_us=nan", "TI001.min_gap_us=-inf", "TI002.top_n=0", "TI007.speedup=0", "TI012.capture_ratio=0",
                "TI012.capture_ratio=-1", "TI008.max_severity=abc", "TI010.max_busy_pct=1e9", "TI005.include_tfdata_iterator=2"]
    for a in bad_sets:
        out.append(Case("6 options", f"--set {a}", lambda d, a=a: [str(kineto(d / "t.json")), "--set", a], 2, stderr_has="expects"))
    for flag, v in (("--min-impact", "inf"), ("--min-impact", "nan"), ("--worse-by", "nan"), ("--worse-by", "-inf"), ("--rule-timeout", "nan")):
        out.append(Case("6 options", f"{flag} {v}", lambda d, flag=flag, v=v: [str(kineto(d / "t.json")), flag, v, "--fail-on", "info"], 2,
                        stderr_has="from 0 to"))

    def pr_pyproject(d: Path) -> list[str]:
        (d / "pyproject.toml").write_text("[tool.traceinsight.rule.TI001]\nmin_gap_us = -1\n")
        return [str(kineto(d / "t.json"))]
    out.append(Case("6 options", "pull request pyproject (cwd)", pr_pyproject, 2, stderr_has="expects"))
    for addr in ("tcp://", "not an address", "tcp://h:99999"):
        out.append(Case("8 scheduler", f"--scheduler {addr!r}", lambda d, addr=addr: [str(job(d)), "--scheduler", addr], 7, timeout=15))
    out.append(Case("8 scheduler", "unreachable (env)", lambda d: [str(job(d))], 7, env={"TRACEINSIGHT_SCHEDULER": f"tcp://127.0.0.1:{free_port()}"},
                    timeout=15, stderr_has="no Dask scheduler answered"))
    out.append(Case("8 scheduler", "env + single trace stays local", lambda d: [str(kineto(d / "t.json")), "-f", "json"], 0,
                    env={"TRACEINSIGHT_SCHEDULER": "tcp://127.0.0.1:1"}))
    for kind in ("negative duration", "overlapping steps", "repeated step numbers", "shared correlation", "far kernel"):
        out.append(Case("9 plausibility", kind, odd_kineto(kind), 0, odd_check(kind)))
    out.append(Case("10 job inputs", "FIFO + link outside", fifo_and_link, 8, missing_check(2), stderr_has="not analysed"))
    out.append(Case("10 job inputs", "20 corrupt of 23 (glob, --fail-on)", corrupt_ranks, 8, missing_check(20)))
    out.append(Case("10 job inputs", "--allow-missing-ranks", lambda d: fifo_and_link(d) + ["--allow-missing-ranks"], 0, missing_check(2)))
    out.append(Case("11 small", "baseline from another tool", baseline_case({"findings": [{"fingerprint": "0123456789abcdef"}]}), 2))
    out.append(Case("11 small", "baseline 300 kB code", baseline_case({"schema_version": 1, "traceinsight_version": "0.1.0", "findings": [
        {"fingerprint": "0123456789abcdef", "code": "C" * 300_000, "title": "x"}]}), 0,
        lambda d, p: None if "C" * 21 not in p.stdout else "code printed in full"))
    out.append(Case("11 small", "lone surrogate", surrogate, 0,
                    lambda d, p: None if "ab\ufffdcd" in p.stdout or "ab\\ufffdcd" in p.stdout else "name lost"))
    out.append(Case("11 small", "50 MB kernel name", big_name, 0,
                    lambda d, p: None if len(p.stdout) < 2_000_000 else "report holds the whole name", timeout=60))
    out.append(Case("11 small", "--max-bytes 100", lambda d: [str(kineto(d / "t.json")), "--max-bytes", "100"], 3, stderr_has="--max-bytes"))
    return out


def run(case: Case, work: Path) -> dict:
    d = work / re.sub(r"\W+", "_", f"{case.cls}_{case.name}")[:80]
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    args = case.build(d)
    env = {**os.environ, "PYTHONPATH": os.environ.get("TI_CAMPAIGN_ROOT", str(ROOT)), **case.env}  # the checkout under test
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "traceinsight.cli.app", "analyze", *args], capture_output=True, text=True,
                           timeout=case.timeout, cwd=d, env=env, errors="replace")
    except subprocess.TimeoutExpired:
        return {"traceback": 1, "silent": 0, "injection": 0, "wrong": 0, "why": "timeout", "s": time.monotonic() - t0}
    res = {"traceback": int("Traceback" in p.stderr), "silent": 0, "injection": 0, "wrong": 0, "why": "", "s": time.monotonic() - t0}
    if p.returncode != case.expect_rc or (case.stderr_has and case.stderr_has not in p.stderr):
        res["silent"], res["why"] = 1, f"exit {p.returncode} (want {case.expect_rc}): {p.stderr.strip()[-300:]}"
    outputs = [(p.stdout, "-f md" in case.name), (p.stderr, False)]
    for f in (d / "out").glob("*") if (d / "out").is_dir() else []:
        outputs.append((f.read_text(errors="replace"), f.suffix == ".md"))
    if case.cls == "1 escaping":
        for text, md in outputs:
            if md or not text.lstrip().startswith(("{", "<")):
                res["injection"] |= int(injected(text, md))
            elif text.lstrip().startswith("<"):
                res["injection"] |= int("<img src=http://evil" in text or "<script>alert" in text or "<img src=x onerror" in text)
    if case.check and not res["silent"] and not res["traceback"]:
        try:
            why = case.check(d, p)
        except Exception as exc:  # noqa: BLE001 - a report that does not parse is a wrong result
            why = f"{type(exc).__name__}: {exc}"
        if why:
            res["wrong"], res["why"] = 1, why
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ti-round3-"))
    table: dict[str, list[int]] = {}
    for case in cases():
        if args.only and args.only not in f"{case.cls} {case.name}":
            continue
        r = run(case, work)
        row = table.setdefault(case.cls, [0, 0, 0, 0, 0])
        row[0] += 1
        for i, k in enumerate(("traceback", "silent", "injection", "wrong"), start=1):
            row[i] += r[k]
        if args.v or r["why"]:
            print(f"  {case.cls:16} {case.name:40} {r['s']:6.1f} s  {r['why'][:200]}", file=sys.stderr)
    print("| class | cases | tracebacks | silent passes | injections | wrong results |")
    print("|---|---:|---:|---:|---:|---:|")
    for cls, (n, tb, sp, inj, wr) in table.items():
        print(f"| {cls} | {n} | {tb} | {sp} | {inj} | {wr} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
