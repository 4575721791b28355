"""TensorFlow-specific signals computed from timeline names and kinds only.

Rules must not know file formats, but some TF facts live only in names (tf.data iterator events, the node names of
``while`` loop bodies). These helpers turn those names into numbers so a rule can use them without re-parsing.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.model.timeline import Timeline

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
