"""Load time of a PyTorch Profiler trace with a million allocator events against the same trace without them.

The base is the 54 MB DDP V100 trace with its own ``[memory]`` events removed; the "with" file adds 10^6
``[memory]`` events (alloc/free pairs, as ``profile_memory=True`` writes them, spread over the trace's host threads
and span). Each load runs in a fresh process, median of ``--repeat``; both the native scanner and the pure-Python
(msgspec) path are measured. CPU time is reported beside wall time (the reference machine is shared); the
CPU µs per memory row is what each allocator event adds to a load, to compare with the µs per event row of
``bench_load.py``.

    python bench/bench_memory.py --events 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRACEINSIGHT_SHARED", REPO.parent / "shared")) / "traces" / "pytorch"
DDP = "hta_ddp_v100_rank1of2.json.gz"

_PROBE = r"""
import sys, time
import traceinsight
t0, c0 = time.perf_counter(), time.process_time()
tl = traceinsight.load(sys.argv[1])
print(time.perf_counter() - t0, time.process_time() - c0, len(tl.events), len(tl.memory))
"""


def build(out_dir: Path, events: int) -> tuple[Path, Path]:
    doc = json.loads(gzip.open(CORPUS / DDP).read())
    evs = [e for e in doc["traceEvents"] if e.get("name") not in ("[memory]", "[OutOfMemory]")]
    base = dict(doc, traceEvents=evs)
    without = out_dir / "without.json"
    without.write_text(json.dumps(base))
    ops = [e for e in evs if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    ops.sort(key=lambda e: e["ts"])
    pid = ops[0]["pid"]
    lines = []
    level = 4 << 30
    for i in range(events // 2):
        op = ops[(i * 7) % len(ops)]
        ts = op["ts"] + min(op.get("dur", 0), 1) * 0.5
        size = 512 << (i % 14)
        addr = 139_900_000_000_000 + (i % 100_000) * 4096
        for sign in (1, -1):
            level += sign * size
            lines.append('{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": %d, "tid": %d, '
                         '"ts": %.3f, "args": {"Ev Idx": %d, "Device Type": 1, "Device Id": 1, "Addr": %d, "Bytes": %d, '
                         '"Total Allocated": %d, "Total Reserved": %d}}'
                         % (pid, op["tid"], ts + (0 if sign > 0 else 0.2), len(lines), addr, sign * size, level, 12 << 30))
    head, tail = json.dumps(base).split('"traceEvents": [', 1)
    with_path = out_dir / "with.json"
    with_path.write_text(head + '"traceEvents": [' + ", ".join(lines) + ", " + tail)
    return without, with_path


def measure(path: Path, repeat: int, pure: bool) -> tuple[float, int, int]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if pure:
        env["TRACEINSIGHT_PURE_PYTHON"] = "1"
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, env=env, check=True)
        dt, cpu, n, m = out.stdout.split()
        runs.append((float(dt), float(cpu), int(n), int(m)))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2], runs[0][3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pure", action="store_true", help="also measure the pure-Python (msgspec) path")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        without, with_mem = build(Path(tmp), args.events)
        print("| path | trace | MB | events | memory rows | load s (median) | CPU s (median) | CPU ratio | CPU µs per memory row |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for pure in ([False, True] if args.pure else [False]):
            base = None
            for label, p in (("without memory events", without), (f"+ {args.events:,} memory events", with_mem)):
                t, cpu, n, m = measure(p, args.repeat, pure)
                base = base or cpu
                per = f"{(cpu - base) / m * 1e6:.2f}" if m else ""
                print(f"| {'pure' if pure else 'native'} | DDP V100 {label} | {p.stat().st_size / 1e6:.0f} | {n:,} | {m:,} | {t:.3f} | {cpu:.3f} | {cpu / base:.2f}x | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
