"""In the pull request: ``--format github`` annotates the user's own line (never a library frame, never a file
outside the checkout), ``--format sarif`` is SARIF 2.1.0 valid against the official schema, and no trace string can
start, end or add a workflow command or break the SARIF."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote

import jsonschema
import pytest
from typer.testing import CliRunner

import traceinsight
from traceinsight.cli.app import app
from traceinsight.model.finding import SourceLine
from traceinsight.render import escape, github, sarif
from traceinsight.render.sources import SourceRoot

from .helpers.kineto_writer import KinetoTrace

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"
COMMAND_NAMES = {"notice", "warning", "error"}
PROPERTIES = {"file", "line", "title"}


def _sync_steps(t: KinetoTrace, user_file: str, line: int = 31, ops: tuple[str, str] = ("aten::item", "aten::_local_scalar_dense")) -> None:
    """3 steps of ``loss.item()`` (a ~1 ms host sync that starves the GPU) called from ``user_file``:``line``
    through torch's own frames, as a ``with_stack=True`` recording writes them."""
    for s in range(3):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        t.python(f"{user_file}(12): <module>", t0 + 1, 1990.0)
        t.python(f"{user_file}({line}): train_step", t0 + 2, 1900.0)
        t.python("torch/_tensor.py(1012): __format__", t0 + 15, 1100.0)  # a library frame, innermost
        t.python("<built-in method item of Tensor object at 0x7f00>", t0 + 18, 1060.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 1000.0, launch_us=t0)
        t.cpu_op(ops[0], t0 + 20, 1040.0)
        t.cpu_op(ops[1], t0 + 22, 1036.0)
        t.memcpy("DtoH", t0 + 1010, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0, pageable=False)
        t.runtime("cudaStreamSynchronize", t0 + 32, 982.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 1360, 100.0, launch_us=t0 + 1350)


