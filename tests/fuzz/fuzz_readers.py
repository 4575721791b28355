"""Time-boxed fuzzing of the trace readers; not collected by pytest (run by hand or in a nightly job).

    python tests/fuzz/fuzz_readers.py --reader kineto --seconds 300 [--engine atheris|mutate] [--out DIR]

Each input is written to a file and read twice, natively and on the pure path, in a worker process with an address
space limit and a per-input timeout, so every failure class is told apart:

* traceback:     an exception other than a one-line TraceReadError escaped ``traceinsight.load``;
* crash:         the worker died on a signal (a fault in a C scanner);
* hang:          one input took longer than ``--timeout`` seconds;
* OOM:           MemoryError, or the worker killed at the ``--rss-mb`` address-space limit;
* wrong result:  native and pure disagree, or the timeline breaks an invariant (negative span, start < 0);
* file damage:   the input file's bytes or mtime changed, or a file appeared next to it.

With ``--engine atheris`` (when installed) the inputs come from libFuzzer's coverage-guided mutator over the
Python code; otherwise from a seeded mutation loop over the seed corpus (byte edits, splices, cuts, structural
tokens). Failing inputs are saved under ``--out``; the last line printed is a JSON summary of the taxonomy.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CLASSES = ("ok", "clean_error", "traceback", "crash", "hang", "oom", "wrong_result", "file_damage")
SUFFIX = {"kineto": ".json", "kineto_gz": ".json.gz", "xplane": ".xplane.pb", "nsys": ".sqlite", "tf_json": ".trace.json.gz"}
FORMAT = {"kineto": "pytorch", "kineto_gz": "pytorch", "xplane": "tensorflow-xplane", "nsys": "nsys",
          "tf_json": "tensorflow-json"}


def seeds(reader: str) -> list[bytes]:
    """Small valid inputs written by the test helpers (real format files)."""
    import gzip

    from tests.helpers.kineto_writer import KinetoTrace

    if reader in ("kineto", "kineto_gz"):
        t = KinetoTrace(rank=0, world_size=2)
        t.step(1, 0, 2000)
        op = t.cpu_op("aten::mm", 10, 400)
        t.kernel("_Z4gemmPfS_i", 100, 50, launch_us=90, op=op)
        t.memcpy("DtoH", 500, 30, 4096, launch_us=480)
        doc = json.dumps(t.to_dict()).encode()
        return [gzip.compress(doc)] if reader == "kineto_gz" else [doc, json.dumps(t.to_dict(), indent=1).encode()]
    if reader == "xplane":
        from tests.test_xplane_native import ODD_EVENTS, STREAM_EVENTS, _space

        return [_space(ODD_EVENTS, STREAM_EVENTS), _space(STREAM_EVENTS)]
    if reader == "nsys":
        from tests.helpers.nsys_writer import NsysTrace

        t = NsysTrace()
        t.step(1, 0, 100_000)
        for i in range(3):
            t.kernel(f"k{i}", 10_000 + i * 1_000, 500)
        with tempfile.TemporaryDirectory() as tmp:
            return [t.write(Path(tmp) / "s.sqlite").read_bytes()]
    if reader == "tf_json":
        doc = {"displayTimeUnit": "ns", "traceEvents": [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "Stream #2(Compute)"}},
            {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "X", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "name": "gemm", "args": {"correlation_id": "7"}},
            {"ph": "X", "pid": 3, "tid": 4, "ts": 8, "dur": 1, "name": "cudaLaunchKernel", "args": {"correlation_id": "7"}}]}
        return [gzip.compress(json.dumps(doc).encode())]
    raise SystemExit(f"unknown reader {reader}")


TOKENS = [b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":", b"1e400", b"-1", b"9223372036854775808", b"null",
          b"\x00", b"\xff", b"\r", b"\n", b"\x1f\x8b", b"\x0b", b"\x0c", b"\\u", b"\\ud800", b"0", b"\xc0\xaf"]

#: Values that are nearly JSON, for the structural mutation: the places where a scanner that skips what it does not
#: read could accept what the general decoder refuses (or decode differently).
ODD_VALUES = [b'"\\ud800"', b'"\\ud800\\u0041"', b'"\\udc00"', b'"\\ud83d\\ude00"', b'"\\u00zz"', b'"\\q"', b'"a\x01b"',
              b'"\\u0058"', b"01", b"-0", b"1.", b"-", b"1e", b"1E+2", b"[1,]", b'{"a":1,}', b'{"a" 1}', b"[1}", b"tru",
              b"nul", b"NaN", b'"\xff"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b'"\xe2\x82"', b"1e400",
              b"-1e400", b'"1e400"', b'"007"', b'"1\\u0030"', b'"\xd9\xa3"', b"123456789012345678901234567890", b"true",
              b"[]", b"{}", b'""', b"\x0b1", b"1 x", b'"\\/"', b'{"\xff": 1}', b'[["\xff"]]', b"null"]
KEYS = [b"zz", b"args", b"grid", b"block", b"name", b"correlation", b"bytes", b"stream", b"ph", b"ts", b"dur", b"pid",
        b"tid", b"cat", b"Input Dims", b"p\\u0068", b"\\u0070h", b"na\\u006de", b"traceEvents", b"deviceProperties",
        b"distributedInfo", b"External id", b"\xff"]


def odd_value(rng: random.Random, depth: int = 0) -> bytes:
    r = rng.random()
    if r < 0.03:
        n = rng.choice([254, 255, 256, 257, 300, 5000, 100_000])
        return b"[" * n + b"]" * n
    if depth > 2 or r < 0.5:
        return rng.choice(ODD_VALUES)
    if r < 0.75:
        return b"[" + b", ".join(odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + b"]"
    return b"{" + b", ".join(b'"' + rng.choice(KEYS) + b'": ' + odd_value(rng, depth + 1)
                             for _ in range(rng.randint(0, 3))) + b"}"


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(1 if rng.random() < 0.5 else rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randrange(len(b)) if b else 0
        if op < 0.25 and b:  # a member with a nearly-JSON value, inside some object
            at = b.find(b"{", pos)
            if at < 0:
                at = b.find(b"{")
            if at >= 0:
                member = b'"' + rng.choice(KEYS) + b'": ' + odd_value(rng) + (b"" if b[at + 1: at + 2] == b"}" else b", ")
                b[at + 1: at + 1] = member
        elif op < 0.3 and b:  # a cut with the start of another event glued on (a restarted writer)
            b = b[: max(1, pos)] + rng.choice([b'{"ph": "X", "na', b"\x00" * rng.randint(1, 600), b"}]}", b", {", b"]"])
        elif op < 0.45 and b:
            b[pos] = rng.randrange(256)
        elif op < 0.6:
            b[pos:pos] = rng.choice(TOKENS)
        elif op < 0.68 and b:
            del b[pos: pos + rng.randint(1, 32)]
        elif op < 0.8 and b:
            other = rng.choice(pool) or b"{}"
            s = rng.randrange(len(other))
            b[pos:pos] = other[s: s + rng.randint(1, 64)]
        elif op < 0.9 and b:
            b = b[: max(1, pos)]
        elif b:
            b[pos: pos + 1] = b[pos: pos + 1] * rng.randint(2, 200)
    return bytes(b)


def mutate_input(rng: random.Random, reader: str, data: bytes, pool: list[bytes]) -> bytes:
    """``mutate``; for gzip inputs mostly on the JSON inside, recompressed (sometimes cut), since byte edits of
    compressed data rarely get past the CRC."""
    if reader != "kineto_gz" or rng.random() < 0.3:
        return mutate(rng, data, pool)
    import gzip
    import zlib

    try:
        inner = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return mutate(rng, data, pool)
    out = gzip.compress(mutate(rng, inner, [inner]), compresslevel=1)
    return out[: rng.randrange(10, len(out))] if rng.random() < 0.1 else out


# --- the worker: one process, many inputs, limits applied ------------------------------------------------------------


def _worker(conn, reader: str, rss_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (rss_mb << 20, rss_mb << 20))
    import warnings

    warnings.simplefilter("error")  # a RuntimeWarning reaching the user counts as a traceback
    import pandas as pd

    import traceinsight
    from traceinsight.vocab.errors import TraceReadError

    def one(path: Path, pure: bool):
        if pure:
            os.environ["TRACEINSIGHT_PURE_PYTHON"] = "1"
        else:
            os.environ.pop("TRACEINSIGHT_PURE_PYTHON", None)
        try:
            tl = traceinsight.load(path, format=FORMAT[reader])
        except TraceReadError as exc:
            msg = str(exc)
            return ("traceback", f"multi-line error: {msg[:200]!r}") if "\n" in msg else ("clean_error", msg)
        except MemoryError:
            return ("oom", "MemoryError")
        except BaseException as exc:  # noqa: BLE001
            return ("traceback", f"{type(exc).__name__}: {str(exc)[:200]}")
        ev = tl.events
        if len(ev) and ((ev["dur_ns"] < 0).any() or (ev["start_ns"] < 0).any() or tl.span_ns < 0):
            return ("wrong_result", "negative span or start")
        return ("ok", tl)

    while True:
        job = conn.recv()
        if job is None:
            return
        path = Path(job)
        before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent)))
        a = one(path, False)
        b = one(path, True)
        after = (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent)))
        if after != before:
            verdict = ("file_damage", "input changed or a file appeared beside it")
        elif a[0] not in ("ok", "clean_error"):
            verdict = (a[0], "native: " + a[1])
        elif b[0] not in ("ok", "clean_error"):
            verdict = (b[0], "pure: " + b[1])
        elif a[0] != b[0]:
            verdict = ("wrong_result", f"native {a[0]} vs pure {b[0]}: {str(a[1])[:100]} | {str(b[1])[:100]}")
        elif a[0] == "ok":
            try:
                pd.testing.assert_frame_equal(a[1].events, b[1].events)
                assert a[1].meta.warnings == b[1].meta.warnings, f"warnings {a[1].meta.warnings} != {b[1].meta.warnings}"
                verdict = ("ok", "")
            except AssertionError as exc:
                verdict = ("wrong_result", "native != pure: " + (str(exc).strip().splitlines() or ["?"])[0][:300])
        else:
            verdict = ("clean_error", "")
        conn.send(verdict)


class Runner:
    """Keeps a worker alive across inputs; restarts it after a crash, hang or OOM."""

    def __init__(self, reader: str, timeout: float, rss_mb: int) -> None:
        self.reader, self.timeout, self.rss_mb = reader, timeout, rss_mb
        self.proc = None
        self.tmp = Path(tempfile.mkdtemp(prefix="ti-fuzz-"))

    def _start(self) -> None:
        parent, child = mp.Pipe()
        self.proc = mp.get_context("fork").Process(target=_worker, args=(child, self.reader, self.rss_mb), daemon=True)
        self.proc.start()
        self.conn = parent

    def run(self, data: bytes) -> tuple[str, str]:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        case = self.tmp / "case"
        if case.exists():
            for p in case.iterdir():
                p.unlink()
        else:
            case.mkdir()
        path = case / ("input" + SUFFIX[self.reader])
        path.write_bytes(data)
        self.conn.send(str(path))
        if self.conn.poll(self.timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        else:
            self.proc.kill()
            self.proc.join()
            self.proc = None
            return ("hang", f"over {self.timeout} s")
        self.proc.join()
        code = self.proc.exitcode
        self.proc = None
        if code is not None and code < 0:
            return ("crash", f"signal {-code}")
        return ("oom", f"worker exited with {code} (address-space limit)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reader", choices=sorted(SUFFIX), required=True)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--engine", choices=["auto", "atheris", "mutate"], default="auto")
    ap.add_argument("--timeout", type=float, default=20.0, help="per input, both paths")
    ap.add_argument("--rss-mb", type=int, default=3072, help="address-space limit of the worker")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench/out/fuzz"))
    args = ap.parse_args()

    engine = args.engine
    if engine in ("auto", "atheris"):
        try:
            import atheris
        except ImportError:
            if engine == "atheris":
                raise SystemExit("atheris is not installed")
            engine = "mutate"
        else:
            engine = "atheris"
            # the libraries first, uninstrumented; then traceinsight alone with coverage hooks
            import google.protobuf.message  # noqa: F401
            import msgspec  # noqa: F401
            import numpy  # noqa: F401
            import pandas  # noqa: F401

            with atheris.instrument_imports(include=["traceinsight"]):
                import traceinsight.ingest  # noqa: F401

    runner = Runner(args.reader, args.timeout, args.rss_mb)
    counts = {c: 0 for c in CLASSES}
    examples: dict[str, list[str]] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    pool = seeds(args.reader)
    deadline = time.monotonic() + args.seconds

    def record(data: bytes) -> str:
        cls, detail = runner.run(data)
        counts[cls] += 1
        if cls not in ("ok", "clean_error"):
            name = f"{args.reader}-{cls}-{counts[cls]}{SUFFIX[args.reader]}"
            (args.out / name).write_bytes(data)
            examples.setdefault(cls, []).append(f"{name}: {detail}")
        return cls

    if engine == "atheris":
        import atheris

        # libFuzzer drives the mutations; each input still goes through the isolated worker, so a crash or hang
        # in a reader is recorded instead of ending the run. Coverage comes from the instrumented parent, which
        # replays every input through the pure reader in-process, where the Python branches are.
        import traceinsight

        os.environ["TRACEINSIGHT_PURE_PYTHON"] = "1"
        probe = runner.tmp / ("probe" + SUFFIX[args.reader])

        def one_input(data: bytes) -> None:
            if time.monotonic() > deadline:  # libFuzzer ends with exit(), which skips Python's atexit: end here
                sys.stdout.flush()
                os._exit(_summary(args, engine, counts, examples))
            probe.write_bytes(data)
            try:
                traceinsight.load(probe, format=FORMAT[args.reader], max_bytes=64 << 20)
            except Exception:  # noqa: BLE001 - classified by the worker below
                pass
            record(data)

        corpus = runner.tmp / "corpus"
        corpus.mkdir()
        for i, s in enumerate(pool):
            (corpus / f"seed{i}").write_bytes(s)
        try:
            atheris.Setup([sys.argv[0], str(corpus), f"-max_total_time={int(args.seconds) + 120}", "-rss_limit_mb=4096",
                           "-timeout=60", "-max_len=200000", f"-artifact_prefix={args.out}/"], one_input)
            atheris.Fuzz()
        except SystemExit:
            pass
    else:
        rng = random.Random(args.seed)
        while time.monotonic() < deadline:
            data = mutate_input(rng, args.reader, rng.choice(pool), pool)
            # inputs that still load grow the pool: later mutations then start from odd but valid documents
            if record(data) == "ok" and rng.random() < 0.2 and len(pool) < 500:
                pool.append(data)
    return _summary(args, engine, counts, examples)


def _summary(args, engine: str, counts: dict[str, int], examples: dict[str, list[str]]) -> int:
    tried = sum(counts.values())
    failures = {c: counts[c] for c in CLASSES if c not in ("ok", "clean_error")}
    for cls, lines in examples.items():
        for line in lines[:5]:
            print(f"{cls}: {line}")
    print(json.dumps({"reader": args.reader, "engine": engine, "seconds": args.seconds, "inputs": tried,
                      "timelines": counts["ok"], "clean_errors": counts["clean_error"], "failures": failures}),
          flush=True)
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
