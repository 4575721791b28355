"""Whole jobs of many tiny ranks: per-rank work must follow the rank's size, not a fixed start-up cost.

Writes N rank files of about 21 events each (one step, a few kernels and their launches, one collective) with the
kineto test writer, then times ``traceinsight analyze FOLDER -f json -o ...`` end to end in a fresh process
(the job path: local processes, one per CPU, ranks handed out in chunks). Target (issue 28): 2,000 ranks in <= 30 s
on 2 cores. The CPU time of the command and its workers is reported too (``cpu_s``, ``cpu_per_rank_ms``): on a
shared machine wall time says more about the neighbours than about us, and CPU seconds / 2 estimates the wall
time on an idle 2-core machine (``idle_2core_estimate_s``). On an idle machine ``wall_s`` is the figure to quote.

    python bench/bench_job_tiny.py                 # 2,000 ranks
    python bench/bench_job_tiny.py --ranks 500
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
    args = p.parse_args()
    folder = Path(args.out) / f"job{args.ranks}"
    t0 = time.perf_counter()
    build(args.ranks, folder)
    built = time.perf_counter() - t0
    report = Path(args.out) / f"job{args.ranks}.json"
    load = os.getloadavg()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "traceinsight.cli", "analyze", str(folder), "-f", "json", "-o", str(report)],
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


if __name__ == "__main__":
    main()
