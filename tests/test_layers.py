"""The floors hold (docs/architecture.md): the import-linter contracts in pyproject.toml pass, no module takes part
in an import cycle, and no module imports another module's private names."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The one import that points up, on purpose: Jupyter asks an Analysis for its notebook view.
NOTEBOOK_HOOK = ("traceinsight.model.analysis", "traceinsight.render.notebook")


def _sources() -> list[Path]:
    return sorted([*(REPO / "traceinsight").rglob("*.py"), *(REPO / "rules").glob("*.py")])


def _module(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (it is in the test extra)")
    res = subprocess.run([exe, "--config", str(REPO / "pyproject.toml")], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken", res.stdout)


def _imports(path: Path, module: str) -> list[tuple[str, list[str]]]:
    """(imported module, names) of every import in the file, relative imports resolved, TYPE_CHECKING ones left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            out.append((target, [a.name for a in node.names]))
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (grimp, as import-linter reads them), the notebook hook left out."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the test extra)")
    sys.path.insert(0, str(REPO))
    try:
        g = grimp.build_graph("traceinsight", "rules", exclude_type_checking_imports=True)
    finally:
        sys.path.remove(str(REPO))
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    graph[NOTEBOOK_HOOK[0]].discard(NOTEBOOK_HOOK[1])
    return graph


def test_no_import_cycles():
    """No strongly connected set of modules in ``traceinsight`` or ``rules``."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    assert cycles == []


def test_cycle_finder_finds_a_cycle(monkeypatch):
    """The check above can fail: a planted edge from the interval helpers back up to the ledger closes a cycle."""
    real = _graph()
    real["traceinsight.vocab.intervals"].add("traceinsight.derive.ledger")
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: real)
    with pytest.raises(AssertionError):
        test_no_import_cycles()


def test_no_private_names_across_modules():
    files = {_module(p): p for p in _sources()}
    bad = []
    for mod, path in files.items():
        for target, names in _imports(path, mod):
            if not (target.startswith(("traceinsight", "rules")) or target.startswith(".")):
                continue
            if target == mod:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{mod}: from {target} import {n}")
            if any(p.startswith("_") and not p.startswith("__") for p in target.split(".")[1:]) and not target.startswith(mod.rpartition(".")[0] + "._"):
                bad.append(f"{mod}: import {target}")
    assert bad == []


def test_a_single_trace_run_imports_only_what_it_uses(tmp_path):
    """Cold start: a single-trace analysis rendered as JSON imports one reader, one renderer, no job machinery."""
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("gemm", 100, 50, launch_us=90)
    path = t.write(tmp_path / "t.json")
    code = (
        "import sys, traceinsight.cli.app; from traceinsight.pipeline import engine; from traceinsight.render import render; "
        "render(engine.analyze(sys.argv[1]), 'json'); print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    loaded = {m for m in out if m.startswith("traceinsight.")}
    assert "traceinsight.ingest.kineto.reader" in loaded and "traceinsight.render.json_report" in loaded
    for absent in ("traceinsight.ingest.nsys.reader", "traceinsight.ingest.xplane.reader", "traceinsight.ingest.tf.logdir",
                   "traceinsight.render.html", "traceinsight.render.markdown", "traceinsight.job.run", "traceinsight.job.mapper",
                   "traceinsight.agent"):
        assert absent not in loaded, absent
    assert not any(m == "jinja2" for m in out)  # the HTML stack stays out of a JSON run
    # nor typer's pydantic, the SQLite stack of the nsys sniffer, the process pools of rank folders
    for absent in ("pydantic", "sqlite3", "concurrent.futures.process", "multiprocessing"):
        assert absent not in out, absent


def test_derived_data_has_one_declared_store(tmp_path):
    """Nothing stashes attributes on the views: what an analysis derived is listed by its store."""
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"views\.__dict__|setattr\(views|ctx\.views\._", text), path
    from tests.helpers.kineto_writer import KinetoTrace

    import traceinsight

    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("gemm", 100, 50, launch_us=90)
    t.runtime("cudaDeviceSynchronize", 160, 300)
    t.kernel("gemm", 700, 50, launch_us=650)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"))
    held = a.views.contents()
    assert "ledger" in held and "gaps" in held and any(k.startswith("memo:rulelib.") for k in held)
    assert a.ledger is a.views.ledger
