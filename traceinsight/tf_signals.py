"""TensorFlow-specific signals computed from timeline names and kinds only.

Rules must not know file formats, but some TF facts live only in names (tf.data iterator events, the node names of
``while`` loop bodies). These helpers turn those names into numbers so a rule can use them without re-parsing.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .timeline import Timeline
from .views import merge_intervals

# Host events during which the training loop waits for the next batch (xprof's HOST_WAIT_INPUT): the
# IteratorGetNext op and its DoCompute TraceMe. ``IteratorGetNext/_N:_Send`` are graph-partition sends, not waits.
_WAIT_INPUT_RE = re.compile(r"^IteratorGetNext(?:AsOptional)?(?:Op::DoCompute|:IteratorGetNext(?:AsOptional)?)?$")
# Host-side enqueue of host-to-device copies (xprof's HOST_TO_DEVICE), by runtime name.
_H2D_RUNTIME_RE = re.compile(r"MemcpyH2D|MemcpyHtoD|cuMemcpyHtoD|HostToDevice")


def _input_intervals(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    names = ev["name"].astype(str)
    host = ev["device"].to_numpy() < 0
    kind = ev["kind"].astype(str).to_numpy()
    wait = host & np.isin(kind, ["cpu_op", "annotation"]) & names.map(lambda s: bool(_WAIT_INPUT_RE.match(s))).to_numpy()
    h2d_rt = host & (kind == "runtime") & names.str.contains(_H2D_RUNTIME_RE).to_numpy()
    h2d_gpu = (kind == "memcpy") & (ev["copy_kind"].astype(str).to_numpy() == "HtoD")
    mask = wait | h2d_rt | h2d_gpu
    sel = ev[mask]
    return sel["rank"].to_numpy(), sel["start_ns"].to_numpy(), (sel["start_ns"] + sel["dur_ns"]).to_numpy()


def input_bound_share(timeline: Timeline) -> float | None:
    """Fraction (0..1) of step time spent waiting for input; None without step markers or iterator events.

    Input time is the union of host waits on the tf.data iterator (``IteratorGetNext*``) and host-to-device copies
    (the runtime call on the host and the copy on the GPU). The batch is fetched *before* the step it feeds starts
    its device work, so each step owns the host time since the previous step ended (the first step: since the
    capture started). The denominator is the summed step durations, as in xprof's Overview page.
    """
    ev = timeline.events
    steps = ev[ev["kind"] == "step"]
    if steps.empty:
        return None
    ranks, s, e = _input_intervals(ev)
    names = ev["name"].astype(str)
    if not names.str.startswith(("IteratorGetNext", "Iterator::")).any():
        return None
    total_input = 0
    total_step = 0
    for rank, st in steps.groupby("rank", observed=True):
        order = np.argsort(st["start_ns"].to_numpy())
        s0 = st["start_ns"].to_numpy()[order]
        s1 = s0 + st["dur_ns"].to_numpy()[order]
        lo = np.concatenate([[ev["start_ns"][ev["rank"] == rank].min()], s1[:-1]])
        lo = np.minimum(lo, s0)
        m = ranks == rank
        ms, me = merge_intervals(s[m], e[m])
        for a, b in zip(lo, s1):
            total_input += int(np.sum(np.clip(me, a, b) - np.clip(ms, a, b)))
        total_step += int(np.sum(s1 - s0))
    if total_step <= 0:
        return None
    return total_input / total_step


# --------------------------------------------------------------------------------------------------------------------
# Recurrent layers: cuDNN vs while-loop fallback

_LOOP_RE = re.compile(r"^(?!_send_|_recv_)(?:StatefulPartitionedCall/)*(?P<region>.*?while(?:_grad)?(?:_\d+)?)/(?P<part>body|cond)/_\d+/")
_MATMUL_TYPES = ("MatMul", "_MklMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_FusedMatMul", "_MklFusedMatMul")


def recurrent_loop_signature(timeline: Timeline) -> pd.DataFrame:
    """Per TF ``while`` loop region: how many iterations ran and which ops ran in each one.

    One row per region (the node-name prefix ending in ``while``/``while_N``/``while_grad``), columns: ``region``,
    ``direction`` (forward/backward), ``layer`` (the lstm/gru/rnn scope when the name has one), ``steps`` (distinct
    step ids seen), ``iterations`` (body executions), ``iterations_per_step``, ``ops``, ``matmul``, ``biasadd``,
    ``sigmoid``, ``tanh``, ``relu``, ``matmul_per_iteration``, ``cudnn_ops`` (CudnnRNN* ops anywhere; same on every
    row). A cuDNN RNN shows no such region for its layer and ``cudnn_ops`` > 0; the generic fallback shows a region
    with about two MatMuls per iteration and sequence-length iterations per step.
    """
    ev = timeline.events
    ops = ev[ev["kind"] == "cpu_op"]
    names = ops["name"].astype(str)
    op_type = names.str.rsplit(":", n=1).str[-1]
    cudnn = int(op_type.str.startswith("CudnnRNN").sum())
    cols = ["region", "direction", "layer", "steps", "iterations", "iterations_per_step", "ops", "matmul", "biasadd",
            "sigmoid", "tanh", "relu", "matmul_per_iteration", "cudnn_ops"]
    m = names.str.extract(_LOOP_RE)
    inloop = m["region"].notna().to_numpy()
    if not inloop.any():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    df = pd.DataFrame({
        "region": m["region"][inloop].to_numpy(),
        "part": m["part"][inloop].to_numpy(),
        "type": op_type[inloop].to_numpy(),
        "step": ops["step"].to_numpy()[inloop],
        "name": names[inloop].to_numpy(),
    })
    rows = []
    for region, g in df.groupby("region", sort=True):
        body = g[g["part"] == "body"]
        t = body["type"]
        # one TensorListGetItem (reading x_t) per timestep in Keras RNN bodies; else the cond's Less evaluations
        reads = int((t == "TensorListGetItem").sum())
        if reads == 0:
            cond_less = g[(g["part"] == "cond") & (g["type"] == "Less")]
            reads = len(body) and max(len(cond_less) // 2, 0)
        steps = int(np.unique(g["step"][g["step"] >= 0]).size)
        layer = re.findall(r"(?:^|/)((?:lstm|gru|simple_rnn|rnn|bidirectional)[^/]*)/", region + "/")
        matmul = int(t.isin(_MATMUL_TYPES).sum())
        rows.append({
            "region": region,
            "direction": "backward" if ("while_grad" in region or "gradient" in region) else "forward",
            "layer": layer[-1] if layer else None,
            "steps": steps,
            "iterations": reads,
            "iterations_per_step": reads / steps if steps else float(reads),
            "ops": len(g),
            "matmul": matmul,
            "biasadd": int((t == "BiasAdd").sum()),
            "sigmoid": int((t == "Sigmoid").sum()),
            "tanh": int((t == "Tanh").sum()),
            "relu": int((t == "Relu").sum()),
            "matmul_per_iteration": matmul / reads if reads else float("nan"),
            "cudnn_ops": cudnn,
        })
    return pd.DataFrame(rows, columns=cols)
