"""TI004: a recurrent layer runs timestep by timestep in small kernels instead of one cuDNN call."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.derive.tf_signals import recurrent_loop_signature

from traceinsight.vocab.intervals import Coverage, merge_intervals
from traceinsight.vocab.masks import category_hits, name_mask
from traceinsight.rulelib.names import kind_mask

CUDNN_KERNEL = re.compile(r"RNN_blockPersist|persistRNN|elemWiseRNNcell|LSTM_elementWise|GRU_elementWise|RNN_elementWise|GENERIC_elementWise|cudnn::rnn|miopen.*rnn", re.I)
CUDNN_OP = re.compile(r"aten::_cudnn_rnn|aten::miopen_rnn|CudnnRNN|CudnnRnnBackward")
CELL_KERNEL = re.compile(r"lstm_cell_forward|gru_cell_forward|lstm_cell_backward|gru_cell_backward")
CELL_OP = re.compile(r"^aten::(_thnn_fused_lstm_cell|_thnn_fused_gru_cell|lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell)$|^ThnnFused(Lstm|Gru)CellBackward")
#: aten::lstm/gru run as a whole layer; fallback when neither cuDNN nor oneDNN executes it underneath.
LAYER_OP = re.compile(r"^aten::(lstm|gru|rnn_tanh|rnn_relu)$")
LAYER_BACKEND = re.compile(r"^aten::(_cudnn_rnn|miopen_rnn|mkldnn_rnn_layer)")
#: TensorFlow generic RNN: ops of a while-loop body under an RNN layer scope (Keras 3) or standard_lstm (Keras 2).
TF_WHILE = re.compile(r"(^|/)while(_\d+)?/body/.*(lstm|gru|rnn)|(lstm|gru|rnn)[^/]*/while(_\d+)?/body/|^while(_\d+)?/body/_\d+/while/(MatMul|BiasAdd|Sigmoid|Tanh|Relu|Mul|AddV2|Split)(_\d+)?(:|$)", re.I)
TF_TIMESTEP = re.compile(r"/(MatMul)(_1)?(:|$)")


@dataclass
class RnnDetection:
    """What a timeline says about recurrent layers (PyTorch ops/kernels, TF op names)."""

    cudnn_kernels: int = 0
    cudnn_ops: int = 0
    cell_ops: int = 0  # one per timestep per layer (forward) for PyTorch cells
    cell_kernels: int = 0
    fallback_layer_ops: int = 0  # aten::lstm/gru with no cuDNN/oneDNN underneath
    tf_loop_ops: int = 0
    tf_timesteps: int = 0
    fallback_names: dict[str, int] = field(default_factory=dict)
    fallback_rows: pd.Index = field(default_factory=lambda: pd.Index([]))  # host rows marking the recurrent region

    @property
    def cudnn(self) -> bool:
        return self.cudnn_kernels > 0 or self.cudnn_ops > 0

    @property
    def timesteps(self) -> int:
        return max(self.cell_ops, self.cell_kernels, self.tf_timesteps)

    @property
    def fallback(self) -> bool:
        return self.cell_ops > 0 or self.cell_kernels > 0 or self.fallback_layer_ops > 0 or self.tf_loop_ops > 0


def _counts(codes: np.ndarray, rows, wanted: np.ndarray) -> np.ndarray:
    """Per name code, how many of the ``rows()`` mask's rows carry it, counted for the ``wanted`` codes (others
    read 0; they are never looked at). A few codes are compared one by one; many are counted all at once."""
    out = np.zeros(len(wanted), np.int64)
    want = np.flatnonzero(wanted)
    if not len(want):
        return out
    mask = rows()
    if len(want) > 16:
        return np.bincount(codes[mask & (codes >= 0)], minlength=len(wanted))
    tmp = np.empty(len(codes), dtype=bool)
    for c in want:
        np.equal(codes, c, out=tmp)
        tmp &= mask
        out[c] = np.count_nonzero(tmp)
    return out


def _may_fall_back(names: pd.Series) -> bool:
    """False when no name in the trace's name categories is a cell op, a cell kernel, a recurrent layer or a TF
    while loop: then ``detect_rnn`` can find no fallback (each test is cached per set of categories, so the rules
    that ask about the same names share it). True, to be decided by ``detect_rnn``, otherwise."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return True
    cats = names.cat.categories
    return any(category_hits(cats, p).any() for p in (CELL_OP, CELL_KERNEL, LAYER_OP, TF_WHILE))


