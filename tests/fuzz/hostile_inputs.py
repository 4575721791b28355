"""Hand-made hostile inputs for the ``traceinsight`` command, each run in a subprocess and classified.

Not collected by pytest (run it by hand or in a nightly job)::

    python tests/fuzz/hostile_inputs.py                 # every case, prints the taxonomy table
    python tests/fuzz/hostile_inputs.py --only bomb -v  # cases whose name or class contains "bomb", with details

Each case writes its inputs into ``<work>/<case>/in``, runs ``traceinsight analyze`` with a wall-clock timeout
and an address-space ceiling, and is classified (first match wins):

=============  ==================================================================================================
hang           still running at the timeout
OOM            MemoryError, exit 9 (out of memory), killed by the memory ceiling, or a peak RSS over ``--rss-mb`` (1 GiB)
crash          ended by a signal, or an exit code the README does not document (``vocab.errors``)
traceback      a Python traceback on stderr
code exec      a marker file written by code the run should never have executed (pyproject rules, nsys binary)
file damage    any byte, name or new file under ``in/`` (the inputs) changed, or a report left half-written
injection      a raw C0/C1 control, ESC, bidi or zero-width character in stdout, stderr or a text/Markdown/JSON report
wrong result   a report with a negative span, a share outside 0-100 %, NaN; an exit code the case forbids (e.g. an
               overwrite that succeeded); a case-specific check (e.g. names shifted by demangling)
unclean error  an error exit but not exactly one ``traceinsight: error:`` line on stderr (after a partial run,
               exit 6 or 8, only an indented list of what was lost may follow it)
clean error    exit 2-4 with one line (a bad option value: the command line's usage, a --help hint, one Error line)
ok             exit 0/1 (or a partial run, exit 6/8, that says what was lost) and a sane report
=============  ==================================================================================================

Input classes follow issue 14. File names here start with ``hostile_`` so they never collide with the reader fuzz
targets next to this file.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import sqlite3
import stat
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.kineto_writer import KinetoTrace  # noqa: E402
from tests.helpers.nsys_writer import NsysTrace  # noqa: E402
from traceinsight.vocab import errors  # noqa: E402

SAMPLES = ROOT / "sample_traces"
CORPUS = ROOT.parent / "shared" / "traces"
#: The command's exit codes (README "Exit codes"), read from their one home: 8 (a job with rank files not
#: analysed) and 9 (out of memory) are as documented as 0-4.
EXIT_DOCUMENTED = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
#: Exits that still write the report (a rule failed; rank files of a job not analysed): judged as a finished run,
#: the report checked for sanity, with one ``traceinsight: error:`` line last on stderr saying what was lost.
EXIT_PARTIAL = {errors.EXIT_RULE_FAILED, errors.EXIT_RANKS_MISSING}

#: Terminal attacks: clear screen, window title (OSC 0), clipboard (OSC 52), C1 CSI, bidi override, zero width.
ESC = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\u202etxt.exe\u200b\x9b31m"
PAYLOADS = {
    "esc_clear": "\x1b[2J\x1b[H",
    "osc_title": "\x1b]0;owned\x07",
    "osc52_clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "c1_csi": "\x9b2J\x9d0;x\x9c",
    "bidi_rlo": "safe\u202egnp.exe",
    "bidi_isolates": "\u2066\u2067\u2068a\u2069",
    "zero_width": "ker\u200bnel\u200d\ufeff\u2060",
    "backspace_cr": "good\rEVIL\x08\x08\x08\x7f",
    "nul_bel": "a\x00b\x07c",
    "rich_markup": "[bold red]x[/][link=file:///etc/passwd]y[/link]\\",
    "line_sep": "a\u2028b\u2029c\x85d",
    "tags": "\U000e0041\U000e0042",
}
RAW_BAD = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)
MD_BAD = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


@dataclass
class Case:
    name: str
    cls: str
    build: Callable[[Path, Path], list[str]]  # (in_dir, out_dir) -> argv after "analyze"
    report: bool = True  # append "-f text,json,md -o out/rep"
    expect: set[int] | None = None  # exit codes allowed; None: any documented code
    check: Callable[[Path, dict | None, str], str | None] | None = None  # (out_dir, json report, stdout) -> problem
    cwd_in: bool = False  # run inside in/ (pyproject discovery)
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None  # a path for stdout instead of a pipe
    preexec: Callable[[], None] | None = None
    timeout: float = 60.0


CASES: list[Case] = []


def case(name: str, cls: str, **kw):
    def deco(fn):
        CASES.append(Case(name, cls, fn, **kw))
        return fn

    return deco


# --- trace builders ----------------------------------------------------------------------------------------

def kineto(n_kernels: int = 30, **names) -> dict:
    """A small kineto trace with steps, ops, kernels, a copy and a sync; ``names`` overrides string fields."""
    t = KinetoTrace(device_name=names.get("device", "NVIDIA A100-SXM4-80GB"))
    kname = names.get("kernel", "volta_sgemm_128x64_nn")
    for s in range(3):
        base = s * 4000
        t.step(s + 1, base, 3500)
        op = t.cpu_op(names.get("op", "aten::mm"), base + 10, 200)
        for i in range(n_kernels // 3):
            t.kernel(kname, base + 50 + i * 100, 30, op=op)
        t.memcpy("HtoD", base + 3000, 100, 1 << 20, pageable=True)
        t.runtime("cudaStreamSynchronize", base + 3150, 200)
    d = t.to_dict()
    for e in d["traceEvents"]:
        if e.get("name") == "thread_name" and "thread" in names:
            e["args"]["name"] = names["thread"]
        if e.get("name") == "process_name" and "process" in names:
            e["args"]["name"] = names["process"]
        if e.get("cat") == "user_annotation" and "annotation" in names:
            e["name"] = names["annotation"]
    if "step" in names:
        for e in d["traceEvents"]:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = names["step"] + e["name"]
    return d


def dump(path: Path, doc: Any, gz: bool = False) -> Path:
    data = json.dumps(doc).encode() if not isinstance(doc, (bytes, str)) else (doc.encode("utf-8", "surrogatepass") if isinstance(doc, str) else doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def events_of(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat]


def nsys(**names) -> NsysTrace:
    t = NsysTrace(device_name=names.get("device", "NVIDIA A100-SXM4-80GB"))
    t.step(1, 0, 10_000_000)
    for i in range(20):
        t.kernel(names.get("kernel", "gemm"), 100_000 + i * 400_000, 20_000)
    t.sync(9_000_000, 500_000)
    if "thread" in names:
        t.thread_names[t.tid] = names["thread"]
    if "annotation" in names:
        t.annotation(names["annotation"], 50_000, 1_000_000)
    return t


# --- checks ------------------------------------------------------------------------------------------------

def sane_report(doc: dict | None, text: str) -> str | None:
    """A report's numbers are physically possible: span >= 0, shares within 0-100 %, no NaN or inf."""
    if doc is None:
        return None
    s = doc.get("summary", {})
    span = s.get("span_ns", 0)
    if not isinstance(span, (int, float)) or span < 0 or span >= 2**62:
        return f"span {span}"
    for key in ("gpu_busy_pct",):
        v = s.get(key)
        if v is not None and not (0 <= v <= 100.05):
            return f"{key} {v}"
    for d in s.get("devices", []):
        v = d.get("busy_pct")
        if v is not None and not (0 <= v <= 100.05):
            return f"device busy {v}"
    for f in doc.get("findings", []):
        if not (0 <= f.get("impact_ns", 0) <= max(span, 0) * 1.01 + 1):
            return f"{f.get('code')} impact {f.get('impact_ns')} > span {span}"
        p = f.get("impact_pct_span", 0)
        if p is None or isinstance(p, str) or not (0 <= p <= 100.05):
            return f"{f.get('code')} impact {p} % of span"
    for m in re.finditer(r"(-?[\d,]+(?:\.\d+)?) ?%", text):
        v = float(m.group(1).replace(",", ""))
        if v < 0 or v > 100.05:
            return f"text shows {m.group(0)}"
    if re.search(r"\b(nan|inf)\b", text, re.I) or re.search(r"span -\d", text):
        return "text shows nan/inf or a negative span"
    return None


