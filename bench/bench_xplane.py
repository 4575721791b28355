"""Time ``traceinsight.load`` on the 3 MB corpus xplane and on a ~100 MB synthetic one, as a user sees it.

Targets (issue): a 3 MB xplane in <= 50 ms, 100 MB in <= 2 s.

Every timed load runs in a fresh interpreter (``python -c``), so the figure includes what a first call pays (lazy
imports of the reader, protobuf descriptor pool, regex compilation) but not interpreter start or
``import traceinsight``; one more row per file adds the import. Each figure is the median of ``--reps`` processes.
Children write bytecode to a private cache (``PYTHONPYCACHEPREFIX`` in a temp dir, warmed by one discarded run),
as an installed package has ``.pyc`` files even where this shell sets ``PYTHONDONTWRITEBYTECODE``.

The synthetic file replicates the real capture's lines (same planes, metadata and stats; shifted line ids and
times) so it exercises the same decoding path. Only lines are replicated, so the replica count is worked out from
the serialized size of the lines, not of the whole file (metadata is ~40% of the demo file).
Loads use the C walker (``ingest/xplane/_wire_scan.c``) where it is built; ``--numpy`` times the pure-Python fallback.
Usage: python bench/bench_xplane.py [--reps 5] [--big-reps 3] [--target-mb 100] [--numpy]
       python bench/bench_xplane.py --run-pools 4 [--reps 5] [--pool-mb 25]

``--run-pools N`` compares how a TensorBoard run of N host files is read (``tf.logdir.RANK_POOL``: threads,
processes, one after another): N copies of the corpus file, and N copies of a ``--pool-mb`` replica, each loaded
as a logdir in fresh processes, pools interleaved.
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

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "tf"
DEMO = CORPUS / "tensorflow-profiler-demo" / "GPU-multi-worker" / "34.83.195.179_6003.xplane.pb"
REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import traceinsight
t1 = time.perf_counter()
tl = traceinsight.load(sys.argv[1])
t2 = time.perf_counter()
from traceinsight.ingest.xplane import space as xplane_space
native = xplane_space.native_scanner() is not None
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "events": len(tl.events), "native": native}))
"""


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def synthesize(src: Path, dst: Path, target_bytes: int) -> tuple[int, int]:
    """Write a copy of ``src`` whose lines are replicated until the file is about ``target_bytes``."""
    from traceinsight.ingest.xplane.schema import messages

    data = src.read_bytes()
    space = messages()["XSpace"].FromString(data)
    # bytes one replica adds: every line as a length-delimited XPlane.lines entry (tag 0x1a + length + body)
    per_replica = sum(1 + _varint_len(n) + n for p in space.planes for n in (line.ByteSize() for line in p.lines))
    copies = max(1, 1 + round((target_bytes - len(data)) / per_replica)) if per_replica else 1
    span_ps = 3_000_000_000_000  # shift each replica by 3 s so replicas do not overlap
    for plane in space.planes:
        originals = list(plane.lines)
        for k in range(1, copies):
            for line in originals:
                new = plane.lines.add()
                new.CopyFrom(line)
                new.id = line.id + k * 1_000_003
                new.timestamp_ns = line.timestamp_ns + k * span_ps // 1000
    out = space.SerializeToString()
    dst.write_bytes(out)
    return len(out), copies


def fresh_runs(path: Path, reps: int, env: dict[str, str]) -> list[dict]:
    runs = []
    for _ in range(reps):
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                              cwd=REPO, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


_POOL_CHILD = r"""
import json, resource, sys, time
import traceinsight
from traceinsight.ingest.tf import logdir
logdir.RANK_POOL = sys.argv[1]
t0 = time.perf_counter()
tl = traceinsight.load(sys.argv[2])
t1 = time.perf_counter()
self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"load_s": t1 - t0, "events": len(tl.events), "rss_mb": self_mb, "child_mb": child_mb}))
"""