def detect_rnn(events: pd.DataFrame) -> RnnDetection:
    """Finds cuDNN and generic (per-timestep) recurrent execution by name; used by the rule and by tests.

    Counted per distinct name: each pattern is tested once per name, and the rows are counted per name code
    (host and kernel rows apart), so no row mask is built unless a fallback needs its rows.
    """
    det = RnnDetection()
    if events.empty:
        return det
    names = events["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, cats = names.cat.codes.to_numpy(), names.cat.categories  # the small codes as they are
    else:
        codes, cats = pd.factorize(names.to_numpy())
    n = len(cats)

    def hit(pattern: re.Pattern) -> np.ndarray:
        return np.fromiter((pattern.search(str(c)) is not None for c in cats), dtype=bool, count=n)

    cudnn_kernel_cat, cudnn_op_cat, cell_cat = hit(CUDNN_KERNEL), hit(CUDNN_OP), hit(CELL_OP)
    cell_kernel_cat = hit(CELL_KERNEL) & hit(re.compile("forward"))
    layer_cat, tf_cat = hit(LAYER_OP), hit(TF_WHILE)
    is_host = events["device"].to_numpy() < 0
    # rows are counted only for the names some test below reads (usually none: then no pass over the rows)
    k_count = _counts(codes, lambda: kind_mask(events, "kernel"), cudnn_kernel_cat | cell_kernel_cat)
    h_count = _counts(codes, lambda: is_host, cudnn_op_cat | cell_cat | layer_cat | tf_cat)

    def rows(cat_mask: np.ndarray) -> np.ndarray:  # host rows whose name is one of cat_mask
        return is_host & np.append(cat_mask, False)[codes]

    det.cudnn_kernels = int(k_count[cudnn_kernel_cat].sum())
    det.cudnn_ops = int(h_count[cudnn_op_cat].sum())
    # only the outermost cell op counts a timestep (aten::lstm_cell contains aten::_thnn_fused_lstm_cell on CUDA)
    outer_cat = cell_cat & hit(re.compile(r"^aten::(lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell)$"))
    inner_cat = cell_cat & ~outer_cat
    n_outer = int(h_count[outer_cat].sum())
    det.cell_ops = n_outer if n_outer else int(h_count[inner_cat & hit(re.compile(r"^aten::_thnn"))].sum())
    det.cell_kernels = int(k_count[cell_kernel_cat].sum())
    layer_fb = pd.Index([])
    if h_count[layer_cat].any():
        backend = events[rows(hit(LAYER_BACKEND))]
        lay = events[rows(layer_cat)]
        has_backend = np.zeros(len(lay), bool)
        if not backend.empty:
            from traceinsight.rulelib.enclosing import innermost_enclosing

            enc = innermost_enclosing(backend, lay)
            has_backend = lay.index.isin([e for e in pd.unique(enc[pd.notna(enc)])])
        det.fallback_layer_ops = int((~has_backend).sum())
        layer_fb = lay.index[~has_backend]
    det.tf_loop_ops = int(h_count[tf_cat].sum())
    if det.tf_loop_ops:
        det.tf_timesteps = int(h_count[tf_cat & hit(TF_TIMESTEP)].sum())
        # LSTM/GRU bodies run two MatMuls per step (input and recurrent); count steps, not GEMMs
        det.tf_timesteps = max(det.tf_timesteps // 2, 1)
    if h_count[cell_cat | tf_cat].any() or len(layer_fb):
        fb = rows(cell_cat | tf_cat)
        if len(layer_fb):
            fb = fb | events.index.isin(layer_fb)
        det.fallback_rows = events.index[fb]
        det.fallback_names = {str(k): int(v) for k, v in events.loc[fb, "name"].astype(str).value_counts().head(8).items()}
    return det


class RnnCudnnFallback(Rule):
    code = "TI004"
    what_if = "rnn_to_cudnn"  # the what-if transform that models this rule's fix
    category = "compute"
    name = "rnn-cudnn-fallback"
    severity = Severity.WARNING
    summary = "A recurrent layer (LSTM/GRU) runs as a per-timestep loop of small kernels instead of the fused cuDNN kernel."
    why = """
    cuDNN runs a whole LSTM/GRU layer over the sequence in a handful of (often persistent) kernels. The generic
    path launches 2 GEMMs and a few elementwise kernels per timestep, strictly in sequence, each a few µs long:
    the GPU waits for the host between every one of them, and recurrent layers get 3-10x slower. Keras falls back
    silently when a layer argument is outside cuDNN's support; PyTorch falls back for `nn.LSTMCell` loops and when
    cuDNN is disabled or the dtype unsupported.
    """
    definition = """
    cuDNN is *recognised* when a kernel name contains `RNN_blockPersist`, `persistRNN`, `elemWiseRNNcell`,
    `LSTM_elementWise`, `GRU_elementWise` (mangled `_Z...` names included) or an op is `aten::_cudnn_rnn` /
    `CudnnRNN*`. The *fallback* is recognised by PyTorch cell ops (`aten::lstm_cell`, `aten::gru_cell`,
    `aten::_thnn_fused_lstm_cell`, `aten::_thnn_fused_gru_cell`), their kernels (`lstm_cell_forward`,
    `gru_cell_forward`), `aten::lstm`/`aten::gru` ops with no cuDNN/oneDNN op inside, or TensorFlow ops of a
    `while/body` loop under an LSTM/GRU/RNN scope (Keras 3) or Keras 2's `standard_lstm` body
    (`while/body/.../MatMul`, `BiasAdd`, `Sigmoid`, `Tanh`).

    A finding is made when the trace has GPU activity, no cuDNN RNN is recognised, and at least `min_timesteps`
    (default **4**) timesteps of fallback execution are seen. The *recurrent region* is, per host thread and step,
    the time from the first to the last fallback op, extended over the step's backward pass when that pass is
    per-timestep too (at least as many autograd nodes after the region as the loop had timesteps); on a trace
    without framework ops (an Nsight capture) it is the span of the host's launch calls of the cell kernels. The
    impact is the GPU idle time inside that region (what a
    single cuDNN call, which keeps the GPU busy, would remove). There is no peer rule: TensorBoard's kernel stats
    only mark `CudnnRNN` ops as Tensor-Core eligible, and say nothing of the layers that did not get cuDNN.

    **Host-only TensorFlow traces** (recorded without a GPU) have every Keras RNN in the generic loop, so the rule
    instead reads each forward loop body: 3 sigmoid + 2 activation ops per timestep make an LSTM, 2 + 1 a GRU;
    `Relu` instead of `Tanh` means `activation="relu"`; more than 2 MatMuls per LSTM timestep means
    `recurrent_dropout > 0`; recurrent MatMuls inside a GRU body mean `reset_after=False`. Layers that would not get
    cuDNN on a GPU give a warning; layers that would get it give an info finding saying so.
    """
    fix_pytorch = Fix(
        "Run the layer over the whole sequence with `nn.LSTM`/`nn.GRU` (not an `nn.LSTMCell` Python loop), keep "
        "`torch.backends.cudnn.enabled = True`, use float32/float16 inputs on the GPU (bf16 lacks persistent "
        "kernels), call `flatten_parameters()` after moving or wrapping the module, pack variable-length batches, "
        "and keep recurrent modules out of `torch.compile` (it unrolls them into tiny GEMMs). At very small batch "
        "sizes the CPU can beat the GPU for such layers; measure before moving them.",
        """
        # bad: one cell launch chain per timestep
        cell = nn.LSTMCell(256, 512).cuda()
        for t in range(x.size(0)):
            h, c = cell(x[t], (h, c))

        # good: one cuDNN call for the whole sequence
        lstm = nn.LSTM(256, 512, batch_first=False).cuda()
        lstm.flatten_parameters()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, (h, c) = lstm(packed)
        """,
    )
    fix_tensorflow = Fix(
        "Keras uses the cuDNN kernel only with activation='tanh', recurrent_activation='sigmoid', "
        "recurrent_dropout=0, unroll=False, use_bias=True, (GRU) reset_after=True, and no mask or a right-padded "
        "mask, when running eagerly-built on a GPU. Keras 3 falls back silently: pass use_cudnn=True so it raises "
        "instead. At small batch sizes the CPU can be faster than the GPU for these layers.",
        """
        layer = tf.keras.layers.LSTM(
            512, activation="tanh", recurrent_activation="sigmoid",
            recurrent_dropout=0.0, unroll=False, use_bias=True,
            use_cudnn=True,            # Keras 3: fail loudly instead of falling back
        )
        gru = tf.keras.layers.GRU(512, reset_after=True)
        """,
    )
    fix_jax = Fix(
        "Run the recurrence as one compiled loop: `jax.lax.scan` over the time steps inside `jax.jit`, not a Python "
        "loop of cell calls; batch sequences together so each step's matmul is large, and at very small batch sizes "
        'measure the CPU.',
        """
        def cell(carry, x_t):
            h, c = lstm_cell(params, carry, x_t)
            return (h, c), h

        (h, c), ys = jax.lax.scan(cell, (h0, c0), xs)     # one loop, compiled once
        """,
    )

    fix_cuda = Fix(
        "Run the recurrence as one cuDNN call over the whole sequence (`cudnnRNNForward` with every timestep in one "
        "`cudnnRNNDataDescriptor_t`), or keep the time loop inside one persistent kernel, instead of launching the "
        "cell's kernels once per timestep from the host.",
        """
        cudnnRNNForward(handle, rnn_desc, CUDNN_FWD_MODE_TRAINING, dev_seq_lengths,
                        x_desc, x, y_desc, y, h_desc, hx, hy, c_desc, cx, cy,
                        weight_space_bytes, weight_space, work_space_bytes, work_space,
                        reserve_space_bytes, reserve_space);   // all timesteps in one call
        """,
    )

    min_timesteps = Option(4, "Fallback execution must cover at least this many timesteps to be reported.", min=1)

    def check(self, ctx):
        v = ctx.views
        if v.gpu_activity.empty:
            # A host-only TensorFlow trace (recorded on the CPU): every Keras RNN runs the generic loop there, so
            # the question becomes whether the layer *would* get cuDNN on a GPU, read from its loop body's ops.
            yield from self._host_only_keras(ctx)
            return
        if not _may_fall_back(ctx.events["name"]):
            return
        det = detect_rnn(ctx.events)
        if det.cudnn or not det.fallback or det.timesteps < self.min_timesteps:
            return
        ev = ctx.events
        rows = ev.loc[det.fallback_rows, ["rank", "pid", "tid", "step", "start_ns", "dur_ns"]]
        names_seen = dict(det.fallback_names)
        if rows.empty:
            # kernels only (an Nsight capture has no framework ops): the region is where the host launched them
            rows, names_seen = _cell_kernel_launches(v.launches, ev)
            if rows.empty:
                return
        rows = rows.assign(end_ns=rows["start_ns"] + rows["dur_ns"])
        regions = rows.groupby(["rank", "pid", "tid", "step"]).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), ops=("dur_ns", "size")).reset_index()
        regions = _with_backward(ev, regions, det.timesteps)
        regions["dur_ns"] = regions["end_ns"] - regions["start_ns"]
        # GPU work launched inside the region and GPU busy time inside it
        ln = v.launches
        busy = v.busy
        kernels_in = np.zeros(len(regions), np.int64)
        busy_in = np.zeros(len(regions), np.int64)
        for rank in regions["rank"].unique():
            m = (regions["rank"] == rank).to_numpy()
            b = busy[busy["rank"] == rank]
            cov = Coverage(b["start_ns"].to_numpy(), b["end_ns"].to_numpy())
            busy_in[m] = cov.overlap(regions["start_ns"].to_numpy()[m], regions["end_ns"].to_numpy()[m])
            if not ln.empty:
                ls = np.sort(ln.loc[(ln["rank"] == rank) & (ln["kind"] == "kernel"), "launch_start_ns"].to_numpy())
                kernels_in[m] = np.searchsorted(ls, regions["end_ns"].to_numpy()[m]) - np.searchsorted(ls, regions["start_ns"].to_numpy()[m])
        regions["kernels"] = kernels_in
        regions["gpu_busy_ns"] = busy_in
        # the totals over the union of the regions per rank: the forward's thread and autograd's backward thread
        # run recurrent regions that overlap in time, and summed they outlast the trace
        region_ns = idle_ns = n_kernels = union_busy = 0
        for rank in regions["rank"].unique():
            m = (regions["rank"] == rank).to_numpy()
            us, ue = merge_intervals(regions["start_ns"].to_numpy()[m], regions["end_ns"].to_numpy()[m])
            b = busy[busy["rank"] == rank]
            in_busy = int(Coverage(b["start_ns"].to_numpy(), b["end_ns"].to_numpy()).overlap(us, ue).sum())
            region_ns += int((ue - us).sum())
            union_busy += in_busy
            idle_ns += int((ue - us).sum()) - in_busy
            if not ln.empty:
                ls = np.sort(ln.loc[(ln["rank"] == rank) & (ln["kind"] == "kernel"), "launch_start_ns"].to_numpy())
                n_kernels += int((np.searchsorted(ls, ue) - np.searchsorted(ls, us)).sum())
        steps = det.timesteps
        per_step = n_kernels / steps if steps else 0.0
        busy_pct = 100.0 * union_busy / max(region_ns, 1)
        top = regions.nlargest(10, "dur_ns")
        evidence = pd.DataFrame(
            {
                "step": top["step"].to_numpy(),
                "thread": top["tid"].to_numpy(),
                "start_ms": top["start_ns"].to_numpy() / 1e6,
                "region_ms": top["dur_ns"].to_numpy() / 1e6,
                "fallback_ops": top["ops"].to_numpy(),
                "kernels": top["kernels"].to_numpy(),
                "gpu_busy_pct": (100.0 * top["gpu_busy_ns"] / top["dur_ns"].clip(lower=1)).round(1).to_numpy(),
            }
        )
        names = ", ".join(f"{n} ×{c}" for n, c in list(names_seen.items())[:4])
        ranks = sorted(int(r) for r in regions["rank"].unique())
        yield ctx.finding(
            title=f"RNN runs per timestep without cuDNN: {steps} timesteps, {per_step:.1f} kernels each",
            message=(
                f"No cuDNN RNN kernel or op was found, but {steps} timesteps of a generic recurrent loop were ({names}). "
                f"The recurrent region lasts {fmt_ns(region_ns)}; it launched {n_kernels} kernels "
                f"(~{per_step:.1f} per timestep) and kept the GPU busy only {busy_pct:.0f} % of that time, "
                f"so {fmt_ns(idle_ns)} of GPU idle is spent between the per-timestep kernels."
            ),
            impact_ns=idle_ns,
            evidence=evidence,
            instances=regions[["start_ns", "end_ns", "rank"]].assign(label="recurrent region").sort_values("start_ns"),
            location=Location(rank=ranks[0] if len(ranks) == 1 else None),
            metrics={
                "cudnn_recognised": False,
                "timesteps": steps,
                "kernels_per_timestep": round(per_step, 2),
                "recurrent_region_ns": region_ns,
                "gpu_busy_pct_in_region": round(busy_pct, 2),
                "fallback_ops": det.fallback_names,
                "cell_ops": det.cell_ops,
                "cell_kernels": det.cell_kernels,
                "tf_loop_ops": det.tf_loop_ops,
            },
            key="rnn-fallback",
        )

    def _host_only_keras(self, ctx):
        sig = recurrent_loop_signature(ctx.timeline)
        if sig.empty:
            return
        fw = sig[(sig["direction"] == "forward") & (sig["iterations"] >= self.min_timesteps)]
        if fw.empty:
            return
        verdicts = [_keras_eligibility(r) for r in fw.itertuples(index=False)]
        evidence = pd.DataFrame(
            {
                "layer": [r.layer or "(unnamed)" for r in fw.itertuples(index=False)],
                "cell": [cell for cell, _ in verdicts],
                "timesteps": fw["iterations"].to_numpy(),
                "matmul_per_timestep": fw["matmul_per_iteration"].round(1).to_numpy(),
                "tanh": fw["tanh"].to_numpy(),
                "relu": fw["relu"].to_numpy(),
                "cudnn_eligible": [not reasons for _, reasons in verdicts],
                "why_not": ["; ".join(reasons) or "-" for _, reasons in verdicts],
            }
        )
        blocked = evidence[~evidence["cudnn_eligible"]]
        if blocked.empty:
            yield ctx.finding(
                title="Keras RNN ran as a while loop on the CPU; its arguments are cuDNN-eligible",
                message=(
                    f"This is a host-only trace: {len(evidence)} recurrent layer(s) ran the generic per-timestep "
                    "loop, as every Keras RNN does without a GPU. Their loop bodies show the cuDNN-compatible "
                    "configuration (tanh activation, sigmoid gates, no recurrent dropout), so on a GPU they would use "
                    "the fused cuDNN kernel. Nothing to change for cuDNN; at small batch sizes the CPU may even be faster."
                ),
                severity=Severity.INFO,
                evidence=evidence,
                metrics={"host_only": True, "layers": int(len(evidence)), "ineligible_layers": 0},
                key="keras-host-only-eligible",
            )
            return
        reasons = sorted({r for _, rs in verdicts for r in rs})
        yield ctx.finding(
            title=f"Keras RNN will not use cuDNN on a GPU: {'; '.join(reasons)}",
            message=(
                f"This is a host-only trace, but the loop bodies of {len(blocked)} of {len(evidence)} recurrent "
                f"layer(s) show arguments outside cuDNN's support ({'; '.join(reasons)}). On a GPU those layers "
                "would run the same per-timestep loop of small kernels instead of one fused cuDNN call, typically "
                "3-10x slower, and Keras 3 does not warn about it."
            ),
            evidence=evidence,
            metrics={"host_only": True, "layers": int(len(evidence)), "ineligible_layers": int(len(blocked)), "reasons": reasons},
            key="keras-host-only-ineligible",
        )