def need_kernels(n: int):
    def check(out: Path, doc: dict | None, text: str) -> str | None:
        if doc is None:
            return "no report"
        got = doc["summary"].get("kernel_count", 0)
        return None if got >= n else f"kept {got} kernels, expected >= {n}"

    return check


def top_kernel_contains(word: str):
    def check(out: Path, doc: dict | None, text: str) -> str | None:
        if doc is None:
            return "no report"
        top = doc["summary"].get("top_kernels") or [{}]
        name = str(top[0].get("name", ""))
        return None if word in name else f"top kernel is {name!r}, expected {word!r} in it"

    return check


# --- 1. terminal escapes in every string field ----------------------------------------------------------------

for field_name in ("kernel", "op", "thread", "process", "device", "step", "annotation"):
    case(f"hostile_esc_{field_name}", "terminal escapes")(
        lambda i, o, f=field_name: [str(dump(i / "t.json", kineto(**{f: f"{f}{ESC}"})))]
    )
for pname, payload in PAYLOADS.items():
    case(f"hostile_payload_{pname}", "terminal escapes")(
        lambda i, o, p=payload: [str(dump(i / "t.json", kineto(kernel="k" + p, op="op" + p, thread="t" + p)))]
    )


@case("hostile_esc_file_name", "terminal escapes")
def _(i, o):
    return [str(dump(i / f"trace{ESC}.json", kineto()))]


@case("hostile_esc_folder_name", "terminal escapes")
def _(i, o):
    d = i / f"run{ESC}"
    dump(d / "a.json", kineto())
    return [str(d), "--trace-format", "pytorch"]


@case("hostile_esc_unreadable_file_name", "terminal escapes", expect={3})
def _(i, o):
    p = i / f"bad{ESC}.json"
    p.write_text("not a trace at all")
    return [str(p)]


@case("hostile_esc_unreadable_content", "terminal escapes", expect={3})
def _(i, o):
    p = i / "bad.json"
    p.write_text('{"traceEvents": 5, "x": "' + ESC.encode("unicode_escape").decode() + '"}')
    return [str(p)]


@case("hostile_esc_json_header_fields", "terminal escapes")
def _(i, o):
    d = kineto()
    d["traceName"] = "n" + ESC
    d["distributedInfo"] = {"backend": "b" + ESC, "rank": 0, "world_size": 1}
    d["deviceProperties"][0]["name"] = "dev" + ESC
    return [str(dump(i / "t.json", d))]


@case("hostile_esc_baseline_titles", "terminal escapes")
def _(i, o):
    t = dump(i / "t.json", kineto())
    b = dump(i / "base.json", {"findings": [{"fingerprint": "old", "code": "TI" + ESC, "title": "t" + ESC, "impact_pct_span": 3}]})
    return [str(t), "--baseline", str(b)]


