"""Writes a small XSpace (``*.xplane.pb``) in the wire format, from a few Python calls, for tests that need what no
corpus file has: TensorFlow BFC allocator events (``MemoryAllocation`` / ``MemoryDeallocation`` with their stats).

Layout as TensorFlow writes it: a ``/host:CPU`` plane with a thread line (step markers ``train`` with ``step_num``,
TF ops, allocator TraceMes) and any other thread lines ``host_range`` names, a ``/device:GPU:N`` plane with device
stats (``memory_size``, ``core_count``) and a ``Stream #N(Compute)`` line of kernels, and a ``Task Environment`` plane holding the profile start time. Times are
ns relative to the start; the writer converts to the ps offsets XPlane uses.
"""

from __future__ import annotations

import struct
from pathlib import Path


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def _int(field: int, v: int) -> bytes:
    return _varint(field << 3) + _varint(v)


def _msg(field: int, payload: bytes | str) -> bytes:
    payload = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _double(field: int, v: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", v)


class _Plane:
    def __init__(self, name: str) -> None:
        self.name = name
        self.event_ids: dict[str, int] = {}
        self.stat_ids: dict[str, int] = {}
        self.lines: list[tuple[str, int, list[bytes]]] = []
        self.stats: list[bytes] = []

    def event_id(self, name: str) -> int:
        return self.event_ids.setdefault(name, len(self.event_ids) + 1)

    def stat_id(self, name: str) -> int:
        return self.stat_ids.setdefault(name, len(self.stat_ids) + 1)

    def stat(self, name: str, value: int | float | str) -> bytes:
        sid = self.stat_id(name)
        if isinstance(value, str):
            return _msg(4, _int(1, sid) + _msg(5, value))
        if isinstance(value, float):
            return _msg(4, _int(1, sid) + _double(2, value))
        return _msg(4, _int(1, sid) + (_int(3, value) if value >= 0 else _int(4, value)))

    def event(self, line: int, name: str, start_ns: int, dur_ns: int, stats: dict | None = None) -> None:
        body = _int(1, self.event_id(name)) + _int(2, start_ns * 1000) + _int(3, dur_ns * 1000)
        body += b"".join(self.stat(k, v) for k, v in (stats or {}).items())
        self.lines[line][2].append(body)

    def encode(self, plane_id: int) -> bytes:
        out = _int(1, plane_id) + _msg(2, self.name)
        for lid, (lname, ts_ns, events) in enumerate(self.lines):
            out += _msg(3, _int(1, lid + 1) + _msg(2, lname) + _int(3, ts_ns) + b"".join(_msg(4, e) for e in events))
        for name, i in self.event_ids.items():
            out += _msg(4, _int(1, i) + _msg(2, _int(1, i) + _msg(2, name)))
        for name, i in self.stat_ids.items():
            out += _msg(5, _int(1, i) + _msg(2, _int(1, i) + _msg(2, name)))
        return out + b"".join(_msg(6, s) for s in self.stats)


class XSpaceTrace:
    """One host with one GPU: ``step``, ``op``, ``kernel`` (with its launch), ``alloc`` / ``free``; ``write`` gives
    the .xplane.pb."""

    def __init__(self, *, memory_bytes: int = 16 << 30, cores: int = 80, start_unix_ns: int = 1_700_000_000_000_000_000) -> None:
        self.start_unix_ns = start_unix_ns
        self.host = _Plane("/host:CPU")
        self.host.lines.append(("tf_executor", 0, []))
        self.gpu = _Plane("/device:GPU:0")
        self.gpu.lines.append(("Stream #7(Compute)", 0, []))
        self.gpu.stats = [self._plane_stat(self.gpu, "memory_size", memory_bytes), self._plane_stat(self.gpu, "core_count", cores),
                          self._plane_stat(self.gpu, "compute_cap_major", 8), self._plane_stat(self.gpu, "compute_cap_minor", 0)]
        self.in_use = 0
        self.reserved = 0
        self.peak = 0
        self.correlations = 0

    @staticmethod
    def _plane_stat(plane: _Plane, name: str, value: int) -> bytes:
        return _int(1, plane.stat_id(name)) + _int(3, value)

    def step(self, n: int, start_ns: int, dur_ns: int) -> None:
        self.host.event(0, "train", start_ns, dur_ns, {"step_num": n})

    def op(self, name: str, start_ns: int, dur_ns: int) -> None:
        self.host.event(0, name, start_ns, dur_ns)

    def host_range(self, name: str, start_ns: int, dur_ns: int, thread: str = "tf_executor") -> None:
        """A TraceMe range on the host thread line ``thread`` (added on first use): JAX's PJRT runtime traces
        ``BufferSequencingEvent::Execute`` on a thread of its own, TF's executor ``ExecutorState::Process`` on its
        pool's threads, a user's ``jax.profiler.TraceAnnotation`` on the Python thread."""
        names = [line[0] for line in self.host.lines]
        if thread not in names:
            self.host.lines.append((thread, 0, []))
            names.append(thread)
        self.host.event(names.index(thread), name, start_ns, dur_ns)

    def kernel(self, name: str, start_ns: int, dur_ns: int, stats: dict | None = None, *, launch_ns: int | None = None,
               launch_dur_ns: int = 5_000) -> None:
        """A kernel on the compute stream; ``stats`` such as XLA's per-op cost (``flops``, ``bytes_accessed``).
        ``launch_ns``: the host's ``cudaLaunchKernel`` then, joined to the kernel by a ``correlation_id`` stat on
        both, as CUPTI's XPlane lines carry it (the launch a gap's cause is read from)."""
        if launch_ns is not None:
            self.correlations += 1
            stats = {**(stats or {}), "correlation_id": self.correlations}
            self.host.event(0, "cudaLaunchKernel", launch_ns, launch_dur_ns, {"correlation_id": self.correlations})
        self.gpu.event(0, name, start_ns, dur_ns, stats)

    def runtime(self, name: str, start_ns: int, dur_ns: int) -> None:
        """A CUDA API call on the host (``cudaStreamSynchronize``, ``cudaMemcpy``...): a correlation id of its own
        makes it a runtime call, as CUPTI records it."""
        self.correlations += 1
        self.host.event(0, name, start_ns, dur_ns, {"correlation_id": self.correlations})

    def alloc(self, at_ns: int, nbytes: int, *, op: str = "", addr: int = 0x7F00_0000_0000, grow_to: int | None = None,
              allocator: str = "GPU_0_bfc") -> None:
        """A BFC allocation of ``nbytes`` by ``op``; ``grow_to`` raises the allocator's reserved bytes first."""
        self.in_use += nbytes
        self.reserved = max(self.reserved, grow_to or 0, self.in_use)
        self.peak = max(self.peak, self.in_use)
        self._event("MemoryAllocation", at_ns, nbytes, op, addr, allocator)

    def free(self, at_ns: int, nbytes: int, *, op: str = "", addr: int = 0x7F00_0000_0000, allocator: str = "GPU_0_bfc") -> None:
        self.in_use -= nbytes
        self._event("MemoryDeallocation", at_ns, nbytes, op, addr, allocator)

    def _event(self, name: str, at_ns: int, nbytes: int, op: str, addr: int, allocator: str) -> None:
        stats = {"allocator_name": allocator, "bytes_reserved": self.reserved, "bytes_allocated": self.in_use,
                 "bytes_available": max(self.reserved - self.in_use, 0), "peak_bytes_in_use": self.peak,
                 "requested_bytes": nbytes if name == "MemoryAllocation" else 0, "allocation_bytes": nbytes,
                 "addr": addr, "fragmentation": 0.0}
        if op:
            stats["tf_op"] = op
        self.host.event(0, name, at_ns, 0, stats)

    def to_bytes(self) -> bytes:
        env = _Plane("Task Environment")
        env.stats = [self._plane_stat(env, "profile_start_time", self.start_unix_ns)]
        return b"".join(_msg(1, p.encode(i)) for i, p in enumerate([env, self.host, self.gpu]))

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path
