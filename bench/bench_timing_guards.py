"""The timing checks that used to sit in unit tests, where a busy machine made them fail and a fast one made them
prove nothing. Run by hand (one short run; needs the native readers built, and the corpus for the replay part):

    python bench/bench_timing_guards.py [--only gil|replay|recovery]

- ``gil``: the native kineto scanner releases the GIL: a Python thread ticking every 1 ms keeps ticking during a
  ~0.1 s scan of 400,000 events (target: >= 3 ticks, the scan >= 20 ms so the count means something).
- ``replay``: ``whatif.predict_step_ns(views, "all")`` on real traces (target: < 3 s each).
- ``recovery``: loading a file cut at 73 % costs about what loading the whole file does (target: cut <= 3x whole
  + 0.5 s, native and pure paths): recovery is one linear pass, not a retry per event.

Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import traceinsight  # noqa: E402
from traceinsight import whatif  # noqa: E402
from traceinsight import native  # noqa: E402
from traceinsight.views import Views  # noqa: E402

SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED", ROOT.parent / "shared")) / "traces"
REPLAY_TRACES = [
    "pytorch/tracelens_h100_owlv2_inference.json.gz",
    "pytorch/hta_a100_rank0of16_5streams.json.gz",
    "pytorch/hta_nccl_data_a100_rank0of2.json.gz",
    "pytorch/param_linear_rtx2080ti.json.gz",
    "nsys/nsys2026.2_fastvideo-train_2xH100_300ms-slice.sqlite",
]


def gil() -> bool:
    scan = native.built("pytorch")
    if scan is None:
        print("gil: the native kineto scanner is not built (python setup.py build_ext --inplace)")
        return False
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 2, "ts": 1.5, "dur": 2.25, "args": {"correlation": 7}},'
    doc = b'{"traceEvents": [' + event * 400_000 + event[:-1] + b"]}"
    ticks: list[float] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)
    start = time.perf_counter()
    scan.scan(doc)
    end = time.perf_counter()
    done.set()
    t.join()
    inside = sum(1 for x in ticks if start < x < end)
    ok = end - start > 0.02 and inside >= 3
    print(f"gil: {inside} ticks during a {end - start:.3f} s scan -> {'ok' if ok else 'MISSED'}")
    return ok


def replay() -> bool:
    ok = True
    for rel in REPLAY_TRACES:
        path = SHARED / rel
        if not path.exists():
            print(f"replay: {rel} not in the corpus at {SHARED}, left out")
            continue
        v = Views(traceinsight.load(path))
        t0 = time.perf_counter()
        r = whatif.predict_step_ns(v, "all")
        cost = time.perf_counter() - t0
        good = cost < 3.0 and r["replay_error_pct"] == 0.0
        ok &= good
        print(f"replay: {rel}: {cost:.3f} s, replay error {r['replay_error_pct']} % -> {'ok' if good else 'MISSED'}")
    return ok


def recovery() -> bool:
    from tests.test_ingest_hostile import _many_events

    ok = True
    data, _ = _many_events(120_000)
    with tempfile.TemporaryDirectory() as tmp:
        full, cut = Path(tmp) / "full.json", Path(tmp) / "cut.json"
        full.write_bytes(data)
        cut.write_bytes(data[: int(len(data) * 0.73)])
        for pure in (False, True):
            if pure:
                os.environ[native.PURE_ENV] = "1"
            else:
                os.environ.pop(native.PURE_ENV, None)
            t0 = time.perf_counter()
            traceinsight.load(full)
            normal = time.perf_counter() - t0
            t0 = time.perf_counter()
            traceinsight.load(cut)
            recovering = time.perf_counter() - t0
            good = recovering < 3 * normal + 0.5
            ok &= good
            print(f"recovery ({'pure' if pure else 'native'}): whole {normal:.3f} s, cut {recovering:.3f} s -> {'ok' if good else 'MISSED'}")
        os.environ.pop(native.PURE_ENV, None)
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["gil", "replay", "recovery"])
    args = p.parse_args()
    checks = {"gil": gil, "replay": replay, "recovery": recovery}
    results = [fn() for name, fn in checks.items() if args.only in (None, name)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
