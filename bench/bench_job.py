"""Whole-job benchmark: a synthetic N-rank job built from one real rank trace of the corpus.

Each rank is a copy of the source rank with its own ``distributedInfo.rank``, its own clock (shifted by up to
``skew_ms``), and one planted straggler that reaches every collective ``delay_ms`` late: its collective kernels
and the runtime calls that launched them start ``delay_ms`` later, and every other rank's collective kernel runs
``delay_ms`` longer (it waits for the straggler), so collective ends still line up as they do on real hardware.

    python bench/bench_job.py                       # N = 8, 64, 256 from hta_nccl_data_a100_rank0of2, local processes
    python bench/bench_job.py --ranks 64 --dask     # also a real LocalCluster (2 workers) run of the 64-rank job
    python bench/bench_job.py --source hta_ddp_v100_rank1of2.json.gz --ranks 8

Reports wall time, coordinator peak RSS (VmHWM of this process: the map runs in child processes), time per
rank, and whether the straggler was named with its delay within 10 %. Files go to bench/out/ (ignored by git).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = Path(os.environ.get("TRACEINSIGHT_SHARED", HERE.parent.parent / "shared")) / "traces" / "pytorch"
_NCCL = re.compile(r"nccl|rccl", re.I)


def build_job(source: Path, n: int, out: Path, *, straggler: int | None = 1, delay_ms: float = 5.0, skew_ms: float = 4.0, seed: int = 7, level: int = 1) -> list[Path]:
    """Write ``n`` rank files into ``out`` (see the module docstring); returns their paths."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rb") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    coll = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and _NCCL.search(str(e.get("name", "")))]
    corr = {(e.get("args") or {}).get("correlation") for e in coll}
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and (e.get("args") or {}).get("correlation") in corr]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    base = [e["ts"] for e in timed]
    coll_dur = [e["dur"] for e in coll]
    coll_ts = [e["ts"] for e in coll]
    launch_ts = [e["ts"] for e in launches]
    d_us = delay_ms * 1000.0
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(n):
        skew = rng.uniform(-skew_ms, skew_ms) * 1000.0
        for e, t in zip(timed, base):
            e["ts"] = t + skew
        if straggler is not None:
            if r == straggler:
                for e, t, d in zip(coll, coll_ts, coll_dur):
                    e["ts"], e["dur"] = t + skew + d_us, d
                for e, t in zip(launches, launch_ts):
                    e["ts"] = t + skew + d_us
            else:
                for e, d in zip(coll, coll_dur):
                    e["dur"] = d + d_us
        info = dict(doc.get("distributedInfo") or {})
        info.update({"rank": r, "world_size": n, "backend": info.get("backend", "nccl")})
        doc["distributedInfo"] = info
        p = out / f"rank{r:04d}.pt.trace.json.gz"
        with gzip.open(p, "wb", compresslevel=level) as fh:
            fh.write(json.dumps(doc, separators=(",", ":")).encode())
        paths.append(p)
    return paths


def _vmhwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _measure(args: list[str]) -> dict:
    """Run one analysis in a fresh interpreter so its peak RSS is its own."""
    res = subprocess.run([sys.executable, __file__, "--_child", *args], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _child(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--mode", default="job")
    p.add_argument("--straggler", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=5.0)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    out: dict = {}
    if a.mode == "single":
        import traceinsight

        traceinsight.analyze(a.path)
    else:
        from traceinsight.job import analyze_job

        if a.mode == "dask":
            import dask
            from distributed import Client, LocalCluster

            # The worker's statistical profiler samples every thread's stack every 10 ms; on 2 cores it costs a
            # visible share of each rank's pandas work and tells us nothing here.
            with dask.config.set({"distributed.worker.profile.enabled": False}), LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster, Client(cluster) as client:
                t0 = time.perf_counter()
                ja = analyze_job(a.path, scheduler=client)
        else:
            ja = analyze_job(a.path)
        out["ranks"] = ja.job.rank_count
        out["residual_p95_us"] = ja.job.alignment.residual_p95_ns / 1e3
        hit = [f for f in ja.findings if f.code == "TI020"]
        if hit:
            out["named_rank"] = hit[0].metrics["rank"]
            out["named_delay_ms"] = hit[0].metrics["median_held_ns"] / 1e6
        from traceinsight.job.report import render

        out["md_chars"] = len(render(ja, "md"))
        out["html_bytes"] = len(render(ja, "html").encode())
    out["wall_s"] = time.perf_counter() - t0
    out["peak_rss_mb"] = _vmhwm_kb() / 1024
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_child":
        return _child(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default="hta_nccl_data_a100_rank0of2.json.gz", help="a rank trace in the corpus (traces/pytorch/)")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--delay-ms", type=float, default=5.0)
    p.add_argument("--dask", action="store_true", help="also run the 64-rank job (or the largest given) on a LocalCluster")
    p.add_argument("--dask-only", action="store_true", help="only the LocalCluster run")
    a = p.parse_args()
    src = CORPUS / a.source
    single = _measure([str(src), "--mode", "single"])
    cores = os.cpu_count() or 1
    print(f"source {a.source}: single-rank analysis {single['wall_s']:.2f} s, peak {single['peak_rss_mb']:.0f} MB; {cores} cores")
    print("| ranks | engine | wall s | s per rank x cores | vs single | coordinator peak RSS MB | straggler named | delay found ms (planted) | clock residual p95 µs | md chars | html kB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [] if a.dask_only else [(n, "local") for n in a.ranks]
    rows += [(64 if 64 in a.ranks else max(a.ranks), "dask")] if a.dask or a.dask_only else []
    for n, engine in rows:
        folder = HERE / "out" / f"job_{Path(a.source).name.split('.')[0]}_{n}"
        straggler = n // 3
        if not (folder / f"rank{n - 1:04d}.pt.trace.json.gz").exists():
            build_job(src, n, folder, straggler=straggler, delay_ms=a.delay_ms)
        r = _measure([str(folder), "--mode", engine])
        per_rank = r["wall_s"] * min(cores, n) / n if engine == "local" else r["wall_s"] * 2 / n
        ok = r.get("named_rank") == straggler and abs(r.get("named_delay_ms", 0) - a.delay_ms) <= 0.1 * a.delay_ms
        print(
            f"| {n} | {engine} | {r['wall_s']:.1f} | {per_rank:.2f} | {per_rank / single['wall_s']:.2f}x | {r['peak_rss_mb']:.0f} | "
            f"{'yes' if ok else 'NO'} (rank {r.get('named_rank')}) | {r.get('named_delay_ms', float('nan')):.3f} ({a.delay_ms:g}) | "
            f"{r['residual_p95_us']:.1f} | {r['md_chars']} | {r['html_bytes'] / 1024:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
