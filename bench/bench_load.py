"""Load-time and peak-memory benchmark for PyTorch Profiler traces.

Each measurement runs in a fresh Python process (so peak RSS is that of one load, imports included) and is
repeated; the table reports the median time and the max peak RSS. Compared:

* ``traceinsight``: ``traceinsight.load(path)`` (the full timeline, steps assigned, names demangled);
* ``stdlib json``: ``json.loads`` of the decompressed file, nothing else: a floor for any json-module loader;
* ``HTA``: ``hta.trace_analysis.TraceAnalysis(trace_files={0: path})``, when an interpreter with HTA is given
  (``--hta-python``; ``pip install holistictraceanalysis`` in a separate venv).

The synthetic trace (``--synthetic N``) replicates the events of the 54 MB DDP V100 trace N times, shifted in
time (and in correlation / external ids), so its content is realistic and its size scales exactly.

    python bench/bench_load.py --hta-python /tmp/hta-venv/bin/python --synthetic 10 --gzip
    python bench/bench_load.py --gigabyte 40 --repeat 3    # load CPU / RSS against reading the file once
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRACEINSIGHT_SHARED", REPO.parent / "shared")) / "traces" / "pytorch"
DDP = "hta_ddp_v100_rank1of2.json.gz"

_PROBE = r"""
import json, sys, time
kind, path = sys.argv[1], sys.argv[2]
import resource
def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0 = _cpu()
t0 = time.perf_counter()
def _report(n):
    dt = time.perf_counter() - t0
    cpu = _cpu() - c0
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report the parent's peak
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest worker process, if any
    print(json.dumps({"seconds": dt, "cpu_seconds": cpu, "process_cpu_seconds": _cpu(), "rows": n,
                      "peak_rss_mb": hwm / 1024, "child_rss_mb": children / 1024}), flush=True)
if kind.startswith("traceinsight"):
    import traceinsight
    if ":" in kind:  # traceinsight:<pool>: read a rank folder with that pool
        from traceinsight.ingest.kineto import reader
        reader.RANK_POOL = kind.split(":")[1]
    if kind in ("traceinsight-one-thread", "traceinsight-two-threads"):  # the scan of a large file on one / two threads
        from traceinsight.ingest.kineto import columns
        columns.SPLIT_MIN_CPUS = 1 << 30 if kind.endswith("one-thread") else 1
    c0, t0 = _cpu(), time.perf_counter()
    tl = traceinsight.load(path)
    n = len(tl.events)
elif kind == "json":
    import gzip
    c0, t0 = _cpu(), time.perf_counter()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.loads(fh.read())
    n = len(doc["traceEvents"])
elif kind == "floor":  # the floor of any loader: the file read into memory once and scanned once
    c0, t0 = _cpu(), time.perf_counter()
    with open(path, "rb") as fh:
        n = fh.read().count(b'"ts"')
elif kind == "analyze":  # the command line: analyze -f html,md,json into a temporary folder
    import os, shutil, tempfile
    from traceinsight.cli.console import main
    reports = tempfile.mkdtemp(prefix="ti-bench-report-")
    sys.argv = ["traceinsight", "analyze", path, "-f", "html,md,json", "-o", reports]
    _exit = os._exit
    def _measured_exit(code=0):
        _report(0)
        shutil.rmtree(reports, ignore_errors=True)
        _exit(code)
    os._exit = _measured_exit
    main()
elif kind == "hta":
    import logging
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    c0, t0 = _cpu(), time.perf_counter()
    ta = TraceAnalysis(trace_files={0: path}, trace_dir="/")
    n = len(ta.t.get_trace(0))
if kind == "analyze":
    _report(0)  # the command line ends with os._exit after its reports are written (measured above)
else:
    _report(n)
"""


def _child_env(cache: Path) -> dict[str, str]:
    """Children write bytecode to a private cache, as an installed package has .pyc files (pip compiles them);
    a shell with PYTHONDONTWRITEBYTECODE would otherwise make every run recompile our modules but not HTA's."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def measure(python: str, kind: str, path: Path, repeat: int, cache: Path) -> dict | None:
    runs = []
    env = _child_env(cache)
    for i in range(repeat + 1):  # the first run only warms the bytecode cache and the page cache
        proc = subprocess.run([python, "-c", _PROBE, kind, str(path)], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"  {kind} failed on {path.name}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}", file=sys.stderr)
            return None
        if i:
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "rows": runs[0]["rows"],
    }


def make_synthetic(src: Path, copies: int, out: Path) -> Path:
    """Write ``copies`` time-shifted replicas of ``src``'s events as one kineto trace (plain JSON)."""
    with gzip.open(src, "rb") as fh:
        doc = json.loads(fh.read())
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e and isinstance(e["ts"], (int, float))]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    shift = (hi - lo) + 1000
    with open(out, "w") as fh:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        fh.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            for e in events:
                e2 = dict(e)
                if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                    e2["ts"] = e2["ts"] + c * shift
                if c and isinstance(e2.get("args"), dict):
                    a = dict(e2["args"])
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int):
                            a[key] = a[key] + c * 10_000_000
                    e2["args"] = a
                if c and e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + c * 10_000_000
                fh.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        fh.write("\n]}\n")
    return out