@pytest.fixture()
def checkout(tmp_path):
    """A repository with src/train.py and a trace recorded on another machine (/home/me/proj/src/train.py)."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text("\n" * 40)
    t = KinetoTrace()
    _sync_steps(t, "/home/me/proj/src/train.py")
    return repo, t.write(repo / "trace.json")


def _run(args, cwd, env=None):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, args, env=env or {})
    finally:
        os.chdir(old)


def runner_commands(text: str) -> list[tuple[str, dict[str, str], str]]:
    """The workflow commands GitHub's runner would see in ``text``: it splits at CR and LF, and a line that starts
    with ``::`` after blanks is a command (``::name k=v,k=v::data``); ``##[`` anywhere is the old syntax."""
    out = []
    for line in re.split(r"\r\n|\r|\n", text):
        assert "##[" not in line, line
        s = line.lstrip()
        if not s.startswith("::"):
            continue
        head, sep, data = s[2:].partition("::")
        assert sep, line
        name, _, props = head.partition(" ")
        pairs = {}
        for p in props.split(",") if props else []:
            k, _, v = p.partition("=")
            pairs[k] = v.replace("%3A", ":").replace("%2C", ",").replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")
        out.append((name, pairs, data.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")))
    return out


def test_annotation_on_the_users_line_not_a_library_frame(checkout):
    repo, path = checkout
    res = _run(["analyze", str(path), "-f", "github", "--select", "TI002"], repo)
    assert res.exit_code == 0, res.output
    cmds = runner_commands(res.stdout)
    assert len(cmds) == 1
    name, props, data = cmds[0]
    assert (name, props["file"], props["line"], props["title"]) == ("warning", "src/train.py", "31", "TI002 host-sync-stalls")
    assert data.startswith("host blocked on the GPU 3 times") and "mostly in aten::_local_scalar_dense (in train_step())." in data
    assert "est. saved" in data and "Fix: Keep values on the GPU" in data
    assert "torch/_tensor.py" not in res.stdout and "1012" not in res.stdout


def test_the_finding_carries_the_recorded_frame(checkout):
    _, path = checkout
    (f,) = [f for f in traceinsight.analyze(path, select=["TI002"]).findings]
    assert f.source == SourceLine("/home/me/proj/src/train.py", 31, "train_step")


def test_source_root_option_and_severity_levels(checkout, tmp_path):
    repo, path = checkout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = _run(["analyze", str(path), "-f", "github", "--select", "TI002", "--source-root", str(repo)], elsewhere)
    assert [(n, p["file"]) for n, p, _ in runner_commands(res.stdout)] == [("warning", "src/train.py")]
    # from another folder without --source-root the file is not the checkout's: no annotation, a plain log line
    res = _run(["analyze", str(path), "-f", "github", "--select", "TI002", "--source-root", str(tmp_path / "nowhere")], elsewhere)
    assert res.exit_code == 2 and "--source-root" in res.output  # a root that is not a folder: a usage error
    res = _run(["analyze", str(path), "-f", "github", "--select", "TI002"], elsewhere)
    assert runner_commands(res.stdout) == []
    assert res.stdout.startswith("traceinsight: TI002 warning: host blocked")
    assert github.COMMANDS == {"info": "notice", "warning": "warning", "error": "error"}


def test_unlocated_findings_go_to_the_job_summary(checkout, tmp_path):
    repo, path = checkout
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    res = _run(["analyze", str(path), "-f", "github"], repo, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.exit_code == 0, res.output
    cmds = runner_commands(res.stdout)
    assert [p["file"] for _, p, _ in cmds] == ["src/train.py"]
    n_all = len(traceinsight.analyze(path).findings)
    assert f"traceinsight: {n_all - 1} finding(s) without a line of this repository's code: see the job summary." in res.stdout
    text = summary.read_text()
    assert text.startswith("earlier step\n### traceinsight: findings without a line")  # appended, not replaced
    assert "`TI001`" in text and "TI002" not in text


def test_source_root_lookup(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "model.py").write_text("x\n")
    (repo / ".venv" / "lib").mkdir(parents=True)
    (repo / ".venv" / "lib" / "dep.py").write_text("x\n")
    outside = tmp_path / "outside.py"
    outside.write_text("x\n")
    (repo / "link.py").symlink_to(outside)
    root = SourceRoot(repo)

    def at(file):
        return root.path_of(SourceLine(file, 3))

    assert at(str(repo / "pkg" / "model.py")) == "pkg/model.py"  # recorded inside the checkout
    assert at("/home/me/proj/pkg/model.py") == "pkg/model.py"  # recorded elsewhere: the tail that exists
    assert at("pkg/model.py") == "pkg/model.py" and at("./pkg/model.py") == "pkg/model.py"
    assert at("C:\\Users\\me\\proj\\pkg\\model.py") == "pkg/model.py"  # a Windows recording
    assert at("pkg/missing.py") is None  # not a file of the checkout
    assert at("../repo/pkg/model.py") is None  # no climbing
    assert at(str(repo / ".venv" / "lib" / "dep.py")) is None  # a virtual environment in the checkout
    assert at(str(repo / "link.py")) is None  # a link out of the checkout
    assert at("pkg/model.py\n::set-env name=X::1") is None  # control characters: never a path
    assert root.path_of(None) is None
    # recorded relative to a sys.path entry (python pkg/model.py records "model.py"): the one file ending so
    assert at("model.py") == "pkg/model.py"
    (repo / "a" / "proj").mkdir(parents=True)
    (repo / "b").mkdir()
    (repo / "a" / "proj" / "train.py").write_text("x\n")
    (repo / "b" / "train.py").write_text("x\n")
    root = SourceRoot(repo)  # a new index
    assert root.path_of(SourceLine("proj/train.py", 1)) == "a/proj/train.py"  # the longest shared tail wins
    assert root.path_of(SourceLine("/x/y/train.py", 1)) is None  # a/proj/train.py or b/train.py: never a guess


def test_sarif_validates_with_rule_table_locations_and_properties(checkout):
    repo, path = checkout
    res = _run(["analyze", str(path), "-f", "sarif"], repo)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert ids == sorted(p.stem for p in DOCS.glob("TI*.md"))  # every built-in rule, by code
    ti002 = rules[ids.index("TI002")]
    assert ti002["name"] == "host-sync-stalls" and ti002["defaultConfiguration"]["level"] == "warning"
    page = (DOCS / "TI002.md").read_text(encoding="utf-8")
    assert ti002["help"]["markdown"].strip() == page.split("-->", 1)[1].strip()  # the rule's docs/rules page
    analysis = traceinsight.analyze(path)
    assert len(run["results"]) == len(analysis.findings)
    by_rule = {r["ruleId"]: r for r in run["results"]}
    r = by_rule["TI002"]
    assert rules[r["ruleIndex"]]["id"] == "TI002"
    loc = r["locations"][0]["physicalLocation"]
    assert (loc["artifactLocation"]["uri"], loc["region"]["startLine"]) == ("src/train.py", 31)
    f = next(f for f in analysis.findings if f.code == "TI002")
    assert r["properties"]["saving_ns"] == f.saving_ns and r["level"] == "warning"
    assert r["partialFingerprints"] == {"traceinsightFinding/v1": f.fingerprint}
    assert r["message"]["text"].startswith(f.title)
    # a finding without a line of code points at the trace file (in the checkout), so code scanning shows it
    t1 = by_rule["TI001"]
    assert t1["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "trace.json"
    assert t1["level"] == "error" and "what_if" not in t1["properties"]
    assert r["properties"]["what_if"]["step_ns"] == f.what_if["step_ns"]  # the what-if, as numbers and in words
    assert r["properties"]["what_if_text"].startswith("step ")
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == Path(os.path.realpath(repo)).as_uri() + "/"
    assert loc["artifactLocation"]["uriBaseId"] == "%SRCROOT%" and run["properties"]["unlocated_results"] == 0


def test_sarif_without_the_trace_in_the_checkout_counts_unlocated_results(checkout, tmp_path):
    repo, path = checkout
    doc = json.loads(sarif.render(traceinsight.analyze(path), source_root=tmp_path / "empty"))
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    run = doc["runs"][0]
    assert run["properties"]["unlocated_results"] == len(run["results"]) > 0
    assert all("locations" not in r for r in run["results"])


def test_sarif_is_a_file_extension_and_a_folder_format(checkout, tmp_path):
    repo, path = checkout
    res = _run(["analyze", str(path), "-o", str(tmp_path / "r.sarif")], repo)
    assert res.exit_code == 0, res.output
    jsonschema.Draft4Validator(SCHEMA).validate(json.loads((tmp_path / "r.sarif").read_text()))
    res = _run(["analyze", str(path), "-f", "github,sarif,md", "-o", str(tmp_path / "out")], repo)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "traceinsight-report.github.txt", "traceinsight-report.md", "traceinsight-report.sarif"]
    assert runner_commands((tmp_path / "out" / "traceinsight-report.github.txt").read_text())[0][1]["file"] == "src/train.py"


HOSTILE = "evil\n::set-env name=LD_PRELOAD::/tmp/x.so\r::add-mask::secret %0A%25 ::stop-commands::tok ##[set-output name=a;]b"
#: a real file name GitHub must get back intact: commas, colons, percent signs, command words
HOSTILE_FILE = "a,b:c %0A ::set-env name=X::1.py"


def test_hostile_names_start_no_workflow_command(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / HOSTILE_FILE).write_text("\n" * 40)
    (repo / "x.py").write_text("\n" * 40)
    t = KinetoTrace()
    # the sync op's framework op is named by the attacker (it reaches TI002's title), the user frame is a real
    # file with a hostile name, and a frame with a newline in its file name must never become a path
    _sync_steps(t, f"/build/{HOSTILE_FILE}", ops=(HOSTILE, HOSTILE))
    t.python(f"x.py\n::set-env name=Y::2(7): f", 7000.0, 10.0)
    t.kernel(HOSTILE, 7100.0, 5.0, launch_us=7050.0)
    path = t.write(repo / "trace.json")
    analysis = traceinsight.analyze(path)
    assert any(HOSTILE[:40] in f.title for f in analysis.findings)  # the hostile text reaches a title
    text = github.render(analysis, source_root=repo)
    cmds = runner_commands(text)
    assert cmds, text
    for name, props, _ in cmds:
        assert name in COMMAND_NAMES and set(props) <= PROPERTIES
        assert props["file"] == HOSTILE_FILE  # escaped on the way, intact on arrival
    assert all(line.startswith(("::notice ", "::warning ", "::error ", "traceinsight: ")) for line in text.splitlines())
    # the CLI's stdout too, and the summary file is Markdown, not the log
    res = _run(["analyze", str(path), "-f", "github"], repo, env={"GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")})
    assert res.exit_code == 0, res.output
    assert {n for n, _, _ in runner_commands(res.stdout)} <= COMMAND_NAMES
    # SARIF: valid, the hostile file name percent-encoded and decoding to itself
    doc = json.loads(sarif.render(analysis, source_root=repo))
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"] for loc in r.get("locations", [])}
    assert unquote(next(u for u in uris if u != "trace.json")) == HOSTILE_FILE
    assert not any("\n" in u or " " in u for u in uris)


def test_a_file_named_with_the_old_command_syntax_is_not_annotated(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "##[add-mask]x.py").write_text("\n" * 40)
    t = KinetoTrace()
    _sync_steps(t, "##[add-mask]x.py")
    analysis = traceinsight.analyze(t.write(repo / "trace.json"), select=["TI002"])
    assert analysis.findings[0].source.file == "##[add-mask]x.py"
    text = github.render(analysis, source_root=repo)
    assert runner_commands(text) == [] and text.startswith("traceinsight: TI002 warning:")


def test_workflow_escapes():
    assert escape.workflow_data("50%\r\n::x") == "50%25\\r\\n::x"  # one line: CR/LF visible, % as GitHub wants
    assert escape.workflow_property("a:b,c%d") == "a%3Ab%2Cc%25d"
    assert escape.workflow_data("x ##[add-mask]y") == "x # #[add-mask]y"
    assert escape.workflow_log("50% ##[x]") == "50% # #[x]"  # a plain log line is not decoded: no % escape
    assert "\n" not in escape.workflow_data("a\u2028b\u0085c\nd")


def test_job_path_refuses_per_line_formats(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("k", 50, 400)
    d = tmp_path / "job"
    d.mkdir()
    t.write(d / "rank0.json")
    t.write(d / "rank1.json")
    res = _run(["analyze", str(d), "-f", "sarif"], tmp_path)
    assert res.exit_code == 2 and "describe(s) one trace" in res.output


def test_text_reports_start_no_workflow_command(tmp_path):
    """The text formats (the default on stdout, so in CI logs) too: a name wrapped to the start of a line cannot
    become ``::stop-commands``; ``##[`` nowhere."""
    t = KinetoTrace()
    _sync_steps(t, "/build/x.py", ops=("::set-env name=A::1", "::stop-commands::tok"))
    for i in range(30):
        t.kernel("::add-mask::tiny ##[group]", 7200.0 + i * 10, 2.0, launch_us=7195.0 + i * 10)
    path = t.write(tmp_path / "t.json")
    res = _run(["analyze", str(path)], tmp_path)
    assert res.exit_code == 0, res.output
    assert "stop-commands" in res.stdout and runner_commands(res.stdout) == []
    res = _run(["diff", str(path), str(path)], tmp_path)
    assert res.exit_code == 0, res.output
    assert runner_commands(res.stdout) == []
    assert escape.log_document("  ::a::b\n::c\nx ::d ##[e]") == "  \\x3a:a::b\n\\x3a:c\nx ::d #\\x23[e]"
    assert escape.log_document("at::native::k\n") == "at::native::k\n"  # ordinary C++ names are untouched


def test_a_real_with_stack_recording_maps_to_the_checkout(tmp_path):
    """PyTorch's own recording (CPU, with_stack=True) of ``python src/train.py``: the profiler writes the user's file
    relative to the script's folder (``train.py(9): train_step``) and torch's own files relative to site-packages;
    the user's frame is found at src/train.py in the checkout, torch's never."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text(
        "import sys\n"
        "import torch\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "model = torch.nn.Linear(16, 16)\n"
        "x = torch.randn(8, 16)\n"
        "\n"
        "\n"
        "def train_step():\n"
        "    return model(x).pow(2).mean().item()\n"
        "\n"
        "\n"
        "with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:\n"
        "    for _ in range(2):\n"
        "        train_step()\n"
        "prof.export_chrome_trace(sys.argv[1])\n"
    )
    trace = tmp_path / "cpu.json"
    subprocess.run([sys.executable, "src/train.py", str(trace)], cwd=repo, check=True, capture_output=True, timeout=300)
    tl = traceinsight.load(trace)
    names = tl.events.loc[tl.events["kind"] == "python", "name"].astype(str).unique()
    from traceinsight.rulelib.usercode import source_line

    sources = {s for s in map(source_line, names) if s is not None}
    root = SourceRoot(repo)
    found = {(root.path_of(s), s.line) for s in sources if root.path_of(s) is not None}
    # train_step's first line (the profiler names a function by where it begins, not by the line running in it),
    # wherever the profiler said the file was
    assert ("src/train.py", 8) in found
    assert {p for p, _ in found} == {"src/train.py"}  # nothing of torch's, the interpreter's or importlib's
    assert any(n.startswith("torch/") for n in names)  # library frames were there to refuse
