"""The GitHub Action (``action.yml``) run here as the runner runs a composite action: each ``run:`` step executed
by bash (``bash --noprofile --norc -eo pipefail``) with the environment GitHub gives it (``GITHUB_OUTPUT``,
``GITHUB_STEP_SUMMARY``, the step's ``env:`` with ``${{ }}`` expressions filled in from inputs, the github context
and earlier steps' outputs), on a sample trace recorded with Python stacks. ``gh`` is a stand-in that records what
it was asked; ``uses:`` steps (the artifact upload) are checked for what they would get, not run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .helpers.kineto_writer import KinetoTrace
from .test_github_sarif import _sync_steps, runner_commands

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

GH_STUB = r'''#!PYTHON
import json, os, sys
args = sys.argv[1:]
entry = {"args": args}
for a in args:
    if a.startswith("body=@"):
        entry["body"] = open(a[6:], encoding="utf-8").read()
with open(os.environ["FAKE_GH_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\n")
if "--paginate" in args and os.environ.get("FAKE_GH_EXISTING"):
    print(os.environ["FAKE_GH_EXISTING"])
'''


def _lookup(expr: str, ctx: dict) -> str:
    """A ``${{ }}`` path (``inputs.trace``, ``github.event.pull_request.number``, ``steps.x.outputs.y``): its value, or
    "" where GitHub would give null."""
    value = ctx
    for part in expr.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return "" if value is None else str(value)


def fill(text: object, ctx: dict) -> str:
    return EXPR.sub(lambda m: _lookup(m.group(1), ctx), str(text))


def run_action(workspace: Path, inputs: dict, github: dict | None = None, extra_env: dict | None = None, only: str | None = None):
    """Every step of the composite action, in order; returns (outputs, step results, summary text, gh calls)."""
    tools = workspace.parent / "tools"
    tools.mkdir(exist_ok=True)
    ti = tools / "traceinsight"
    ti.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.argv[0] = \"traceinsight\"; from traceinsight.cli.console import main; main()' \"$@\"\n")
    gh = tools / "gh"
    gh.write_text(GH_STUB.replace("PYTHON", sys.executable))
    for f in (ti, gh):
        f.chmod(0o755)
    summary = workspace.parent / "summary.md"
    summary.write_text("")
    gh_log = workspace.parent / "gh.jsonl"
    gh_log.write_text("")
    defaults = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    ctx = {
        "github": {"action_path": str(ROOT), "event_name": "push", "repository": "org/repo", "token": "t0ken", "workspace": str(workspace), **(github or {})},
        "steps": {},
    }
    ctx["inputs"] = {k: fill(v, ctx) for k, v in {**defaults, **inputs}.items()}
    base_env = {
        "PATH": f"{tools}:{os.environ['PATH']}",
        "HOME": str(workspace.parent),
        "PYTHONPATH": str(ROOT),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_ACTION_PATH": str(ROOT),
        "FAKE_GH_LOG": str(gh_log),
        **(extra_env or {}),
    }
    results, failed = [], False
    for i, step in enumerate(ACTION["runs"]["steps"]):
        if only is not None and step["name"] != only:
            continue
        cond = str(step.get("if", ""))
        if "uses" in step:
            results.append({"name": step["name"], "uses": step["uses"], "with": {k: fill(v, ctx) for k, v in step.get("with", {}).items()}, "if": cond})
            continue
        if failed and "always()" not in cond:
            continue
        assert step["shell"] == "bash" and not cond, step["name"]  # run steps decide inside their script
        assert "${{" not in step["run"], f"{step['name']}: inputs reach a script through env:, never pasted into it"
        out_file = workspace.parent / f"output-{i}"
        out_file.write_text("")
        script = workspace.parent / f"step-{i}.sh"
        script.write_text(step["run"])
        env = {**base_env, "GITHUB_OUTPUT": str(out_file), **{k: fill(v, ctx) for k, v in step.get("env", {}).items()}}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=300)
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
        if "id" in step:
            ctx["steps"][step["id"]] = {"outputs": outputs}
        results.append({"name": step["name"], "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "outputs": outputs})
        failed = failed or proc.returncode != 0
    action_outputs = {k: fill(v["value"], ctx) for k, v in ACTION["outputs"].items()}
    calls = [json.loads(line) for line in gh_log.read_text().splitlines()]
    return action_outputs, {r["name"]: r for r in results}, summary.read_text(), calls


@pytest.fixture()
def workspace(tmp_path):
    """A checkout with src/train.py and the trace its training step wrote (Python stacks recorded elsewhere)."""
    ws = tmp_path / "workspace"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "train.py").write_text("\n" * 40)
    (ws / "traces").mkdir()
    t = KinetoTrace()
    _sync_steps(t, "/home/runner/work/repo/repo/src/train.py")
    t.write(ws / "traces" / "train.pt.trace.json")
    return ws


def _docs_workflow() -> dict:
    """The workflow of docs/ci.md that uses the action."""
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "jobs" in doc and "uses: YOUR-ORG/traceinsight@" in block:
            return doc
    raise AssertionError("docs/ci.md has no workflow that uses the action")


def test_the_docs_workflow_runs_the_action(workspace):
    wf = _docs_workflow()
    steps = next(iter(wf["jobs"].values()))["steps"]
    ours = next(s for s in steps if str(s.get("uses", "")).startswith("YOUR-ORG/traceinsight@"))
    assert wf["permissions"]["pull-requests"] == "write" and wf["permissions"]["security-events"] == "write"
    inputs = {k: str(v) for k, v in ours["with"].items()}
    assert set(inputs) <= set(ACTION["inputs"])
    out, steps_run, summary, calls = run_action(workspace, {**inputs, "install": "none", "python": sys.executable},
                                                github={"event_name": "pull_request", "event": {"pull_request": {"number": 7}}})
    analyze = steps_run["Analyse the trace"]
    assert analyze["rc"] == 0, analyze["stderr"]
    # the annotation on the user's own line, from the step's output, as the runner reads it
    cmds = runner_commands(analyze["stdout"])
    assert [(n, p["file"], p["line"], p["title"]) for n, p, _ in cmds] == [("warning", "src/train.py", "31", "TI002 host-sync-stalls")]
    # outputs: the gate (fail-on error: TI001 is an error here), the verdict, the reports
    assert out["exit-code"] == "1" and steps_run["Gate"]["rc"] == 1
    report = json.loads((workspace / "traceinsight-report" / "traceinsight-report.json").read_text())
    assert out["verdict"] == report["verdict"]["headline"] and out["verdict"]
    assert out["report-path"] == "traceinsight-report/traceinsight-report.html" and (workspace / out["report-path"]).is_file()
    assert out["sarif-path"].endswith(".sarif") and json.loads((workspace / out["sarif-path"]).read_text())["version"] == "2.1.0"
    # the job summary is the Markdown report
    assert summary == (workspace / "traceinsight-report" / "traceinsight-report.md").read_text()
    # one PR comment, created (none had the marker yet), carrying the report
    assert [c["args"][:3] for c in calls] == [["api", "repos/org/repo/issues/7/comments", "--paginate"], ["api", "-X", "POST"]]
    assert calls[1]["body"].startswith("<!-- traceinsight-report -->\n## traceinsight:")
    # the upload step would get the report folder, and runs after a failed gate too (always())
    up = steps_run["Upload the HTML report"]
    assert up["uses"].startswith("actions/upload-artifact@") and up["with"]["path"] == "traceinsight-report" and "always()" in up["if"]
    # the SARIF upload step of the workflow reads the action's output
    sarif_step = next(s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@"))
    assert "steps.ti.outputs.sarif-path" in sarif_step["with"]["sarif_file"] and ours["id"] == "ti"


def test_comment_is_updated_in_place_and_gate_passes(workspace):
    out, steps_run, _, calls = run_action(
        workspace, {"trace": "traces/train.pt.trace.json", "fail-on": "never", "comment": "true", "install": "none", "python": sys.executable},
        github={"event_name": "pull_request", "event": {"pull_request": {"number": 7}}}, extra_env={"FAKE_GH_EXISTING": "99"})
    assert out["exit-code"] == "0" and steps_run["Gate"]["rc"] == 0
    assert calls[1]["args"][:4] == ["api", "-X", "PATCH", "repos/org/repo/issues/comments/99"]
    assert len(calls) == 2  # no second comment


def test_no_comment_outside_a_pull_request_and_diff_gate(workspace):
    out, steps_run, summary, calls = run_action(
        workspace, {"trace": "traces/train.pt.trace.json", "base-trace": "traces/train.pt.trace.json", "fail-if-slower": "5",
                    "fail-on": "never", "comment": "true", "install": "none", "python": sys.executable})
    assert calls == []  # a push: no pull request to comment on
    diff = steps_run["Diff against the base run"]
    assert diff["outputs"]["status"] in {"0", "5"}, diff["stderr"]  # the same run: not slower (or too few steps to tell)
    assert "## traceinsight" in summary and (workspace / "traceinsight-report" / "diff" / "traceinsight-diff.md").read_text() in summary
    assert out["exit-code"] == "0"


def test_unreadable_trace_fails_the_gate_with_its_code(workspace):
    (workspace / "bad.json").write_text("{not json")
    out, steps_run, _, _ = run_action(workspace, {"trace": "bad.json", "install": "none", "python": sys.executable})
    assert out["exit-code"] == "3" and steps_run["Gate"]["rc"] == 3
    assert out["verdict"] == "" and out["report-path"] == ""


def test_install_step_installs_the_pinned_action(workspace, tmp_path):
    log = tmp_path / "pip-args"
    py = tmp_path / "fake-python"
    py.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n")
    py.chmod(0o755)
    run_action(workspace, {"trace": "x", "install": "action", "python": str(py)}, only="Install traceinsight")
    assert log.read_text().split() == ["-m", "pip", "install", "--quiet", str(ROOT)]
    run_action(workspace, {"trace": "x", "install": "traceinsight==0.1.0", "python": str(py)}, only="Install traceinsight")
    assert log.read_text().split()[-1] == "traceinsight==0.1.0"
