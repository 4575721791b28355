"""Mutation check of the core modules with mutmut: how many small deliberate bugs the fast tests catch, and which
ones survive. Not in CI (minutes per module); run it before resolving an issue that touches one of these modules.

    python bench/mutation.py severity            # one module
    python bench/mutation.py all --timeout 600   # each module in turn, each run capped
    python bench/mutation.py whatif --children 2 --keep /tmp/mut
    python bench/mutation.py ledger --only 'traceinsight.derive.ledger.intervals.x__merged__mutmut_*'   # part of a large module

Each run works on a scratch copy of the checkout (tracked and untracked-but-not-ignored files plus the built C
extensions), so the working tree is never touched; mutmut's configuration is written into that copy only. Tests
run as on a fresh clone: without the corpus (``TRACEINSIGHT_SHARED`` points nowhere) and in file order. For each
module (one file or several checked together) the script prints the score (killed / (killed + survived)) and
every surviving mutant as a one-line diff;
mutants not reached before the timeout are counted as "not checked". Exit status 1 when a module scores below
``--target`` (default 90 %).

Needs ``mutmut`` >= 3.2 (the test extra does not install it: ``pip install mutmut``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: module -> (file, or a tuple of files checked together; the fast tests that pin them; mutant-name patterns to
#: restrict to (empty: every function)).
MODULES: dict[str, tuple[str | tuple[str, ...], list[str], list[str]]] = {
    "severity": ("traceinsight/assess/severity.py", ["tests/test_severity.py", "tests/rules/test_TI002.py"], []),
    "causes": ("traceinsight/assess/causes.py", ["tests/test_causes.py"], []),
    "verdict": ("traceinsight/assess/verdict.py", ["tests/test_verdict_values.py", "tests/test_ledger_verdict.py", "tests/test_render_synth.py"], []),
    "baseline": ("traceinsight/pipeline/baseline.py", ["tests/test_baseline_compare.py", "tests/test_baseline.py", "tests/test_security_baseline.py"], []),
    # the grading scale and what normalises a finding's instances (the module is otherwise dataclasses)
    "finding": (
        "traceinsight/model/finding.py",
        ["tests/test_severity.py", "tests/test_finding.py", "tests/test_columnar.py", "tests/test_rule_api.py"],
        [f"traceinsight.model.finding.{name}__mutmut_*" for name in (
            "x_level", "xǁSeverityǁrank", "xǁSeverityǁparse", "xǁFixǁ__post_init__", "xǁInstanceǁ__post_init__",
            "xǁInstanceǁdur_ns", "x__columns_of", "x_instance_columns", "x_as_instances", "xǁInstancesǁ*",
            "xǁInstanceColumnsǁlabel", "x__opt_id", "xǁFindingǁfingerprint")],
    ),
    # FLOPs per op from recorded shapes (the numerator of every MFU) and the efficiency view built on it
    "flops": ("traceinsight/derive/flops.py", ["tests/test_flops.py", "tests/test_efficiency.py"], []),
    "efficiency": ("traceinsight/derive/efficiency.py", ["tests/test_efficiency.py", "tests/test_efficiency_view.py"], []),
    "memory": (("traceinsight/derive/memory.py", "traceinsight/vocab/allocator.py"),
               ["tests/test_memory.py", "tests/test_allocator.py", "tests/test_memory_view.py"], []),
    # the unit tests on hand-written reports (tests/test_diff.py pins the same code end to end on analysed traces,
    # several seconds a mutant: far too slow here)
    "diff": (("traceinsight/delta/compare.py", "traceinsight/delta/match.py", "traceinsight/delta/stats.py"),
             ["tests/test_diff_compare.py"], []),
    # the steady-state model (warm-up steps, allocator growth, whether a window can be judged) and what each finding
    # saves and how it is graded on it (issue 40)
    "steady": ("traceinsight/derive/steady.py", ["tests/test_steady_state.py", "tests/rules/test_TI013.py"], []),
    "savings": ("traceinsight/assess/savings.py", ["tests/test_severity_symptoms.py", "tests/test_verdict_values.py"], []),
    # the whole job: its verdict, and the reduce step that matches collectives and measures the waits it quotes
    "job_verdict": ("traceinsight/job/verdict.py", ["tests/test_job_verdict.py"], []),
    "job_reduce": ("traceinsight/derive/ranks/reduce.py", ["tests/test_job_verdict.py", "tests/test_fast_job.py"], []),
    # the diff's kernel matching (which renamed kernels are the same work) on hand-written reports
    "diff_matching": ("traceinsight/delta/compare.py", ["tests/test_diff_matching.py", "tests/test_diff_compare.py"],
                      ["traceinsight.delta.compare.x_kernel_diff__mutmut_*"]),
    # host work that calls no GPU API (TI001's CPU-work cause): which long ops count
    "cpuwork": ("traceinsight/rulelib/cpuwork.py", ["tests/test_cpuwork.py", "tests/rules/test_TI001.py", "tests/rules/test_TI013.py"], []),
    # Nsight Systems' memory tables (allocations, releases, unified-memory faults) as memory rows
    "nsys_memory": ("traceinsight/ingest/nsys/memory.py", ["tests/test_memory.py", "tests/test_memory_view.py"], []),
    "ledger": (tuple(f"traceinsight/derive/ledger/{m}.py" for m in ("intervals", "host", "warmup", "slices", "build", "frames", "account", "claims")), ["tests/test_ledger_values.py", "tests/test_ledger_json.py", "tests/test_ledger.py", "tests/test_ledger_pieces.py", "tests/test_ledger_property.py",
                                         "tests/test_ledger_verdict.py", "tests/test_ledger_render.py", "tests/test_fast_paths.py"], []),
    # the what-if transforms and what maps findings to them (graph building and replay have their own tests,
    # native-vs-Python replay among them, and would take far longer than a run here)
    "whatif": (
        ("traceinsight/derive/whatif/transforms.py", "traceinsight/derive/whatif/predict.py", "traceinsight/derive/whatif/replay.py"),
        ["tests/test_whatif_transforms.py", "tests/test_whatif.py"],
        [f"traceinsight.derive.whatif.{module}.x_{name}__mutmut_*" for module, names in (
            ("transforms", ("_in", "_where", "remove_data_wait", "remove_host_sync", "launch_bound_to_graphs", "rnn_to_cudnn",
                            "remove_warmup", "cut_time", "warmup_mask", "typical_gpu_latencies", "_all")),
            ("predict", ("_resolve", "windows_of", "what_if_for")),
            ("replay", ("step_times",))) for name in names],
    ),
}

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", 37: "caught by type check", None: "not checked"}


def scratch_copy(dest: Path) -> None:
    """The checkout as git sees it (tracked + untracked, not ignored), plus the built extensions."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    built = [str(p.relative_to(ROOT)) for p in (ROOT / "traceinsight").rglob("*.so")]
    for rel in filter(None, listed + built):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _files(file: str | tuple[str, ...]) -> list[str]:
    return [file] if isinstance(file, str) else list(file)


