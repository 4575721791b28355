"""How long ``traceinsight.load`` takes on a large nsys SQLite export (target: 1M kernels in <= 2 s).

The file is written by the test writer (real nsys 2026.1 table layout), so the parser does the same work as
on a real capture: 1M kernel rows, optionally with their 1M cudaLaunchKernel runtime rows.

    python bench/bench_nsys.py [--kernels 1000000] [--repeat 3] [--threads N]

``--threads`` caps the reader's parallel scan (default: every CPU this process may use); ``--threads 1``
shows the single-core time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import traceinsight  # noqa: E402
from traceinsight.ingest.nsys import sql as nsys_sql  # noqa: E402
from tests.helpers.nsys_writer import NsysTrace  # noqa: E402


def build(path: Path, n: int, with_runtime: bool) -> None:
    rng = np.random.default_rng(0)
    durs = rng.integers(2_000, 50_000, n)
    starts = np.cumsum(durs + rng.integers(500, 5_000, n)) + 10_000
    names = [f"kernel_{i}" for i in rng.integers(0, 200, n)]
    t = NsysTrace()
    t.kernels_bulk(names, starts.tolist(), durs.tolist())
    if not with_runtime:
        t.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].clear()
    t.write(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="cap on reader threads (0: all CPUs)")
    args = ap.parse_args()
    if args.threads:
        nsys_sql.MAX_THREADS = args.threads
    print(f"reader threads: {min(nsys_sql._cpus(), nsys_sql.MAX_THREADS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for with_runtime in (False, True):
            path = Path(tmp) / f"bench_{with_runtime}.sqlite"
            t0 = time.perf_counter()
            build(path, args.kernels, with_runtime)
            write_s = time.perf_counter() - t0
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                tl = traceinsight.load(path)
                times.append(time.perf_counter() - t0)
            k = int((tl.events["kind"] == "kernel").sum())
            r = int((tl.events["kind"] == "runtime").sum())
            rows.append((k, r, path.stat().st_size / 2**20, write_s, min(times), float(np.median(times))))
            del tl
    print(f"{'kernels':>9} {'runtime':>9} {'file MiB':>9} {'write s':>8} {'load best s':>12} {'load median s':>14} {'Mrows/s':>8}")
    for k, r, mib, w, best, med in rows:
        print(f"{k:>9,} {r:>9,} {mib:>9.1f} {w:>8.2f} {best:>12.2f} {med:>14.2f} {(k + r) / best / 1e6:>8.2f}")


if __name__ == "__main__":
    main()
