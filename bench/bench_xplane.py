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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5, help="fresh processes for the 3 MB file")
    ap.add_argument("--big-reps", type=int, default=3, help="fresh processes for the synthetic file")
    ap.add_argument("--target-mb", type=float, default=100)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="keep this shell's bytecode settings")
    ap.add_argument("--numpy", action="store_true", help="force the numpy decoder (TRACEINSIGHT_PURE_PYTHON=1)")
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
