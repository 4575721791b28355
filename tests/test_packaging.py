"""The built wheel works on its own: rules, templates and entry points ship inside it.

The wheel is installed without dependencies into a fresh virtual environment, which borrows the test
environment's third-party packages through a .pth file (no network needed), and never sees the source tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .helpers.kineto_writer import KinetoTrace

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("traceinsight-*.whl")
    return whl


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "traceinsight/rules/gpu_idle_gaps.py" in names
    assert not any(n.startswith("rules/") for n in names)  # no global "rules" package
    assert any(n.startswith("traceinsight/render/templates/") and n.endswith(".j2") for n in names)
    ep = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(ep).decode()
    assert "traceinsight = traceinsight.cli.console:main" in text
    assert "TI001" not in text  # built-ins are found as modules of traceinsight.rules, not listed a second time
    import traceinsight

    assert wheel.name.startswith(f"traceinsight-{traceinsight.__version__}-")  # the version has one home
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Requires-Python: >=3.11" in meta
    # the C accelerators are compiled into the wheel where a compiler exists (CI has one)
    assert any(n.startswith("traceinsight/ingest/kineto/_kineto_scan") and n.endswith((".so", ".pyd")) for n in names)


def test_wheel_installs_and_runs_in_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    purelib = Path(subprocess.check_output([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # Unpack the wheel (what pip install --no-deps does for a pure wheel) and borrow the dependencies.
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(purelib)
    (purelib / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = venv / "bin" / "traceinsight"
    script.write_text(f"#!{vpy}\nimport sys\nfrom traceinsight.cli.console import main\nsys.exit(main())\n")
    script.chmod(0o755)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    cwd = tmp_path  # not the repo: the source tree must not be importable
    where = subprocess.check_output([str(vpy), "-c", "import traceinsight, traceinsight.rules; print(traceinsight.__file__)"], text=True, cwd=cwd, env=env)
    assert str(REPO) not in where

    help_out = subprocess.run([str(script), "--help"], capture_output=True, text=True, cwd=cwd, env=env)
    assert help_out.returncode == 0 and "analyze" in help_out.stdout
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, cwd=cwd, env=env)
    assert "PyTorch Profiler JSON: native reader" in version.stdout

    t = KinetoTrace()
    t.step(1, 0.0, 5000.0)
    for i in range(50):
        t.kernel("tiny_elementwise_kernel", 100.0 + i * 80, 2.0)
    trace = t.write(tmp_path / "t.json")
    res = subprocess.run([str(script), "analyze", str(trace), "--format", "json"], capture_output=True, text=True, cwd=cwd, env=env)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["summary"]["kernel_count"] == 50
    assert "TI001" in report["rules_run"] and "TI003" in report["rules_run"]
    html = tmp_path / "r.html"
    res = subprocess.run([str(script), "analyze", str(trace), "-o", str(html)], capture_output=True, text=True, cwd=cwd, env=env)
    assert res.returncode == 0, res.stderr
    assert html.read_text().lstrip().lower().startswith("<!doctype html>")


def _installed_venv(wheel: Path, tmp_path: Path) -> Path:
    """A fresh venv with the wheel unpacked into it (what ``pip install .`` leaves), borrowing the dependencies."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    purelib = Path(subprocess.check_output([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(purelib)
    (purelib / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return vpy


def test_readme_api_example_runs_from_the_checkout_after_install(wheel, tmp_path):
    """The README's Python API block, run the way a user runs it after the README's install command: from the
    checkout (``python`` or a notebook started there), where the source folder shadows the installed package."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API"):]
    code = re.search(r"```python\n(.*?)\n```", section, re.DOTALL).group(1)
    assert "traceinsight.analyze" in code
    vpy = _installed_venv(wheel, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    res = subprocess.run([str(vpy), "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith(("Bound by ", "No finding explains", "Cannot judge", "No GPU activity")) and " GPU busy " in first
    assert "TI002" in res.stdout
    where = subprocess.run([str(vpy), "-c", "import traceinsight; print(traceinsight.__file__)"], capture_output=True, text=True, cwd=REPO, env=env)
    assert where.stdout.strip().startswith(str(REPO))  # the checkout's package was the one imported