def write_config(dest: Path, file: str | tuple[str, ...], tests: list[str]) -> None:
    lines = ["[mutmut]", "source_paths=traceinsight/", "only_mutate="] + [f"    {f}" for f in _files(file)] + [
             "also_copy=", "    rules/", "    docs/", "    sample_traces/", "    bench/",
             "pytest_add_cli_args_test_selection="] + [f"    {t}" for t in tests] + [
             "pytest_add_cli_args=", "    -p", "    no:randomly", "    -p", "    no:cacheprovider", "    -q", "    -x"]
    (dest / "setup.cfg").write_text("\n".join(lines) + "\n")
    # mutmut reads [tool.mutmut] from pyproject.toml first: the copy's has none, so setup.cfg is used


def run_module(name: str, timeout: int, children: int, keep: Path | None,
               only: list[str] | None = None) -> tuple[float | None, str]:
    file, tests, patterns = MODULES[name]
    patterns = only or patterns
    work = Path(tempfile.mkdtemp(prefix=f"mutation-{name}-", dir=keep))
    scratch_copy(work)
    write_config(work, file, tests)
    env = dict(os.environ, TRACEINSIGHT_SHARED=str(work / "no-corpus"), TRACEINSIGHT_CACHE_DIR="", PYTHONHASHSEED="0")
    cmd = ["timeout", str(timeout), sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *patterns]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    try:
        return report(name, work, stopped=proc.returncode == 124, tail=proc.stdout[-2000:] + proc.stderr[-2000:], only=only)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def report(name: str, work: Path, stopped: bool = False, tail: str = "", only: list[str] | None = None) -> tuple[float | None, str]:
    """Score and surviving mutants of a finished (or stopped) run in the scratch copy ``work``."""
    import ast
    import difflib
    import fnmatch

    file, tests, patterns = MODULES[name]
    patterns = only or patterns
    files = _files(file)
    metas = [work / "mutants" / (f + ".meta") for f in files]
    if not any(m.is_file() for m in metas):
        return None, f"{name}: mutmut produced no results\n{tail}"
    codes = {}
    for m in metas:
        if m.is_file():
            codes.update(json.loads(m.read_text())["exit_code_by_key"])
    if patterns:
        codes = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, p) for p in patterns)}
    status = {k: STATUS.get(v, "suspicious") for k, v in codes.items()}
    counts = Counter(status.values())
    killed = counts["killed"] + counts["timeout"] + counts["caught by type check"]
    decided = killed + counts["survived"]
    score = 100.0 * killed / decided if decided else None
    out = [f"{name} ({' '.join(files)}; tests: {' '.join(tests)}{'; only: ' + ' '.join(only) if only else ''}): "
           + (f"{score:.1f} % killed" if score is not None else "no mutant decided")
           + f" ({killed} killed, {counts['survived']} survived"
           + "".join(f", {n} {s}" for s, n in sorted(counts.items()) if s not in ("killed", "survived", "timeout", "caught by type check"))
           + (", stopped by the timeout" if stopped else "") + ")"]
    # each mutant is a copy of its function in the trampolined file: diff it against the original copy
    funcs = {}  # (module, function) -> its lines
    for f in files:
        module = f.removesuffix(".py").replace("/", ".")
        source = (work / "mutants" / f).read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
                # the whole function, its name left out (a default argument may be what was mutated)
                funcs[(module, node.name)] = [ln.replace(node.name, "", 1) if i == 0 else ln
                                              for i, ln in enumerate(lines[node.lineno - 1:node.end_lineno])]
    for key in sorted((k for k, s in status.items() if s == "survived"), key=_natural):
        module, fn = key.rsplit(".", 1)
        orig = funcs.get((module, fn.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"), [])
        diff = difflib.unified_diff(orig, funcs.get((module, fn), []), lineterm="", n=0)
        changed = [ln for ln in diff if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        where = fn if len(files) == 1 else f"{module.rsplit('.', 1)[-1]}.{fn}"
        out.append(f"  survived {where}: " + " => ".join(ln[1:].strip() for ln in changed))
    return score, "\n".join(out)


def _natural(key: str):
    head, _, n = key.rpartition("_")
    return (head, int(n) if n.isdigit() else 0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("module", choices=[*MODULES, "all"])
    p.add_argument("--timeout", type=int, default=600, help="seconds per module (default 600)")
    p.add_argument("--children", type=int, default=1, help="parallel mutant runs (default 1)")
    p.add_argument("--target", type=float, default=90.0, help="minimum %% killed per module (default 90)")
    p.add_argument("--keep", type=Path, help="keep the scratch copies under this folder (to rerun or inspect)")
    p.add_argument("--only", nargs="+", metavar="PATTERN",
                   help="mutant-name patterns (fnmatch, e.g. 'traceinsight.derive.ledger.intervals.x__merged__mutmut_*') run and scored "
                        "instead of the module's own: to iterate on part of a large module")
    p.add_argument("--report", type=Path, metavar="COPY", help="only report on a kept scratch copy of this module")
    args = p.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    if args.report:
        score, text = report(args.module, args.report, only=args.only)
        print(text)
        return 0 if score is not None and score >= args.target else 1
    ok = True
    for name in MODULES if args.module == "all" else [args.module]:
        score, text = run_module(name, args.timeout, args.children, args.keep, args.only)
        print(text, flush=True)
        ok &= score is not None and score >= args.target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
