"""Time ``traceinsight.load`` on the 3 MB corpus xplane and on a ~100 MB synthetic one.

The synthetic file replicates the real capture's lines (same planes, metadata and stats, shifted ids and times) with
our own schema classes, so it exercises the same decoding path at 30x the size.
Usage: python bench/bench_xplane.py [--reps 5] [--target-mb 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import traceinsight
from traceinsight.ingest.proto.xplane_schema import messages

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "tf"
DEMO = CORPUS / "tensorflow-profiler-demo" / "GPU-multi-worker" / "34.83.195.179_6003.xplane.pb"


def synthesize(src: Path, dst: Path, target_bytes: int) -> int:
    space = messages()["XSpace"].FromString(src.read_bytes())
    size = len(src.read_bytes())
    copies = max(1, target_bytes // size)
    for plane in space.planes:
        originals = list(plane.lines)
        span_ps = 3_000_000_000_000  # shift each replica by 3 s so replicas do not overlap
        for k in range(1, copies):
            for line in originals:
                new = plane.lines.add()
                new.CopyFrom(line)
                new.id = line.id + k * 1_000_003
                new.timestamp_ns = line.timestamp_ns + k * span_ps // 1000
    data = space.SerializeToString()
    dst.write_bytes(data)
    return len(data)


def timeit(path: Path, reps: int) -> tuple[float, int]:
    traceinsight.load(path)  # warm: imports and descriptor pool
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        tl = traceinsight.load(path)
        times.append(time.perf_counter() - t)
    return statistics.median(times), len(tl.events)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--target-mb", type=int, default=100)
    args = ap.parse_args()
    rows = []
    t, n = timeit(DEMO, args.reps)
    rows.append(("corpus GPU-multi-worker", DEMO.stat().st_size, n, t, 0.050))
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "synthetic.xplane.pb"
        size = synthesize(DEMO, big, args.target_mb * 1_000_000)
        t, n = timeit(big, max(1, args.reps // 2))
        rows.append(("synthetic (replicated lines)", size, n, t, 2.0))
    print(f"{'file':32} {'MB':>8} {'events':>10} {'median s':>10} {'target s':>9} {'ok':>4}")
    for name, size, n, t, target in rows:
        print(f"{name:32} {size / 1e6:8.1f} {n:10d} {t:10.3f} {target:9.3f} {'yes' if t <= target else 'NO':>4}")


if __name__ == "__main__":
    main()
