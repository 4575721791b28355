"""TI016: torch.compile graph breaks in the steady state: eager ops between compiled regions, each a launch gap."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import AVOIDABLE_BUCKETS
from traceinsight.vocab.masks import name_mask
from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns
from traceinsight.rulelib.warmup import warmup_steps

#: The range PyTorch records around each compiled graph it runs (torch >= 2.3), or, in older traces, the
#: autograd function a compiled graph runs as.
COMPILED_REGION = r"^Torch-Compiled Region"
COMPILED_FUNCTION = r"^CompiledFunction$"


class GraphBreaks(Rule):
    code = "TI016"
    name = "graph-breaks"
    category = "launch_overhead"
    claims = AVOIDABLE_BUCKETS  # the avoidable idle between compiled regions, whatever the ledger booked it as
    severity = Severity.WARNING
    summary = "Graph breaks: torch.compile runs each step as several compiled graphs with eager ops between them."
    why = """
    torch.compile turns a step into one graph of fused kernels, unless Python code it cannot trace (a `.item()`,
    a data-dependent branch, a print, an unsupported call) breaks the graph. Each break splits the step into
    compiled regions with eager PyTorch between them: those ops dispatch and launch one kernel at a time, the
    GPU waits between the regions, and fusion and CUDA graphs (`mode="reduce-overhead"`) stop at the break.
    """
    definition = """
    Per rank, the ranges PyTorch records around each compiled graph it runs (`Torch-Compiled Region: X/Y`; in
    older traces `CompiledFunction`) are taken per step; two consecutive regions of one step with GPU work
    launched between them (eager ops) are one graph break. Steps before the rank's second step and leading
    warm-up steps are left out (compilation happens there). Reported when the median steady step has at least
    one break. **Impact** = the avoidable idle the time ledger books in the gaps those between-region stretches
    touch (the GPU waiting while the host runs the eager part). Needs step markers.
    """
    fix_pytorch = Fix(
        "List the breaks and their reasons with `torch._dynamo.explain(model)(*inputs)` or `TORCH_LOGS=graph_breaks`, "
        "then remove them: keep tensors on the GPU instead of `.item()`/`.tolist()` in the step, replace data-dependent "
        "Python branches with `torch.where`/`torch.cond`, move prints and logging out of the compiled function; "
        "`torch.compile(fullgraph=True)` turns any remaining break into an error.",
        """
        explanation = torch._dynamo.explain(model)(batch)
        print(explanation.graph_break_count, explanation.break_reasons)
        model = torch.compile(model, fullgraph=True)   # fails loudly on a break instead of splitting the step
        """,
    )
    fix_tensorflow = Fix(
        "Keep the whole step inside one `tf.function(jit_compile=True)`; ops XLA cannot compile split it into clusters "
        "with TensorFlow ops between them (see the XLA auto-clustering report, `TF_XLA_FLAGS=--tf_xla_clustering_debug`).",
        """
        @tf.function(jit_compile=True)
        def train_step(x, y): ...
        """,
    )
    fix_jax = Fix(
        "Keep the whole step inside one `jax.jit`: Python between jitted functions (converting device values with "
        "`float(x)` or `np.asarray`, branching on them) splits the step into several programs with host work between "
        'them; use `jax.lax.cond` and `jax.lax.while_loop` for data-dependent control flow.',
        """
        @jax.jit
        def train_step(params, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            scale = jax.lax.cond(loss > 10.0, lambda: 0.5, lambda: 1.0)   # no Python branch on a device value
            return jax.tree.map(lambda p, g: p - lr * scale * g, params, grads), loss
        """,
    )

    min_breaks = Option(1, "Report when the median steady step has at least this many graph breaks.")

    def check(self, ctx: Context):
        v = ctx.views
        host, st, ln = v.host_events, v.steps, v.launches
        if host.empty or st.empty or ln.empty:
            return
        region = name_mask(host["name"], COMPILED_REGION)
        if not region.any():
            region = name_mask(host["name"], COMPILED_FUNCTION)
            if not region.any():
                return
        rows = np.flatnonzero(region)
        r_rank = host["rank"].to_numpy()[rows].astype(np.int64)
        r_start = host["start_ns"].to_numpy(np.int64)[rows]
        r_end = r_start + np.maximum(host["dur_ns"].to_numpy(np.int64)[rows], 0)
        l_rank = ln["rank"].to_numpy(np.int64)
        l_start = ln["launch_start_ns"].to_numpy(np.int64)
        led = v.ledger
        for rank, g in st.groupby("rank", sort=True):
            rank = int(rank)
            g = g.sort_values("start_ns")
            steady = g[~warmup_steps(g["dur_ns"].to_numpy())].iloc[1:] if len(g) > 1 else g.iloc[:0]
            mine = r_rank == rank
            rs, re_ = r_start[mine], r_end[mine]
            o = np.argsort(rs, kind="stable")
            rs, re_ = rs[o], re_[o]
            ls = np.sort(l_start[l_rank == rank], kind="stable")  # nearly in time order: timsort takes the runs
            per_step, between, launched = [], [], 0
            for s in steady.itertuples(index=False):
                inside = (rs >= s.start_ns) & (rs < s.end_ns)
                a, b = rs[inside], re_[inside]
                # outermost regions only: a region nested in the one before it is the same graph
                keep = np.r_[True, a[1:] >= np.maximum.accumulate(b)[:-1]] if len(a) else np.zeros(0, bool)
                a, b = a[keep], b[keep]
                n = 0
                for e0, s1 in zip(b[:-1], a[1:]):
                    k = int(np.searchsorted(ls, s1) - np.searchsorted(ls, e0))
                    if k > 0:
                        n += 1
                        launched += k
                        between.append((int(e0), int(s1), int(s.step)))
                per_step.append(n)
            if not per_step or float(np.median(per_step)) < self.min_breaks:
                continue
            inst = pd.DataFrame({"start_ns": [x[0] for x in between], "end_ns": [x[1] for x in between], "rank": rank, "label": "eager ops between compiled regions"})
            idle = int(led.claim(AVOIDABLE_BUCKETS, rank=rank, within=inst))
            host_ns = int(sum(x[1] - x[0] for x in between))
            med = float(np.median(per_step))
            ev = pd.DataFrame({"step": [int(s) for s in steady["step"]], "graph_breaks": per_step})
            where = f"rank {rank}: " if len(ctx.meta.ranks) > 1 else ""
            yield ctx.finding(
                title=f"{where}{med:g} graph break(s) per step: eager ops between compiled regions ({fmt_ns(idle)} GPU idle)",
                message=(
                    f"In {len(per_step)} steady steps torch.compile ran each step as {med + 1:g} compiled graphs with eager PyTorch "
                    f"between them ({len(between)} breaks, {fmt_ns(host_ns)} of host time, {launched} kernels launched one by one); "
                    f"the GPU sat idle {fmt_ns(idle)} in those stretches."
                ),
                evidence=ev,
                instances=inst,
                impact_ns=idle,
                location=Location(rank=rank),
                metrics={"breaks_per_step": med, "breaks": len(between), "eager_launches": launched, "between_ns": host_ns, "idle_ns": idle},
                key=f"rank{rank}",
            )