@case("hostile_esc_baseline_error", "terminal escapes", expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    b = i / f"base{ESC}.json"
    b.write_text("[1, 2")
    return [str(t), "--baseline", str(b)]


@case("hostile_esc_output_path_error", "terminal escapes", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    blocker = o / f"f{ESC}"
    blocker.write_text("x")
    return [str(t), "-o", str(blocker / "r.md")]


@case("hostile_esc_run_name", "terminal escapes", expect={0, 1, 2, 3})
def _(i, o):
    d = i / "logdir"
    shutil.copytree(SAMPLES / "keras_lstm_fallback", d)
    return [str(d), "--run", "nope" + ESC]


for field_name in ("kernel", "thread", "device", "annotation"):
    case(f"hostile_esc_nsys_{field_name}", "terminal escapes")(
        lambda i, o, f=field_name: [str(nsys(**{f: f"{f}{ESC}"}).write(i / "t.sqlite"))]
    )


def _tf_json_hostile(i: Path, o: Path) -> list[str]:
    src = CORPUS / "tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12/instance-ecbm.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes())) if src.exists() else {"traceEvents": []}
    for e in doc.get("traceEvents", [])[::3]:
        if "name" in e:
            e["name"] = str(e["name"]) + ESC
    return [str(dump(i / "t.trace.json.gz", doc, gz=True)), "--trace-format", "tensorflow-json"]


case("hostile_esc_tf_json_names", "terminal escapes")(_tf_json_hostile)


@case("hostile_esc_xplane_names", "terminal escapes")
def _(i, o):
    src = next((SAMPLES / "keras_lstm_fallback").rglob("*.xplane.pb")).read_bytes()
    evil = b"\x1b[2J\x1b]0;x\x07\xe2\x80\xae"  # same length substitution keeps every protobuf length valid
    out = src
    for word in (b"volta", b"Eigen", b"cudnn", b"/device:GPU:0"):
        pos = out.find(word)
        if pos >= 0 and len(word) >= 4:
            n = min(len(word), len(evil))
            out = out[:pos] + evil[:n] + out[pos + n:]
    p = i / "plugins/profile/run1/host.xplane.pb"
    p.parent.mkdir(parents=True)
    p.write_bytes(out)
    return [str(p)]


# --- 2. overwrite attempts ----------------------------------------------------------------------------------

@case("hostile_overwrite_same_path", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    return [str(t), "-o", str(t)]


@case("hostile_overwrite_dotdot", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    (i / "sub").mkdir()
    return [str(t), "-o", str(i / "sub" / ".." / "t.json"), "-f", "json"]


@case("hostile_overwrite_symlink", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    (o / "link.json").symlink_to(t)
    return [str(t), "-o", str(o / "link.json")]


@case("hostile_overwrite_hardlink", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    os.link(t, o / "hard.json")
    return [str(t), "-o", str(o / "hard.json"), "-f", "md"]


@case("hostile_overwrite_gz_input", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json.gz", kineto(), gz=True)
    return [str(t), "-o", str(t), "-f", "json"]


@case("hostile_overwrite_file_in_input_folder", "overwrite", report=False, expect={2})
def _(i, o):
    d = i / "run"
    t = dump(d / "a.json", kineto())
    return [str(d), "--trace-format", "pytorch", "-o", str(t)]


@case("hostile_overwrite_new_file_in_input_folder", "overwrite", report=False, expect={2})
def _(i, o):
    d = i / "run"
    dump(d / "a.json", kineto())
    return [str(d), "--trace-format", "pytorch", "-o", str(d / "report.html")]


@case("hostile_overwrite_multi_into_input_folder", "overwrite", report=False, expect={2})
def _(i, o):
    d = i / "run"
    dump(d / "a.json", kineto())
    return [str(d), "--trace-format", "pytorch", "-f", "json,md", "-o", str(d)]


@case("hostile_overwrite_multi_name_is_input", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "traceinsight-report.json", kineto())
    return [str(t), "-f", "json,md", "-o", str(i)]


@case("hostile_overwrite_baseline", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    b = dump(i / "base.json", {"findings": []})
    return [str(t), "--baseline", str(b), "-o", str(b)]


@case("hostile_overwrite_config", "overwrite", report=False, expect={2})
def _(i, o):
    t = dump(i / "t.json", kineto())
    c = i / "pyproject.toml"
    c.write_text("[tool.traceinsight]\nselect = ['TI001']\n")
    return [str(t), "--config", str(c), "-o", str(c), "-f", "md"]


@case("hostile_overwrite_logdir_xplane", "overwrite", report=False, expect={2})
def _(i, o):
    d = i / "logdir"
    shutil.copytree(SAMPLES / "keras_lstm_fallback", d)
    pb = next(d.rglob("*.xplane.pb"))
    return [str(d), "-o", str(pb)]


@case("hostile_overwrite_symlinked_folder", "overwrite", report=False, expect={2})
def _(i, o):
    d = i / "run"
    dump(d / "a.json", kineto())
    (o / "alias").symlink_to(d)
    return [str(d), "--trace-format", "pytorch", "-o", str(o / "alias" / "r.md")]


# --- 3. output errors ---------------------------------------------------------------------------------------

@case("hostile_output_is_folder", "output errors", report=False, expect={2})
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "-o", str(o)]


@case("hostile_output_dev_full", "output errors", report=False, expect={2})
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "-o", "/dev/full"]


@case("hostile_output_stdout_dev_full", "output errors", report=False, expect={2}, stdout_to="/dev/full")
def _(i, o):
    return [str(dump(i / "t.json", kineto()))]


@case("hostile_output_proc", "output errors", report=False, expect={2})
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "-o", "/proc/traceinsight.json"]


@case("hostile_output_parent_is_file", "output errors", report=False, expect={2})
def _(i, o):
    (o / "file").write_text("x")
    return [str(dump(i / "t.json", kineto())), "-o", str(o / "file" / "sub" / "r.json")]


@case("hostile_output_name_too_long", "output errors", report=False, expect={2})
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "-o", str(o / ("r" * 300 + ".md"))]


@case("hostile_output_multi_dir_is_file", "output errors", report=False, expect={2})
def _(i, o):
    (o / "file").write_text("x")
    return [str(dump(i / "t.json", kineto())), "-f", "json,md", "-o", str(o / "file")]


@case("hostile_output_dev_null", "output errors", report=False, expect={0, 1})
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "-o", "/dev/null", "-f", "json"]


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def _old_report_kept(out: Path, doc: dict | None, text: str) -> str | None:
    names = sorted(p.name for p in out.iterdir())
    if (out / "r.html").read_text() != "previous":
        return "the previous report was damaged"
    return None if names == ["r.html"] else f"left {names}"


@case("hostile_output_efbig_atomic", "output errors", report=False, expect={2}, preexec=_small_files, check=_old_report_kept)
def _(i, o):
    (o / "r.html").write_text("previous")
    return [str(dump(i / "t.json", kineto())), "-o", str(o / "r.html")]


# --- 4. huge numbers and int64 ranges ---------------------------------------------------------------------

def _set_all(doc: dict, cat: str | None, key: str, value: Any, in_args: bool = False) -> dict:
    for e in doc["traceEvents"]:
        if cat is None or e.get("cat") == cat:
            if in_args:
                e.setdefault("args", {})[key] = value
            elif key in e:
                e[key] = value
    return doc


NUMBERS = {
    "ts_1e300": ("kernel", "ts", 1e300, False),
    "ts_neg_1e300": ("kernel", "ts", -1e300, False),
    "dur_1e300": ("kernel", "dur", 1e300, False),
    "dur_negative": ("kernel", "dur", -50, False),
    "ts_2pow63": ("kernel", "ts", 2**63, False),
    "dur_2pow64": ("kernel", "dur", 2**64, False),
    "ts_2pow62_us": ("kernel", "ts", 2**62, False),
    "pid_2pow63": ("cpu_op", "pid", 2**63, False),
    "tid_2pow70": ("cpu_op", "tid", 2**70, False),
    "stream_list": ("kernel", "stream", [1], True),
    "stream_string": ("kernel", "stream", "seven", True),
    "correlation_1e30": ("kernel", "correlation", 1e30, True),
    "bytes_1e40": ("gpu_memcpy", "bytes", 1e40, True),
    "grid_huge": ("kernel", "grid", [2**40, 2**40, 2**40], True),
    "grid_negative": ("kernel", "grid", [-1, 0, -5], True),
    "device_1e20": ("kernel", "device", 1e20, True),
    "ts_nan": ("kernel", "ts", float("nan"), False),
    "dur_inf": ("kernel", "dur", float("inf"), False),
}
for nname, (cat, key, value, in_args) in NUMBERS.items():
    case(f"hostile_num_{nname}", "huge numbers")(
        lambda i, o, c=cat, k=key, v=value, a=in_args: [str(dump(i / "t.json", _set_all(kineto(), c, k, v, a)))]
    )


@case("hostile_num_1e400_literal", "huge numbers")
def _(i, o):
    text = json.dumps(kineto()).replace('"dur": 30.0', '"dur": 1e400', 5)
    return [str(dump(i / "t.json", text))]


@case("hostile_num_70_digit_string", "huge numbers")
def _(i, o):
    text = json.dumps(kineto()).replace('"dur": 30.0', '"dur": ' + "9" * 70, 3)
    return [str(dump(i / "t.json", text))]


@case("hostile_num_5000_digit_int", "huge numbers")
def _(i, o):
    text = json.dumps(kineto()).replace('"dur": 30.0', '"dur": ' + "9" * 5000, 1)
    return [str(dump(i / "t.json", text))]


@case("hostile_num_base_time_2pow70", "huge numbers")
def _(i, o):
    d = kineto()
    d["baseTimeNanoseconds"] = 2**70
    return [str(dump(i / "t.json", d))]


@case("hostile_num_rank_1e30", "huge numbers")
def _(i, o):
    d = kineto()
    d["distributedInfo"] = {"backend": "nccl", "rank": 1e30, "world_size": -3}
    return [str(dump(i / "t.json", d))]


@case("hostile_num_num_sms_zero", "huge numbers")
def _(i, o):
    d = kineto()
    d["deviceProperties"][0]["numSms"] = 0
    return [str(dump(i / "t.json", d))]


@case("hostile_num_far_apart_events", "huge numbers")
def _(i, o):
    d = kineto()
    for e in events_of(d, "kernel")[-3:]:
        e["ts"] = e["ts"] + 1e15  # 31 years later, still inside int64 ns
    return [str(dump(i / "t.json", d))]


@case("hostile_num_nsys_huge_times", "huge numbers")
def _(i, o):
    p = nsys().write(i / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775000, end = 9223372036854775807 WHERE rowid % 3 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid % 3 = 1")
    con.commit()
    con.close()
    return [str(p)]


@case("hostile_num_nsys_text_in_int", "huge numbers")
def _(i, o):
    p = nsys().write(i / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon', deviceId = 1e30 WHERE rowid % 4 = 0")
    con.commit()
    con.close()
    return [str(p)]


# --- 5. bombs and size ----------------------------------------------------------------------------------------

def _gzip_bomb(path: Path, inflated: int, prefix: bytes = b'{"traceEvents": [', filler: bytes = b" ") -> Path:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = filler * (1 << 20)
    with open(path, "wb") as f:
        f.write(comp.compress(prefix))
        for _ in range(inflated >> 20):
            f.write(comp.compress(chunk))
        f.write(comp.compress(b"]}"))
        f.write(comp.flush())
    return path


@case("hostile_bomb_gzip_4gib_spaces", "bombs", expect={3}, timeout=120)
def _(i, o):
    return [str(_gzip_bomb(i / "bomb.json.gz", 4 << 30))]


@case("hostile_bomb_gzip_1gib_zeros", "bombs", expect={3}, timeout=120)
def _(i, o):
    return [str(_gzip_bomb(i / "bomb.json.gz", 1 << 30, prefix=b"", filler=b"\0"))]


@case("hostile_bomb_nested_gzip", "bombs", expect={3}, timeout=120)
def _(i, o):
    inner = _gzip_bomb(o / "inner.gz", 512 << 20).read_bytes()
    p = i / "bomb.json.gz"
    p.write_bytes(gzip.compress(inner))
    return [str(p)]


@case("hostile_bomb_huge_name", "bombs", timeout=120)
def _(i, o):
    return [str(dump(i / "t.json", kineto(n_kernels=3, kernel="k" * (30 << 20) + ESC)))]  # 3 x 30 MB names


@case("hostile_bomb_deep_array", "bombs", expect={3}, timeout=120)
def _(i, o):
    return [str(dump(i / "t.json", '{"traceEvents": [' + "[" * 5_000_000 + "]" * 5_000_000 + "]}"))]


@case("hostile_bomb_deep_object_in_args", "bombs", expect={3}, timeout=120)  # deeper than msgspec recurses: one error on both paths
def _(i, o):
    text = json.dumps(kineto()).replace('"args": {"External id"', '"args": {"deep": ' + '{"a":' * 200_000 + "1" + "}" * 200_000 + ', "External id"', 1)
    return [str(dump(i / "t.json", text))]


@case("hostile_bomb_many_distinct_names", "bombs", timeout=180)
def _(i, o):
    t = KinetoTrace()
    t.step(1, 0, 300_000)
    for n in range(60_000):
        t.kernel(f"k{n}{ESC}", 10 + n * 5, 2)
    return [str(t.write(i / "t.json.gz"))]


@case("hostile_bomb_xplane_huge_length", "bombs", expect={3}, timeout=120)
def _(i, o):
    p = i / "plugins/profile/r/h.xplane.pb"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 64)  # field 1, length 4 GiB, 64 bytes present
    return [str(p)]


# --- 6. non-regular files and special paths -----------------------------------------------------------------

SPECIAL = {
    "dev_zero": ["/dev/zero"],
    "dev_zero_forced_pytorch": ["/dev/zero", "--trace-format", "pytorch"],
    "dev_zero_forced_xplane": ["/dev/zero", "--trace-format", "tensorflow-xplane"],
    "dev_zero_forced_nsys": ["/dev/zero", "--trace-format", "nsys"],
    "dev_urandom_forced": ["/dev/urandom", "--trace-format", "pytorch"],
    "dev_null": ["/dev/null"],
    "missing_file": ["/nonexistent/trace.json"],
}
for sname, sargs in SPECIAL.items():
    case(f"hostile_special_{sname}", "non-regular files", expect={2, 3}, timeout=60)(lambda i, o, a=sargs: list(a))


@case("hostile_special_fifo", "non-regular files", expect={2, 3}, timeout=30)
def _(i, o):
    os.mkfifo(i / "t.json")
    return [str(i / "t.json")]


@case("hostile_special_fifo_in_folder", "non-regular files", timeout=30, expect={8})  # the usable rank analysed, the FIFO listed
def _(i, o):
    d = i / "run"
    dump(d / "a.json", kineto())
    os.mkfifo(d / "b.json")
    return [str(d), "--trace-format", "pytorch"]


@case("hostile_special_symlink_loop", "non-regular files", expect={2, 3})
def _(i, o):
    (i / "a.json").symlink_to(i / "b.json")
    (i / "b.json").symlink_to(i / "a.json")
    return [str(i / "a.json")]


@case("hostile_special_symlink_to_dev_zero", "non-regular files", expect={2, 3})
def _(i, o):
    (i / "t.json").symlink_to("/dev/zero")
    return [str(i / "t.json")]


@case("hostile_special_empty_folder", "non-regular files", expect={2, 3})
def _(i, o):
    (i / "empty").mkdir()
    return [str(i / "empty")]


@case("hostile_special_folder_loop", "non-regular files", timeout=60)
def _(i, o):
    d = i / "run"
    dump(d / "a.json", kineto())
    (d / "loop").symlink_to(d)
    return [str(d), "--trace-format", "pytorch"]


for bname, bpath in {"dev_zero": "/dev/zero", "dev_urandom": "/dev/urandom", "folder": "/tmp"}.items():
    case(f"hostile_baseline_{bname}", "non-regular files", expect={2}, timeout=60)(
        lambda i, o, b=bpath: [str(dump(i / "t.json", kineto())), "--baseline", b]
    )


@case("hostile_baseline_fifo", "non-regular files", expect={2}, timeout=30)
def _(i, o):
    os.mkfifo(i / "b.json")
    return [str(dump(i / "t.json", kineto())), "--baseline", str(i / "b.json")]


@case("hostile_baseline_sparse_10gib", "non-regular files", expect={2}, timeout=60)
def _(i, o):
    with open(i / "b.json", "wb") as f:
        f.truncate(10 << 30)
    return [str(dump(i / "t.json", kineto())), "--baseline", str(i / "b.json")]


@case("hostile_baseline_deep", "non-regular files", expect={2})
def _(i, o):
    (i / "b.json").write_text("[" * 1_000_000)
    return [str(dump(i / "t.json", kineto())), "--baseline", str(i / "b.json")]


@case("hostile_baseline_wrong_types", "non-regular files")
def _(i, o):
    b = dump(i / "b.json", {"findings": [{"fingerprint": "x", "impact_pct_span": "1e999", "code": {"a": 1}, "title": None}]})
    return [str(dump(i / "t.json", kineto())), "--baseline", str(b)]


@case("hostile_config_dev_zero", "non-regular files", expect={2}, timeout=60)
def _(i, o):
    return [str(dump(i / "t.json", kineto())), "--config", "/dev/zero"]


# --- 7. truncated files ----------------------------------------------------------------------------------------

def _truncated(frac: float, gz: bool = False):
    def build(i: Path, o: Path) -> list[str]:
        data = json.dumps(kineto(n_kernels=300)).encode()
        cut = data[: int(len(data) * frac)]
        p = i / ("t.json.gz" if gz else "t.json")
        p.write_bytes(gzip.compress(data)[: int(len(gzip.compress(data)) * frac)] if gz else cut)
        return [str(p)]

    return build


for frac, need in ((0.98, 200), (0.9, 150), (0.6, 60), (0.3, 1)):
    case(f"hostile_trunc_json_{int(frac * 100)}pct", "truncated files", check=need_kernels(need))(_truncated(frac))
case("hostile_trunc_gz_80pct", "truncated files", check=need_kernels(100))(_truncated(0.8, gz=True))
case("hostile_trunc_header_only", "truncated files", expect={0, 1, 3})(_truncated(0.02))


@case("hostile_trunc_mid_string", "truncated files", check=need_kernels(50))
def _(i, o):
    data = json.dumps(kineto(n_kernels=300))
    cut = data.rfind('"name": "volta_sgemm') + 15
    return [str(dump(i / "t.json", data[:cut]))]


@case("hostile_trunc_empty", "truncated files", expect={3})
def _(i, o):
    (i / "t.json").write_bytes(b"")
    return [str(i / "t.json")]


@case("hostile_trunc_one_byte", "truncated files", expect={3})
def _(i, o):
    (i / "t.json").write_bytes(b"{")
    return [str(i / "t.json")]


@case("hostile_trunc_sqlite", "truncated files", expect={3})
def _(i, o):
    data = nsys().write(o / "full.sqlite").read_bytes()
    p = i / "t.sqlite"
    p.write_bytes(data[: len(data) // 2])
    return [str(p)]


@case("hostile_trunc_xplane", "truncated files", expect={0, 1, 3})
def _(i, o):
    data = next((SAMPLES / "keras_lstm_fallback").rglob("*.xplane.pb")).read_bytes()
    p = i / "plugins/profile/r/h.xplane.pb"
    p.parent.mkdir(parents=True)
    p.write_bytes(data[: len(data) * 2 // 3])
    return [str(p)]


def _big_cut(glue: bytes, keep_tail: int = 0):
    """60,000 kernels cut 5,000 bytes before the end, ``glue`` after the cut (a partial event from a restarted
    writer, NULs from a crashed file system), and optionally the last ``keep_tail`` bytes of the full file after
    that (damage with intact events after it, which is not a cut)."""
    def build(i: Path, o: Path) -> list[str]:
        t = KinetoTrace()
        t.step(1, 0, 10_000_000)
        for n in range(60_000):
            t.kernel("k", 10 + n * 100, 50)
        data = json.dumps(t.to_dict()).encode()
        p = i / "t.json"
        p.write_bytes(data[: len(data) - 5000] + glue + (data[-keep_tail:] if keep_tail else b""))
        return [str(p)]

    return build


# A cut whose tail is a partial event is a truncation whatever bytes follow the cut: every complete event before it
# is kept (59,000+ of 60,000 here), with the truncation warning, in linear time on both paths.
case("hostile_trunc_big_linear_time", "truncated files", timeout=60, check=need_kernels(59_000))(
    _big_cut(b'{"ph": "X", "na'))
case("hostile_trunc_nul_tail", "truncated files", timeout=60, check=need_kernels(59_000))(_big_cut(b"\0" * 8192))
# damage followed by intact events (a stretch lost in the middle) is an error, not a cut
case("hostile_trunc_damage_then_events", "truncated files", expect={3}, timeout=60)(
    _big_cut(b'{"ph": "X", "na', keep_tail=3000))


# --- 8. invalid UTF-8 and encodings ---------------------------------------------------------------------------

def _bytes_replace(doc: dict, old: str, new: bytes) -> bytes:
    return json.dumps(doc).encode().replace(old.encode(), new)


UTF8 = {
    "kernel_name": ("volta_sgemm_128x64_nn", b"volta\xff\xfe\xc0\xafsgemm"),
    "header_field": ("kineto_writer", b"kin\xffeto"),
    "thread_name": ("(python)", b"(py\xed\xa0\x80thon)"),  # an encoded surrogate
    "overlong_slash": ("aten::mm", b"aten\xc0\xaf\xe0\x80\xafmm"),
    "device_name": ("NVIDIA A100-SXM4-80GB", b"NVIDIA \xf8\x88\x80\x80\x80"),
}
for uname, (old, new) in UTF8.items():
    case(f"hostile_utf8_{uname}", "invalid UTF-8")(
        lambda i, o, a=old, b=new: [str(dump(i / "t.json", _bytes_replace(kineto(), a, b)))]
    )


@case("hostile_utf8_escaped_lone_surrogate", "invalid UTF-8")
def _(i, o):
    return [str(dump(i / "t.json", json.dumps(kineto()).replace("volta_sgemm", "volta\\udc80\\ud800sgemm")))]


@case("hostile_utf8_nul_in_names", "invalid UTF-8")
def _(i, o):
    return [str(dump(i / "t.json", kineto(kernel="a\x00b", op="op\x00")))]


@case("hostile_utf8_bom", "invalid UTF-8")
def _(i, o):
    return [str(dump(i / "t.json", b"\xef\xbb\xbf" + json.dumps(kineto()).encode()))]


@case("hostile_utf8_utf16_file", "invalid UTF-8", expect={0, 1, 3})
def _(i, o):
    return [str(dump(i / "t.json", json.dumps(kineto()).encode("utf-16")))]


@case("hostile_utf8_nsys_invalid_string", "invalid UTF-8")
def _(i, o):
    p = nsys(kernel="gemmXX").write(i / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE StringIds SET value = CAST(X'67656d6dff80' AS TEXT) WHERE value = 'gemmXX'")
    con.commit()
    con.close()
    return [str(p)]


# --- 9. bad fields and structure --------------------------------------------------------------------------------

def _mut(fn):
    def build(i: Path, o: Path) -> list[str]:
        d = kineto()
        fn(d)
        return [str(dump(i / "t.json", d))]

    return build


BAD_FIELDS = {
    "args_list": lambda d: _set_all(d, "kernel", "args", [], False),
    "args_string": lambda d: _set_all(d, "kernel", "args", "x", False),
    "name_int": lambda d: _set_all(d, "kernel", "name", 123, False),
    "name_null": lambda d: _set_all(d, "kernel", "name", None, False),
    "ph_unknown": lambda d: _set_all(d, "kernel", "ph", "?", False),
    "ts_string": lambda d: _set_all(d, "kernel", "ts", "12", False),
    "dur_string": lambda d: _set_all(d, "kernel", "dur", "abc", False),
    "grid_bad_json_string": lambda d: _set_all(d, "kernel", "grid", "[1,2", True),
    "grid_object": lambda d: _set_all(d, "kernel", "grid", {"x": 1}, True),
    "events_not_list": lambda d: d.__setitem__("traceEvents", {"a": 1}),
    "events_null": lambda d: d.__setitem__("traceEvents", None),
    "events_missing": lambda d: d.pop("traceEvents"),
    "device_props_garbage": lambda d: d.__setitem__("deviceProperties", [1, "x", None, {"id": "zero"}]),
    "flow_without_id": lambda d: [e.pop("id", None) for e in d["traceEvents"] if e.get("cat") == "ac2g"],
    "event_is_number": lambda d: d["traceEvents"].extend([5, "x", None, []]),
}
for bname, fn in BAD_FIELDS.items():
    case(f"hostile_field_{bname}", "bad fields", expect={0, 1, 3})(_mut(fn))


@case("hostile_field_duplicate_keys", "bad fields", expect={0, 1, 3})
def _(i, o):
    text = json.dumps(kineto()).replace('"ph": "X"', '"ph": "X", "ph": "M"', 3)
    return [str(dump(i / "t.json", text))]


@case("hostile_field_top_level_array", "bad fields", expect={0, 1, 3})
def _(i, o):
    return [str(dump(i / "t.json", kineto()["traceEvents"]))]


@case("hostile_field_nsys_missing_string_ids", "bad fields", expect={0, 1, 3})
def _(i, o):
    p = nsys().write(i / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("DELETE FROM StringIds")
    con.commit()
    con.close()
    return [str(p)]


@case("hostile_field_nsys_no_kernel_table", "bad fields", expect={0, 1, 3})
def _(i, o):
    p = nsys().write(i / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    return [str(p)]


@case("hostile_field_xplane_byte_flips", "bad fields", expect={0, 1, 3})
def _(i, o):
    data = bytearray(next((SAMPLES / "keras_lstm_fallback").rglob("*.xplane.pb")).read_bytes())
    for k in range(50, len(data), max(len(data) // 40, 1)):
        data[k] ^= 0x5A
    p = i / "plugins/profile/r/h.xplane.pb"
    p.parent.mkdir(parents=True)
    p.write_bytes(bytes(data))
    return [str(p)]


@case("hostile_field_sqlite_not_nsys", "bad fields", expect={3})
def _(i, o):
    con = sqlite3.connect(i / "t.sqlite")
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    return [str(i / "t.sqlite")]


@case("hostile_field_random_bytes_json_name", "bad fields", expect={3})
def _(i, o):
    (i / "t.json").write_bytes(os.urandom(100_000))
    return [str(i / "t.json")]


# --- 10. nsys WAL and the converter binary -----------------------------------------------------------------------

def _wal_read_or_warned(out: Path, doc: dict | None, text: str) -> str | None:
    """The WAL holds a committed copy of every kernel: read it (40 kernels) or say it was not read."""
    if doc is None:
        return "no report"
    warned = any("wal" in str(w).lower() for w in doc["trace"].get("warnings", []) + doc.get("warnings", []))
    n = doc["summary"].get("kernel_count", 0)
    return None if n >= 40 or warned else f"{n} kernels, committed WAL rows ignored without a warning"


@case("hostile_nsys_wal_pending", "nsys WAL", check=_wal_read_or_warned)
def _(i, o):
    p = nsys().write(i / "t.sqlite")
    src = sqlite3.connect(p)
    src.execute("PRAGMA journal_mode=WAL")
    src.execute("PRAGMA wal_autocheckpoint=0")
    src.commit()
    src.close()
    con = sqlite3.connect(p)
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    # copy the database and its -wal while the WAL still holds the commit (a crashed or live writer)
    for suffix in ("", "-wal"):
        if Path(str(p) + suffix).exists():
            shutil.copy(str(p) + suffix, str(i / "w.sqlite") + suffix)
    con.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(p) + suffix).unlink(missing_ok=True)
    return [str(i / "w.sqlite")]


def _marker_absent(out: Path, doc: dict | None, text: str) -> str | None:
    return "CODE EXEC" if (out / "pwned").exists() else None


@case("hostile_exec_traceinsight_nsys", "code execution", check=_marker_absent, expect={0, 1, 2, 3},
      env={"TRACEINSIGHT_NSYS": "{out}/fake_nsys.sh"})
def _(i, o):
    script = o / "fake_nsys.sh"
    script.write_text(f"#!/bin/sh\ntouch {o}/pwned\nexit 1\n")
    script.chmod(0o755)
    (i / "t.nsys-rep").write_bytes(b"NSYS-REP-garbage" * 100)
    return [str(i / "t.nsys-rep")]


@case("hostile_exec_pyproject_rules", "code execution", check=_marker_absent, cwd_in=True, expect={0, 1, 2, 3})
def _(i, o):
    (i / "evil.py").write_text(f"open({str(o / 'pwned')!r}, 'w').write('x')\n")
    (i / "pyproject.toml").write_text('[tool.traceinsight]\nrules = ["evil.py"]\n')
    return [str(dump(i / "t.json", kineto()))]


# --- 11. demangling ----------------------------------------------------------------------------------------------

@case("hostile_demangle_cr_shift", "demangling", check=top_kernel_contains("biggest"))
def _(i, o):
    t = KinetoTrace()
    t.step(1, 0, 10_000)
    t.kernel("_Z5firsti\r_Z6secondi", 100, 10)
    t.kernel("_Z5smalli", 200, 10)
    t.kernel("_Z7biggesti", 400, 5000)
    return [str(t.write(i / "t.json"))]


@case("hostile_demangle_newline_nul", "demangling", check=top_kernel_contains("biggest"))
def _(i, o):
    t = KinetoTrace()
    t.step(1, 0, 10_000)
    t.kernel("_Z1ai\n_Z1bi", 100, 10)
    t.kernel("_Z1ci\x00_Z1di", 150, 10)
    t.kernel("_Z7biggesti", 400, 5000)
    return [str(t.write(i / "t.json"))]


# --- runner ------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    label: str
    rc: int | None
    seconds: float
    rss_mb: float
    detail: str = ""


def _tree_digest(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_size > (256 << 20):  # sparse giants: size, time and inode
                out[rel] = f"big:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                out[rel] = h.hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            else:
                out[rel] = stat.filemode(st.st_mode)
    return out


def run_case(c: Case, work: Path, rss_limit_mb: int, as_limit_mb: int) -> Outcome:
    cdir = work / c.name
    shutil.rmtree(cdir, ignore_errors=True)
    in_dir, out_dir = cdir / "in", cdir / "out"
    in_dir.mkdir(parents=True)
    out_dir.mkdir()
    try:
        args = c.build(in_dir, out_dir)
    except Exception as exc:  # a broken case is a harness bug: say so, do not hide it
        return Outcome(c, "harness error", None, 0.0, 0.0, f"{type(exc).__name__}: {exc}")
    if c.report:
        args = [*args, "-f", "text,json,md", "-o", str(out_dir / "rep")]
    before = _tree_digest(in_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "TRACEINSIGHT"))}
    env.update({"COLUMNS": "120", "PYTHONFAULTHANDLER": "1"})
    env.update({k: v.replace("{out}", str(out_dir)) for k, v in c.env.items()})
    stdout_path = Path(c.stdout_to) if c.stdout_to else cdir / "stdout"

    def limits() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (as_limit_mb << 20, as_limit_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if c.preexec:
            c.preexec()

    argv = [sys.executable, "-m", "traceinsight.cli.app", "analyze", *args]
    t0 = time.monotonic()
    with open(stdout_path, "wb") as so, open(cdir / "stderr", "wb") as se, open(os.devnull, "rb") as si:
        import subprocess

        proc = subprocess.Popen(argv, stdin=si, stdout=so, stderr=se, env=env, cwd=str(in_dir if c.cwd_in else cdir),
                                preexec_fn=limits)
        hung = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > c.timeout:
                hung = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
    secs = time.monotonic() - t0
    rss = ru.ru_maxrss / 1024.0
    rc = proc.returncode
    out_b = b"" if c.stdout_to else stdout_path.read_bytes()
    err_b = (cdir / "stderr").read_bytes()
    err = err_b.decode("utf-8", "replace")
    after = _tree_digest(in_dir)

    def done(label: str, detail: str = "") -> Outcome:
        return Outcome(c, label, rc, secs, rss, detail)

    if hung:
        return done("hang", f"killed after {c.timeout:.0f} s")
    if "MemoryError" in err or rc == 9 or rss > rss_limit_mb or (rc is not None and rc < 0 and rss > as_limit_mb * 0.8):
        return done("OOM", f"peak RSS {rss:.0f} MB" + (" MemoryError" if "MemoryError" in err else ""))
    if rc is None or rc < 0 or rc not in EXIT_DOCUMENTED or "Fatal Python error" in err:
        return done("crash", f"exit {rc}: {err.strip().splitlines()[-1:] if err.strip() else ''}")
    if "Traceback (most recent call last)" in err:
        return done("traceback", err.strip().splitlines()[-1][:200])
    if (out_dir / "pwned").exists():
        return done("code exec", "a marker was written by code from the input")
    if before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        return done("file damage", f"inputs changed: {[k for k, _ in changed][:4]}")
    stray = [p.name for p in out_dir.rglob("*.tmp")]
    if stray:
        return done("file damage", f"temporary files left: {stray[:3]}")
    texts = {"stdout": out_b.decode("utf-8", "replace"), "stderr": err}
    reports = out_dir / "rep"
    doc = None
    for name in ("traceinsight-report.txt", "traceinsight-report.md", "traceinsight-report.json"):
        p = reports / name
        if p.exists():
            texts[name] = p.read_text(encoding="utf-8", errors="replace")
    for where, text in texts.items():
        bad = (MD_BAD if where.endswith(".md") else RAW_BAD).search(text.replace("\t", " "))
        if bad:
            return done("injection", f"raw {bad.group()!r} in {where}")
    if "traceinsight-report.json" in texts:
        try:
            doc = json.loads(texts["traceinsight-report.json"])
        except ValueError as exc:
            return done("wrong result", f"JSON report does not parse: {exc}")
    if rc in (0, 1) or rc in EXIT_PARTIAL:
        problem = sane_report(doc, texts.get("traceinsight-report.txt", texts["stdout"]))
        if problem:
            return done("wrong result", problem)
    if c.check:
        problem = c.check(out_dir, doc, texts["stdout"])
        if problem:
            return done("code exec" if problem == "CODE EXEC" else "wrong result", problem)
    if c.expect is not None and rc not in c.expect:
        return done("wrong result", f"exit {rc}, expected {sorted(c.expect)}: {err.strip()[:160]}")
    if rc in (0, 1):
        return done("ok")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    heads = [i for i, ln in enumerate(lines) if ln.startswith("traceinsight: error: ")]
    if rc in EXIT_PARTIAL and len(heads) == 1 and all(ln.startswith(" ") for ln in lines[heads[0] + 1:]):
        return done("ok", lines[heads[0]][:200])  # what was lost, and the list of it (indented) below
    if len(lines) == 1 and lines[0].startswith("traceinsight: error: "):
        return done("clean error", lines[0][:200])
    if rc == errors.EXIT_USAGE and len(lines) == 3 and lines[0].startswith("Usage: ") and lines[2].startswith("Error: "):
        return done("clean error", lines[2][:200])  # a bad option value, refused before reading: the usage, a hint, one Error line
    return done("unclean error", " | ".join(lines[-3:])[:200])


LABELS = ["ok", "clean error", "unclean error", "traceback", "crash", "hang", "OOM", "wrong result", "injection",
          "file damage", "code exec", "harness error"]


def table(outcomes: list[Outcome]) -> str:
    classes = list(dict.fromkeys(o.case.cls for o in outcomes))
    counts = {cl: collections.Counter(o.label for o in outcomes if o.case.cls == cl) for cl in classes}
    used = [lb for lb in LABELS if any(counts[cl][lb] for cl in classes) or lb in ("traceback", "crash", "hang", "OOM", "wrong result", "injection", "file damage")]
    head = ["class", "inputs", *used]
    rows = [[cl, str(sum(counts[cl].values())), *(str(counts[cl][lb]) for lb in used)] for cl in classes]
    total = collections.Counter(o.label for o in outcomes)
    rows.append(["TOTAL", str(len(outcomes)), *(str(total[lb]) for lb in used)])
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    fmt = lambda r: "| " + " | ".join(v.ljust(widths[k]) if k == 0 else v.rjust(widths[k]) for k, v in enumerate(r)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run cases whose name or class contains this text")
    ap.add_argument("--work", type=Path, help="where to build the inputs (default: a temporary folder, removed)")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2))))
    ap.add_argument("--rss-mb", type=int, default=1024, help="peak RSS above this counts as OOM")
    ap.add_argument("--as-mb", type=int, default=4096, help="address-space ceiling of each run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not only the failures")
    ns = ap.parse_args()
    cases = [c for c in CASES if not ns.only or ns.only in c.name or ns.only in c.cls]
    work = ns.work or Path(tempfile.mkdtemp(prefix="hostile_inputs_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(ns.jobs) as pool:
        outcomes = list(pool.map(lambda c: run_case(c, work, ns.rss_mb, ns.as_mb), cases))
    bad = {"ok", "clean error"}
    for o in outcomes:
        if ns.verbose or o.label not in bad:
            print(f"{o.label:<14} {o.case.name:<48} exit={o.rc} {o.seconds:5.1f}s {o.rss_mb:6.0f}MB  {o.detail}")
    print()
    print(f"{len(outcomes)} hostile inputs in {time.monotonic() - t0:.0f} s (timeout per case, RSS limit {ns.rss_mb} MB)")
    print(table(outcomes))
    if ns.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(o.label not in bad for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
