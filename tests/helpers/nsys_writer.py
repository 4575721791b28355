"""Writes a small Nsight Systems SQLite export (``nsys export --type sqlite``) from a few Python calls.

Real captures cannot be ordered to contain "a 2 ms gap after a cudaStreamSynchronize"; this writer can, and
because it writes the real layout (table and column names of nsys 2026.1, or 2022.1 with ``legacy=True``),
every test using it also exercises the nsys parser. Quirks kept on purpose: names are ids into ``StringIds``,
``globalTid = (1 << 48) | (pid << 24) | tid``, runtime API names carry a version suffix
(``cudaLaunchKernel_v7000``), tables exist only when they have rows, and row times are integer ns on the
capture clock (``origin_ns`` + the times you give; ``raw_clock=True`` mimics 2026.2, whose rows are on the
raw system clock named by ``TARGET_INFO_SESSION_START_TIME.systemClockNs``).

All times given to the API are **ns relative to the start of the trace**. Method names mirror
``kineto_writer.KinetoTrace`` (which takes µs), so a planted pattern reads the same in both::

    t = NsysTrace()
    t.step(1, 0, 10_000_000)
    t.kernel("gemm", start_ns=100_000, dur_ns=2_000_000)                  # + its cudaLaunchKernel call
    t.sync(2_200_000, 3_000_000)                                            # cudaStreamSynchronize + GPU sync row
    t.memcpy("DtoH", 5_300_000, 400_000, 1 << 20, pageable=True)            # + cudaMemcpyAsync
    t.write(tmp_path / "trace.sqlite")
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable, Sequence

#: Version suffixes real exports put on runtime names (the parser strips them for display).
API_NAMES = {
    "cudaLaunchKernel": "cudaLaunchKernel_v7000",
    "cudaLaunchKernelExC": "cudaLaunchKernelExC_v11060",
    "cudaMemcpy": "cudaMemcpy_v3020",
    "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
    "cudaMemset": "cudaMemset_v3020",
    "cudaMemsetAsync": "cudaMemsetAsync_v3020",
    "cudaStreamSynchronize": "cudaStreamSynchronize_v3020",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize_v3020",
    "cudaEventSynchronize": "cudaEventSynchronize_v3020",
    "cudaStreamWaitEvent": "cudaStreamWaitEvent_v3020",
    "cudaEventRecord": "cudaEventRecord_v3020",
    "cudaMalloc": "cudaMalloc_v3020",
    "cudaFree": "cudaFree_v3020",
    "cudaGraphLaunch": "cudaGraphLaunch_v10000",
}

#: ENUM_CUDA_MEMCPY_OPER ids by direction, ENUM_CUDA_MEM_KIND ids (as in real 2023..2026 exports).
COPY_KIND_ID = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}
PAGEABLE, PINNED, DEVICE = 0, 1, 2

#: kineto-style sync kind -> (ENUM_CUPTI_SYNC_TYPE id, the runtime call that produces it).
SYNC_KINDS = {
    "event_synchronize": (1, "cudaEventSynchronize"),
    "stream_wait_event": (2, "cudaStreamWaitEvent"),
    "stream_synchronize": (3, "cudaStreamSynchronize"),
    "context_synchronize": (4, "cudaDeviceSynchronize"),
}

_ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"), (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_CLASS": [(0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"), (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver")],
    "ENUM_NSYS_EVENT_TYPE": [
        (34, "NVTX_MARK", "NvtxMark"), (59, "NVTX_PUSHPOP_RANGE", "NvtxPushPopRange"),
        (60, "NVTX_STARTEND_RANGE", "NvtxStartEndRange"), (75, "NVTX_DOMAIN_CREATE", "NvtxDomainCreate"),
    ],
}

_GREEN = ("greenContextId INTEGER",)
_DDL_NEW = {
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL", *_GREEN,
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "demangledName INTEGER NOT NULL",
        "shortName INTEGER NOT NULL", "mangledName INTEGER", "launchType INTEGER", "cacheConfig INTEGER",
        "registersPerThread INTEGER NOT NULL", "gridX INTEGER NOT NULL", "gridY INTEGER NOT NULL", "gridZ INTEGER NOT NULL",
        "blockX INTEGER NOT NULL", "blockY INTEGER NOT NULL", "blockZ INTEGER NOT NULL", "staticSharedMemory INTEGER NOT NULL",
        "dynamicSharedMemory INTEGER NOT NULL", "localMemoryPerThread INTEGER NOT NULL", "localMemoryTotal INTEGER NOT NULL",
        "gridId INTEGER NOT NULL", "sharedMemoryExecuted INTEGER", "graphNodeId INTEGER", "sharedMemoryLimitConfig INTEGER",
        "qmdBulkReleaseDone INTEGER", "qmdPreexitDone INTEGER", "qmdLastCtaDone INTEGER", "graphId INTEGER",
        "clusterX INTEGER", "clusterY INTEGER", "clusterZ INTEGER", "clusterSchedulingPolicy INTEGER",
        "maxPotentialClusterSize INTEGER", "maxActiveClusters INTEGER", "sharedMemoryRequestedPercentage INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "eventClass INTEGER NOT NULL", "globalTid INTEGER",
        "correlationId INTEGER", "nameId INTEGER NOT NULL", "returnValue INTEGER NOT NULL", "callchainId INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL", *_GREEN,
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "bytes INTEGER NOT NULL",
        "copyKind INTEGER NOT NULL", "deprecatedSrcId INTEGER", "srcKind INTEGER", "dstKind INTEGER", "srcDeviceId INTEGER",
        "srcContextId INTEGER", "dstDeviceId INTEGER", "dstContextId INTEGER", "migrationCause INTEGER",
        "graphNodeId INTEGER", "virtualAddress INTEGER", "copyCount INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL", *_GREEN,
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "value INTEGER NOT NULL",
        "bytes INTEGER NOT NULL", "graphNodeId INTEGER", "memKind INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL", *_GREEN,
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "deprecatedSyncType INTEGER",
        "syncType INTEGER NOT NULL", "eventId INTEGER NOT NULL", "eventSyncId INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL", *_GREEN,
        "streamId INTEGER NOT NULL", "correlationId INTEGER", "globalPid INTEGER", "graphId INTEGER NOT NULL",
        "graphExecId INTEGER NOT NULL",
    ],
    "NVTX_EVENTS": [
        "start INTEGER NOT NULL", "end INTEGER", "eventType INTEGER NOT NULL", "rangeId INTEGER", "category INTEGER",
        "color INTEGER", "text TEXT", "globalTid INTEGER", "endGlobalTid INTEGER", "textId INTEGER", "domainId INTEGER",
        "uint64Value INTEGER", "int64Value INTEGER", "doubleValue REAL", "uint32Value INTEGER", "int32Value INTEGER",
        "floatValue REAL", "jsonTextId INTEGER", "jsonText TEXT", "binaryData TEXT",
    ],
    "OSRT_API": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "eventClass INTEGER NOT NULL", "globalTid INTEGER",
        "nameId INTEGER NOT NULL", "returnValue INTEGER NOT NULL", "nestingLevel INTEGER", "callchainId INTEGER",
    ],
}

#: Memory tables (``--cuda-memory-usage=true``, ``--cuda-um-cpu-page-faults``, ``--cuda-um-gpu-page-faults``), 2024.6 DDL;
#: written apart from ``_DDL_NEW`` because their rows have no ``end`` in the second column.
_DDL_MEMORY = {
    "CUDA_GPU_MEMORY_USAGE_EVENTS": [
        "start INTEGER NOT NULL", "globalPid INTEGER NOT NULL", "deviceId INTEGER NOT NULL", "contextId INTEGER NOT NULL",
        "address INTEGER NOT NULL", "pc INTEGER NOT NULL", "bytes INTEGER NOT NULL", "memKind INTEGER NOT NULL",
        "memoryOperationType INTEGER NOT NULL", "name TEXT", "correlationId INTEGER", "streamId INTEGER",
        "localMemoryPoolAddress INTEGER", "localMemoryPoolReleaseThreshold INTEGER", "localMemoryPoolSize INTEGER",
        "localMemoryPoolUtilizedSize INTEGER", "importedMemoryPoolAddress INTEGER", "importedMemoryPoolProcessId INTEGER",
    ],
    "CUDA_UM_CPU_PAGE_FAULT_EVENTS": [
        "start INTEGER NOT NULL", "globalPid INTEGER NOT NULL", "address INTEGER NOT NULL", "originalFaultPc INTEGER",
        "CpuInstruction TEXT", "module TEXT", "unresolvedFaultPc INTEGER", "sourceFile TEXT", "sourceLine INTEGER",
    ],
    "CUDA_UM_GPU_PAGE_FAULT_EVENTS": [
        "start INTEGER NOT NULL", "end INTEGER NOT NULL", "globalPid INTEGER NOT NULL", "deviceId INTEGER NOT NULL",
        "address INTEGER NOT NULL", "numberOfPageFaults INTEGER NOT NULL", "faultAccessType INTEGER NOT NULL",
    ],
}
_ENUMS["ENUM_CUDA_DEV_MEM_EVENT_OPER"] = [(0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"),
                                         (1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation")]

#: 2022.1 (schema 2.9.1): no green contexts, no cluster/qmd columns, sync rows without eventSyncId, no NVTX payloads.
_LEGACY_DROP = {
    "greenContextId", "qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone", "graphId", "clusterX", "clusterY",
    "clusterZ", "clusterSchedulingPolicy", "maxPotentialClusterSize", "maxActiveClusters",
    "sharedMemoryRequestedPercentage", "copyCount", "deprecatedSyncType", "eventSyncId", "jsonTextId", "jsonText",
    "binaryData",
}


class NsysTrace:
    """One capture (one process on one or more GPUs), built call by call; ``write`` produces the .sqlite."""

    def __init__(
        self,
        device_name: str = "NVIDIA A100-SXM4-80GB",
        sm_count: int = 108,
        *,
        devices: int = 1,
        memory_bytes: int = 85_899_345_920,
        compute_capability: tuple[int, int] = (8, 0),
        pid: int = 4242,
        tid: int = 4242,
        version: str = "2026.1.1.204",
        legacy: bool = False,
        raw_clock: bool = False,
        origin_ns: int = 1_000_000_000,
        utc_epoch_ns: int = 1_700_000_000_000_000_000,
        gpu_info: bool = True,
    ) -> None:
        """``legacy`` writes the 2022.1 layout (EXPORT_META_DATA, no ENUM tables); ``gpu_info=False`` omits
        TARGET_INFO_GPU as the 2026.2 cloud captures do."""
        self.pid, self.tid = pid, tid
        self.legacy = legacy
        self.version = "2022.1.3.3" if legacy and version == "2026.1.1.204" else version
        self.raw_clock = raw_clock
        self.origin_ns = origin_ns + (30_000_000_000 if raw_clock else 0)
        self.system_clock_ns = 30_000_000_000 if raw_clock else 515_396_806_359_142
        self.utc_epoch_ns = utc_epoch_ns
        self.gpus = [(i, device_name, sm_count, memory_bytes, compute_capability) for i in range(devices)] if gpu_info else []
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[tuple]] = {name: [] for name in _DDL_NEW}
        self.thread_names: dict[int, str] = {tid: "python"}
        self.memory_rows: dict[str, list[tuple]] = {name: [] for name in _DDL_MEMORY}
        self._corr = 0
        self._next_address = 0x7F0000000000
        self.metric_samples: list[tuple[int, int, str, int]] = []  # (time, device, metric name, value)

    # --- ids ---------------------------------------------------------------------------------------------
    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings)
        return self.strings[value]

    def global_pid(self, pid: int | None = None) -> int:
        return (1 << 48) | ((self.pid if pid is None else pid) << 24)

    def global_tid(self, tid: int | None = None, pid: int | None = None) -> int:
        return self.global_pid(pid) | (self.tid if tid is None else tid)

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _t(self, ns: int) -> int:
        return self.origin_ns + int(ns)

    # --- GPU metrics sampling (--gpu-metrics-devices) -----------------------------------------------------------
    def gpu_metrics(self, at_ns: int, values: dict[str, int], *, device: int = 0) -> None:
        """One sample of GPU metrics (``{"SMs Active [Throughput %]": 80, ...}``) at ``at_ns`` on ``device``."""
        for name, v in values.items():
            self.metric_samples.append((self._t(at_ns), device, name, int(v)))

    # --- host rows ---------------------------------------------------------------------------------------
    def runtime(self, name: str, start_ns: int, dur_ns: int, *, tid: int | None = None, correlation: int | None = None, driver: bool | None = None) -> int:
        """A CUDA runtime (or driver, ``cu*``) API call; returns its correlation id."""
        corr = self._next_corr() if correlation is None else correlation
        full = API_NAMES.get(name, name)
        if driver is None:
            driver = name.startswith("cu") and not name.startswith("cuda")
        if tid is not None:
            self.thread_names.setdefault(tid, f"thread {tid}")
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), 1 if driver else 0, self.global_tid(tid), corr, self.string(full), 0, None)
        )
        return corr

    def annotation(self, name: str, start_ns: int, dur_ns: int | None, *, tid: int | None = None, push_pop: bool = True, registered: bool = False) -> None:
        """An NVTX range; ``dur_ns=None`` leaves it open (capture stopped inside it); ``registered`` uses textId."""
        end = None if dur_ns is None else self._t(start_ns + dur_ns)
        text, text_id = (None, self.string(name)) if registered else (name, None)
        self.rows["NVTX_EVENTS"].append(
            (self._t(start_ns), end, 59 if push_pop else 60, None, None, None, text, self.global_tid(tid), None, text_id, 0)
            + (None,) * 9
        )

    def step(self, n: int, start_ns: int, dur_ns: int) -> None:
        self.annotation(f"ProfilerStep#{n}", start_ns, dur_ns)

    def mark(self, name: str, at_ns: int, *, tid: int | None = None) -> None:
        self.rows["NVTX_EVENTS"].append((self._t(at_ns), None, 34, None, None, None, name, self.global_tid(tid), None, None, 0) + (None,) * 9)

    def osrt(self, name: str, start_ns: int, dur_ns: int, *, tid: int | None = None) -> None:
        """An OS runtime call (``poll``, ``read``, ``pthread_cond_wait``...), as ``--trace osrt`` records."""
        self.rows["OSRT_API"].append((self._t(start_ns), self._t(start_ns + dur_ns), 27, self.global_tid(tid), self.string(name), 0, 0, None))

    # --- memory rows -------------------------------------------------------------------------------------
    def cuda_malloc(self, start_ns: int, nbytes: int, *, dur_ns: int = 20_000, device: int = 0, mem_kind: int = DEVICE,
                    tid: int | None = None) -> int:
        """A ``cudaMalloc`` call and the allocation it records in CUDA_GPU_MEMORY_USAGE_EVENTS; returns the address."""
        address = self._next_address
        self._next_address += max(int(nbytes), 512)
        corr = self.runtime("cudaMalloc", start_ns, dur_ns, tid=tid)
        self._usage(start_ns + dur_ns // 2, device, address, nbytes, mem_kind, 0, corr)
        return address

    def cuda_free(self, start_ns: int, address: int, nbytes: int, *, dur_ns: int = 30_000, device: int = 0,
                  mem_kind: int = DEVICE, tid: int | None = None) -> None:
        """A ``cudaFree`` call and the release it records."""
        corr = self.runtime("cudaFree", start_ns, dur_ns, tid=tid)
        self._usage(start_ns + dur_ns // 2, device, address, nbytes, mem_kind, 1, corr)

    def _usage(self, at_ns: int, device: int, address: int, nbytes: int, mem_kind: int, oper: int, corr: int) -> None:
        self.memory_rows["CUDA_GPU_MEMORY_USAGE_EVENTS"].append(
            (self._t(at_ns), self.global_pid(), device, 1, address, 0, int(nbytes), mem_kind, oper, None, corr, None)
            + (None,) * 6)

    def um_cpu_fault(self, at_ns: int, address: int = 0x7E0000000000) -> None:
        """One unified-memory page fault on the host (a page migrated back to the CPU)."""
        self.memory_rows["CUDA_UM_CPU_PAGE_FAULT_EVENTS"].append(
            (self._t(at_ns), self.global_pid(), address, 0, None, None, None, None, None))

    def um_gpu_faults(self, start_ns: int, dur_ns: int, count: int, *, device: int = 0, address: int = 0x7E0000000000) -> None:
        """A group of ``count`` unified-memory page faults a GPU took over ``[start, start + dur)``."""
        self.memory_rows["CUDA_UM_GPU_PAGE_FAULT_EVENTS"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), self.global_pid(), device, address, int(count), 1))

    # --- GPU rows ----------------------------------------------------------------------------------------
    def _launch(self, name: str, start_ns: int, launch_ns: int | None, launch_dur_ns: int, tid: int | None, launch: bool) -> int | None:
        if not launch:
            return self._next_corr()
        launch_ns = start_ns - 5_000 if launch_ns is None else launch_ns
        return self.runtime(name, launch_ns, launch_dur_ns, tid=tid)

    def kernel(
        self,
        name: str,
        start_ns: int,
        dur_ns: int,
        *,
        launch_ns: int | None = None,
        launch_dur_ns: int = 4_000,
        stream: int = 7,
        device: int = 0,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        registers: int = 32,
        shared_memory: int = 0,
        launch_name: str = "cudaLaunchKernel",
        demangled: str | None = None,
        tid: int | None = None,
        launch: bool = True,
        correlation: int | None = None,
    ) -> int:
        """A kernel and (unless ``launch=False``, as in a sliced capture) the API call that launched it; with
        ``correlation``, a kernel of a call already written (a ``cudaGraphLaunch`` replaying a graph node by node)."""
        corr = correlation if correlation is not None else self._launch(launch_name, start_ns, launch_ns, launch_dur_ns, tid, launch)
        full = demangled or f"void {name}<float>(float *, int)"
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, stream, corr, self.global_pid(),
             self.string(full), self.string(name), None, 1, 0, registers, *grid, *block, shared_memory, 0, 0, 0,
             len(self.rows["CUPTI_ACTIVITY_KIND_KERNEL"]), 0, None, 0, None, None, None, None, 0, 0, 0, 0, 0, 0, 0)
        )
        return corr

    def kernels_bulk(self, names: Sequence[str], starts_ns: Sequence[int], durs_ns: Sequence[int], *, launch_offset_ns: int = 5_000, launch_dur_ns: int = 4_000, stream: int = 7, device: int = 0) -> None:
        """Many kernels + their launches at once (benchmarks): same rows as ``kernel`` without per-call overhead."""
        n = len(starts_ns)
        first = self._corr + 1
        self._corr += n
        ids = {nm: (self.string(f"void {nm}<float>(float *, int)"), self.string(nm)) for nm in set(names)}
        launch_id = self.string(API_NAMES["cudaLaunchKernel"])
        gpid, gtid, o = self.global_pid(), self.global_tid(), self.origin_ns
        k = self.rows["CUPTI_ACTIVITY_KIND_KERNEL"]
        r = self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"]
        for i, (nm, s, d) in enumerate(zip(names, starts_ns, durs_ns)):
            corr = first + i
            dem, short = ids[nm]
            k.append((o + s, o + s + d, device, 1, None, stream, corr, gpid, dem, short, None, 1, 0, 32, 128, 1, 1, 256, 1, 1,
                      0, 0, 0, 0, i, 0, None, 0, None, None, None, None, 0, 0, 0, 0, 0, 0, 0))
            ls = s - launch_offset_ns
            r.append((o + ls, o + ls + launch_dur_ns, 0, gtid, corr, launch_id, 0, None))
        assert len(k) >= n

    def memcpy(
        self,
        kind: str = "HtoD",
        start_ns: int = 0,
        dur_ns: int = 1_000,
        nbytes: int = 0,
        *,
        pageable: bool = False,
        sync: bool = False,
        launch_ns: int | None = None,
        launch_dur_ns: int = 4_000,
        stream: int = 7,
        device: int = 0,
        tid: int | None = None,
        launch: bool = True,
    ) -> int:
        """A copy plus its ``cudaMemcpyAsync`` (``sync=True``: a blocking ``cudaMemcpy`` lasting past the copy).

        ``pageable`` makes the host side pageable memory (the source of HtoD, the destination of DtoH).
        """
        launch_ns = start_ns - 5_000 if launch_ns is None else launch_ns
        if sync:
            launch_dur_ns = max(launch_dur_ns, start_ns + dur_ns - launch_ns + 1_000)
        corr = self._launch("cudaMemcpy" if sync else "cudaMemcpyAsync", start_ns, launch_ns, launch_dur_ns, tid, launch)
        host = PAGEABLE if pageable else PINNED
        src, dst = {"HtoD": (host, DEVICE), "DtoH": (DEVICE, host), "HtoH": (host, host)}.get(kind, (DEVICE, DEVICE))
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, stream, corr, self.global_pid(), int(nbytes),
             COPY_KIND_ID[kind], None, src, dst, device, 1, device, 1, 0, None, None, 1)
        )
        return corr

    def migration(self, kind: str, start_ns: int, dur_ns: int, nbytes: int, *, cause: int = 2, device: int = 0) -> None:
        """A unified-memory migration as Nsight Systems exports it: copyKind 11 (HtoD) / 12 (DtoH), memory kinds
        unknown, ``cause`` from ENUM_CUDA_UNIF_MEM_MIGRATION (2: page fault, 1: prefetch), no API call behind it."""
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, 0, 0, self.global_pid(), int(nbytes),
             {"HtoD": 11, "DtoH": 12}[kind], None, 7, 7, device, 1, device, 1, cause, None, None, 1)
        )

    def memset(self, start_ns: int, dur_ns: int, nbytes: int, *, launch_ns: int | None = None, stream: int = 7, device: int = 0, tid: int | None = None) -> int:
        corr = self._launch("cudaMemsetAsync", start_ns, launch_ns, 3_000, tid, True)
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, stream, corr, self.global_pid(), 0, int(nbytes), None, DEVICE)
        )
        return corr

    def gpu_sync(self, start_ns: int, dur_ns: int, *, kind: str = "stream_synchronize", stream: int = 7, device: int = 0, correlation: int | None = None) -> None:
        """A CUPTI synchronization record alone (``sync`` also writes the API call)."""
        sync_type, _ = SYNC_KINDS[kind]
        if kind == "context_synchronize":
            stream = 0xFFFFFFFF  # not applicable, as CUPTI writes it
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, stream, correlation, self.global_pid(),
             None, sync_type, 0xFFFFFFFF, None)
        )

    def sync(self, start_ns: int, dur_ns: int, *, kind: str = "stream_synchronize", stream: int = 7, device: int = 0, tid: int | None = None) -> int:
        """A host sync stall: the API call (e.g. ``cudaStreamSynchronize``) and its GPU sync record, same span."""
        _, api = SYNC_KINDS[kind]
        corr = self.runtime(api, start_ns, dur_ns, tid=tid)
        self.gpu_sync(start_ns, dur_ns, kind=kind, stream=stream, device=device, correlation=corr)
        return corr

    def graph_launch(self, start_ns: int, dur_ns: int, *, graph_id: int = 1, launch_ns: int | None = None, stream: int = 7, device: int = 0) -> int:
        """A whole CUDA graph as graph-level tracing records it (one row, no kernels)."""
        corr = self._launch("cudaGraphLaunch", start_ns, launch_ns, 6_000, None, True)
        self.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].append(
            (self._t(start_ns), self._t(start_ns + dur_ns), device, 1, None, stream, corr, self.global_pid(), graph_id, graph_id)
        )
        return corr

    # --- output ------------------------------------------------------------------------------------------
    def _columns(self, table: str) -> list[str]:
        cols = _DDL_NEW[table]
        return [c for c in cols if c.split()[0] not in _LEGACY_DROP] if self.legacy else list(cols)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        if path.exists():
            path.unlink()
        conn = sqlite3.connect(path)
        try:
            self._write(conn)
            conn.commit()
        finally:
            conn.close()
        return path

    def _write(self, conn: sqlite3.Connection) -> None:
        # Resolve thread names before StringIds is written (they are strings too).
        names = [(self.string(n), self.global_tid(t)) for t, n in sorted(self.thread_names.items())]
        conn.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        conn.execute("CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)")
        conn.executemany("INSERT INTO ThreadNames VALUES (?, 20, ?)", names)
        conn.execute("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
        conn.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (self.global_pid(), self.pid))
        if self.legacy:
            conn.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
            conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (self.utc_epoch_ns,))
        else:
            conn.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER)")
            conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '', ?)", (self.utc_epoch_ns, self.system_clock_ns))
        if self.gpus:
            conn.execute(
                "CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
                "totalMemory INTEGER NOT NULL, smCount INTEGER NOT NULL, chipName TEXT, cuDevice INTEGER, "
                "computeMajor INTEGER NOT NULL, computeMinor INTEGER NOT NULL)"
            )
            conn.executemany(
                "INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, '', ?, ?, '', ?, ?, ?)",
                [(1 << 48, i, nm, mem, sms, i, cc[0], cc[1]) for i, nm, sms, mem, cc in self.gpus],
            )
        meta_table = "EXPORT_META_DATA" if self.legacy else "META_DATA_EXPORT"
        conn.execute(f"CREATE TABLE {meta_table} (name TEXT NOT NULL, value TEXT)")
        major = self.version.split(".")
        conn.executemany(
            f"INSERT INTO {meta_table} VALUES (?, ?)",
            [
                ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                ("EXPORT_PRODUCT_VERSION", self.version),
                ("EXPORT_PRODUCT_DATE", ".".join(major[:2])),
                ("EXPORT_SCHEMA_VERSION", "2.9.1" if self.legacy else "3.24.14"),
                ("DERIVED_BY", "traceinsight tests/helpers/nsys_writer.py"),  # marks the file as synthetic
            ],
        )
        if not self.legacy:
            for table, values in _ENUMS.items():
                conn.execute(f"CREATE TABLE {table} (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
                conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", values)
        for table, rows in self.rows.items():
            if not rows:
                continue  # nsys creates a table only when it has rows
            cols = self._columns(table)
            all_cols = [c.split()[0] for c in _DDL_NEW[table]]
            keep = [all_cols.index(c.split()[0]) for c in cols]
            conn.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
            marks = ", ".join("?" * len(cols))
            if len(keep) == len(all_cols):
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            else:
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", ([r[i] for i in keep] for r in rows))
        for table, rows in self.memory_rows.items():
            if rows:
                conn.execute(f"CREATE TABLE {table} ({', '.join(_DDL_MEMORY[table])})")
                conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(_DDL_MEMORY[table]))})", rows)
        if self.metric_samples:  # as nsys 2024+ writes them: typeId = (chip type << 8) | GPU index
            names = list(dict.fromkeys(n for _, _, n, _ in self.metric_samples))
            conn.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, "
                         "typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)")
            devs = sorted({d for _, d, _, _ in self.metric_samples})
            conn.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, 'GA100', ?, ?)",
                             [((0x11 << 8) | d, d, i, n) for d in devs for i, n in enumerate(names)])
            conn.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, value INTEGER NOT NULL)")
            conn.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
                             [(t, (0x11 << 8) | d, names.index(n), v) for t, d, n, v in self.metric_samples])
        times = [r[0] for rows in self.rows.values() for r in rows] + [r[1] for rows in self.rows.values() for r in rows if r[1] is not None]
        if times:
            start = self.system_clock_ns if self.raw_clock else min(times)
            conn.execute("CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, stopTime INTEGER NOT NULL)")
            conn.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)", (1 << 48, max(times) - start, start, max(times)))


def write_trace(path: str | Path, build: Iterable) -> Path:
    """Convenience for one-liners: ``write_trace(p, [lambda t: t.kernel(...), ...])``."""
    t = NsysTrace()
    for fn in build:
        fn(t)
    return t.write(path)
