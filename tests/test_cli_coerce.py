"""The command line's plain value conversion (``traceinsight.cli.coerce``) gives exactly what typer's own gives.

For every parameter of every command, each value of a battery (unset, strings of every shape, numbers, enum
members, lists, paths that exist and that do not) is converted both ways: the result (type and value) or the error
message must be the same. Plain values must really take the plain path (else the comparison proves nothing and
pydantic is imported on every run), and a whole run must not import pydantic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from traceinsight.cli.app import FailOn, app
from traceinsight.cli.coerce import DEFER, PlainValues, converter

from .helpers.kineto_writer import KinetoTrace

REPO = Path(__file__).resolve().parents[1]


def _params():
    """(command name, parameter, context) for the group and every command."""
    group = typer.main.get_command(app)
    gctx = group.context_class(group)
    out = [("(group)", p, gctx) for p in group.get_params(gctx)]
    for name, cmd in sorted(group.commands.items()):
        ctx = cmd.context_class(cmd, parent=gctx)
        out += [(name, p, ctx) for p in cmd.get_params(ctx)]
    return out


def _values(tmp_path: Path) -> list:
    f = tmp_path / "t.json"
    f.write_text("{}")
    words = ["", "json", "html,md", "0", "7", "25", "007", "-1", "+5", " 5", "5 ", "1_000", "1e3", "0.5", "0.50", "1.", ".5",
             "inf", "nan", "never", "warning", "WARNING", "error ", "TI001", "/", str(f), str(tmp_path), str(tmp_path / "absent.json"),
             "a\udcffb", "~/x", "99999999999999999999999"]
    return [*words, 25.0, 120.0, 0.0, 3, True, FailOn.never, FailOn.error, f, ["TI001", "TI002"], ("a",), [str(f), "x"], [], ["1", 2]]


def _typer(p, value, ctx):
    try:
        out = type(p).get_runtime_param(p).coerce(value, param=p, ctx=ctx)
        return ("ok", type(out), out)
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return ("error", type(exc), str(exc))


def _ours(p, value, ctx):
    try:
        out = PlainValues(p, converter(p)).coerce(value, param=p, ctx=ctx)
        return ("ok", type(out), out)
    except Exception as exc:  # noqa: BLE001
        return ("error", type(exc), str(exc))


def _same(a, b) -> bool:
    if a[0] != b[0] or a[1] is not b[1]:
        return False
    if a[0] == "ok" and isinstance(a[2], float) and a[2] != a[2]:
        return b[2] != b[2]
    return a[2] == b[2]


def test_plain_conversion_equals_typers_on_every_parameter(tmp_path):
    params = _params()
    assert {name for name, _, _ in params} >= {"analyze", "diff", "rules", "rule", "mcp", "(group)"}
    differ = []
    for name, p, ctx in params:
        for value in [None, *_values(tmp_path)]:
            want, got = _typer(p, value, ctx), _ours(p, value, ctx)
            if not _same(want, got):
                differ.append(f"{name} {p.name} {value!r}: typer {want!r}, plain {got!r}")
    assert differ == []


def test_plain_values_take_the_plain_path(tmp_path):
    """The values every run passes are converted without typer's (pydantic) conversion."""
    by_name = {(name, p.name): p for name, p, _ in _params()}
    f = tmp_path / "t.json"
    f.write_text("{}")
    plain = {
        ("analyze", "path"): [str(f), str(tmp_path / "absent.json"), str(tmp_path)],
        ("analyze", "fmt"): ["json", "html,md"],
        ("analyze", "output"): [str(tmp_path / "r.html")],
        ("analyze", "fail_on"): [FailOn.never, "warning"],
        ("analyze", "worse_by"): [25.0, "30", "2.5"],
        ("analyze", "rule_timeout"): [120.0, "0"],
        ("analyze", "max_bytes"): ["1000"],
        ("analyze", "min_impact"): ["0.5"],
        ("analyze", "select"): [["TI001,TI002", "TI003"]],
        ("analyze", "rules"): [[str(f)]],
        ("diff", "base"): [str(f)],
    }
    for key, values in plain.items():
        p = by_name[key]
        convert = converter(p)
        assert convert is not None, key
        for v in values:
            assert convert(v, None) is not DEFER, (key, v)
    # values typer must judge are left to it: below a minimum, not a plain number, not a choice
    assert converter(by_name[("analyze", "max_bytes")])("0", None) is DEFER
    assert converter(by_name[("analyze", "worse_by")])("1e3", None) is DEFER
    assert converter(by_name[("analyze", "fail_on")])("WARNING", None) is DEFER


