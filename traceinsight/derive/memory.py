"""GPU memory as a derived view: per device, allocated and reserved over time against capacity, the peak (with the
op and step that reached it), per-step peak and headroom, and the allocator calls of the steady state.

Read from ``Timeline.memory`` (``docs/timeline.md``, "Memory") and the events; built once per analysis through
``Derived.memory`` and shared by the memory rules (TI030-TI033) and every renderer, so a figure in a finding and in the
report's memory section is the same number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from traceinsight.model.timeline import build_memory
from traceinsight.vocab.masks import kind_mask

if TYPE_CHECKING:
    from traceinsight.derive.views import Views

#: Runtime calls that grow or shrink what the driver has handed out (the caching allocator's slow path):
#: ``cudaFree`` (and ``hipFree``) also synchronise the device, so in a steady-state step they stall the host.
ALLOCATOR_CALLS = re.compile(r"^(cudaMalloc|cudaMallocAsync|cudaFree|cudaFreeAsync|cuMemAlloc|cuMemFree|cuMemCreate|"
                             r"cuMemRelease|cuMemMap|cuMemUnmap|hipMalloc|hipFree|hipMallocAsync|hipFreeAsync)(_v\d+)?$")
#: Of those, the calls that release memory (and, for the non-async ones, synchronise).
FREE_CALLS = re.compile(r"Free|Release|Unmap")

#: Engines that hold most of a GPU's memory on purpose, found by the names they leave in a trace (ops, ranges,
#: threads, Python frames): (pattern, engine, what it holds, the setting that sizes it, how to lower it). Their own
#: long-lived tensors (a KV cache sized to a fraction of the GPU) fill the reservation, so allocated is high by
#: design too.
RESERVING_ENGINES: tuple[tuple[re.Pattern[str], str, str, str, str], ...] = (
    (re.compile(r"vllm", re.I), "vLLM", "its KV cache", "`gpu_memory_utilization`, 0.9 of the GPU by default",
     'llm = LLM(model=model_name, gpu_memory_utilization=0.8)   # vllm serve: --gpu-memory-utilization 0.8'),
    (re.compile(r"sglang", re.I), "SGLang", "its KV cache pool", "`mem_fraction_static`, about 0.8-0.9 of the GPU by default",
     'engine = sglang.Engine(model_path=model_name, mem_fraction_static=0.7)   # server: --mem-fraction-static 0.7'),
    (re.compile(r"tensorrt_llm|trtllm|tensorrt-llm", re.I), "TensorRT-LLM", "its KV cache",
     "`KvCacheConfig.free_gpu_memory_fraction`, 0.9 of the free memory by default",
     'kv_cache_config = KvCacheConfig(free_gpu_memory_fraction=0.7)'),
)
#: Frameworks whose allocator preallocates a pool at start-up: what it reserves is no pressure, what is in use is.
PREALLOCATING_FRAMEWORKS: dict[str, tuple[str, str, str, str]] = {
    "jax": ("JAX", "its preallocated pool",
            "`XLA_PYTHON_CLIENT_PREALLOCATE` and `XLA_PYTHON_CLIENT_MEM_FRACTION`, 75 % of the GPU by default",
            'os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.5"   # before the first import of jax'),
    "tensorflow": ("TensorFlow", "its BFC allocator's pool",
                   "`set_memory_growth` off by default: all of the GPU's memory is reserved",
                   'tf.config.experimental.set_memory_growth(tf.config.list_physical_devices("GPU")[0], True)'),
}
#: Name columns searched for an engine's names.
_ENGINE_COLUMNS = ("name", "thread_name", "raw_name")


@dataclass(frozen=True)
class Reservation:
    """Memory an engine or framework holds on purpose: ``engine`` (vLLM, JAX, ...), ``holds`` (what for), ``setting``
    (what sizes it), ``lower`` (a line of code that lowers it), ``pool``: True when the reservation is a pool and
    what is in use (allocated) is the real need; False when the engine's own long-lived tensors (a KV cache) fill
    it, so allocated near capacity is by design too."""

    engine: str
    holds: str
    setting: str
    lower: str
    pool: bool

    def sentence(self, share_pct: float | None = None) -> str:
        level = f"the {share_pct:.0f} % of capacity it holds" if share_pct is not None else "what it holds"
        return (f"{self.engine} reserves {self.holds} by design ({self.setting}): {level} is that reservation, "
                "sized once at start-up, not an allocator running out of memory")


#: Points kept per device series for drawing (the envelope: the extremes of each bucket survive).
MAX_POINTS = 2000


@dataclass
class DeviceMemory:
    """One GPU's memory over the trace."""

    rank: int
    device: int
    device_type: str
    capacity: int | None
    events: int
    peak_allocated: float | None
    peak_reserved: float | None
    peak_at_ns: int | None  # when allocated first reached its peak (reserved, where only that is known)
    peak_op: str | None
    peak_step: int | None
    relative: bool  # allocated counts from the start of the profile (only deltas recorded)
    oom_events: int
    series: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)  # start_ns, allocated, reserved (reduced)
    steps: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)  # per step: peak, headroom

    @property
    def peak(self) -> float | None:
        """The peak that matters against capacity: reserved (what the device handed out) where known."""
        return self.peak_reserved if self.peak_reserved is not None else self.peak_allocated

    @property
    def peak_share(self) -> float | None:
        if self.capacity and self.peak is not None:
            return self.peak / self.capacity
        return None

    def to_dict(self) -> dict[str, Any]:
        steps = [{k: (None if pd.isna(v) else int(v)) for k, v in row.items()} for row in self.steps.to_dict("records")]
        return {
            "rank": self.rank, "device": self.device, "device_type": self.device_type, "capacity_bytes": self.capacity,
            "events": self.events, "peak_allocated_bytes": _num(self.peak_allocated), "peak_reserved_bytes": _num(self.peak_reserved),
            "peak_at_ns": self.peak_at_ns, "peak_op": self.peak_op, "peak_step": self.peak_step,
            "peak_share_of_capacity": None if self.peak_share is None else round(self.peak_share, 6),
            "headroom_bytes": None if self.capacity is None or self.peak is None else int(self.capacity - self.peak),
            "allocated_relative_to_profile_start": self.relative, "oom_events": self.oom_events, "steps": steps,
        }


