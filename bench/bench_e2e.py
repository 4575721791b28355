"""End-to-end benchmark: the whole job a user runs, against reading the file alone, and against HTA.

Each measurement is one fresh process, timed from launch to exit by the parent (interpreter start, imports and
teardown included), with the child's peak RSS from ``wait4``. Compared, in the same run:

* ``load``: ``import traceinsight; traceinsight.load(path)``: the floor (reading the trace), the reference of the
  target;
* ``load_kept``: the same after ``allocator.keep_freed_memory()``, the allocator setting the CLI makes;
* ``load_exit``: ``load_kept`` ending as the command does, with ``os._exit`` instead of interpreter teardown
  (``cli._exit_now``); with these two the ratio can be read without any setting that only one side has;
* ``analyze``: the installed command, ``traceinsight analyze PATH -f html,md,json -o DIR`` (``console.main``, exactly
  what the console script runs): read, all rules, three reports written;
* ``HTA``: ``TraceAnalysis`` + ``get_temporal_breakdown`` + ``get_idle_time_breakdown`` (HolisticTraceAnalysis
  0.5.0 in its own interpreter, ``--hta-python``), the nearest thing HTA does to the same job.

The trace is the N-times replica of the 54 MB DDP V100 trace that ``bench_load.py`` builds (default 10x,
1.23 M rows). The target of issue 11: ``analyze`` <= 1.6x ``load``, i.e. rules and three reports cost less than
half of reading the file. ``--profile`` prints where the analysis and rendering time goes (cProfile, in-process).

    python bench/bench_e2e.py --hta-python /tmp/hta/bin/python --synthetic 10 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import CORPUS, DDP, _child_env, make_synthetic  # noqa: E402

_ROWS = "\nprint('BENCH ' + json.dumps({'rows': rows}))\n"
_KEPT = "from traceinsight.vocab.allocator import keep_freed_memory\nkeep_freed_memory()\n"

PROBES = {
    "load": "import json, sys\nimport traceinsight\nrows = len(traceinsight.load(sys.argv[1]).events)" + _ROWS,
    "load_kept": "import json, sys\nimport traceinsight\n" + _KEPT + "rows = len(traceinsight.load(sys.argv[1]).events)" + _ROWS,
    "load_exit": (
        "import json, os, sys\nimport traceinsight\n" + _KEPT + "rows = len(traceinsight.load(sys.argv[1]).events)" + _ROWS
        + "sys.stdout.flush()\nos._exit(0)\n"
    ),
    "analyze": (
        "import sys\nfrom traceinsight.cli.console import main\n"
        "sys.argv = ['traceinsight', 'analyze', sys.argv[1], '-f', 'html,md,json', '-o', sys.argv[2], '--no-progress']\nmain()\n"
    ),
    "hta": (
        "import json, sys, logging\nlogging.disable(logging.CRITICAL)\nfrom hta.trace_analysis import TraceAnalysis\n"
        "ta = TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir='/')\n"
        "ta.get_temporal_breakdown(visualize=False)\nta.get_idle_time_breakdown(visualize=False)\n"
        "rows = len(ta.t.get_trace(0))" + _ROWS
    ),
}


def _run(cmd: list[str], env: dict) -> tuple[float, int, str, str, float]:
    """Wall seconds, exit status, stdout, stderr and peak RSS (MB, from wait4) of one child process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return dt, proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), usage.ru_maxrss / 1024


def measure(python: str, kind: str, path: Path, out: Path, repeat: int, cache: Path) -> dict | None:
    """Median wall time and max peak RSS of ``repeat`` fresh processes, after one discarded warm-up run."""
    runs = []
    env = _child_env(cache)
    for i in range(repeat + 1):
        dt, code, stdout, stderr, rss = _run([python, "-c", PROBES[kind], str(path), str(out / f"{kind}-{i}")], env)
        line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), "BENCH {}")
        if code != 0:
            tail = (stderr.strip().splitlines() or [str(code)])[-1]
            print(f"  {kind} failed: {tail}", file=sys.stderr)
            return None
        if i:
            runs.append({"seconds": dt, "peak_rss_mb": rss, **json.loads(line[6:])})
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "rows": runs[0].get("rows", 0),
        "all": [round(r["seconds"], 3) for r in runs],
    }


