"""Writes kineto Chrome-trace JSON the way PyTorch >= 2.3 does, so tests can plant exact situations.

Real traces cannot be ordered to contain "a 2 ms gap after a cudaStreamSynchronize at 10 ms"; this writer can,
and because it emits the real file format (not a timeline), every test that uses it also exercises the
PyTorch parser. The event shapes copy real traces in ../shared/traces/pytorch (categories, arg names, flow
events, metadata rows), including the quirks a parser must survive: times are float µs on an arbitrary
clock next to ``baseTimeNanoseconds``, GPU rows use pid=device / tid=stream, and ``ac2g`` flows pair a
runtime call with its GPU activity by ``id`` == correlation.

Times given to the API are µs relative to the start of the trace; the writer adds ``origin_us``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

#: CUPTI callback ids of common runtime calls (kept so traces look like the real thing).
CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cuLaunchKernel": 307,
    "cudaMemcpy": 31,
    "cudaMemcpyAsync": 41,
    "cudaMemset": 47,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventSynchronize": 133,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 146,
    "cudaMalloc": 20,
    "cudaFree": 22,
}

_COPY_LABEL = {
    "HtoD": ("Memcpy HtoD", "Pageable -> Device", "Pinned -> Device"),
    "DtoH": ("Memcpy DtoH", "Device -> Pageable", "Device -> Pinned"),
    "DtoD": ("Memcpy DtoD", "Device -> Device", "Device -> Device"),
}


class KinetoTrace:
    """One rank's kineto trace, built call by call; ``write`` produces the JSON file."""

    def __init__(
        self,
        device_name: str = "NVIDIA A100-SXM4-80GB",
        sm_count: int = 108,
        rank: int | None = None,
        world_size: int | None = None,
        *,
        pid: int = 4242,
        tid: int = 4242,
        origin_us: float = 1_234_567_890.125,
        base_time_ns: int = 1_700_000_000_000_000_000,
        devices: int = 1,
        memory_bytes: int = 85_899_345_920,
        compute_capability: tuple[int, int] = (8, 0),
    ) -> None:
        self.pid = pid
        self.tid = tid
        self.origin_us = origin_us
        self.base_time_ns = base_time_ns
        self.rank = rank
        self.world_size = world_size
        self.device_props = [
            {
                "id": i,
                "name": device_name,
                "totalGlobalMem": memory_bytes,
                "computeMajor": compute_capability[0],
                "computeMinor": compute_capability[1],
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "numSms": sm_count,
                "regsPerMultiprocessor": 65536,
                "sharedMemPerBlockOptin": 166912,
                "sharedMemPerMultiprocessor": 167936,
            }
            for i in range(devices)
        ]
        self.events: list[dict[str, Any]] = []
        self._ext = 0
        self._corr = 1000
        self._ops: list[tuple[float, float, int, int]] = []  # (start, end, tid, external id) of cpu_ops
        self._gpu_threads: set[tuple[int, int]] = set()
        self._host_threads: set[int] = {tid}

    # --- helpers ---------------------------------------------------------------------------------------
    def _ts(self, us: float) -> float:
        return round(self.origin_us + float(us), 3)

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _x(self, cat: str, name: str, start_us: float, dur_us: float, pid: Any, tid: Any, args: dict | None) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self._ts(start_us), "dur": round(float(dur_us), 3)}
        if args is not None:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def _enclosing_op(self, at_us: float, tid: int) -> int | None:
        """External id of the innermost cpu_op on ``tid`` containing ``at_us`` (what kineto stamps on launches)."""
        best = None
        for s, e, t, ext in self._ops:
            if t == tid and s <= at_us < e and (best is None or s >= best[0]):
                best = (s, ext)
        return None if best is None else best[1]

    # --- host rows ---------------------------------------------------------------------------------------
    def step(self, n: int, start_us: float, dur_us: float) -> int:
        ext = self._next_ext()
        self._x("user_annotation", f"ProfilerStep#{n}", start_us, dur_us, self.pid, self.tid, {"External id": ext, "Record function id": 0})
        return ext

    def annotation(self, name: str, start_us: float, dur_us: float, tid: int | None = None) -> int:
        """A record_function range (``user_annotation``), e.g. ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``."""
        tid = self.tid if tid is None else tid
        self._host_threads.add(tid)
        ext = self._next_ext()
        self._x("user_annotation", name, start_us, dur_us, self.pid, tid, {"External id": ext, "Record function id": 0})
        self._ops.append((start_us, start_us + dur_us, tid, ext))
        return ext

    def cpu_op(self, name: str, start_us: float, dur_us: float, tid: int | None = None, args: dict | None = None) -> int:
        tid = self.tid if tid is None else tid
        self._host_threads.add(tid)
        ext = self._next_ext()
        a = {"External id": ext, "Record function id": 0, "Sequence number": ext, "Fwd thread id": 0}
        a.update(args or {})
        self._x("cpu_op", name, start_us, dur_us, self.pid, tid, a)
        self._ops.append((start_us, start_us + dur_us, tid, ext))
        return ext

    def python(self, name: str, start_us: float, dur_us: float, tid: int | None = None) -> None:
        """A ``python_function`` frame (traces recorded with ``with_stack=True``)."""
        tid = self.tid if tid is None else tid
        self._host_threads.add(tid)
        self._x("python_function", name, start_us, dur_us, self.pid, tid, {"Python id": self._next_ext(), "Python parent id": 0})

    def runtime(self, name: str, start_us: float, dur_us: float, tid: int | None = None, args: dict | None = None) -> int:
        """A CUDA runtime call without GPU activity (syncs, mallocs, event records); returns its correlation."""
        tid = self.tid if tid is None else tid
        self._host_threads.add(tid)
        corr = self._next_corr()
        a: dict[str, Any] = {"cbid": CBID.get(name, 0), "correlation": corr}
        ext = self._enclosing_op(start_us, tid)
        if ext is not None:
            a["External id"] = ext
        a.update(args or {})
        self._x("cuda_runtime", name, start_us, dur_us, self.pid, tid, a)
        return corr

    # --- GPU rows ----------------------------------------------------------------------------------------
    def _launch(self, launch_name: str, launch_us: float, launch_dur_us: float, op: int | None, tid: int | None) -> tuple[int, int | None, int]:
        tid = self.tid if tid is None else tid
        self._host_threads.add(tid)
        corr = self._next_corr()
        ext = op if op is not None else self._enclosing_op(launch_us, tid)
        a: dict[str, Any] = {"cbid": CBID.get(launch_name, 0), "correlation": corr}
        if ext is not None:
            a["External id"] = ext
        cat = "cuda_driver" if launch_name.startswith("cu") and not launch_name.startswith("cuda") else "cuda_runtime"
        self._x(cat, launch_name, launch_us, launch_dur_us, self.pid, tid, a)
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": tid, "ts": self._ts(launch_us), "cat": "ac2g", "name": "ac2g"})
        return corr, ext, tid

    def _flow_end(self, corr: int, device: int, stream: int, start_us: float) -> None:
        self.events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": self._ts(start_us), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self._gpu_threads.add((device, stream))

    def kernel(
        self,
        name: str,
        start_us: float,
        dur_us: float,
        *,
        launch_us: float | None = None,
        launch_dur_us: float = 4.0,
        stream: int = 7,
        device: int = 0,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        launch_name: str = "cudaLaunchKernel",
        op: int | None = None,
        tid: int | None = None,
        registers: int = 32,
        shared_memory: int = 0,
    ) -> int:
        launch_us = start_us - 5.0 if launch_us is None else launch_us
        corr, ext, _ = self._launch(launch_name, launch_us, launch_dur_us, op, tid)
        sms = self.device_props[0]["numSms"]
        blocks = grid[0] * grid[1] * grid[2]
        threads = block[0] * block[1] * block[2]
        args: dict[str, Any] = {
            "External id": ext if ext is not None else 0,
            "queued": 0,
            "device": device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
            "registers per thread": registers,
            "shared memory": shared_memory,
            "blocks per SM": round(blocks / sms, 6),
            "warps per SM": round(blocks * threads / 32 / sms, 6),
            "grid": list(grid),
            "block": list(block),
            "est. achieved occupancy %": min(100, int(100 * blocks * threads / (sms * 2048))),
        }
        self._x("kernel", name, start_us, dur_us, device, stream, args)
        self._flow_end(corr, device, stream, start_us)
        return corr

    def memcpy(
        self,
        kind: str = "HtoD",
        start_us: float = 0.0,
        dur_us: float = 1.0,
        nbytes: int = 0,
        *,
        pageable: bool = False,
        launch_us: float | None = None,
        launch_dur_us: float = 4.0,
        sync: bool = False,
        stream: int = 7,
        device: int = 0,
        op: int | None = None,
        tid: int | None = None,
    ) -> int:
        """A copy; ``sync=True`` writes a blocking ``cudaMemcpy`` whose call lasts until the copy ends."""
        label, pageable_dir, pinned_dir = _COPY_LABEL[kind]
        launch_us = start_us - 5.0 if launch_us is None else launch_us
        if sync:
            launch_dur_us = max(launch_dur_us, start_us + dur_us - launch_us + 1.0)
        corr, ext, _ = self._launch("cudaMemcpy" if sync else "cudaMemcpyAsync", launch_us, launch_dur_us, op, tid)
        name = f"{label} ({pageable_dir if pageable else pinned_dir})"
        gbps = nbytes / (dur_us * 1e3) if dur_us > 0 else 0.0
        args = {
            "External id": ext if ext is not None else 0,
            "device": device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
            "bytes": int(nbytes),
            "memory bandwidth (GB/s)": round(gbps, 6),
        }
        self._x("gpu_memcpy", name, start_us, dur_us, device, stream, args)
        self._flow_end(corr, device, stream, start_us)
        return corr

    def memset(self, start_us: float, dur_us: float, nbytes: int, *, launch_us: float | None = None, stream: int = 7, device: int = 0, op: int | None = None) -> int:
        launch_us = start_us - 5.0 if launch_us is None else launch_us
        corr, ext, _ = self._launch("cudaMemsetAsync", launch_us, 3.0, op, None)
        args = {"External id": ext if ext is not None else 0, "device": device, "context": 1, "stream": stream, "correlation": corr, "bytes": int(nbytes), "memory bandwidth (GB/s)": 0.0}
        self._x("gpu_memset", "Memset (Device)", start_us, dur_us, device, stream, args)
        self._flow_end(corr, device, stream, start_us)
        return corr

    def gpu_sync(self, start_us: float, dur_us: float, *, kind: str = "stream_synchronize", stream: int = 7, device: int = 0, correlation: int | None = None) -> None:
        """A ``cuda_sync`` row (CUPTI synchronization activity, PyTorch >= 2.2 with ``enable_cuda_sync_events``)."""
        names = {"stream_synchronize": "Stream Sync", "context_synchronize": "Context Sync", "event_synchronize": "Event Sync", "stream_wait_event": "Stream Wait Event"}
        args = {"device": device, "stream": stream, "correlation": correlation if correlation is not None else 0, "cuda_sync_kind": kind}
        self._x("cuda_sync", names.get(kind, "Stream Sync"), start_us, dur_us, device, stream, args)
        self._gpu_threads.add((device, stream))

    # --- output ------------------------------------------------------------------------------------------
    # --- allocator records (profile_memory=True) ----------------------------------------------------------
    def memory(self, at_us: float, nbytes: int, *, allocated: int | None = None, reserved: int | None = None,
               device: int = 0, device_type: int = 1, addr: int = 0x7F0000000000, tid: int | None = None,
               legacy: bool = False, name: str = "[memory]") -> None:
        """A ``[memory]`` instant event as the profiler writes it: ``Bytes`` (+ alloc / - free), the allocator's
        totals after the call, the device (c10 DeviceType: 0 CPU, 1 CUDA, 6 HIP). ``legacy`` writes the 2021 form
        (only Device Type, Device Id and Bytes, no ``cat``)."""
        args: dict[str, Any] = {"Device Type": device_type, "Device Id": device if device_type else -1, "Bytes": int(nbytes)}
        if not legacy:
            args = {"Ev Idx": len(self.events), **args, "Addr": addr,
                    "Total Allocated": int(allocated if allocated is not None else 0),
                    "Total Reserved": int(reserved if reserved is not None else 0)}
        ev: dict[str, Any] = {"ph": "i", "s": "t", "name": name, "pid": self.pid, "tid": self.tid if tid is None else tid,
                              "ts": self._ts(at_us), "args": args}
        if not legacy:
            ev = {"ph": "i", "cat": "cpu_instant_event", **{k: v for k, v in ev.items() if k != "ph"}}
        self.events.append(ev)

    def out_of_memory(self, at_us: float, nbytes: int, *, allocated: int, reserved: int, device: int = 0, device_type: int = 1) -> None:
        """An ``[OutOfMemory]`` instant event: an allocation of ``nbytes`` that failed."""
        self.memory(at_us, nbytes, allocated=allocated, reserved=reserved, device=device, device_type=device_type, name="[OutOfMemory]")

    def to_dict(self) -> dict[str, Any]:
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": self._ts(0), "pid": self.pid, "tid": 0, "args": {"name": "python"}},
            {"name": "process_labels", "ph": "M", "ts": self._ts(0), "pid": self.pid, "tid": 0, "args": {"labels": "CPU"}},
        ]
        for t in sorted(self._host_threads):
            meta.append({"name": "thread_name", "ph": "M", "ts": self._ts(0), "pid": self.pid, "tid": t, "args": {"name": f"thread {t} (python)"}})
        for dev in sorted({d for d, _ in self._gpu_threads} | {0}):
            meta.append({"name": "process_name", "ph": "M", "ts": self._ts(0), "pid": dev, "tid": 0, "args": {"name": "python"}})
            meta.append({"name": "process_labels", "ph": "M", "ts": self._ts(0), "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}})
        for dev, stream in sorted(self._gpu_threads):
            meta.append({"name": "thread_name", "ph": "M", "ts": self._ts(0), "pid": dev, "tid": stream, "args": {"name": f"stream {stream} "}})
        end = max((e["ts"] + e.get("dur", 0) for e in self.events), default=self._ts(0))
        tail = [
            {"ph": "X", "cat": "Trace", "ts": self._ts(0), "dur": round(end - self._ts(0), 3), "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        ]
        out: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": self.device_props,
        }
        if self.rank is not None or self.world_size is not None:
            out["distributedInfo"] = {"backend": "nccl", "rank": self.rank or 0, "world_size": self.world_size or 1}
        out.update(
            {
                "record_shapes": 1,
                "with_stack": 0,
                "cupti_version": 24,
                "cuda_runtime_version": 12060,
                "cuda_driver_version": 12060,
                "trace_id": "0123456789ABCDEF0123456789ABCDEF",
                "displayTimeUnit": "ms",
                "baseTimeNanoseconds": self.base_time_ns,
                "traceEvents": meta + self.events + tail,
                "traceName": "kineto_writer",
            }
        )
        return out

    def write(self, path: str | Path, gz: bool | None = None) -> Path:
        path = Path(path)
        gz = path.suffix == ".gz" if gz is None else gz
        data = json.dumps(self.to_dict()).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        if gz:
            with gzip.open(path, "wb") as f:
                f.write(data)
        else:
            path.write_bytes(data)
        return path
