"""Whole jobs of many tiny ranks: per-rank work must follow the rank's size, not a fixed start-up cost.

Writes N rank files of about 21 events each (one step, a few kernels and their launches, one collective) with the
kineto test writer, then times ``traceinsight analyze FOLDER -f json -o ...`` end to end in a fresh process
(the job path: local processes, one per CPU, ranks handed out in chunks). Target (issue 28): 2,000 ranks in <= 30 s
on 2 cores. The CPU time of the command and its workers is reported too (``cpu_s``, ``cpu_per_rank_ms``): on a
shared machine wall time says more about the neighbours than about us, and CPU seconds / 2 estimates the wall
time on an idle 2-core machine (``idle_2core_estimate_s``). On an idle machine ``wall_s`` is the figure to quote.

    python bench/bench_job_tiny.py                 # 2,000 ranks
    python bench/bench_job_tiny.py --ranks 500
    python bench/bench_job_tiny.py --ranks 240 --pieces   # in one process: ms per rank, and per piece of the analysis

``--pieces`` runs ``analyze_rank`` over the ranks in this process (no pool; the first 40 warm it up) and prints the
process time per rank of the whole and of each piece: reading, each rule, the savings, grading, the rank summary,
the finding dicts. The wrappers that time the pieces add some 15 % to the whole.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.helpers.kineto_writer import KinetoTrace  # noqa: E402


def build(n: int, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for r in range(n):
        t = KinetoTrace(rank=r, world_size=n)
        t.step(1, 0.0, 2000.0)
        for i in range(4):
            t.kernel("gemm", 100.0 + i * 300, 200.0)
        t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500.0, 300.0)
        t.write(out / f"rank{r:05d}.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2000)
    p.add_argument("--out", default=str(HERE / "out" / "tiny"))
    p.add_argument("--pieces", action="store_true", help="time analyze_rank and its pieces in this process instead")
    args = p.parse_args()
    folder = Path(args.out) / f"job{args.ranks}"
    t0 = time.perf_counter()
    build(args.ranks, folder)
    built = time.perf_counter() - t0
    if args.pieces:
        pieces(sorted(str(f) for f in folder.iterdir()))
        return
    report = Path(args.out) / f"job{args.ranks}.json"
    load = os.getloadavg()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "traceinsight.cli.app", "analyze", str(folder), "-f", "json", "-o", str(report)],
                         capture_output=True, text=True, cwd=HERE.parent)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the CLI and its worker processes
    ok = res.returncode == 0 and json.loads(report.read_text())["summary"]["ranks"] == args.ranks
    print(json.dumps({"ranks": args.ranks, "wall_s": round(wall, 2), "wall_per_rank_ms": round(1000 * wall / args.ranks, 1),
                      "cpu_s": round(cpu, 1), "cpu_per_rank_ms": round(1000 * cpu / args.ranks, 1),
                      "idle_2core_estimate_s": round(cpu / 2, 1), "target_s": 30 if args.ranks == 2000 else None,
                      "exit": res.returncode, "all_ranks_reported": ok, "cpus": os.cpu_count(),
                      "load_before_1_5_15min": [round(x, 2) for x in load], "build_s": round(built, 1)}))
    print(f"{args.ranks} ranks: wall {wall:.1f} s, CPU {cpu:.1f} s (CLI + workers; {1000 * cpu / args.ranks:.1f} ms per rank, "
          f"start-up included) -> about {cpu / 2:.1f} s on an idle 2-core machine; load before {load[0]:.1f}", file=sys.stderr)
    if res.returncode:
        print(res.stderr[-2000:], file=sys.stderr)


def pieces(files: list[str], warm_up: int = 40) -> None:
    """Process time per rank of ``analyze_rank`` and of each piece it runs (see the module docstring)."""
    import collections

    import traceinsight.pipeline.engine as engine
    import traceinsight.ingest as ingest
    import traceinsight.job.mapper as mapper
    from traceinsight.job.mapper import MapSettings, analyze_rank, warm

    spent: collections.Counter = collections.Counter()

    def timed(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                spent[label] += time.process_time() - t

        setattr(owner, name, wrapper)

    timed(ingest, "load", "load")
    timed(mapper, "summarize_ranks", "rank summary")
    timed(mapper, "finding_dict", "finding dicts")
    timed(engine.savings, "assess", "savings")
    timed(engine, "grade", "grading")
    timed(engine, "link_causes", "causes")
    guarded = engine.run_guarded

    def per_rule(rule, call, timeout):
        t = time.process_time()
        try:
            return guarded(rule, call, timeout)
        finally:
            spent["rule " + rule.code] += time.process_time() - t

    engine.run_guarded = per_rule
    settings = MapSettings()
    warm(settings)
    for f in files[:warm_up]:
        analyze_rank(f, settings)
    spent.clear()
    rest = files[warm_up:]
    t0 = time.process_time()
    for f in rest:
        analyze_rank(f, settings)
    total = time.process_time() - t0
    print(json.dumps({"ranks": len(rest), "ms_per_rank": round(1000 * total / len(rest), 2),
                      "pieces_ms_per_rank": {k: round(1000 * v / len(rest), 2) for k, v in spent.most_common()}}, indent=1))


if __name__ == "__main__":
    main()