#: Autograd nodes: the backward pass of a training step.
_BACKWARD = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function")


def _cell_kernel_launches(ln: pd.DataFrame, events: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The launch calls of per-timestep cell kernels (rank, pid, tid, step, start_ns, dur_ns), and the kernels'
    names with their counts: the recurrent region of a trace without framework ops, where the host side is only
    runtime calls."""
    cols = ["rank", "pid", "tid", "step", "start_ns", "dur_ns"]
    if ln.empty:
        return pd.DataFrame(columns=cols), {}
    k = ln[kind_mask(ln, "kernel") & name_mask(ln["gpu_name"], CELL_KERNEL)]
    if k.empty:
        return pd.DataFrame(columns=cols), {}
    step = events["step"].reindex(k["launch_idx"].to_numpy()).fillna(-1).to_numpy(np.int64)
    rows = pd.DataFrame({"rank": k["rank"].to_numpy(), "pid": k["pid"].to_numpy(), "tid": k["tid"].to_numpy(), "step": step,
                         "start_ns": k["launch_start_ns"].to_numpy(np.int64), "dur_ns": k["launch_dur_ns"].to_numpy(np.int64)})
    counts = k["gpu_name"].astype(str).value_counts()
    return rows, {str(n): int(c) for n, c in counts.items()}


def _with_backward(events: pd.DataFrame, regions: pd.DataFrame, timesteps: int) -> pd.DataFrame:
    """Extend each forward region over its step's backward pass when that pass is itself per-timestep.

    The backward of a timestep loop replays the loop in reverse, one small chain of kernels per timestep, so it
    belongs to the same fallback. It is taken as the step's autograd nodes after the region ended, and only when
    the step has at least as many of them as the loop had timesteps (a per-timestep backward, not one fused node).
    """
    host = events[(events["device"].to_numpy() < 0) & (events["kind"] == "cpu_op").to_numpy()]
    bw = host[name_mask(host["name"], _BACKWARD)]
    if bw.empty or regions.empty:
        return regions
    bw = bw.assign(end_ns=bw["start_ns"] + bw["dur_ns"])
    out = regions.copy()
    for i, r in out.iterrows():
        m = (bw["rank"].to_numpy() == r["rank"]) & (bw["step"].to_numpy() == r["step"]) & (bw["start_ns"].to_numpy() >= r["end_ns"])
        if int(m.sum()) >= max(int(timesteps), 1):
            out.at[i, "end_ns"] = max(int(r["end_ns"]), int(bw["end_ns"].to_numpy()[m].max()))
    return out


def _keras_eligibility(row) -> tuple[str, list[str]]:
    """(cell type, reasons it cannot use cuDNN) from one forward loop region's op counts per timestep.

    LSTM bodies run 3 sigmoid gates and 2 activations per step, GRU bodies 2 and 1; the activation op's type is
    the activation itself. Recurrent dropout multiplies the recurrent MatMuls (masks applied per gate); a GRU with
    reset_after=False computes its candidate with a separate recurrent MatMul (measured on the Keras 2 and 3
    recordings in the shared corpus: 0 vs 2 MatMuls per step in the loop body).
    """
    n = max(int(row.iterations), 1)
    sig = row.sigmoid / n
    mm = float(row.matmul_per_iteration) if row.matmul_per_iteration == row.matmul_per_iteration else 0.0
    cell = "LSTM" if sig >= 2.5 else ("GRU" if sig >= 1.5 else "RNN")
    reasons = []
    if row.relu and not row.tanh:
        reasons.append("activation is relu, not tanh")
    if cell == "LSTM" and mm > 2.0 + 1e-9:
        reasons.append("recurrent_dropout > 0")
    if cell == "GRU" and mm >= 2.0:
        reasons.append("reset_after=False")
    if cell == "RNN":
        reasons.append("SimpleRNN has no cuDNN kernel")
    return cell, reasons
