"""Nsight Systems SQLite facts the reader depends on, shipped as constants.

Exports before 2023 carry no ``ENUM_*`` tables and later ones only create the tables they need, so the
reader never looks enums up in the file: these values were checked identical across the 2023.1..2026.2
exports.
"""

from __future__ import annotations

#: Bit layout of ``globalTid`` / ``globalPid``: (vm << 48) | (pid << 24) | tid.
PID_SHIFT = 24
ID_MASK = 0xFFFFFF

#: ENUM_CUDA_MEMCPY_OPER -> timeline copy_kind. Arrays live on the device, unified copies keep their direction.
MEMCPY_KIND: dict[int, str] = {
    0: "other",
    1: "HtoD",
    2: "DtoH",
    3: "HtoD",  # host -> array
    4: "DtoH",  # array -> host
    5: "DtoD",  # array -> array
    6: "DtoD",  # array -> device
    7: "DtoD",  # device -> array
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",  # unified HtoD
    12: "DtoH",  # unified DtoH
    13: "DtoD",  # unified DtoD
}

#: ENUM_CUDA_MEMCPY_OPER values of unified-memory migrations (the driver moves managed pages; no API call copies).
UVM_COPY_KINDS = (11, 12, 13)
#: ENUM_CUDA_UNIF_MEM_MIGRATION -> why the driver migrated the pages (the name of the row says it).
MIGRATION_CAUSE: dict[int, str] = {0: "unknown cause", 1: "prefetch", 2: "page fault", 3: "speculative prefetch", 4: "eviction",
                                   5: "access counters"}

#: ENUM_CUDA_MEM_KIND labels (srcKind / dstKind / memKind).
MEM_KIND_PAGEABLE = 0
MEM_KIND: dict[int, str] = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}

#: ENUM_CUPTI_SYNC_TYPE -> (display name as kineto prints its cuda_sync rows, CUPTI enum name).
SYNC_TYPE: dict[int, tuple[str, str]] = {
    0: ("Unknown Sync", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN"),
    1: ("Event Sync", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE"),
    2: ("Stream Wait Event", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT"),
    3: ("Stream Sync", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE"),
    4: ("Context Sync", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE"),
}

#: ENUM_NSYS_EVENT_CLASS values found in CUPTI_ACTIVITY_KIND_RUNTIME.
EVENT_CLASS_RUNTIME = 0
EVENT_CLASS_DRIVER = 1

#: ENUM_NSYS_EVENT_TYPE values of NVTX_EVENTS rows.
NVTX_MARK = 34
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_RANGES = (NVTX_PUSH_POP, NVTX_START_END)

#: CUPTI writes all-ones for "not applicable" stream / event ids.
UINT32_NONE = 0xFFFFFFFF

#: Table names (one per record kind; each exists only when it has rows).
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
CUPTI_OVERHEAD = "CUPTI_ACTIVITY_KIND_OVERHEAD"
PROFILER_OVERHEAD = "PROFILER_OVERHEAD"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE)
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # renamed by 2024.6

#: Tables whose presence marks a file as an nsys export (one of them always exists, even with no CUDA).
MARKER_TABLES = ("StringIds", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", *META_TABLES)

#: NVTX range names that mark a training step (kind ``step``); the number is read by ``assign_steps``.
STEP_PATTERN = r"^(?:ProfilerStep#\d+|(?:train[_ ]?)?step[ _#:]*\d+)$"