#: What profilers write where an allocation has no op (XPlane's memory profile: ``(null)``): no name at all.
_NO_OP = frozenset({"", "(null)", "null", "none", "nan", "<unknown>", "unknown"})


def _op_name(op: Any) -> str | None:
    """The op that reached a peak, or None when the trace names none (missing, or a placeholder in ``_NO_OP``)."""
    if op is None or (not isinstance(op, str) and pd.isna(op)):
        return None
    name = str(op).strip()
    return None if name.lower() in _NO_OP else name


def _num(v: float | None) -> int | None:
    return None if v is None or not np.isfinite(v) else int(v)


class Memory:
    """The memory view of one analysis (``Derived.memory``). ``warmup``: the time ledger's warm-up regions, asked
    when first needed (``warmup_end``; the store passes its ledger's); without it, warm-up ends with the first step."""

    def __init__(self, views: "Views", warmup: "Callable[[], pd.DataFrame | None] | None" = None) -> None:
        self.views = views
        self._warmup = warmup
        self.timeline = views.timeline
        table = getattr(self.timeline, "memory", None)  # a Timeline built before the memory table existed has none
        self.table = table if table is not None else build_memory()

    @cached_property
    def devices(self) -> list[DeviceMemory]:
        """One entry per GPU with memory rows (host memory is not drawn against a GPU's capacity)."""
        mem = self.table
        if mem.empty:
            return []
        keep = (mem["device"].to_numpy() >= 0) & kind_mask(mem["kind"], ("alloc", "free", "oom"))
        if not keep.any():
            return []
        caps = {(d.rank, d.index): d.memory_bytes for d in self.timeline.meta.devices}
        relative = set(self.timeline.meta.extra.get("memory_allocated_from_deltas", []))
        rank, dev = mem["rank"].to_numpy()[keep], mem["device"].to_numpy()[keep]
        if rank.min() == rank.max() and dev.min() == dev.max():  # one GPU (a rank's own trace): its rows, no groupby
            groups = [((rank[0], dev[0]), mem if keep.all() else mem[keep])]
        else:
            groups = mem[keep].groupby(["rank", "device"], sort=True, observed=True)
        out = []
        for (r, d), g in groups:
            out.append(self._device(int(r), int(d), g, caps.get((int(r), int(d))), int(d) in relative))
        return out

    def _device(self, rank: int, device: int, g: pd.DataFrame, capacity: int | None, relative: bool) -> DeviceMemory:
        alloc = g["allocated"].to_numpy(dtype=float)
        res = g["reserved"].to_numpy(dtype=float)
        t = g["start_ns"].to_numpy()
        pa = float(np.nanmax(alloc)) if np.isfinite(alloc).any() else None
        pr = float(np.nanmax(res)) if np.isfinite(res).any() else None
        # the op and step that first reached the highest allocated level (the tensors that set the peak); where
        # only reserved is known, the first row at its peak
        level = alloc if pa is not None else res
        i = int(np.nanargmax(level)) if np.isfinite(level).any() else None
        op = g["op"].iloc[i] if i is not None else None
        step = int(g["step"].iloc[i]) if i is not None else None
        return DeviceMemory(
            rank=rank, device=device, device_type=str(g["device_type"].iloc[0]), capacity=capacity, events=len(g),
            peak_allocated=pa, peak_reserved=pr, peak_at_ns=int(t[i]) if i is not None else None,
            peak_op=_op_name(op), peak_step=step if step is not None and step >= 0 else None,
            relative=relative, oom_events=int((g["kind"] == "oom").sum()),
            series=_reduce(t, alloc, res), steps=self._per_step(g, capacity),
        )

    def _per_step(self, g: pd.DataFrame, capacity: int | None) -> pd.DataFrame:
        st = g[g["step"].to_numpy() >= 0]
        if st.empty:
            return pd.DataFrame()
        agg = st.groupby("step").agg(peak_allocated=("allocated", "max"), peak_reserved=("reserved", "max"),
                                                 start_reserved=("reserved", "first"))
        agg["headroom"] = (capacity - agg["peak_reserved"].fillna(agg["peak_allocated"])) if capacity else np.nan
        return agg.reset_index()

    def device(self, rank: int, device: int) -> DeviceMemory | None:
        for d in self.devices:
            if d.rank == rank and d.device == device:
                return d
        return None

    @cached_property
    def allocator_calls(self) -> pd.DataFrame:
        """Runtime calls that grow or shrink the device pool (cudaMalloc / cudaFree and kin), with their step."""
        host = self.views.host_events
        names = host["name"]
        if isinstance(names.dtype, pd.CategoricalDtype) and not any(ALLOCATOR_CALLS.match(str(c)) for c in names.cat.categories):
            # no allocator name at all (the runtime calls share the host rows' categories): no rows, the same
            # columns, without taking the runtime rows out of the host rows
            return host.iloc[:0]
        rt = self.views.runtime_calls
        if rt.empty:
            return rt
        cats = rt["name"].cat.categories if isinstance(rt["name"].dtype, pd.CategoricalDtype) else pd.Index(rt["name"].unique())
        hit = [c for c in cats if ALLOCATOR_CALLS.match(str(c))]
        if not hit:
            return rt.iloc[:0]
        return rt[rt["name"].isin(hit).to_numpy()]

    @cached_property
    def reservation(self) -> Reservation | None:
        """Who holds this trace's GPU memory on purpose, from the trace's own evidence: a serving engine whose names
        appear in its ops, ranges, threads or Python frames (``RESERVING_ENGINES``), else a framework whose
        allocator preallocates (``PREALLOCATING_FRAMEWORKS``, from ``framework.detect_framework``); None when
        neither (PyTorch's caching allocator reserves only what it has used)."""
        ev = self.timeline.events
        for col in _ENGINE_COLUMNS:
            if col not in ev:
                continue
            vals = ev[col]
            uniq = vals.cat.categories if isinstance(vals.dtype, pd.CategoricalDtype) else pd.unique(vals.dropna())
            heads = [str(u)[:512] for u in uniq]
            for rx, engine, holds, setting, lower in RESERVING_ENGINES:
                if any(rx.search(h) for h in heads):
                    return Reservation(engine, holds, setting, lower, pool=False)
        from traceinsight.derive.framework import detect_framework

        fw = PREALLOCATING_FRAMEWORKS.get(detect_framework(self.timeline))
        return Reservation(*fw, pool=True) if fw else None

    def in_use_peak(self, d: DeviceMemory) -> float | None:
        """The peak that says whether ``d`` is short of memory: what was in use (allocated) where an engine reserves
        a pool on purpose (``reservation.pool``), else ``d.peak`` (reserved where known)."""
        r = self.reservation
        if r is not None and r.pool and d.peak_allocated is not None:
            return d.peak_allocated
        return d.peak

    @cached_property
    def faults(self) -> pd.DataFrame:
        mem = self.table
        return mem[mem["kind"].isin(["um_fault_cpu", "um_fault_gpu"]).to_numpy()]

    @cached_property
    def warmup_end(self) -> dict[int, int]:
        """Per rank with at least two steps, when its warm-up ends: the end of its first step (allocator growth,
        cuDNN autotuning and compilation land there; the ledger treats an outlier first step as warm-up on the same
        grounds), extended to the end of any warm-up region the ledger found later (``Ledger.warmup``: first calls
        that are outliers). A rank with fewer steps has no steady state to judge: a run's start and its end
        (``cudaMalloc`` of the inputs, ``cudaFree`` at exit) cannot be told from a loop without step markers."""
        out: dict[int, int] = {}
        st = self.views.steps
        if st.empty:
            return out
        for r, g in st.groupby("rank", sort=True):
            if len(g) >= 2:
                out[int(r)] = int(g["end_ns"].iloc[0])
        try:
            warm = self._warmup() if self._warmup is not None else None
        except Exception:  # noqa: BLE001 - a ledger that cannot be built leaves warm-up to the steps
            warm = pd.DataFrame()
        if warm is not None and not warm.empty:
            for r, g in warm.groupby("rank", sort=True):
                if int(r) in out:
                    out[int(r)] = max(out[int(r)], int(g["end_ns"].max()))
        return out

    def steady(self, rank: np.ndarray, t: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Rows (rank, time, step) in steady state: inside a step, after their rank's warm-up."""
        rank, t, step = np.asarray(rank), np.asarray(t), np.asarray(step)
        out = np.zeros(len(t), dtype=bool)
        for r, end in self.warmup_end.items():
            m = rank == r
            out[m] = (t[m] >= end) & (step[m] >= 0)
        return out

    def steady_allocator_calls(self, names: str, *, matching: bool = True) -> pd.DataFrame:
        """Allocator calls in steady state (``steady``) whose name matches the regex ``names`` (or, with
        ``matching=False``, does not): what the memory rules count as pool growth or flushes after warm-up."""
        calls = self.allocator_calls
        if calls.empty:
            return calls
        hit = calls["name"].astype(str).str.contains(names).to_numpy() == matching
        calls = calls[hit]
        return calls[self.steady(calls["rank"].to_numpy(), calls["start_ns"].to_numpy(), calls["step"].to_numpy())]

    def to_dict(self) -> dict[str, Any]:
        faults = self.faults
        return {
            "devices": [d.to_dict() for d in self.devices],
            "um_page_faults": int(faults["count"].sum()),
            "allocator_calls": int(len(self.allocator_calls)),
        }


def _reduce(t: np.ndarray, alloc: np.ndarray, res: np.ndarray, limit: int = MAX_POINTS) -> pd.DataFrame:
    """The series for drawing: every row when few, else per time bucket its first, max and last values, so peaks
    and steps survive at any zoom the report draws."""
    n = len(t)
    if n <= limit:
        return pd.DataFrame({"start_ns": t, "allocated": alloc, "reserved": res})
    buckets = limit // 3
    b = np.minimum(((t - t[0]) * buckets // max(int(t[-1] - t[0]), 1)).astype(np.int64), buckets - 1)
    cut = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ends = np.r_[cut[1:], n] - 1
    level = np.where(np.isfinite(res), res, alloc)
    peak = np.array([a + int(np.nanargmax(level[a:e + 1])) if np.isfinite(level[a:e + 1]).any() else a
                     for a, e in zip(cut.tolist(), ends.tolist())], dtype=np.int64)
    keep = np.unique(np.concatenate([cut, peak, ends]))
    return pd.DataFrame({"start_ns": t[keep], "allocated": alloc[keep], "reserved": res[keep]})


def fmt_bytes(n: float | None) -> str:
    """Human bytes, binary units: 512 B, 1.5 MiB, 30.2 GiB."""
    if n is None or not np.isfinite(n):
        return "n/a"
    a = abs(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if a >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