def test_a_command_line_run_imports_no_pydantic(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("gemm", 100, 50, launch_us=90)
    path = t.write(tmp_path / "t.json")
    code = (  # the app as main() runs it, then the modules it imported (main() itself ends with os._exit)
        "import sys; from traceinsight.cli import app as cli; sys.argv[0] = 'traceinsight'\n"
        "try:\n    cli.app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    res = subprocess.run([sys.executable, "-c", code, "analyze", str(path), "-f", "json", "-o", str(tmp_path / "r.json"),
                          "--worse-by", "30", "--fail-on", "error", "--select", "TI0"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    loaded = res.stderr.split()
    assert "traceinsight.pipeline.engine" in loaded  # the run happened and the module list was printed
    assert "pydantic" not in loaded and "pydantic_core" not in loaded
    assert (tmp_path / "r.json").stat().st_size > 0


def test_a_bad_value_still_gets_typers_message(tmp_path):
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["analyze", str(tmp_path / "x.json"), "--worse-by", "lots"])
    assert res.exit_code == 2
    assert "Invalid value for '--worse-by'" in res.output and "valid number" in res.output  # typer's (pydantic's) words


def test_the_installed_command_freezes_its_imports_and_keeps_collecting():
    """``traceinsight.cli.console.main`` (the console script) imports the command line with the collector paused and
    freezes what the imports made; the collector is on again for the run. Importing ``traceinsight.cli.app`` itself
    leaves the collector alone."""
    code = (
        "import gc, sys; from traceinsight.cli import console; sys.argv = ['traceinsight', 'rules']\n"
        "try:\n    console.main()\nexcept SystemExit:\n    pass\n"
        "print(gc.get_freeze_count(), gc.isenabled(), 'pandas' in sys.modules, file=sys.stderr)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    frozen, enabled, pandas = res.stderr.split()[-3:]
    assert "TI001" in res.stdout and int(frozen) > 50_000 and enabled == "True" and pandas == "True"
    code = "import gc, sys; import traceinsight.cli.app; print(gc.get_freeze_count(), gc.isenabled())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO).stdout.split() == ["0", "True"]


@pytest.mark.parametrize("user_choice", [None, "3"])
def test_the_installed_command_loads_numpy_with_one_blas_thread_and_leaves_the_environment_as_given(user_choice):
    """The console script asks OpenBLAS for one thread while numpy loads (its per-core threads spin ~0.1 s of CPU
    each for work the command never gives them), unless the user set a number; the variable is gone again
    afterwards, so a program ``traceinsight record`` starts inherits the environment the user gave."""
    code = (
        "import os, sys; from traceinsight.cli import console; sys.argv = ['traceinsight', 'rules']\n"
        "try:\n    console.main()\nexcept SystemExit:\n    pass\n"
        "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS', '-'), file=sys.stderr)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user_choice:
        env["OPENBLAS_NUM_THREADS"] = user_choice
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    threads, seen = res.stderr.split()[-2:]
    assert "TI001" in res.stdout
    assert seen == (user_choice or "-")
    if os.path.isdir("/proc/self/task") and not user_choice:
        assert int(threads) == 1  # no OpenBLAS worker threads next to the main one
