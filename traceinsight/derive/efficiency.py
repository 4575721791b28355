"""Is the busy GPU doing useful work: achieved FLOP/s and bytes/s per kernel class, roofline position, MFU per step.

Built from the views (kernels, copies, steps), the FLOPs model of ``traceinsight.derive.flops`` (from recorded shapes) and
the peak table of ``traceinsight.vocab.peaks``. Every percentage carries the peak it was measured against; where the
trace cannot say (no shapes, unknown GPU) the view says what to record or pass instead of printing zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from traceinsight.derive.flops import OpCounts, count_ops
from traceinsight.ingest import InputFormat, input_format
from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.peaks import UNKNOWN_PEAK, PeakChoice, choose
from traceinsight.vocab.units import fmt_ns
from traceinsight.vocab.work_classes import CLASSES, LAYOUT_KERNEL, MATRIX_CLASSES, TF32_KERNEL, kernel_classes


@dataclass
class EfficiencySettings:
    """What the user tells about peaks and model FLOPs (CLI ``--peak-tflops``, ``--peak-bandwidth``,
    ``--model-flops-per-step``; API ``analyze(..., efficiency=EfficiencySettings(...))``)."""

    peak_tflops: float | None = None
    peak_bandwidth_gbs: float | None = None
    model_flops_per_step: float | None = None


@dataclass
class Efficiency:
    """The efficiency view of one timeline.

    ``classes``: one row per kernel class with GPU time: ``cls``, ``label``, ``time_ns``, ``share_pct`` (of GPU
    activity time), ``modelled_ns`` (time of kernels whose op has a FLOPs/bytes model), ``flops`` (every leaf op of
    the class with shapes, its kernels linked or not), ``modelled_flops`` (those of the linked ops: the rates'
    numerator, over ``modelled_ns``), ``bytes``,
    ``dtype``, ``achieved_tflops``, ``achieved_gbs``, ``peak_tflops``, ``peak_label``, ``pct_of_peak``,
    ``pct_of_bandwidth``, ``intensity`` (FLOP/byte), ``ridge`` (FLOP/byte), ``bound``.
    ``steps``: ``rank``, ``step``, ``dur_ns``, ``flops``, ``tflops``, ``mfu_pct``.

    ``classes`` is built from ``class_rows`` (one dict per row) when first read: the job path's ranks never read
    it, and a frame of seventeen mixed columns costs more to build than the rest of this view on a small rank.
    """

    peak: PeakChoice
    flops_source: str  # "shapes", "recorded" (XLA's per-op cost on XPlane kernels), "user", "none"
    shapes_recorded: bool
    class_rows: list[dict[str, Any]]
    steps: pd.DataFrame
    counts: OpCounts | None
    gpu_time_ns: int
    model_flops: float  # matrix-class FLOPs on the GPU (or the user's per step x steps)
    mfu_pct: float | None
    mfu_dtype: str | None
    notes: list[str] = field(default_factory=list)
    kernel_cls: np.ndarray | None = None  # per row of ``views.kernels``: its class (from its op, else its name)
    hardware: pd.DataFrame | None = None  # sampled GPU metrics: scope, metric, mean_pct, samples (see ``_hardware``)
    top_ops: pd.DataFrame | None = None  # matrix ops by kernel time, grouped by (op, shapes, dtype): see ``_top_ops``
    coverage: dict[str, Any] | None = None  # how much of the matrix work the FLOPs cover: see ``_coverage``
    mfu_withheld: str = ""  # why no MFU is headlined although FLOPs are known (shapes cover too little): the sentence
    mfu_basis: str = ""  # what MFU is measured over when warm-up is left out of it ("" : every step, or the whole window)

    @cached_property
    def classes(self) -> pd.DataFrame:
        return pd.DataFrame(self.class_rows, columns=CLASS_COLUMNS)

    @property
    def available(self) -> bool:
        return self.flops_source != "none"

    def peak_label(self, dtype: str | None = None) -> str:
        return self.peak.label(dtype or self.mfu_dtype)

    def to_dict(self) -> dict[str, Any]:
        def num(v: Any, nd: int = 3) -> Any:
            return None if v is None or (isinstance(v, float) and not np.isfinite(v)) else round(float(v), nd)

        return {
            "flops_source": self.flops_source,
            "shapes_recorded": self.shapes_recorded,
            "peak": {"gpu": self.peak.gpu, "tflops": self.peak.tflops, "bandwidth_gbs": self.peak.bandwidth_gbs,
                     "source": self.peak.source, "dense": True, "known": self.peak.known,
                     "reason": self.peak.reason or None},
            "gpu_time_ns": int(self.gpu_time_ns),
            "model_flops": num(self.model_flops, 0),
            "mfu_pct": num(self.mfu_pct),
            "mfu_dtype": self.mfu_dtype,
            "mfu_peak": self.peak_label() if self.mfu_pct is not None else None,
            "mfu_withheld": self.mfu_withheld or None,
            "mfu_basis": self.mfu_basis or None,
            "shape_coverage_pct": None if self.coverage is None else num(self.coverage.get("pct")),
            "coverage": None if self.coverage is None else {k: (num(v) if isinstance(v, float) else v) for k, v in self.coverage.items()},
            "classes": [
                {k: (num(v) if isinstance(v, float) else (int(v) if isinstance(v, (np.integer,)) else v)) for k, v in r.items()}
                for r in self.classes.to_dict("records")
            ],
            "steps": [
                {"rank": int(r["rank"]), "step": int(r["step"]), "dur_ns": int(r["dur_ns"]), "flops": num(r["flops"], 0),
                 "tflops": num(r["tflops"]), "mfu_pct": num(r["mfu_pct"])}
                for r in self.steps.to_dict("records")
            ],
            "top_ops": None if self.top_ops is None else [
                {k: (num(v, 4) if isinstance(v, float) else (int(v) if isinstance(v, np.integer) else v)) for k, v in r.items()}
                for r in self.top_ops.to_dict("records")
            ],
            "assumptions": dict(self.counts.assumed) if self.counts else {},
            "hardware": None if self.hardware is None else [
                {"scope": r["scope"], "metric": r["metric"], "mean_pct": num(r["mean_pct"]), "samples": int(r["samples"])}
                for r in self.hardware.to_dict("records")
            ],
            "notes": list(self.notes),
        }


def build(views: Any, settings: EfficiencySettings | None = None, ledger: "Callable[[], Any] | None" = None) -> Efficiency:
    """The efficiency view of the views' timeline, in named steps: the peak of the devices that ran work (``_peak``),
    FLOPs per op from what the trace's format records (``_op_counts``), each kernel's class (``_kernel_class``), the
    row of each class (``_class_rows``), where the FLOPs come from (``_flops_source``) and what is missing
    (``_flops_notes``), FLOPs and MFU per step (``_step_frame``) and over the steady state (``_window_mfu``).

    ``ledger``: the time ledger, asked for only when MFU is computed (the analysis' store passes its own). With it,
    MFU leaves out what the verdict sets aside as warm-up (steps that are mostly warm-up; without steps, the
    window's warm-up time), so the MFU and the busy % beside it speak of the same steady state."""
    settings = settings or EfficiencySettings()
    tl = views.timeline
    kernels = views.kernels
    peak = _peak(views, settings)
    notes: list[str] = []
    fmt = input_format(tl.meta.source_format)  # what the trace's format records, and what to say when it is missing
    counts = _op_counts(tl.events, kernels, fmt, peak, notes)
    shapes = bool(counts and counts.shapes_recorded)
    recorded = counts is not None and not counts.shapes_recorded and bool(fmt.op_costs)
    cls = _kernel_class(kernels, counts)
    ops = _GpuOps.of(counts, kernels)
    rows, gpu_ns = _class_rows(views, cls, ops, peak)
    mfu_dtype = _mfu_dtype(ops, rows)
    source = _flops_source(settings, ops.matrix_all, recorded)
    if source == "user":
        mfu_dtype = mfu_dtype or "bf16"
    coverage = _flops_notes(source, fmt, shapes, rows, ops.matrix_all, counts, peak, notes)
    peak_mfu, _ = peak.for_dtype(mfu_dtype)
    step_frame = _step_frame(views.steps, source, ops.matrix_all, settings, peak_mfu)
    model_flops, mfu, basis = _window_mfu(source, views.gpu_activity, step_frame, ops.matrix_all, settings, peak_mfu, notes, ledger,
                                           views.steps)
    withheld = ""
    if mfu is not None and coverage is not None and (coverage["pct"] if coverage["pct"] is not None else 0.0) < MFU_MIN_COVERAGE_PCT:
        # an MFU over a sliver of the matrix work is not the model's: say what is known instead (see ``withheld_text``)
        withheld = withheld_text(coverage, rows, fmt.record_shapes)
        mfu = None
        step_frame["mfu_pct"] = None
    hardware = _hardware(tl.samples, views, kernels, cls) if getattr(tl, "samples", None) is not None else None
    if hardware is not None and source == "none":  # only a format that samples the hardware has them (Nsight)
        notes.append("GPU-metrics samples are present: SM and tensor-core activity below are the hardware's own measure")
    top = _top_ops(tl.events, ops.matrix, peak, mfu_dtype) if source == "shapes" else None
    return Efficiency(peak, source, shapes, rows, step_frame, counts, gpu_ns, model_flops, mfu,
                      mfu_dtype if source != "none" else None, notes, kernel_cls=cls, hardware=hardware, top_ops=top,
                      coverage=coverage, mfu_withheld=withheld, mfu_basis=basis if mfu is not None else "")


def _peak(views: Any, settings: EfficiencySettings) -> PeakChoice:
    """The peak to measure against: of the devices that ran GPU work (all the trace's devices when none matches),
    or the user's figures."""
    act = views.gpu_activity
    a_rank, a_dev = views.array("gpu_activity", "rank"), views.array("gpu_activity", "device")
    if len(act) and a_rank.min() == a_rank.max() and a_dev.min() == a_dev.max():  # one device: no pairs to sort
        used = {(int(a_rank[0]), int(a_dev[0]))}
    else:
        pairs = np.unique(np.stack([a_rank.astype(np.int64), a_dev.astype(np.int64)], axis=1), axis=0) if len(act) else np.zeros((0, 2), np.int64)
        used = {(int(r), int(d)) for r, d in pairs}
    meta = views.timeline.meta
    devs = [d for d in meta.devices if (int(d.rank), int(d.index)) in used] or list(meta.devices)
    return choose(devs, settings.peak_tflops, settings.peak_bandwidth_gbs)


def _op_counts(events: pd.DataFrame, kernels: pd.DataFrame, fmt: InputFormat, peak: PeakChoice, notes: list[str]) -> OpCounts | None:
    """FLOPs and bytes per op, from what the format records: framework ops' shapes, or the compiler's per-op costs
    on kernels; None where it records neither. Implausible figures are dropped (``plausible_flops``)."""
    counts = None
    if fmt.shapes:
        try:
            counts = count_ops(events, kernels)
        except (ValueError, TypeError, OverflowError, KeyError, IndexError) as exc:  # untrusted shapes: say so, go on
            notes.append(f"the FLOPs model could not read this trace's shapes ({type(exc).__name__}); FLOPs are not shown")
    elif fmt.op_costs:
        counts = _recorded_counts(kernels)  # the compiler's own per-op FLOPs/bytes, where the profiler wrote them
    return plausible_flops(counts, peak, notes) if counts is not None else None


def _kernel_class(kernels: pd.DataFrame, counts: OpCounts | None) -> np.ndarray:
    """The class of every kernel: its launching op's class where the op is known, else the kernel name's."""
    if not len(kernels):
        return np.zeros(0, dtype=object)
    cls = kernel_classes(kernels["name"])
    if counts is not None and len(counts.ops):
        hit = counts.kernel_op >= 0
        if hit.any():  # a layout transform keeps its own class under whatever op launched it (``LAYOUT_KERNEL``)
            hit &= ~name_mask(kernels["name"], LAYOUT_KERNEL)
        cls = cls.astype(object)
        cls[hit] = counts.ops["cls"].to_numpy()[counts.kernel_op[hit]]
    return cls


class _GpuOps(NamedTuple):
    """The ops the efficiency view counts: ``on_gpu`` (with linked kernel time: the rates' numerator), ``gpu_ops``
    (ran on the GPU: linked kernels, or runtime calls inside them, whose kernels' link may be lost; an op with
    neither ran on the host, and its FLOPs are not the GPU's), their matrix classes (``matrix`` of ``on_gpu``,
    ``matrix_all`` of ``gpu_ops`` with FLOPs: the model's FLOPs, whether or not their kernels were linked), and
    the share of matrix kernel time on TF32 kernels."""

    on_gpu: pd.DataFrame
    gpu_ops: pd.DataFrame
    matrix: pd.DataFrame
    matrix_all: pd.DataFrame
    tf32_share: float

    @classmethod
    def of(cls, counts: OpCounts | None, kernels: pd.DataFrame) -> "_GpuOps":
        ops = counts.ops if counts is not None else pd.DataFrame()
        on_gpu = ops[ops["kernel_ns"] > 0] if len(ops) else ops
        gpu_ops = ops[(ops["kernel_ns"] > 0) | (ops["launches"] > 0)] if len(ops) else ops
        matrix = on_gpu[on_gpu["cls"].isin(MATRIX_CLASSES)] if len(on_gpu) else on_gpu
        matrix_all = gpu_ops[gpu_ops["cls"].isin(MATRIX_CLASSES) & gpu_ops["flops"].notna()] if len(gpu_ops) else gpu_ops
        tf32_share = _tf32_share(kernels, counts) if counts is not None else 0.0
        return cls(on_gpu, gpu_ops, matrix, matrix_all, tf32_share)


def _class_rows(views: Any, cls: np.ndarray, ops: _GpuOps, peak: PeakChoice) -> tuple[list[dict[str, Any]], int]:
    """One row per kernel class with GPU time (``Efficiency.classes``), and the GPU activity time. Copies (every
    activity row that is not a kernel) and kernel time per class are summed on arrays: a frame take and a groupby
    on a rank of a few dozen rows cost more than all the rest of this view."""
    is_copy = ~kind_mask(views.gpu_activity["kind"], ("kernel",))  # on the kind's codes, not 10^6 strings compared
    act_dur = views.array("gpu_activity", "dur_ns")
    copy_dur = act_dur[is_copy]
    copy_bytes = float(views.array("gpu_activity", "bytes")[is_copy].sum()) if len(copy_dur) else None
    time_by = _int_sums(cls, views.array("kernels", "dur_ns")) if len(views.kernels) else {}
    copy_ns = int(copy_dur.sum())
    gpu_ns = int(act_dur.sum())
    rows = []
    for c, label in CLASSES.items():
        t = int(time_by.get(c, 0)) + (copy_ns if c == "copy" else 0)
        if t > 0:
            copies = (copy_ns, copy_bytes) if c == "copy" and copy_bytes is not None else None
            row = _class_row(c, label, t, gpu_ns, ops, peak, copies)
            if copies is not None:
                _host_link_copies(row, views, is_copy, peak)
            rows.append(row)
    return rows, gpu_ns


#: Copy directions that cross the host link (PCIe, NVLink-C2C) rather than staying in device memory.
HOST_LINK_COPIES = ("HtoD", "DtoH", "HtoH")


def _host_link_copies(row: dict[str, Any], views: Any, is_copy: np.ndarray, peak: PeakChoice) -> None:
    """The copy row's rates split by where the bytes go: host<->device copies run over the host link (PCIe, NVLink-C2C),
    whose speed is not the device memory's, so only copies and memsets in device memory are measured against the
    DRAM bandwidth (``pct_of_bandwidth``); ``link_gbs`` / ``device_gbs`` give each side's achieved rate, and the
    row is bound by the ``host link`` when those copies hold most of the copy time. A blended rate of a 10 GB/s
    PCIe transfer and a 2 TB/s device copy read against DRAM bandwidth said nothing about either."""
    act = views.gpu_activity
    ck = act["copy_kind"] if "copy_kind" in act else None
    if ck is None:
        return
    link = is_copy & kind_mask(ck, HOST_LINK_COPIES)  # on the category codes, not a string per row
    dur, nbytes = views.array("gpu_activity", "dur_ns"), views.array("gpu_activity", "bytes")
    on_dev = is_copy & ~link
    lt, dt = int(dur[link].sum()), int(dur[on_dev].sum())
    lb, db = float(nbytes[link].sum()), float(nbytes[on_dev].sum())
    row["link_gbs"] = lb / lt if lt > 0 and lb > 0 else None  # bytes per ns = GB/s
    row["device_gbs"] = db / dt if dt > 0 and db > 0 else None
    row["pct_of_bandwidth"] = 100.0 * row["device_gbs"] / peak.bandwidth_gbs if row["device_gbs"] and peak.bandwidth_gbs and dt > 0 else None
    if lt > dt:
        row["bound"] = "host link"
        if row["pct_of_bandwidth"] is not None and 2 * dt < lt:
            row["pct_of_bandwidth"] = None  # the device side is the smaller part: its % would stand for the row


def _class_row(c: str, label: str, t: int, gpu_ns: int, ops: _GpuOps, peak: PeakChoice,
               copies: tuple[int, float] | None) -> dict[str, Any]:
    """The row of class ``c`` (``t`` ns of GPU time; ``copies``: the copies' time and bytes, which carry their own
    byte counts): its FLOPs and bytes, dtype, achieved rates, peak, arithmetic intensity and roofline bound."""
    on_gpu, every = ops.on_gpu, ops.gpu_ops
    sub = on_gpu[on_gpu["cls"] == c] if len(on_gpu) else on_gpu
    flops = float(sub["flops"].sum()) if len(sub) else 0.0  # the linked ops': the rates' numerator
    every = every[every["cls"] == c] if len(every) else every
    flops_all = float(every["flops"].sum()) if len(every) else 0.0  # every leaf op's, linked or not
    nbytes = float(sub["bytes"].sum()) if len(sub) else 0.0
    modelled = int(sub["kernel_ns"].sum()) if len(sub) else 0
    if copies is not None:
        modelled += copies[0]
        nbytes += copies[1]
    matrix = c in MATRIX_CLASSES
    dtype = _dominant_dtype(sub)
    if dtype == "fp32" and matrix and ops.tf32_share >= 0.5:
        dtype = "tf32"
    sec = modelled / 1e9
    ach_t = flops / sec / 1e12 if sec > 0 and flops > 0 else None
    fp32_peak = peak.tflops.get("fp32") if "*" not in peak.tflops else None
    if dtype == "fp32" and matrix and ops.tf32_share > 0 and ach_t and fp32_peak and ach_t > fp32_peak:
        dtype = "tf32"  # faster than FP32 CUDA cores can go: its TF32 kernels did the work, measure against TF32
    peak_t, _ = peak.for_dtype(dtype) if matrix else (None, "")
    ach_b = nbytes / sec / 1e9 if sec > 0 and nbytes > 0 else None
    intensity = flops / nbytes if nbytes > 0 and flops > 0 else None
    ridge_peak, _ = peak.for_dtype(dtype if matrix else (dtype or "fp32"))
    ridge = ridge_peak * 1e12 / (peak.bandwidth_gbs * 1e9) if ridge_peak and peak.bandwidth_gbs else None
    bound = None
    if intensity is not None and ridge is not None:
        bound = "compute" if intensity >= ridge else "memory"
    elif c in ("copy", "elementwise", "norm") and ach_b is not None:
        bound = "memory"
    return {
        "cls": c, "label": label, "time_ns": t, "share_pct": 100.0 * t / gpu_ns if gpu_ns else 0.0,
        "modelled_ns": modelled, "flops": flops_all, "modelled_flops": flops, "bytes": nbytes, "dtype": dtype,
        "achieved_tflops": ach_t, "achieved_gbs": ach_b,
        "peak_tflops": peak_t, "peak_label": peak.label(dtype) if matrix else (
            f"{peak.bandwidth_gbs:g} GB/s, {peak.gpu if peak.source != 'user' else 'given'}" if peak.bandwidth_gbs else "bandwidth unknown; pass --peak-bandwidth"),
        "pct_of_peak": 100.0 * ach_t / peak_t if ach_t and peak_t else None,
        "pct_of_bandwidth": 100.0 * ach_b / peak.bandwidth_gbs if ach_b and peak.bandwidth_gbs else None,
        "intensity": intensity, "ridge": ridge, "bound": bound,
    }


def _mfu_dtype(ops: _GpuOps, rows: list[dict[str, Any]]) -> str | None:
    """The dtype the MFU is measured in: the matrix ops' dominant one, TF32 where most FP32 matrix time is on TF32
    kernels or a class ran faster than FP32 CUDA cores can go."""
    dtype = _dominant_dtype(ops.matrix_all)
    if dtype == "fp32" and (ops.tf32_share >= 0.5 or any(r["dtype"] == "tf32" for r in rows if r["cls"] in MATRIX_CLASSES)):
        dtype = "tf32"
    return dtype


def _flops_source(settings: EfficiencySettings, matrix_all: pd.DataFrame, recorded: bool) -> str:
    """"user" (--model-flops-per-step), "recorded" (the compiler's per-op costs), "shapes", or "none"."""
    if settings.model_flops_per_step is not None:
        return "user"
    if len(matrix_all) and float(matrix_all["flops"].sum()) > 0:
        return "recorded" if recorded else "shapes"
    return "none"


def _flops_notes(source: str, fmt: InputFormat, shapes: bool, rows: list[dict[str, Any]], matrix_all: pd.DataFrame,
                 counts: OpCounts | None, peak: PeakChoice, notes: list[str]) -> dict[str, Any] | None:
    """What the figures rest on, said in ``notes``: why there are no FLOPs (the format's words), how much of the
    matrix work they cover and what they assumed, an unknown peak. Returns the coverage (None unless counted)."""
    if source == "none":
        if fmt.no_flops and not shapes:
            notes.append(fmt.no_flops)
        elif shapes:
            notes.append("shapes are recorded, but no matmul/convolution/attention op with a FLOPs model ran on the GPU")
    coverage = _coverage(rows, matrix_all) if source in COUNTED else None
    if coverage is not None and source == "recorded":
        coverage["by"] = fmt.op_costs
    if coverage is not None and coverage["pct"] is not None and coverage["pct"] < COVERAGE_NOTE_PCT:
        notes.append(f"{coverage_phrase(coverage)}: the rest is in kernels not tied to an op with "
                     + ("recorded shapes (no External id or launch record, a graph replay, or an op without a FLOPs model)"
                        if source == "shapes" else "a recorded cost"))
    if coverage is not None and coverage["unlinked_ops"]:
        notes.append(f"{coverage['unlinked_ops']:,} matrix op(s) with shapes launched no kernel the trace links to them; their "
                     f"{coverage['unlinked_flops'] / 1e9:,.1f} GFLOP are counted in the model FLOPs, not in the achieved rates")
    if counts is not None and counts.assumed:
        for what, n in counts.assumed.items():
            notes.append(f"{n:,} op(s): assumed {what}")
    if not peak.known:
        notes.append(f"{UNKNOWN_PEAK} ({peak.reason})" if peak.reason else UNKNOWN_PEAK)
    return coverage


def _step_frame(steps: pd.DataFrame, source: str, matrix_all: pd.DataFrame, settings: EfficiencySettings,
                peak_mfu: float | None) -> pd.DataFrame:
    """FLOPs, TFLOP/s and MFU per step (``STEP_COLUMNS``); empty without FLOPs or steps."""
    step_rows = []
    if len(steps) and source in (*COUNTED, "user"):  # without FLOPs no step has a figure
        if source in COUNTED:
            key = pd.DataFrame({"rank": matrix_all["rank"].to_numpy(), "step": matrix_all["step"].to_numpy(), "flops": matrix_all["flops"].to_numpy()})
            by = key.groupby(["rank", "step"])["flops"].sum()
        for r in steps.itertuples(index=False):
            if source in COUNTED:
                f = float(by.get((int(r.rank), int(r.step)), 0.0))
            elif source == "user":
                f = float(settings.model_flops_per_step)
            else:
                continue
            sec = r.dur_ns / 1e9
            tf = f / sec / 1e12 if sec > 0 else None
            step_rows.append({"rank": int(r.rank), "step": int(r.step), "dur_ns": int(r.dur_ns), "flops": f, "tflops": tf,
                              "mfu_pct": 100.0 * tf / peak_mfu if tf is not None and peak_mfu else None})
    return pd.DataFrame(step_rows, columns=STEP_COLUMNS) if step_rows else _NO_STEPS.copy()


def _window_mfu(source: str, act: pd.DataFrame, step_frame: pd.DataFrame, matrix_all: pd.DataFrame,
                settings: EfficiencySettings, peak_mfu: float | None, notes: list[str],
                ledger: "Callable[[], Any] | None" = None, marked: pd.DataFrame | None = None) -> tuple[float, float | None, str]:
    """(the model's FLOPs, the MFU over the steady steps' wall time, or the GPU window less its warm-up without
    steps, and what it is over when warm-up was left out ("" otherwise)); MFU None without FLOPs or a peak."""
    basis = ""
    if source in COUNTED:
        model_flops = float(matrix_all["flops"].sum())
        if len(step_frame) and step_frame["flops"].sum() > 0:
            counted, basis = _steady_steps(step_frame[step_frame["flops"] > 0], ledger, marked)
            # the wall time of the steps' work is the longer of the host's steps and the GPU's span for them: a
            # GPU-bound loop queues ahead, so its host steps end long before the GPU has done their work
            tot_ns = float(max(counted["dur_ns"].sum(), _device_span_ns(act, counted)))
            f_in = float(counted["flops"].sum())
        else:  # no steps: the GPU window of the trace, less its warm-up
            (tot_ns, basis), f_in = _steady_window(act, ledger), model_flops
    elif source == "user":
        model_flops = float(settings.model_flops_per_step) * max(len(step_frame), 1)
        if len(step_frame):
            counted, basis = _steady_steps(step_frame, ledger, marked)
            tot_ns, f_in = float(counted["dur_ns"].sum()), float(settings.model_flops_per_step) * len(counted)
        else:
            (tot_ns, basis), f_in = _steady_window(act, ledger), model_flops
            notes.append("the trace has no step markers: MFU is the given FLOPs for one step over the whole GPU window"
                         + (" less its warm-up" if basis else ""))
    else:
        model_flops, tot_ns, f_in = 0.0, 0.0, 0.0
    mfu = 100.0 * f_in / (tot_ns / 1e9) / 1e12 / peak_mfu if source != "none" and tot_ns > 0 and peak_mfu else None
    return model_flops, mfu, basis


def _steady_steps(steps: pd.DataFrame, ledger: "Callable[[], Any] | None", marked: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """The steps MFU is measured over: those that are not mostly warm-up (``steady.mostly_warmup``, the rule that
    counts the verdict's steady steps; ``marked``: the views' step markers, which carry the steps' times), with the
    phrase saying so; all of them when none or every one is."""
    if ledger is None or marked is None or not len(steps) or not len(marked):
        return steps, ""
    from traceinsight.derive.steady import mostly_warmup

    warm_rows = mostly_warmup(ledger().warmup, marked["rank"].to_numpy(), marked["start_ns"].to_numpy(np.int64),
                              marked["end_ns"].to_numpy(np.int64))
    if not warm_rows.any():
        return steps, ""
    big = np.int64(1 << 32)
    key = lambda f: f["rank"].to_numpy().astype(np.int64) * big + f["step"].to_numpy().astype(np.int64)  # noqa: E731
    warm = np.isin(key(steps), key(marked)[warm_rows])
    if not warm.any() or warm.all():
        return steps, ""
    k, n = int(warm.sum()), int((~warm).sum())
    return steps[~warm], f"over the {n} steady step{'s' if n != 1 else ''} ({k} warm-up step{'s' if k != 1 else ''} left out)"


def _steady_window(act: pd.DataFrame, ledger: "Callable[[], Any] | None") -> tuple[float, str]:
    """The GPU window MFU is measured over without steps: less the ledger's warm-up (one-time idle the verdict sets
    aside), as a share of the window when several devices' windows are summed in the ledger; the phrase saying so."""
    span = float(_window_ns(act))
    if ledger is None or span <= 0:
        return span, ""
    from traceinsight.vocab.buckets import WARMUP_BUCKET

    totals = ledger().totals()
    window = float(sum(totals.values()))
    warm = float(totals.get(WARMUP_BUCKET, 0))
    if warm <= 0 or window <= warm:
        return span, ""
    steady = span * (window - warm) / window
    return steady, f"over the steady state (the GPU window less {fmt_ns(int(round(span - steady)))} of warm-up)"


#: FLOPs sources counted per op (recorded shapes; XLA's own per-op cost analysis): their coverage is known.
COUNTED = ("shapes", "recorded")


def _recorded_counts(kernels: pd.DataFrame) -> OpCounts | None:
    """XPlane kernels that carry XLA's per-op cost (``op_flops``, ``op_bytes``) as ``OpCounts``: one "op" per such
    kernel, classed by its name (``work_classes``); None when no kernel carries it."""
    if "op_flops" not in kernels or not len(kernels):
        return None
    f = kernels["op_flops"].to_numpy(dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(f))
    if not len(idx):
        return None
    b = kernels["op_bytes"].to_numpy(dtype=np.float64)[idx] if "op_bytes" in kernels else np.full(len(idx), np.nan)
    start = kernels["start_ns"].to_numpy()[idx]
    dur = kernels["dur_ns"].to_numpy()[idx].astype(np.int64)
    ops = pd.DataFrame({
        "row": np.full(len(idx), -1, np.int64), "name": kernels["name"].astype(str).to_numpy()[idx],
        "cls": kernel_classes(kernels["name"])[idx], "flops": f[idx], "bytes": b, "dtype": np.full(len(idx), "", dtype=object),
        "assumed": np.full(len(idx), "", dtype=object), "rank": kernels["rank"].to_numpy()[idx],
        "step": kernels["step"].to_numpy()[idx] if "step" in kernels else np.full(len(idx), -1),
        "start_ns": start, "end_ns": start + dur, "kernel_ns": dur, "kernels": np.ones(len(idx), np.int64),
        "launches": np.ones(len(idx), np.int64),
    })
    kernel_op = np.full(len(kernels), -1, np.int64)
    kernel_op[idx] = np.arange(len(idx))
    return OpCounts(ops, kernel_op, False)


#: Below this share of the matrix classes' GPU time in kernels tied to ops with shapes, no MFU is headlined: the
#: FLOPs then describe a minority of the work (a HIP/CUDA-graph replay, kernels without launch records), and a
#: figure over the whole window would be off by the uncovered part.
MFU_MIN_COVERAGE_PCT = 50.0
#: Below this share a note says where the uncovered time is.
COVERAGE_NOTE_PCT = 90.0


def _coverage(rows: list[dict[str, Any]], matrix_all: pd.DataFrame) -> dict[str, Any]:
    """How much of the matrix work (GEMM, convolution, attention) the FLOPs cover: ``matrix_time_ns`` (their
    classes' GPU time), ``covered_ns`` (of it, kernels linked to an op with shapes), ``pct`` (None without matrix
    GPU time), ``model_flops``, ``unlinked_ops`` and ``unlinked_flops`` (leaf ops with shapes whose kernels the
    trace does not link to them: counted in the FLOPs, not in the rates)."""
    mx = [r for r in rows if r["cls"] in MATRIX_CLASSES]
    total = int(sum(int(r["time_ns"]) for r in mx))
    covered = int(sum(int(r["modelled_ns"]) for r in mx))
    unlinked = matrix_all[matrix_all["kernel_ns"].to_numpy() <= 0] if len(matrix_all) else matrix_all
    return {"matrix_time_ns": total, "covered_ns": covered, "pct": 100.0 * covered / total if total > 0 else None,
            "model_flops": float(matrix_all["flops"].sum()) if len(matrix_all) else 0.0,
            "unlinked_ops": int(len(unlinked)), "unlinked_flops": float(unlinked["flops"].sum()) if len(unlinked) else 0.0,
            "mfu_min_pct": MFU_MIN_COVERAGE_PCT}


def coverage_phrase(coverage: dict[str, Any] | None) -> str:
    """"shapes cover 65 % of matrix GPU time" (the figure every MFU carries), or "" when it does not apply."""
    if not coverage or coverage.get("pct") is None:
        return ""
    return f"{coverage.get('by', 'shapes')} cover {coverage['pct']:.0f} % of matrix GPU time"


def withheld_text(coverage: dict[str, Any], rows: list[dict[str, Any]], how: str = "record shapes") -> str:
    """The sentence that stands where the MFU would: how little the shapes cover, the achieved rate per matrix
    class on the covered part, and how to get a whole figure (``how``: the format's way to record shapes,
    ``InputFormat.record_shapes``)."""
    rates = [f"{r['label']} {r['achieved_tflops']:.1f} TFLOP/s" + (f" ({r['pct_of_peak']:.1f} % of peak)" if r.get("pct_of_peak") else "")
             for r in rows if r["cls"] in MATRIX_CLASSES and r.get("achieved_tflops")]
    if coverage.get("pct") is None:  # FLOPs of ops whose kernels are not linked, and no matrix-class kernel time at all
        text = ("MFU unknown: no GEMM/convolution/attention kernel time is tied to an op with shapes (the kernels that ran "
                "are not linked to the ops, e.g. a graph replay)")
    else:
        text = (f"MFU unknown: {coverage_phrase(coverage)} ({fmt_ns(coverage['covered_ns'])} of {fmt_ns(coverage['matrix_time_ns'])}), "
                f"under the {MFU_MIN_COVERAGE_PCT:.0f} % an MFU needs")
    if rates:
        text += f"; on the covered part: {', '.join(rates)}"
    return text + f". For MFU, {how}, or pass --model-flops-per-step"


TOP_OPS = 15

#: An op's FLOPs are believed while its kernels' achieved rate stays under the device's fastest dense peak × this
#: (structured sparsity doubles a datasheet figure); past it the recorded shapes are wrong, not the GPU fast.
FLOPS_MARGIN = 2.0
#: The rate bound where the peak is unknown: no device computes 10^17 FLOP/s (100 PFLOP/s).
MAX_FLOPS_RATE = 1e17


def plausible_flops(counts: OpCounts, peak: PeakChoice, notes: list[str]) -> OpCounts:
    """``counts`` without the FLOPs no GPU could compute: an op whose FLOPs (from ``Input Dims``) over its kernels'
    time exceed the peak (``FLOPS_MARGIN``, ``MAX_FLOPS_RATE``), or whose FLOPs are not finite, keeps its class but
    loses its FLOPs, bytes and modelled time, so MFU and achieved TFLOP/s count only believable work; a note says
    how many and why (a shape of 10^12 gave an MFU of 10^27 %)."""
    ops = counts.ops
    if not len(ops):
        return counts
    fastest = max((float(v) for v in peak.tflops.values()), default=0.0) * 1e12 * FLOPS_MARGIN
    bound = min(fastest, MAX_FLOPS_RATE) if fastest > 0 else MAX_FLOPS_RATE
    flops = ops["flops"].to_numpy(dtype=np.float64)
    ns = ops["kernel_ns"].to_numpy(dtype=np.float64)
    with np.errstate(all="ignore"):
        rate = flops / (ns / 1e9)
        bad = ~np.isfinite(flops) | (flops < 0) | ((ns > 0) & (rate > bound))
    if not bad.any():
        return counts
    ops = ops.copy()
    for col in ("flops", "bytes", "kernel_ns"):
        if col in ops.columns:
            ops.loc[bad, col] = 0
    where = f"{bound / 1e12:,.0f} TFLOP/s" + (f" ({FLOPS_MARGIN:g}× {peak.gpu or 'the given'} peak)" if fastest > 0 and fastest <= MAX_FLOPS_RATE else "")
    notes.append(f"{int(bad.sum()):,} op(s) left out of FLOPs and MFU: their recorded shapes give more than {where}, faster than "
                 "the GPU computes (implausible input dims)")
    from dataclasses import replace

    return replace(counts, ops=ops)

#: The columns of ``Efficiency.classes`` and ``Efficiency.steps``.
CLASS_COLUMNS = ["cls", "label", "time_ns", "share_pct", "modelled_ns", "flops", "modelled_flops", "bytes", "dtype", "achieved_tflops", "achieved_gbs",
                 "peak_tflops", "peak_label", "pct_of_peak", "pct_of_bandwidth", "intensity", "ridge", "bound", "link_gbs", "device_gbs"]
STEP_COLUMNS = ["rank", "step", "dur_ns", "flops", "tflops", "mfu_pct"]
#: ``steps`` without a row, copied for each view (a copy costs a twentieth of building it).
_NO_STEPS = pd.DataFrame([], columns=STEP_COLUMNS)


def _top_ops(events: pd.DataFrame, matrix: pd.DataFrame, peak: PeakChoice, mfu_dtype: str | None) -> pd.DataFrame | None:
    """The matrix ops that take the most kernel time, one row per (op, input shapes, dtype): ``op``, ``cls``,
    ``input_dims`` (compact JSON), ``dtype``, ``count``, ``gflop`` (per call), ``kernel_ns``, ``tflops``,
    ``pct_of_peak`` (the dtype's dense peak; FP32 as TF32 where the view measured TF32)."""
    if matrix is None or not len(matrix) or "input_shapes" not in events:
        return None
    dims = events["input_shapes"].to_numpy()[matrix["row"].to_numpy()]
    frame = pd.DataFrame({"op": matrix["name"].to_numpy(), "cls": matrix["cls"].to_numpy(), "dims": dims,
                          "dtype": matrix["dtype"].to_numpy(), "flops": matrix["flops"].to_numpy(),
                          "kernel_ns": matrix["kernel_ns"].to_numpy()})
    frame["dims"] = frame["dims"].astype(object).where(frame["dims"].notna(), "")
    g = frame.groupby(["op", "cls", "dims", "dtype"], sort=False).agg(count=("flops", "size"), flops=("flops", "sum"),
                                                                      kernel_ns=("kernel_ns", "sum")).reset_index()
    g = g.sort_values("kernel_ns", ascending=False).head(TOP_OPS).reset_index(drop=True)
    g["input_dims"] = [_compact_dims(d) for d in g["dims"]]
    g["gflop"] = g["flops"] / g["count"] / 1e9
    g["tflops"] = g["flops"] / (g["kernel_ns"] / 1e9) / 1e12
    peaks = [peak.for_dtype("tf32" if d == "fp32" and mfu_dtype == "tf32" else d)[0] for d in g["dtype"]]
    g["pct_of_peak"] = [100.0 * t / p if p else None for t, p in zip(g["tflops"], peaks)]
    return g[["op", "cls", "input_dims", "dtype", "count", "gflop", "kernel_ns", "tflops", "pct_of_peak"]]


def _compact_dims(text: Any) -> str:
    """"[[8944, 1024], [1024, 1024]]" from the recorded (pretty-printed) JSON text, scalars' [] left out."""
    import json

    try:
        dims = json.loads(str(text))
    except ValueError:
        return str(text)[:160]
    if isinstance(dims, list):
        dims = [d for d in dims if d != []]
    return json.dumps(dims, separators=(", ", ": "))[:160]


def _hardware(samples: pd.DataFrame, views: Any, kernels: pd.DataFrame, cls: np.ndarray) -> pd.DataFrame | None:
    """Mean of each sampled metric over scopes: ``all`` samples, ``busy`` (a kernel, copy or memset running on the
    sample's GPU), each kernel class (the kernel running at the sample: with concurrent streams, the latest started),
    and ``step N`` (samples inside the step, on any rank's clock)."""
    if samples is None or samples.empty:
        return None
    t = samples["start_ns"].to_numpy()
    dev = samples["device"].to_numpy()
    busy = np.zeros(len(samples), dtype=bool)
    label = np.full(len(samples), "", dtype=object)
    b = views.busy
    for d in np.unique(dev):
        here = dev == d
        bb = b[b["device"].to_numpy() == d]
        if len(bb):
            s0, e0 = bb["start_ns"].to_numpy(), bb["end_ns"].to_numpy()
            i = np.searchsorted(s0, t[here], side="right") - 1
            busy[here] = (i >= 0) & (t[here] < e0[np.clip(i, 0, None)])
        on = kernels["device"].to_numpy() == d
        if on.any():
            ks = kernels["start_ns"].to_numpy()[on]
            ke = ks + kernels["dur_ns"].to_numpy()[on]
            kc = np.asarray(cls, dtype=object)[on]
            order = np.argsort(ks, kind="stable")
            ks, ke, kc = ks[order], ke[order], kc[order]
            j = np.searchsorted(ks, t[here], side="right") - 1
            inside = (j >= 0) & (t[here] < ke[np.clip(j, 0, None)])
            lab = np.where(inside, kc[np.clip(j, 0, None)], "")
            label[here] = [CLASSES.get(c, c) if c else "" for c in lab]
    frame = pd.DataFrame({"metric": samples["metric"].astype(str).to_numpy(), "value": samples["value"].to_numpy()})
    parts = [frame.assign(scope="all"), frame[busy].assign(scope="busy")]
    parts.append(frame.assign(scope=label)[label != ""])
    steps = views.steps
    if len(steps):
        st = steps.drop_duplicates("step").sort_values("start_ns")
        k = np.searchsorted(st["start_ns"].to_numpy(), t, side="right") - 1
        ok = (k >= 0) & (t < st["end_ns"].to_numpy()[np.clip(k, 0, None)])
        names = np.array([f"step {int(x)}" for x in st["step"].to_numpy()], dtype=object)
        parts.append(frame[ok].assign(scope=names[k[ok]]))
    allp = pd.concat(parts, ignore_index=True)
    out = allp.groupby(["scope", "metric"], sort=False)["value"].agg(mean_pct="mean", samples="size").reset_index()
    return out


def _int_sums(keys: np.ndarray, values: np.ndarray) -> dict[Any, int]:
    """Exact int64 sums of ``values`` per distinct key (``pd.Series(values).groupby(keys).sum()`` as a dict)."""
    # grouped by hashing (the keys are a few class names over 10^6 kernels: sorting them as Python strings costs
    # several times more), summed exactly in int64
    inv, uniq = pd.factorize(keys, use_na_sentinel=False)
    sums = np.zeros(len(uniq), np.int64)
    np.add.at(sums, inv, values.astype(np.int64, copy=False))
    return dict(zip(uniq.tolist(), sums.tolist()))


def _device_span_ns(act: pd.DataFrame, steps: pd.DataFrame) -> int:
    """Per rank, from the first GPU row launched in one of ``steps`` (rank, step) to the last one's end; the longest
    over ranks (they run in parallel). GPU rows carry the step their launch ran in."""
    if act.empty or steps.empty or "step" not in act.columns:
        return 0
    key = act["rank"].to_numpy().astype(np.int64) * (1 << 32) + act["step"].to_numpy().astype(np.int64)
    want = steps["rank"].to_numpy().astype(np.int64) * (1 << 32) + steps["step"].to_numpy().astype(np.int64)
    m = np.isin(key, want)
    if not m.any():
        return 0
    rank = act["rank"].to_numpy()[m]
    start = act["start_ns"].to_numpy()[m].astype(np.int64)
    end = start + act["dur_ns"].to_numpy()[m].astype(np.int64)
    best = 0
    for r in np.unique(rank):
        on = rank == r
        best = max(best, int(end[on].max() - start[on].min()))
    return best


def _window_ns(act: pd.DataFrame) -> int:
    if act.empty:
        return 0
    s = act["start_ns"].to_numpy()
    return int((s + act["dur_ns"].to_numpy()).max() - s.min())


def _dominant_dtype(ops: pd.DataFrame) -> str | None:
    if ops is None or not len(ops):
        return None
    w = ops.groupby("dtype")["flops"].sum()
    w = w[w.index != ""]
    if w.empty or w.max() <= 0:
        b = ops.groupby("dtype")["bytes"].sum()
        b = b[b.index != ""]
        return str(b.idxmax()) if len(b) else None
    return str(w.idxmax())


def _tf32_share(kernels: pd.DataFrame, counts: OpCounts) -> float:
    """Of the kernel time of FP32 matrix ops, the share in kernels whose names say tensor cores (TF32)."""
    if not len(counts.ops) or not len(kernels):
        return 0.0
    hit = counts.kernel_op >= 0
    op = counts.kernel_op[hit]
    ops = counts.ops
    fp32m = (ops["dtype"].to_numpy() == "fp32") & np.isin(ops["cls"].to_numpy(), MATRIX_CLASSES)
    sel = fp32m[op]
    if not sel.any():
        return 0.0
    names = kernels["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # one regex test per distinct name
        per = np.array([bool(TF32_KERNEL.search(str(c))) for c in names.cat.categories] + [False])
        codes = names.cat.codes.to_numpy()
        tc_all = per[np.where(codes >= 0, codes, len(per) - 1)]
    else:
        tc_all = np.array([bool(TF32_KERNEL.search(str(n))) for n in names], dtype=bool)
    tc = tc_all[hit][sel]
    dur = kernels["dur_ns"].to_numpy()[hit][sel].astype(float)
    return float(dur[tc].sum() / dur.sum()) if dur.sum() > 0 else 0.0
