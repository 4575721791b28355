"""TI003: most kernels are so short that launching them costs more than running them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Rule, Severity, fmt_ns


from traceinsight.rulelib.enclosing import cpu_op_enclosing, starts_inside
from traceinsight.rulelib.inuse import in_use
from traceinsight.rulelib.gaps import inference_ranks, ledger_gaps, sync_calls
from traceinsight.rulelib.names import kind_mask, pair_codes, short_name
from traceinsight.rulelib.usercode import lead_source, shown_frames, user_code_sentence, user_frame_texts


class TinyKernels(Rule):
    code = "TI003"
    what_if = "launch_bound_to_graphs"  # the what-if transform that models this rule's fix
    category = "launch_overhead"
    name = "tiny-kernels"
    severity = Severity.WARNING
    summary = "Many kernels are shorter than their own launch; the GPU waits on the host between them (launch-bound)."
    why = """
    Launching a kernel costs the host 5-20 µs (framework dispatch + CUDA launch). A kernel that runs for 3 µs
    finishes before the next launch arrives, so the GPU alternates between a little work and waiting. Such
    workloads do not get faster on a faster GPU; they need fewer, larger kernels.
    """
    definition = """
    A kernel is *launch-bound* when it runs shorter than `max_kernel_us` (default **10 µs**, TraceLens'
    `short_kernel_threshold_us`) or shorter than the host call that launched it (HTA's "short GPU kernel":
    GPU duration < CPU launch duration; a call that launched several kernels, a CUDA/HIP graph replay, is charged
    once: only its first kernel is compared with it). A finding is made per (rank, device) when launch-bound kernels are at least
    `min_share_pct` (default **50 %**) of all kernels and the idle time before them is at least `min_idle_pct`
    (default **2 %**) of the device's active window; without the second condition a GPU whose queue is full
    (many small kernels back to back, no idle) would be flagged although launching is not its bottleneck.

    Impact: the device-idle gaps (all streams merged) that end at a launch-bound kernel and are shorter than
    `max_gap_us` (default 100 µs, TI001's lower bound, so TI001 and TI003 never count the same gap), leaving out
    gaps that begin while the host is blocked in a synchronizing call (the sync drained the queue: TI002's), and
    gaps whose next kernel was already queued: when its launch call had returned before the GPU ran dry, the GPU
    waited on something of its own (an event another stream records, a cross-stream `cudaStreamWaitEvent`, the
    previous kernel's tail), not on the host, so a faster launch would not have shortened the gap (the time
    ledger's GPU-side dependency; counted in `metrics["gpu_dependency_ns"]`, not in the impact). Gaps whose next
    kernel has no launch in the trace are counted, as nothing shows it was queued. The idle-time condition above
    reads this impact, so tiny kernels that always wait in a full queue or behind GPU-side dependencies are never
    reported. Fusing these kernels (torch.compile, XLA) or replaying them as a CUDA graph removes these gaps; the
    kernels' own run time stays, so this is a lower bound on launch overhead, not on total savings.
    """
    fix_pytorch = Fix(
        "Give each launch more work: larger batches; fuse elementwise chains with `torch.compile`; replay the step "
        "as a CUDA graph (`mode=\"reduce-overhead\"` or `torch.cuda.graphs`) when shapes are static; use the "
        "foreach/fused optimizer implementations instead of one kernel per parameter.",
        """
        model = torch.compile(model, mode="reduce-overhead")      # fusion + CUDA graphs
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

        # or capture a static step by hand
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        static_in.copy_(batch); g.replay()
        """,
    )
    fix_tensorflow = Fix(
        "Compile the step with XLA so elementwise ops fuse into few kernels, increase the batch, and run several "
        "steps per `tf.function` call.",
        """
        @tf.function(jit_compile=True)
        def train_step(x, y): ...

        model.compile(optimizer="adam", loss=loss_fn, jit_compile=True, steps_per_execution=32)
        """,
    )
    fix_jax = Fix(
        "Jit the whole step so XLA fuses the small ops into a few kernels, and turn Python loops over timesteps or "
        "layers into `jax.lax.scan` so they compile to one loop instead of many launches.",
        """
        @jax.jit
        def step(carry, xs):
            return jax.lax.scan(cell, carry, xs)
        """,
    )

    fix_cuda = Fix(
        "Launch fewer, larger kernels: fuse consecutive elementwise kernels into one, process several items per "
        "thread (grid-stride loops), and capture a repeated sequence of launches as a CUDA graph so it is "
        "submitted with one `cudaGraphLaunch`.",
        """
        cudaGraph_t graph; cudaGraphExec_t exec;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        for (int k = 0; k < n_small; ++k) small_kernel<<<g, b, 0, s>>>(args[k]);
        cudaStreamEndCapture(s, &graph);
        cudaGraphInstantiate(&exec, graph, 0);
        for (int it = 0; it < iters; ++it) cudaGraphLaunch(exec, s);   // one launch per iteration
        """,
    )

    max_kernel_us = Option(10.0, "Kernels shorter than this (µs) count as tiny (TraceLens short-kernel threshold).")
    min_share_pct = Option(50.0, "Report when at least this % of a device's kernels are launch-bound.", max=100)
    min_idle_pct = Option(2.0, "...and the idle gaps before them are at least this % of the device's active window.", max=100)
    max_gap_us = Option(100.0, "Only gaps shorter than this (µs) count as launch overhead; longer ones are TI001's.")
    top_n = Option(10, "Evidence rows: the launch-bound kernels the GPU waited for longest, then the most frequent.", min=1)

    def check(self, ctx):
        v = ctx.views
        kern = v.kernels
        if kern.empty:
            return
        # plain arrays of the few kernel columns used: never a row selection of the wide frame
        k_rank = v.array("kernels", "rank")
        k_dev = v.array("kernels", "device")
        k_start = v.array("kernels", "start_ns")
        k_dur = v.array("kernels", "dur_ns")
        launch_dur, launch_idx, launch_row = _kernel_launches(v.launches, kern.index.to_numpy())
        launch_dur = _charged_once(launch_dur, launch_idx, k_start)
        tiny = k_dur < self.max_kernel_us * 1e3
        shorter = k_dur < np.nan_to_num(launch_dur, nan=-1.0)
        bound = tiny | shorter
        if not bound.any() and self.min_share_pct > 0:
            return  # no launch-bound kernel: every device's share is 0 %, below the threshold
        # one code per (rank, device), in sorted order (the order findings are made in)
        dev_keys, k_code = pair_codes(k_rank, k_dev)

        gaps = v.gaps
        gi = np.flatnonzero(gaps["dur_ns"].to_numpy() < self.max_gap_us * 1e3)
        g_rank = gaps["rank"].to_numpy().astype(np.int64)[gi]
        gi = gi[~starts_inside(pd.DataFrame({"rank": g_rank, "start_ns": gaps["start_ns"].to_numpy()[gi]}), sync_calls(v))]
        # gaps that end where a launch-bound kernel starts (the first such kernel names it)
        kpos = _first_kernel_at(k_code, k_start, bound, dev_keys, gaps["rank"].to_numpy()[gi], gaps["device"].to_numpy()[gi], gaps["end_ns"].to_numpy()[gi])
        gi, kpos = gi[kpos >= 0], kpos[kpos >= 0]
        g_start = gaps["start_ns"].to_numpy()[gi]
        g_dur = gaps["dur_ns"].to_numpy()[gi]
        g_code = k_code[kpos]
        nl = ledger_gaps(v)["next_launch_end_ns"].to_numpy(dtype=float)[gi] if len(gi) else np.zeros(0)
        queued = ~np.isnan(nl) & (nl <= g_start.astype(float))  # already queued: a GPU-side dependency (ledger)

        n = len(dev_keys)
        kernels = np.bincount(k_code, minlength=n)
        n_bound = np.bincount(k_code, weights=bound, minlength=n).astype(np.int64)
        n_tiny = np.bincount(k_code, weights=tiny, minlength=n).astype(np.int64)
        kernel_ns = _int_sum(k_code, k_dur, n)
        bound_ns = _int_sum(k_code[bound], k_dur[bound], n)
        idle_ns = _int_sum(g_code[~queued], g_dur[~queued], n)
        n_gaps = np.bincount(g_code[~queued], minlength=n)
        dep_ns = _int_sum(g_code[queued], g_dur[queued], n)
        n_dep = np.bincount(g_code[queued], minlength=n)
        window_ns = _windows(v.utilization, dev_keys)
        share_pct = 100.0 * n_bound / np.maximum(kernels, 1)
        idle_pct = 100.0 * idle_ns / np.maximum(window_ns, 1)
        hit = np.flatnonzero((share_pct >= self.min_share_pct) & (idle_pct >= self.min_idle_pct))
        if not len(hit):
            return
        k_names = kern["name"]
        g_name_code, name_cats = _codes(k_names)
        keep_g = ~queued
        for c in hit:
            rank, device = int(dev_keys[c, 0]), int(dev_keys[c, 1])
            kb_i = np.flatnonzero((k_code == c) & bound)
            gd = np.flatnonzero(keep_g & (g_code == c))
            gname = g_name_code[kpos[gd]]
            # idle before each kernel name (the names that end a counted gap, in code order, as a groupby gives)
            used = np.flatnonzero(np.bincount(gname, minlength=len(name_cats)))
            idle_by_name = pd.Series(_int_sum(gname, g_dur[gd], len(name_cats))[used], index=name_cats[used])
            evidence = self._offenders(ctx, g_name_code[kb_i], name_cats, k_dur[kb_i], launch_dur[kb_i], launch_row[kb_i], idle_by_name)
            multi = len(ctx.meta.ranks) > 1 or n > 1
            where = f"rank {rank} GPU {device}" if multi else f"GPU {device}"
            idle = int(idle_ns[c])
            top = evidence.iloc[0]
            dep = (
                f" {int(n_dep[c])} more gaps before them ({fmt_ns(int(dep_ns[c]))}) are not counted: the kernel was "
                "already queued, so the GPU waited on a dependency of its own, not on the launch."
                if n_dep[c]
                else ""
            )
            li = launch_idx[kb_i]
            li = li[~np.isnan(li)].astype(np.int64)[:20_000]  # a sample is enough to name the line
            cols = ["rank", "pid", "tid", "start_ns", "dur_ns", *(["stack"] if "stack" in ctx.events else [])]  # what user_frames_at reads
            frame_texts = user_frame_texts(ctx.events.loc[li, cols], ctx.events, v.host_events)
            code_at = user_code_sentence(shown_frames(frame_texts), ctx, "Most of them are launched from")
            bound_time_pct = 100.0 * float(bound_ns[c]) / max(float(kernel_ns[c]), 1.0)
            yield ctx.finding(
                fixes={**type(self).fixes(), **_fits(in_use(v), int(dev_keys[c][0]) in inference_ranks(v))},
                title=f"{where}: {share_pct[c]:.0f} % of kernels are launch-bound (< {self.max_kernel_us:g} µs or shorter than their launch)",
                message=(
                    f"{int(n_bound[c])} of {int(kernels[c])} kernels on {where} ({share_pct[c]:.0f} %) ran shorter than "
                    f"{self.max_kernel_us:g} µs or than their own launch call; together they are "
                    f"{bound_time_pct:.1f} % of kernel time. The GPU idled "
                    f"{fmt_ns(idle)} ({idle_pct[c]:.1f} % of its active window) in {int(n_gaps[c])} short gaps waiting "
                    f"for their launch.{dep} Longest waited for: {top['kernel']} ({int(top['count'])}×, mean {fmt_ns(top['mean_us'] * 1e3)}, "
                    f"{fmt_ns(top['idle_before_us'] * 1e3)} idle before it), launched from {top['launched_by']}.{code_at}"
                ),
                impact_ns=idle,
                evidence=evidence,
                instances=pd.DataFrame(
                    {
                        "start_ns": g_start[gd],
                        "end_ns": gaps["end_ns"].to_numpy()[gi[gd]],
                        "rank": rank,
                        "device": device,
                        # one label for every row: a categorical of one value, not a string object per row
                        "label": pd.Categorical.from_codes(np.zeros(len(gd), np.int8), ["wait before a launch-bound kernel"]),
                    }
                ),
                location=Location(rank=rank, device=device),
                source=lead_source(frame_texts),
                metrics={
                    "kernels": int(kernels[c]),
                    "launch_bound_kernels": int(n_bound[c]),
                    "tiny_kernels": int(n_tiny[c]),
                    "launch_bound_share_pct": round(float(share_pct[c]), 3),
                    "launch_bound_time_share_pct": round(bound_time_pct, 3),
                    "idle_before_ns": idle,
                    "idle_pct": round(float(idle_pct[c]), 3),
                    "gpu_dependency_gaps": int(n_dep[c]),
                    "gpu_dependency_ns": int(dep_ns[c]),
                },
                key=f"rank{rank}-gpu{device}",
            )

    def _offenders(self, ctx, name_code, name_cats, dur, launch_dur, launch_row, idle_by_name: pd.Series) -> pd.DataFrame:
        """Top kernels by the idle counted before them, then by count, each with the framework op that launched it
        most often. Idle first: a tiny kernel that always sits in the queue is frequent but costs nothing.

        The launching op is looked up only for the kernels of the rows shown."""
        present = np.bincount(name_code, minlength=len(name_cats)) > 0  # the names used, in code order
        codes = np.flatnonzero(present)
        inv = (np.cumsum(present) - 1)[name_code]
        names = np.asarray([str(x) for x in name_cats[codes]], dtype=object)
        has_l = ~np.isnan(launch_dur)
        agg = pd.DataFrame(
            {
                "count": np.bincount(inv, minlength=len(codes)),
                "total_ns": _int_sum(inv, dur, len(codes)),
                "launch_sum": _int_sum(inv[has_l], launch_dur[has_l].astype(np.int64), len(codes)),
                "launch_n": np.bincount(inv[has_l], minlength=len(codes)),
            },
            index=pd.Index(names, name="name"),
        ).sort_index()  # a groupby by name orders by name
        agg["mean_ns"] = agg["total_ns"] / agg["count"]
        agg["launch_ns"] = np.where(agg["launch_n"] > 0, agg["launch_sum"] / np.maximum(agg["launch_n"], 1), np.nan)
        agg = agg[["count", "mean_ns", "total_ns", "launch_ns"]]
        agg["idle_ns"] = idle_by_name.reindex(agg.index).fillna(0).to_numpy()
        agg = agg.sort_values(["idle_ns", "count"], ascending=False).head(int(self.top_n))
        shown_code = np.zeros(len(codes), dtype=bool)
        shown_code[pd.Index(names).get_indexer(agg.index)] = True
        rows = np.flatnonzero(shown_code[inv])
        # the framework op around each launch call, as a name code (-1: none, or no name)
        op_code = np.full(len(rows), -1, np.int64)
        lr = launch_row[rows]
        has = lr >= 0
        if has.any():
            # the launch calls' thread and span, from the launches frame (the same values as their event rows)
            ln, lr = ctx.views.launches, lr[has]
            l_start = ln["launch_start_ns"].to_numpy()[lr]
            cpu_ops, ops = cpu_op_enclosing(ctx.views)
            enc = ops.find(ln["rank"].to_numpy()[lr], ln["pid"].to_numpy()[lr], ln["tid"].to_numpy()[lr], l_start, l_start + ln["launch_dur_ns"].to_numpy()[lr])
            got = enc >= 0
            h_names = ctx.views.host_events["name"]
            if isinstance(h_names.dtype, pd.CategoricalDtype):  # only the found ops' codes are read
                h_codes, h_cats = h_names.cat.codes.to_numpy(), np.asarray(h_names.cat.categories.astype(object))
            else:
                h_codes, h_cats = _codes(h_names, missing=-1)
            found = np.full(len(enc), -1, np.int64)
            found[got] = h_codes[cpu_ops[enc[got]]]
            op_code[has] = found
        # the op that launched each shown kernel most often: counts per (name, op) pair, then the pandas steps of a
        # groupby(["name", "launched_by"]).size() on a table that small
        lb_code, lb_uniq = pd.factorize(op_code)
        lb_names = np.asarray(["(unknown)" if c < 0 else str(h_cats[c]) for c in lb_uniq], dtype=object)
        pair, n = np.unique(inv[rows] * np.int64(len(lb_names) + 1) + lb_code, return_counts=True)
        op = pd.DataFrame({"name": names[pair // (len(lb_names) + 1)], "launched_by": np.asarray(lb_names, dtype=object)[pair % (len(lb_names) + 1)], "n": n})
        op = op.sort_values(["name", "launched_by"]).reset_index(drop=True)
        op = op.sort_values("n", ascending=False).drop_duplicates("name").set_index("name")["launched_by"]
        return pd.DataFrame(
            {
                "kernel": [short_name(n) for n in agg.index],
                "count": agg["count"].to_numpy(),
                "mean_us": agg["mean_ns"].to_numpy() / 1e3,
                "total_us": agg["total_ns"].to_numpy() / 1e3,
                "mean_launch_us": agg["launch_ns"].to_numpy() / 1e3,
                "idle_before_us": agg["idle_ns"].to_numpy() / 1e3,
                "launched_by": op.reindex(agg.index).to_numpy(),
            }
        )


def _codes(names: pd.Series, missing: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a name column and the names they stand for (categorical codes where the column is one).

    A missing name gets code ``missing`` when given, else groups as "nan" (as ``astype(str)`` writes it)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = np.asarray(names.cat.categories.astype(object))
        codes = names.cat.codes.to_numpy().astype(np.int64)
        if missing is None and (codes < 0).any():
            cats = np.append(cats, "nan")
            codes = np.where(codes < 0, len(cats) - 1, codes)
        return codes, cats
    if missing is not None:
        codes, uniq = pd.factorize(names.to_numpy())
        return np.where(codes < 0, missing, codes).astype(np.int64), np.asarray(uniq, dtype=object)
    codes, uniq = pd.factorize(names.astype(str).to_numpy(), use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniq, dtype=object)


def _int_sum(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact per-code sums of integer values (np.bincount would sum in floats)."""
    out = np.zeros(n, np.int64)
    np.add.at(out, codes, np.asarray(values, dtype=np.int64))
    return out


def _charged_once(launch_dur: np.ndarray, launch_idx: np.ndarray, k_start: np.ndarray) -> np.ndarray:
    """One call that launched several kernels (a CUDA/HIP graph replay) is charged once: only its earliest
    kernel is compared with the call's duration; the others were not launched one by one (NaN: no launch cost)."""
    has = np.flatnonzero(~np.isnan(launch_idx))
    if len(has) < 2:
        return launch_dur
    li = launch_idx[has]
    _, inv, cnt = np.unique(li, return_inverse=True, return_counts=True)
    if not (cnt > 1).any():
        return launch_dur
    order = np.lexsort((k_start[has], inv))
    later = np.r_[False, inv[order][1:] == inv[order][:-1]]  # not the first kernel of its call
    out = launch_dur.copy()
    out[has[order[later]]] = np.nan
    return out


def _windows(util: pd.DataFrame, dev_keys: np.ndarray) -> np.ndarray:
    """The active window (``views.utilization``) of each (rank, device) row of ``dev_keys`` as floats, 0 for a
    device it lacks: a reindex of the window by (rank, device), looked up in a dict (a MultiIndex and a reindex
    cost most of this rule on a small rank). A device listed twice takes the reindex, which says what that means."""
    u_win = util["window_ns"].to_numpy()
    keys = list(zip(util["rank"].to_numpy().astype(np.int64).tolist(), util["device"].to_numpy().astype(np.int64).tolist()))
    at = dict(zip(keys, u_win.tolist()))
    if len(at) != len(keys):
        win = pd.Series(u_win, index=pd.MultiIndex.from_arrays([np.array([k[0] for k in keys], np.int64), np.array([k[1] for k in keys], np.int64)]))
        return win.reindex(pd.MultiIndex.from_arrays([dev_keys[:, 0], dev_keys[:, 1]])).fillna(0).to_numpy(dtype=float)
    return np.array([at.get(k, 0) for k in zip(dev_keys[:, 0].tolist(), dev_keys[:, 1].tolist())], dtype=float)


def _kernel_launches(ln: pd.DataFrame, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kernel row label: the duration and row label of the runtime call that launched it (NaN where none), and
    its row position in ``ln`` (-1 where none)."""
    dur = np.full(len(labels), np.nan)
    idx = np.full(len(labels), np.nan)
    row = np.full(len(labels), -1, np.int64)
    if ln.empty or not len(labels):
        return dur, idx, row
    rows = np.flatnonzero(kind_mask(ln, "kernel"))  # the kernels' launch rows, as positions in ln
    gs = ln["gpu_idx"].to_numpy()[rows]
    if len(gs) == len(labels) and np.array_equal(gs, labels):  # the usual trace: one launch per kernel, in order
        return ln["launch_dur_ns"].to_numpy()[rows].astype(float), ln["launch_idx"].to_numpy()[rows].astype(float), rows
    if len(gs) > 1 and not bool((gs[1:] >= gs[:-1]).all()):  # launch order is usually the GPU rows' order too
        order = np.argsort(gs, kind="stable")
        gs, rows = gs[order], rows[order]
    first = np.r_[True, gs[1:] != gs[:-1]]  # the first launch row of a kernel (as drop_duplicates kept)
    if not first.all():
        gs, rows = gs[first], rows[first]
    if not len(gs):
        return dur, idx, row
    pos = np.searchsorted(gs, labels)
    np.minimum(pos, len(gs) - 1, out=pos)
    hit = gs[pos] == labels
    if hit.all():  # every kernel has its launch: whole arrays, no masked copies
        row = rows[pos]
        return ln["launch_dur_ns"].to_numpy()[row].astype(float), ln["launch_idx"].to_numpy()[row].astype(float), row
    row[hit] = rows[pos[hit]]
    dur[hit] = ln["launch_dur_ns"].to_numpy()[row[hit]]
    idx[hit] = ln["launch_idx"].to_numpy()[row[hit]]
    return dur, idx, row


def _first_kernel_at(k_code, k_start, bound, dev_keys, q_rank, q_dev, q_t) -> np.ndarray:
    """For each query (rank, device, t): the position of the first launch-bound kernel (in frame order) of that
    device starting exactly at t, or -1."""
    out = np.full(len(q_t), -1, np.int64)
    if not len(q_t):
        return out
    b = np.flatnonzero(bound)
    q_rank = np.asarray(q_rank, np.int64)
    q_dev = np.asarray(q_dev, np.int64)
    for c, (rank, device) in enumerate(dev_keys):
        sel = (q_rank == rank) & (q_dev == device)
        every = bool(sel.all())  # one device (one file): no selection of the queries
        qm = None if every else np.flatnonzero(sel)
        if not every and not len(qm):
            continue
        kb = b if len(dev_keys) == 1 else b[k_code[b] == c]
        if not len(kb):
            continue
        ks, kp = k_start[kb], kb
        if len(ks) > 1 and not bool((ks[1:] >= ks[:-1]).all()):  # kernels usually come in start order
            order = np.argsort(ks, kind="stable")  # equal starts keep frame order: the first comes first
            ks, kp = ks[order], kp[order]
        t = np.asarray(q_t) if every else np.asarray(q_t)[qm]
        pos = np.searchsorted(ks, t)
        np.minimum(pos, len(ks) - 1, out=pos)
        ok = ks[pos] == t
        if every:
            out[ok] = kp[pos[ok]]
        else:
            out[qm[ok]] = kp[pos[ok]]
    return out


#: The PyTorch fix for a model already compiled (``rulelib.in_use``): fusion has been done, what is left is one
#: launch per kernel, which a CUDA graph replays at once, or kernels too small for the GPU, which a batch enlarges.
FIX_COMPILED = Fix(
    "The model is already compiled (`torch.compile`): its kernels are fused and still tiny, so the host's launches "
    "set the pace. Replay the compiled step as a CUDA graph (`mode=\"reduce-overhead\"`, static shapes) so one launch "
    "runs them all, or raise the batch so each kernel has more work.",
    """
    model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs over the compiled kernels
    loader = DataLoader(ds, batch_size=64)                 # or: more work per kernel
    """,
)
#: Compile with CUDA graphs, or capture a static ``what`` (step, forward) by hand: the snippet of the fixes below.
_GRAPH_CODE = """
    model = torch.compile(model, mode="reduce-overhead")      # fusion + CUDA graphs

    # or capture a static {what} by hand
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_in)
    static_in.copy_(batch); g.replay()
"""
#: The PyTorch fix without the optimizer advice, for a model already on the foreach or fused optimizer.
FIX_OPTIMIZER_IN_USE = Fix(
    "Give each launch more work: larger batches; fuse elementwise chains with `torch.compile`; replay the step as a "
    "CUDA graph (`mode=\"reduce-overhead\"` or `torch.cuda.graphs`) when shapes are static. (The optimizer already "
    "runs its foreach or fused implementation.)",
    _GRAPH_CODE.format(what="step"),
)
#: For inference (no backward, no optimizer on the rank): the class fix without its optimizer advice.
FIX_INFERENCE = Fix(
    "Give each launch more work: batch more requests per forward pass; fuse elementwise chains with `torch.compile`; "
    "replay the forward as a CUDA graph (`mode=\"reduce-overhead\"` or `torch.cuda.graphs`) when shapes are static "
    "(pad to a few fixed sizes if they vary).",
    _GRAPH_CODE.format(what="forward"),
)


def _fits(used: frozenset, inference: bool = False) -> dict:
    """The PyTorch fix replaced where the trace shows part of the class fix is already in use, or does not apply (an
    inference run has no optimizer to fuse)."""
    if "compiled" in used and "graphs" not in used:
        return {"pytorch": FIX_COMPILED}
    if used & {"foreach_optimizer", "fused_optimizer"}:
        return {"pytorch": FIX_OPTIMIZER_IN_USE}
    if inference:
        return {"pytorch": FIX_INFERENCE}
    return {}