def run_pools(n: int, reps: int, pool_mb: float, env: dict[str, str], tmp: Path) -> None:
    """Median load time of an n-host run folder per pool, fresh processes, pools interleaved."""
    big = tmp / "pool_src.xplane.pb"
    synthesize(DEMO, big, int(pool_mb * 1_000_000))
    pools = ("threads", "processes", "serial")
    print(f"{'run folder':34} {'files':>5} " + " ".join(f"{p + ' s':>12} {'RSS MB':>7}" for p in pools))
    for label, src in (("corpus GPU-multi-worker", DEMO), (f"replica {big.stat().st_size / 1e6:.0f} MB", big)):
        run = tmp / label.replace(" ", "_") / "plugins" / "profile" / "2026_01_01_00_00_00"
        run.mkdir(parents=True)
        for i in range(n):
            (run / f"host{i}.xplane.pb").write_bytes(src.read_bytes())
        runs: dict[str, list[dict]] = {p: [] for p in pools}
        for i in range(reps + 1):
            for pool in pools:  # interleaved, so a busy spell on the machine hits every pool alike
                proc = subprocess.run([sys.executable, "-c", _POOL_CHILD, pool, str(run.parents[2])],
                                      capture_output=True, text=True, env=env, cwd=REPO, check=True)
                if i:  # the first round warms the page and bytecode caches
                    runs[pool].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        cells = []
        for pool in pools:
            sec = statistics.median(r["load_s"] for r in runs[pool])
            # processes: the parent plus one worker per core at the largest worker's peak, an upper bound
            workers = min(n, os.cpu_count() or 1) if pool == "processes" else 0
            rss = max(r["rss_mb"] + workers * r["child_mb"] for r in runs[pool])
            cells.append(f"{sec:12.3f} {rss:7.0f}")
        print(f"{label:34} {n:5d} " + " ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5, help="fresh processes for the 3 MB file")
    ap.add_argument("--big-reps", type=int, default=3, help="fresh processes for the synthetic file")
    ap.add_argument("--target-mb", type=float, default=100)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="keep this shell's bytecode settings")
    ap.add_argument("--numpy", action="store_true", help="force the numpy decoder (TRACEINSIGHT_PURE_PYTHON=1)")
    ap.add_argument("--run-pools", type=int, default=0, metavar="N",
                    help="only compare threads, processes and one after another on an N-host run folder")
    ap.add_argument("--pool-mb", type=float, default=25, help="with --run-pools: size of the replica host file")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if args.numpy:
            env["TRACEINSIGHT_PURE_PYTHON"] = "1"
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        if args.run_pools:
            run_pools(args.run_pools, args.reps, args.pool_mb, env, Path(tmp))
            return
        native = fresh_runs(DEMO, 1, env)[0]["native"]  # warms the OS page cache and the bytecode cache; not counted
        big = Path(tmp) / "synthetic.xplane.pb"
        size, copies = synthesize(DEMO, big, int(args.target_mb * 1_000_000))
        for label, path, reps, target in (("corpus GPU-multi-worker", DEMO, args.reps, 0.050),
                                          (f"synthetic ({copies}x lines)", big, args.big_reps, 2.0)):
            runs = fresh_runs(path, reps, env)
            load = statistics.median(r["load_s"] for r in runs)
            total = statistics.median(r["import_s"] + r["load_s"] for r in runs)
            n = runs[0]["events"]
            rows.append((label, path.stat().st_size, n, "first load", load, target))
            rows.append((label, path.stat().st_size, n, "+ import", total, None))
    print("decoder:", "C walker (xplane/_wire_scan.c)" if native else "upb + numpy (xplane/wire.py)")
    print(f"{'file':30} {'MB':>7} {'events':>9} {'measure':>11} {'median s':>9} {'target s':>9} {'ok':>4}")
    for name, size, n, what, t, target in rows:
        tgt = f"{target:9.3f}" if target is not None else f"{'':9}"
        ok = ("yes" if t <= target else "NO") if target is not None else ""
        print(f"{name:30} {size / 1e6:7.1f} {n:9d} {what:>11} {t:9.3f} {tgt} {ok:>4}")


if __name__ == "__main__":
    main()