def rank_pools(folders: list[Path], replicas: int, repeat: int) -> int:
    """Median wall time of loading each rank folder with each pool (fresh processes, interleaved runs)."""
    tmp = Path(tempfile.mkdtemp(prefix="ti-bench-ranks-"))
    if replicas:
        rep = tmp / f"ddp_x{replicas}_ranks"
        rep.mkdir()
        for i in range(replicas):
            shutil.copy(CORPUS / DDP, rep / f"rank{i}.json.gz")
        folders.append(rep)
    pools = ("threads", "processes", "serial")
    print(f"{'folder':40s} {'files':>5s} " + " ".join(f"{p + ' s':>12s} {'RSS MB':>7s}" for p in pools))
    for folder in folders:
        runs: dict[str, list[dict]] = {p: [] for p in pools}
        env = _child_env(tmp / "pycache")
        for i in range(repeat + 1):
            for pool in pools:  # interleaved, so a busy spell on the machine hits every pool alike
                proc = subprocess.run([sys.executable, "-c", _PROBE, f"traceinsight:{pool}", str(folder)],
                                      capture_output=True, text=True, env=env, check=True)
                if i:
                    runs[pool].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        n = len([p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))])
        cells = []
        for pool in pools:
            sec = statistics.median(r["seconds"] for r in runs[pool])
            # processes: the parent plus one worker per file at the largest worker's peak, an upper bound
            rss = max(r["peak_rss_mb"] + (min(n, os.cpu_count() or 1) * r["child_rss_mb"] if pool == "processes" else 0)
                      for r in runs[pool])
            cells.append(f"{sec:12.3f} {rss:7.0f}")
        print(f"{folder.name[:40]:40s} {n:5d} " + " ".join(cells))
    return 0


