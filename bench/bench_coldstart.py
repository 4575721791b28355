"""Cold start: what one ``traceinsight analyze`` of a small trace costs beyond importing pandas.

A CI gate or a notebook cell runs the command on small traces all day, so the fixed cost of every run (imports,
rule discovery, the derived data of a tiny trace, rendering) is what users wait for. Measured as CPU time (user +
system, from ``wait4``) of fresh processes, in alternating order so that both sides see the same machine state:

* ``pandas``: ``python -c "import pandas"``, the floor any pandas tool pays;
* ``json``: ``traceinsight analyze SMALL -f json`` (the console script's ``console.main``), report to stdout;
* ``html``: ``traceinsight analyze SMALL -f html -o FILE``.

Targets (issue 21): ``json`` <= 1.3x ``pandas`` and ``html`` <= 1.5x ``pandas``, medians of the repeats. The small
trace is written by the test helpers (PyTorch Profiler JSON: steps, kernels with their launches, a data-loader
wait and a sync) unless ``--trace`` names one (<= 3 MB). ``--baseline-repo`` runs another checkout (e.g. a copy of
main) in the same alternating rounds; ``--importtime`` prints the slowest imports of one run.

    python bench/bench_coldstart.py --repeat 9 --baseline-repo /tmp/main-copy
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def small_trace(path: Path, steps: int = 4, kernels: int = 5) -> Path:
    """A ~20 KB trace of a training loop: data wait, a few kernels with their launches, a sync per step."""
    sys.path.insert(0, str(REPO))
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    at = 0.0
    for s in range(steps):
        t0 = at
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", at, 300.0)
        at += 320.0
        for k in range(kernels):
            t.kernel(f"void gemm_kernel_{k}<float>", at + 10.0, 40.0, launch_us=at)
            at += 60.0
        t.runtime("cudaStreamSynchronize", at, 50.0)
        at += 80.0
        t.step(s, t0, at - t0)
    return t.write(path)


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """User + system CPU time of one fresh process running ``cmd`` to exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0])
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{cmd!r} failed with status {status}")
    return usage.ru_utime + usage.ru_stime


def _typer_version(env: dict[str, str]) -> str:
    """The typer the runs import (``PYTHONPATH`` may put another one first)."""
    out = subprocess.run([sys.executable, "-c", "import typer; print(typer.__version__)"], capture_output=True, text=True, env=env)
    return out.stdout.strip() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, help="a small trace (default: one written by the test helpers)")
    ap.add_argument("--repeat", type=int, default=9, help="alternating rounds (default 9)")
    ap.add_argument("--importtime", action="store_true", help="print the slowest imports of one json run and exit")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose traceinsight runs (default: this one)")
    ap.add_argument("--baseline-repo", type=Path, help="another checkout (e.g. a copy of main) run in the same rounds")
    args = ap.parse_args()

    def env_for(repo: Path) -> dict[str, str]:
        extra = os.environ.get("PYTHONPATH", "")
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), extra) if p), "PYTHONDONTWRITEBYTECODE": "1"}

    env = env_for(args.repo)
    # An installed package runs from bytecode (pip compiles at install); a checkout may hold none, or stale files,
    # and PYTHONDONTWRITEBYTECODE would make every run compile them again: compile each checkout once, as pip does.
    for repo in filter(None, (args.repo, args.baseline_repo)):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(repo / "traceinsight"), str(repo / "rules")], check=False)
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace or small_trace(Path(tmp) / "small.json")
        size = trace.stat().st_size

        def runs(repo: Path, tag: str) -> dict[str, tuple[list[str], dict[str, str]]]:
            # the module the checkout installs as the command (it moved with the floor folders)
            entry = next(m for m, f in (("cli.console", "cli/console.py"), ("console", "console.py"), ("cli", "cli.py"))
                         if (repo / "traceinsight" / f).exists())
            cli = [sys.executable, "-c", f"import sys; from traceinsight.{entry} import main; sys.exit(main())", "analyze", str(trace), "--no-progress"]
            e = env_for(repo)
            return {f"json{tag}": ([*cli, "-f", "json"], e), f"html{tag}": ([*cli, "-f", "html", "-o", str(Path(tmp) / f"r{tag}.html")], e)}

        cmds = {"pandas": ([sys.executable, "-c", "import pandas"], env), **runs(args.repo, "")}
        if args.baseline_repo:
            cmds.update(runs(args.baseline_repo, " (baseline)"))
        if args.importtime:
            out = subprocess.run([sys.executable, "-X", "importtime", *cmds["json"][0][1:]], capture_output=True, text=True, env=env, cwd=args.repo)
            rows = [ln.split("|") for ln in out.stderr.splitlines() if ln.startswith("import time:") and "|" in ln]
            rows = sorted(((int(r[1]), r[2].rstrip()) for r in rows if r[1].strip().isdigit()), reverse=True)[:40]
            for us, name in rows:
                print(f"{us / 1000:8.1f} ms  {name}")
            return
        for k, (c, e) in cmds.items():  # warm the page cache and the template cache once, and check each run works
            cpu_seconds(c, e)
            if k.startswith("json"):  # a run that fails fast would time nothing: the report must come out
                out = subprocess.run(c, capture_output=True, text=True, env=e, cwd=e["PYTHONPATH"].split(os.pathsep)[0])
                try:
                    json.loads(out.stdout)
                except ValueError:
                    raise SystemExit(f"{k}: no JSON report on stdout ({out.stderr.strip()[-300:]!r})") from None
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.repeat):
            for k, (c, e) in cmds.items():
                times[k].append(cpu_seconds(c, e))
    med = {k: statistics.median(v) for k, v in times.items()}
    import importlib.metadata as md

    print(f"checkout: {args.repo}; trace: {trace.name if args.trace else 'small.json (test helpers)'}, {size / 1024:.0f} KB; "
          f"{args.repeat} alternating rounds; CPU s (user+sys); pandas {md.version('pandas')}, typer {_typer_version(env)}")
    print("| run | median CPU s | min | max | x pandas | target |")
    print("|---|---|---|---|---|---|")
    targets = {"json": 1.3, "html": 1.5}
    for k, v in times.items():
        ratio = med[k] / med["pandas"]
        tgt = f"<= {targets[k]}x: {'met' if ratio <= targets[k] else 'missed'}" if k in targets else ""
        print(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} | {ratio:.2f}x | {tgt} |")


if __name__ == "__main__":
    main()
