"""Third-party rules load the same two ways the built-ins do: a local file (--rules) and an entry point."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

from typer.testing import CliRunner

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.cli.app import app

RULE_SRC = textwrap.dedent(
    '''
    from traceinsight.rule_api import Rule, Option, Fix, Location, fmt_ns

    class KernelCount(Rule):
        code = "{code}"
        name = "kernel-count"
        summary = "Counts kernels (a test rule)."
        why = "Tests that plugins run."
        fix_pytorch = Fix("Nothing to fix.", "pass")
        at_least = Option(1, "Report when at least this many kernels ran.")

        def check(self, ctx):
            n = len(ctx.views.kernels)
            if n >= self.at_least:
                yield ctx.finding(title=f"{{n}} kernels", message=f"{{n}} kernels in {{fmt_ns(ctx.views.span_ns)}}", impact_ns=0, key="k")
    '''
)


def _trace(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 500.0)
    for i in range(3):
        t.kernel("k", 10.0 + i * 100, 50.0)
    return t.write(tmp_path / "t.json")


def test_rule_from_file_via_cli(tmp_path):
    rule = tmp_path / "my_rule.py"
    rule.write_text(RULE_SRC.format(code="ACME001"))
    res = CliRunner().invoke(app, ["analyze", str(_trace(tmp_path)), "--rules", str(rule), "--select", "ACME", "--format", "json", "--no-progress", "--set", "ACME001.at_least=2"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout[res.stdout.index("{"):])
    codes = [f["code"] for f in data["findings"]]
    assert codes == ["ACME001"] and data["findings"][0]["title"] == "3 kernels"


def test_rule_from_entry_point(tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    (pkg / "acme_rules").mkdir(parents=True)
    (pkg / "acme_rules" / "__init__.py").write_text(RULE_SRC.format(code="ACME002"))
    dist = pkg / "acme_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[traceinsight.rules]\nACME002 = acme_rules:KernelCount\n")
    monkeypatch.syspath_prepend(str(pkg))
    importlib.invalidate_caches()
    a = traceinsight.analyze(_trace(tmp_path), select=["ACME002", "TI001"])
    assert "ACME002" in a.rules_run and "TI001" in a.rules_run
    assert [f.title for f in a.findings if f.code == "ACME002"] == ["3 kernels"]
    sys.modules.pop("acme_rules", None)


def _dist(site, name, entry_points=None, kind="dist-info"):
    d = site / f"{name}-1.0.{kind}"
    d.mkdir(parents=True)
    (d / ("PKG-INFO" if kind == "egg-info" else "METADATA")).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (d / "entry_points.txt").write_text(entry_points)


def _fresh_answer(*path) -> bool:
    """``group_may_be_declared`` in a fresh interpreter: this one may have imported the importlib_metadata backport
    (through torch, TensorFlow, ...), whose distribution finder replaces the standard one, and then the answer is
    rightly always True."""
    import subprocess

    code = "import sys; from traceinsight.pipeline.plugins import group_may_be_declared as g; print(g(sys.argv[1:] or None))"
    out = subprocess.run([sys.executable, "-c", code, *map(str, path)], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_the_plugin_prefilter_never_hides_an_entry_point(tmp_path, monkeypatch):
    """``group_may_be_declared`` says False only where importlib.metadata finds no rule plugin, and True for every
    layout where it finds one (dist-info, egg-info, an .egg folder, a zip on the path), and wherever a distribution
    finder other than the standard one is installed (what it would find cannot be read from the folders)."""
    import zipfile
    from importlib.metadata import distributions

    from traceinsight.pipeline.plugins import ENTRY_POINT_GROUP, group_may_be_declared

    def found(path):
        return [ep for d in distributions(path=[str(path)]) for ep in d.entry_points if ep.group == ENTRY_POINT_GROUP]

    plain = tmp_path / "plain"
    _dist(plain, "tool", "[console_scripts]\ntool = tool:main\n")
    _dist(plain, "lib")
    _dist(plain, "old", "[console_scripts]\nold = old:main\n", kind="egg-info")
    (plain / "single.egg-info").write_text("Metadata-Version: 1.0\nName: single\n")  # a metadata file, not a folder
    assert found(plain) == [] and _fresh_answer(plain) is False and _fresh_answer(tmp_path / "absent") is False

    class OwnFinder:  # a finder that could serve distributions from anywhere
        @staticmethod
        def find_distributions(context=None):
            return iter(())

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, OwnFinder])
    assert group_may_be_declared([str(plain)]) is True
    monkeypatch.undo()

    with_rules = tmp_path / "rules_dist"
    _dist(with_rules, "acme", "[console_scripts]\nacme = acme:main\n\n[traceinsight.rules]\nACME = acme:Rule\n")
    legacy = tmp_path / "legacy"
    _dist(legacy, "acme", "[traceinsight.rules]\nACME = acme:Rule\n", kind="egg-info")
    egg = tmp_path / "acme-1.0.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: acme\nVersion: 1.0\n")
    (egg / "EGG-INFO" / "entry_points.txt").write_text("[traceinsight.rules]\nACME = acme:Rule\n")
    zipped = tmp_path / "acme.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("acme-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: acme\nVersion: 1.0\n")
        z.writestr("acme-1.0.dist-info/entry_points.txt", "[traceinsight.rules]\nACME = acme:Rule\n")
    for where in (with_rules, legacy, egg, zipped):
        assert len(found(where)) == 1, where
        assert group_may_be_declared([str(plain), str(where)]) is True, where
    # and on this interpreter's own path, the answer agrees with the full search whenever it says "none"
    if not group_may_be_declared():
        from importlib.metadata import entry_points

        assert list(entry_points(group=ENTRY_POINT_GROUP)) == []


def test_a_run_without_rule_plugins_does_not_load_importlib_metadata(tmp_path):
    """The plugin search reads entry_points.txt files itself; the full importlib.metadata search (email, socket,
    parsing every distribution's entry points) runs only when some distribution names the group."""
    import subprocess

    from tests.conftest import REPO
    if _fresh_answer():  # the subprocess below starts fresh too
        import pytest

        pytest.skip("a distribution on this path registers traceinsight rules")
    code = "import sys; from traceinsight.pipeline.plugins import discover; rs = discover(); print(len(rs.rules), 'importlib.metadata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    assert int(out[0]) >= 20 and out[1] == "False"


def test_rule_docs_cli():
    res = CliRunner().invoke(app, ["rule", "TI001"])
    assert res.exit_code == 0, res.output
    assert "gpu-idle-gaps" in res.output and "min_gap_us" in res.output and "DataLoader" in res.output


def test_graded_severity_says_why_it_differs_from_the_declared_one(tmp_path):
    """A custom rule declared warning whose cost grades it otherwise says so in every format (issue 23)."""
    import traceinsight
    from traceinsight.render import render
    from traceinsight.rule_api import Rule, Severity

    class Declared(Rule):
        code = "ZZ950"
        name = "declared-warning"
        severity = Severity.WARNING
        category = "gpu_idle"
        summary = "A planted idle cost."

        def check(self, ctx):
            yield ctx.finding(title="planted", message="planted", impact_ns=10**12)

    from tests.conftest import REPO

    a = traceinsight.analyze(REPO / "sample_traces" / "dataloader_gaps.json.gz", extra_rules=[Declared], select=["ZZ950"])
    (f,) = a.findings
    assert f.severity is Severity.ERROR  # most of the window is avoidable idle: graded error
    assert f.metrics["severity_basis"].startswith("graded error on the common scale") and "declared warning" in f.metrics["severity_basis"]
    assert "declared warning" in render(a, "md") and "declared warning" in render(a, "text") and "declared warning" in render(a, "html")
