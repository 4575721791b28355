"""The timing checks that used to sit in unit tests, where a busy machine made them fail and a fast one made them
prove nothing. Run by hand (one short run; needs the native readers built, and the corpus for the replay part):

    python bench/bench_timing_guards.py [--only gil|replay|recovery|hostile]

- ``gil``: the native kineto scanner releases the GIL: a Python thread ticking every 1 ms keeps ticking during a
  ~0.1 s scan of 400,000 events (target: >= 3 ticks, the scan >= 20 ms so the count means something).
- ``replay``: ``whatif.predict_step_ns(Derived(...).graphs, "all")`` on real traces (target: < 3 s each).
- ``recovery``: loading a file cut at 73 % costs about what loading the whole file does (target: cut <= 3x whole
  + 0.5 s, native and pure paths): recovery is one linear pass, not a retry per event.
- ``hostile``: hostile inputs end quickly, as the tests check by value (tests/test_security_sqlite.py,
  tests/test_kineto_parity.py, tests/test_ingest_hostile.py): an Nsight export with a generated string column is
  refused (target: < 5 s), one with a 1 MiB stored kernel name loads (< 10 s), five million nested brackets are one
  error on the native and the pure path (< 30 s each), a trace with a 50 MB kernel name is analysed (< 30 s), a
  2 GiB-inflating gzip is refused (< 30 s).

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
from traceinsight.derive import whatif  # noqa: E402
from traceinsight.vocab import native  # noqa: E402
from traceinsight.derive.derived import Derived  # noqa: E402

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
        v = Derived(traceinsight.load(path))
        t0 = time.perf_counter()
        r = whatif.predict_step_ns(v.graphs, "all")
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


def hostile() -> bool:
    import sqlite3

    from tests.test_ingest_hostile import _bomb
    from tests.test_kineto_parity import _doc_with
    from tests.test_security_sqlite import _export, _sql
    from traceinsight.vocab.errors import TraceReadError

    ok = True

    def timed(what: str, target: float, fn) -> None:
        nonlocal ok
        t0 = time.perf_counter()
        said = "loaded"
        try:
            fn()
        except TraceReadError as exc:  # the refusal is what the tests check; here its time, and which one it was
            said = str(exc).splitlines()[0][-70:]
        cost = time.perf_counter() - t0
        good = cost < target
        ok &= good
        print(f"hostile: {what}: {cost:.3f} s (target < {target:g} s; {said}) -> {'ok' if good else 'MISSED'}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gen = _export(tmp, "generated.sqlite")
        _sql(gen, "ALTER TABLE StringIds RENAME TO S0",
             "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, v0 TEXT, value TEXT GENERATED ALWAYS AS (printf('%.*c', 50000000, 'x')) VIRTUAL)",
             "INSERT INTO StringIds (id, v0) SELECT id, value FROM S0", "DROP TABLE S0")
        timed("generated string column refused", 5.0, lambda: traceinsight.load(gen))
        big = _export(tmp, "big_value.sqlite")
        c = sqlite3.connect(big)
        c.execute("INSERT INTO StringIds (id, value) VALUES (999, ?)", ("k" * (1 << 20),))
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999 WHERE rowid = 1")
        c.commit()
        c.close()
        timed("1 MiB stored kernel name loaded", 10.0, lambda: traceinsight.load(big))
        deep = tmp / "deep.json"
        deep.write_bytes(_doc_with("args", "deep", b"[" * 5_000_000 + b"]" * 5_000_000))
        for pure in (False, True):
            if pure:
                os.environ[native.PURE_ENV] = "1"
            timed(f"5,000,000 nested brackets ({'pure' if pure else 'native'})", 30.0, lambda: traceinsight.load(deep))
            os.environ.pop(native.PURE_ENV, None)
        from tests.test_security_small import _trace

        name = _trace(tmp, "K" * 50_000_000).write(tmp / "big_name.json")
        timed("50 MB kernel name analysed (170 s before names were capped)", 30.0, lambda: traceinsight.analyze(name))
        bomb = _bomb(tmp / "bomb.json.gz", 2 << 30)
        timed("2 GiB gzip bomb refused", 30.0, lambda: traceinsight.load(bomb))
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["gil", "replay", "recovery", "hostile"])
    args = p.parse_args()
    checks = {"gil": gil, "replay": replay, "recovery": recovery, "hostile": hostile}
    results = [fn() for name, fn in checks.items() if args.only in (None, name)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