def profile(path: Path, out: Path, top: int = 25) -> None:
    """Where analysis and rendering spend their time, with the load excluded."""
    import cProfile
    import pstats

    import traceinsight
    from traceinsight.render import render

    tl = traceinsight.load(path)
    t0 = time.perf_counter()
    pr = cProfile.Profile()
    pr.enable()
    a = traceinsight.analyze(tl)
    t1 = time.perf_counter()
    for fmt in ("html", "md", "json"):
        (out / f"profile.{fmt}").write_text(render(a, fmt, html_name="profile.html"), encoding="utf-8")
    pr.disable()
    t2 = time.perf_counter()
    print(f"\nanalysis {t1 - t0:.3f} s (rules: " + ", ".join(f"{c} {s:.3f}" for c, s in sorted(a.timings.items(), key=lambda kv: -kv[1])) + f"), rendering {t2 - t1:.3f} s")
    pstats.Stats(pr).sort_stats("cumulative").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", help="an interpreter that can import hta (HolisticTraceAnalysis 0.5.0)")
    ap.add_argument("--synthetic", type=int, default=10, help="size of the DDP replica (default 10x); 0: the corpus file itself")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also profile analysis + rendering in this process")
    ap.add_argument("--trace", type=Path, help="use this trace instead of building the replica")
    ap.add_argument("--skip-load", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ti-e2e-"))
    src = CORPUS / DDP
    if not src.exists():
        print(f"corpus file {src} not found", file=sys.stderr)
        return 2
    if args.trace:
        path = args.trace
    else:
        path = make_synthetic(src, args.synthetic, tmp / f"ddp_x{args.synthetic}.json") if args.synthetic else src
    cache = tmp / "pycache"
    results = {
        "load": measure(sys.executable, "load", path, tmp, args.repeat, cache),
        "load_kept": measure(sys.executable, "load_kept", path, tmp, args.repeat, cache),
        "load_exit": measure(sys.executable, "load_exit", path, tmp, args.repeat, cache),
        "analyze": measure(sys.executable, "analyze", path, tmp, args.repeat, cache),
        "hta": measure(args.hta_python, "hta", path, tmp, args.repeat, cache) if args.hta_python else None,
    }
    load = results["load"]
    mb = path.stat().st_size / 1e6
    print(f"\ntrace: {path.name}, {mb:.0f} MB, {load['rows'] if load else 0:,} rows; median of {args.repeat} fresh processes; cores: {os.cpu_count()}")
    kept = results["load_exit"]
    print(f"{'job':58s} {'s':>8s} {'peak RSS MB':>12s} {'vs load':>8s} {'vs exit':>8s}  runs")
    labels = {
        "load": "import traceinsight; load()",
        "load_kept": "same, with the CLI's allocator setting (allocator.py)",
        "load_exit": "same, and ending with os._exit as the CLI does",
        "analyze": "traceinsight analyze -f html,md,json",
        "hta": "HTA TraceAnalysis + temporal + idle-time breakdown",
    }
    for kind, r in results.items():
        if r is None:
            continue
        ratio = f"{r['seconds'] / load['seconds']:7.2f}x" if load else "-"
        ratio_kept = f"{r['seconds'] / kept['seconds']:7.2f}x" if kept else "-"
        print(f"{labels[kind]:58s} {r['seconds']:8.2f} {r['peak_rss_mb']:12.0f} {ratio:>8s} {ratio_kept:>8s}  {r['all']}")
    if args.profile:
        profile(path, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