def gigabyte(copies: int, replica: str | None, repeat: int) -> int:
    """The issue-42 case: the N-times DDP replica (40: 1.9 GB) read five ways in fresh processes, rounds
    interleaved so a busy spell hits all alike: the floor (the file read into memory, ``"ts"`` counted once),
    ``traceinsight.load`` (its scan on two threads where ``SPLIT_MIN_CPUS`` are usable), the same with the scan on
    one thread and on two whatever the machine, and ``traceinsight analyze -f html,md,json``. CPU is user + system of the whole process,
    start-up and exit included, and wall the whole process too (what ``/usr/bin/time`` reports: a process that
    held a 1.9 GB mapping spends a second of system time unmapping it at exit); medians of ``repeat`` rounds after
    a discarded one; RSS is the peak (``VmHWM``)."""
    tmp = Path(tempfile.mkdtemp(prefix="ti-bench-giga-"))
    path = Path(replica) if replica else make_synthetic(CORPUS / DDP, copies, tmp / f"ddp_x{copies}.json")
    size_mb = path.stat().st_size / 1e6
    kinds = ("floor", "traceinsight", "traceinsight-one-thread", "traceinsight-two-threads", "analyze")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    env = _child_env(tmp / "pycache")
    for i in range(repeat + 1):
        for kind in kinds:
            t0 = time.perf_counter()
            with tempfile.TemporaryFile("w+") as err_fh:  # a file, not a pipe: nothing blocks while stdout is read
                proc = subprocess.Popen([sys.executable, "-c", _PROBE, kind, str(path)], stdout=subprocess.PIPE,
                                        stderr=err_fh, text=True, env=env)
                out = proc.stdout.read()
                _, status, usage = os.wait4(proc.pid, 0)  # the child's whole CPU time, exit included (as /usr/bin/time)
                err_fh.seek(0)
                err = err_fh.read()
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                print(f"{kind} failed: {err.strip()[-300:]}", file=sys.stderr)
                return 1
            if i:
                r = json.loads(out.strip().splitlines()[-1])
                r["process_cpu_seconds"] = usage.ru_utime + usage.ru_stime
                r["seconds"] = wall
                runs[kind].append(r)
    med = {k: {f: statistics.median(r[f] for r in runs[k]) for f in ("process_cpu_seconds", "seconds", "peak_rss_mb")} for k in kinds}
    floor = med["floor"]["process_cpu_seconds"]
    print(f"\n{path.name}: {size_mb:,.0f} MB, median of {repeat} round(s)")
    print(f"{'':34s} {'CPU s':>7s} {'wall s':>7s} {'RSS MB':>7s} {'RSS/file':>8s} {'CPU/floor':>9s}")
    names = {"floor": "read + count ts (floor)", "traceinsight": "traceinsight.load",
             "traceinsight-one-thread": "traceinsight.load, one thread", "traceinsight-two-threads": "traceinsight.load, two threads",
             "analyze": "analyze -f html,md,json"}
    for k in kinds:
        m = med[k]
        print(f"{names[k]:34s} {m['process_cpu_seconds']:7.2f} {m['seconds']:7.2f} {m['peak_rss_mb']:7.0f} "
              f"{m['peak_rss_mb'] / size_mb:8.2f} {m['process_cpu_seconds'] / floor:9.2f}")
    load_cpu, an = med["traceinsight"]["process_cpu_seconds"], med["analyze"]
    one, two = med["traceinsight-one-thread"]["process_cpu_seconds"], med["traceinsight-two-threads"]["process_cpu_seconds"]
    print(f"targets: load CPU / floor {load_cpu / floor:.2f} (one thread {one / floor:.2f}, two {two / floor:.2f}) (<= 1.5); analyze RSS / file "
          f"{an['peak_rss_mb'] / size_mb:.2f} (<= 1.3); analyze CPU / load CPU {an['process_cpu_seconds'] / load_cpu:.2f} (<= 1.3)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", help="an interpreter that can import hta (HolisticTraceAnalysis)")
    ap.add_argument("--synthetic", type=int, default=0, help="also build and load an N-times replica of the DDP trace")
    ap.add_argument("--gzip", action="store_true", help="also load the replica gzipped, like the small trace it scales")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", nargs="*", default=None, help="corpus file names (default: the DDP trace and a few others)")
    ap.add_argument("--rank-pools", nargs="*", metavar="FOLDER", default=None,
                    help="only compare how rank folders are read: threads, processes, one after another")
    ap.add_argument("--replicas", type=int, default=0,
                    help="with --rank-pools: also a folder of N copies of the DDP trace (one rank each)")
    ap.add_argument("--gigabyte", type=int, nargs="?", const=40, default=0, metavar="N",
                    help="only the large-trace case: floor, load and analyze of the N-times replica (default 40, 1.9 GB)")
    ap.add_argument("--replica", help="with --gigabyte: an already built replica to use instead of building one")
    args = ap.parse_args()
    if args.gigabyte:
        return gigabyte(args.gigabyte, args.replica, args.repeat)
    if args.rank_pools is not None:
        return rank_pools([Path(f) for f in args.rank_pools], args.replicas, args.repeat)

    files = [CORPUS / f for f in (args.files or [DDP, "tracelens_h100_owlv2_inference.json.gz", "kineto_resnet50_nw0_v100.pt.trace.json.gz"])]
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ti-bench-"))
    targets = [(f, args.repeat) for f in files if f.exists()]
    if args.synthetic:
        synth = make_synthetic(CORPUS / DDP, args.synthetic, tmp / f"ddp_x{args.synthetic}.json")
        targets.append((synth, 1))
        if args.gzip:
            gz = synth.with_name(synth.name + ".gz")
            with open(synth, "rb") as src_fh, gzip.open(gz, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src_fh, dst, 1 << 24)
            targets.append((gz, 1))
    for path, repeat in targets:
        size_mb = path.stat().st_size / 1e6
        json_mb = size_mb if not path.name.endswith(".gz") else len(gzip.decompress(path.read_bytes())) / 1e6
        cache = tmp / "pycache"
        ti = measure(sys.executable, "traceinsight", path, repeat, cache)
        js = measure(sys.executable, "json", path, repeat, cache)
        hta = measure(args.hta_python, "hta", path, repeat, cache) if args.hta_python else None
        rows.append((path.name, json_mb, ti, js, hta))

    print(f"\n{'trace':46s} {'JSON MB':>8s} {'events':>9s} | {'traceinsight s':>14s} {'RSS MB':>7s} | {'json s':>7s} {'RSS MB':>7s} | {'HTA s':>7s} {'RSS MB':>7s} | {'speed-up':>8s} {'RSS ratio':>9s} | {'µs/row':>6s}")
    for name, mb, ti, js, hta in rows:
        def cell(r):
            return (f"{r['seconds']:7.3f} {r['peak_rss_mb']:7.0f}") if r else f"{'-':>7s} {'-':>7s}"
        speed = f"{hta['seconds'] / ti['seconds']:7.1f}x" if (hta and ti) else f"{'-':>8s}"
        ratio = f"{ti['peak_rss_mb'] / hta['peak_rss_mb']:9.2f}" if (hta and ti) else f"{'-':>9s}"
        per = f"{1e6 * ti['seconds'] / max(ti['rows'], 1):6.2f}" if ti else "-"
        print(f"{name[:46]:46s} {mb:8.1f} {ti['rows'] if ti else 0:9,d} | {ti['seconds'] if ti else 0:14.3f} {ti['peak_rss_mb'] if ti else 0:7.0f} | {cell(js)} | {cell(hta)} | {speed} {ratio} | {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
