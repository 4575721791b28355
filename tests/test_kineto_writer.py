"""The kineto writer must emit what PyTorch emits, or every test built on it proves nothing about real traces."""

from __future__ import annotations

import gzip
import json

from tests.helpers.kineto_writer import KinetoTrace


def _sample() -> KinetoTrace:
    t = KinetoTrace(rank=1, world_size=2)
    t.step(3, 0.0, 1000.0)
    op = t.cpu_op("aten::mm", 10.0, 50.0, args={"Input Dims": [[64, 64], [64, 64]]})
    t.kernel("ampere_sgemm_64x64_nn", 70.0, 20.0, launch_us=40.0, grid=(4, 1, 1))
    t.memcpy("DtoH", 100.0, 30.0, 4096, pageable=True, sync=True)
    t.runtime("cudaStreamSynchronize", 200.0, 100.0)
    t.gpu_sync(200.0, 100.0)
    assert op == 2
    return t


def test_round_trips_through_json(tmp_path):
    for name in ("t.json", "t.json.gz"):
        p = _sample().write(tmp_path / name)
        raw = gzip.open(p).read() if name.endswith(".gz") else p.read_bytes()
        d = json.loads(raw)
        assert d["schemaVersion"] == 1 and d["deviceProperties"][0]["numSms"] == 108
        assert d["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2}
        ev = d["traceEvents"]
        cats = {e.get("cat") for e in ev}
        assert {"cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "cuda_sync", "ac2g"} <= cats
        kern = next(e for e in ev if e.get("cat") == "kernel")
        launch = next(e for e in ev if e.get("name") == "cudaLaunchKernel")
        assert kern["args"]["correlation"] == launch["args"]["correlation"]
        assert kern["args"]["External id"] == 2 == launch["args"]["External id"]  # stamped from the enclosing aten::mm
        assert abs(kern["ts"] - launch["ts"] - 30.0) < 1e-6 and isinstance(kern["ts"], float)
        flows = [e for e in ev if e.get("cat") == "ac2g" and e["id"] == kern["args"]["correlation"]]
        assert sorted(f["ph"] for f in flows) == ["f", "s"]
        cp = next(e for e in ev if e.get("cat") == "gpu_memcpy")
        assert cp["name"] == "Memcpy DtoH (Device -> Pageable)" and cp["args"]["bytes"] == 4096
        sync_call = next(e for e in ev if e.get("name") == "cudaMemcpy")
        assert sync_call["ts"] + sync_call["dur"] >= cp["ts"] + cp["dur"]
        assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev)
