"""TI001: the GPU sat idle for long stretches, and what the host was doing instead."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.vocab.buckets import CAUSE, IDLE_BUCKETS, WARMUP_BUCKET
from traceinsight.rule_api import Fix, Instance, Location, Option, Rule, Severity, fmt_ns

from traceinsight.vocab.intervals import Coverage, merge_intervals
from traceinsight.vocab.patterns import OPTIMIZER
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.rulelib.enclosing import host_columns
from traceinsight.rulelib.gaps import gap_columns, ledger_gap_columns, request_boundary_gaps
from traceinsight.vocab.masks import name_mask
from traceinsight.rulelib.names import kind_mask, short_name
from traceinsight.derive.steady import may_match
from traceinsight.rulelib.warmup import gap_warmup_ns
from traceinsight.rulelib import cpu_only_ops, in_use, memo

#: Shortest framework op that counts as CPU work when it launches nothing (a long gap's own floor, 100 µs): the
#: short ops of eager dispatch (views, reshapes, empty tensors) launch nothing either, but are dispatch, not work.
MIN_CPU_WORK_NS = LAUNCH_GAP_NS

CAUSE_OPT = "optimizer step"  # not a bucket: names host-caused idle more precisely
#: Not a bucket either: host-busy idle spent in framework ops that made no GPU call (``rulelib.cpu_only_ops``):
#: the host computes on the CPU, which compiling the model does not change
CAUSE_CPU_WORK = "CPU work in ops that make no GPU call"
#: The words for each idle bucket of the time ledger (``traceinsight.vocab.buckets``), which decides what every
#: nanosecond of a gap was.
BUCKET_CAUSE = {b: CAUSE[b] for b in IDLE_BUCKETS}
CAUSE_DATA = BUCKET_CAUSE["idle_data_wait"]
CAUSE_SYNC = BUCKET_CAUSE["idle_host_sync"]
CAUSE_LAUNCH = BUCKET_CAUSE["idle_launch_bound"]
CAUSE_CPU = BUCKET_CAUSE["idle_host_busy"]
CAUSE_UNTRACED = BUCKET_CAUSE["idle_untraced"]
CAUSE_K2K = BUCKET_CAUSE["idle_gpu_dependency"]
CAUSE_WARMUP = BUCKET_CAUSE[WARMUP_BUCKET]
CAUSE_UNKNOWN = BUCKET_CAUSE["idle_other"]
CAUSES = (CAUSE_DATA, CAUSE_OPT, CAUSE_CPU_WORK, CAUSE_SYNC, CAUSE_LAUNCH, CAUSE_CPU, CAUSE_UNTRACED, CAUSE_K2K, CAUSE_WARMUP, CAUSE_UNKNOWN)
#: The finding category (rule_api.CATEGORIES) of the rule that owns each gap cause, for root-cause linking.
CAUSE_CATEGORY = {CAUSE_DATA: "input_pipeline", CAUSE_SYNC: "host_sync"}
#: The fix each cause of the gaps calls for, per framework (the finding leads with its top cause's; the class
#: fixes cover the rest). Data loading wants a faster input pipeline, a sync wants the sync gone, host busy wants
#: fewer launches (compilation, CUDA graphs), the optimizer step a fused optimizer, untraced time a closer look.
CAUSE_FIXES: dict[str, dict[str, Fix]] = {
    CAUSE_DATA: {
        "pytorch": Fix(
            "The GPU waits for the next batch: load it in worker processes, pin it and prefetch it, so it is ready "
            "when the step asks.",
            """
            loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True,
                                                 persistent_workers=True, prefetch_factor=4)
            for x, y in loader:
                x = x.cuda(non_blocking=True)
            """,
        ),
        "tensorflow": Fix(
            "The GPU waits for the next batch: parallel map, cache and prefetch (to the GPU).",
            """
            ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).cache().prefetch(tf.data.AUTOTUNE)
            ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
            """,
        ),
        "jax": Fix(
            "The device waits for the next batch: prepare batches in background threads and keep two on the device.",
            """
            batches = flax.jax_utils.prefetch_to_device(iter(ds), size=2)
            """,
        ),
    },
    CAUSE_SYNC: {
        "pytorch": Fix(
            "The queue drains while the host waits in a sync: keep values on the GPU inside the step and read them "
            "every N steps (see TI002).",
            """
            torch.cuda.set_sync_debug_mode("warn")   # names every implicit sync
            running_loss += loss.detach()            # not loss.item() every step
            """,
        ),
        "tensorflow": Fix(
            "The queue drains while the host reads results: no `.numpy()` or Python checks of tensors inside the step.",
            """
            @tf.function
            def train_step(x, y): ...
            """,
        ),
        "jax": Fix(
            "The device idles while the host blocks on results: do not call `.block_until_ready()`, `float(x)` or "
            "`jax.device_get` every step; fetch metrics every N steps.",
            """
            if step % 100 == 0:
                print(jax.device_get(metrics))
            """,
        ),
    },
    CAUSE_CPU: {
        "pytorch": Fix(
            "The host is busy in framework ops between launches (eager dispatch): compile the model so the step is a "
            "few fused kernels, and capture it with CUDA graphs when the shapes are static.",
            """
            model = torch.compile(model, mode="reduce-overhead")   # fused kernels + CUDA graphs
            """,
        ),
        "tensorflow": Fix(
            "The host is busy dispatching eager ops (`TFE_Py_FastPathExecute`): wrap the step in `tf.function` and "
            "let XLA compile it.",
            """
            train_step = tf.function(train_step, jit_compile=True)
            """,
        ),
        "jax": Fix(
            "The host dispatches op by op: jit the whole step and donate the buffers it replaces.",
            """
            train_step = jax.jit(train_step, donate_argnums=(0,))
            """,
        ),
    },
    CAUSE_OPT: {
        "pytorch": Fix(
            "The optimizer step runs as many small kernels launched from Python: use the fused (or foreach) "
            "implementation.",
            """
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            """,
        ),
        "tensorflow": Fix(
            "The optimizer update runs op by op: compile the step with XLA so the update is fused.",
            """
            train_step = tf.function(train_step, jit_compile=True)
            """,
        ),
        "jax": Fix(
            "Put the optimizer update inside the jitted step (optax), so it compiles into the same program.",
            """
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            """,
        ),
    },
}
CAUSE_FIXES[CAUSE_CPU_WORK] = {
    "pytorch": Fix(
        "The host computes on the CPU inside the step (framework ops that make no GPU call, such as "
        "`torch.randn` of a CPU tensor or a transform of the batch) while the GPU waits: create such tensors on the "
        "GPU, or prepare them ahead of the step in DataLoader workers and copy them pinned and non-blocking.",
        """
        x = torch.randn(batch, n, device="cuda")            # made on the GPU, not torch.randn(batch, n).cuda()
        loader = DataLoader(ds, num_workers=4, pin_memory=True)
        for x, y in loader:
            x = x.cuda(non_blocking=True)
        """,
    ),
    "tensorflow": Fix(
        "Ops placed on the CPU run inside the step while the GPU waits: place them on the GPU, or move that work into "
        "the input pipeline (`map` with `num_parallel_calls`, `prefetch`) so it overlaps the step.",
        """
        ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        """,
    ),
    "jax": Fix(
        "The host computes between device calls (NumPy or host-side work in the step): do it inside the jitted "
        "function on the device, or prepare inputs ahead and keep them on the device.",
        """
        batches = flax.jax_utils.prefetch_to_device(iter(ds), size=2)
        """,
    ),
    "cuda": Fix(
        "The host computes between launches and the GPU waits: move that work to the GPU, or prepare the next input "
        "on another thread while the GPU runs (pinned buffers, `cudaMemcpyAsync` on a second stream).",
        """
        // worker thread fills h_next (cudaMallocHost) while the GPU processes the current batch
        cudaMemcpyAsync(d_in, h_next, bytes, cudaMemcpyHostToDevice, copy_stream);
        """,
    ),
}
CAUSE_FIXES[CAUSE_UNTRACED] = {
    **CAUSE_FIXES[CAUSE_CPU],
    "pytorch": Fix(
        "The host does work the trace does not show before the next launch: record Python stacks to see it "
        "(`with_stack=True`); if it is framework dispatch, compile the model.",
        """
        with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
            train_steps(5)
        model = torch.compile(model)
        """,
    ),
}

#: For a model already compiled and replayed as CUDA/HIP graphs: what is left is outside them.
_FIX_OUTSIDE_GRAPHS = Fix(
    "The model already runs compiled and as CUDA graphs, so the host-busy gaps are in the code outside them (eager "
    "ops before or between the graphed calls, Python hooks, logging, walks over the modules): compile and capture "
    "that code too, or move its Python work out of the step.",
    """
    encode = torch.compile(encode, mode="reduce-overhead")   # the eager part around the graphed model
    """,
)
#: For a program that already replays (or captures) CUDA/HIP graphs without torch.compile (a serving engine's own
#: graphs): what is left is the host code between the replays.
_FIX_BETWEEN_GRAPHS = Fix(
    "The model already runs as CUDA/HIP graph replays, so the host-busy gaps are the code between them (the "
    "scheduler or sampling step of a serving engine, eager ops around the graphed call, Python bookkeeping): "
    "shorten that path, capture more of the step in the graph, or overlap the host work with the previous replay.",
    """
    graph.replay()                      # the captured forward
    next_batch = scheduler.prepare()    # host work for the next step while this replay runs, not after it
    """,
)
#: For a Keras or custom TensorFlow step that already runs as a ``tf.function``: the host time left between calls
#: is the per-batch Python around them (Keras's loop, callbacks, logs read back), which only fewer calls remove.
#: A compiled model whose host is still busy between launches: the wrapper's own Python, which CUDA graphs remove.
_FIX_COMPILED_HOST = Fix(
    "The model is already compiled and the host is still busy between launches (the compiled wrapper's own "
    "Python: guards, argument handling, the generated `call`): replay it as a CUDA graph "
    "(`mode=\"reduce-overhead\"`) so one launch runs the whole graph, or give each launch more work with a larger batch.",
    """
    model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs over the compiled step
    """,
)
_FIX_TF_STEPS_PER_CALL = Fix(
    "The step already runs as a `tf.function` (its `__inference_` function is in the trace), so the idle is the "
    "Python between two calls: Keras's per-batch loop (callbacks, logs and metrics read back, its end-of-batch "
    "checks, each a few eager ops or a copy to the host) or your own loop's. Run several steps per call, so that "
    "Python runs once per N batches: `model.compile(..., steps_per_execution=N)`, or a `tf.range` loop over N "
    "batches inside your `tf.function`; keep callbacks that read tensors every batch out of the loop. (Gaps inside "
    "the call itself are the executor dispatching the graph's ops one by one: compile it with XLA, `jit_compile=True`.)",
    """
    model.compile(optimizer="adam", loss=loss_fn, steps_per_execution=32)   # 32 batches per train_function call

    @tf.function
    def train_steps(it, n):
        for _ in tf.range(n):          # a graph loop: one call runs n steps
            train_step(next(it))
    """,
)
#: Fixes for what the trace shows is already in use (``rulelib.in_use``), per framework: never advise it again.
#: framework -> (cause, techniques in use) -> fix; the first entry whose techniques are all in use wins.
FIX_IN_USE: dict[str, dict[tuple[str, str], Fix]] = {
    "pytorch": {
        (CAUSE_CPU, "compiled+graphs"): _FIX_OUTSIDE_GRAPHS,
        (CAUSE_UNTRACED, "compiled+graphs"): _FIX_OUTSIDE_GRAPHS,
        (CAUSE_CPU, "graphs"): _FIX_BETWEEN_GRAPHS,
        (CAUSE_UNTRACED, "graphs"): _FIX_BETWEEN_GRAPHS,
        (CAUSE_CPU_WORK, "graphs"): _FIX_BETWEEN_GRAPHS,
        (CAUSE_DATA, "loader_workers"): Fix(
            "The GPU waits for the next batch although the DataLoader already loads in worker processes: they are too "
            "few or too slow. Raise `num_workers` towards the CPU cores per GPU and `prefetch_factor`, or make each "
            "sample cheaper (decode once and cache, augment on the GPU) (see TI005).",
            """
            loader = DataLoader(ds, batch_size=256, num_workers=os.cpu_count() // torch.cuda.device_count(),
                                prefetch_factor=8, persistent_workers=True, pin_memory=True)
            """,
        ),
        (CAUSE_OPT, "fused_optimizer"): Fix(
            "The optimizer step is already fused (`fused=True`) and still leaves the GPU idle while the host steps it: "
            "compile the step with the optimizer inside (`torch.compile`), or capture the whole iteration, optimizer "
            "included, as a CUDA graph so its launches cost nothing.",
            """
            @torch.compile(mode="reduce-overhead")            # the optimizer step compiled and replayed as a graph
            def opt_step():
                opt.step()
            """,
        ),
        (CAUSE_OPT, "foreach_optimizer"): Fix(
            "The optimizer already runs the foreach implementation (`_foreach_` ops, a few kernels per parameter group), "
            "and the host still leaves the GPU idle while it steps: switch to the fused one (one kernel per group), "
            "or compile the optimizer step.",
            """
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)   # instead of foreach=True
            """,
        ),
        (CAUSE_CPU, "compiled"): _FIX_COMPILED_HOST,
        (CAUSE_UNTRACED, "compiled"): _FIX_COMPILED_HOST,
    },
    "tensorflow": {
        (CAUSE_CPU, "tf_function"): _FIX_TF_STEPS_PER_CALL,
        (CAUSE_UNTRACED, "tf_function"): _FIX_TF_STEPS_PER_CALL,
        (CAUSE_CPU_WORK, "tf_function"): _FIX_TF_STEPS_PER_CALL,  # eager CPU ops between calls: the per-batch loop's
        (CAUSE_SYNC, "tf_function"): Fix(
            "The step already runs as a `tf.function`; the queue drains while the host reads results between calls "
            "(Keras's per-batch logs, a callback's or a metric's `.numpy()`), each read waiting for the GPU. Run "
            "several steps per call (`steps_per_execution`) so the reads happen once per N batches, and read "
            "metrics back every N steps.",
            """
            model.compile(optimizer="adam", loss=loss_fn, metrics=["accuracy"], steps_per_execution=32)
            if step % 100 == 0:
                print(float(train_loss.result()))   # read back every N steps, not every batch
            """,
        ),
    },
}


def cause_fixes(views, cause: str) -> dict[str, Fix]:
    """The fixes of a top cause, each framework's replaced where the trace shows its advice is already in use."""
    out = dict(CAUSE_FIXES.get(cause, {}))
    used = in_use(views)
    for framework, table in FIX_IN_USE.items():
        for (c, techniques), fx in table.items():
            if c == cause and set(techniques.split("+")) <= used:
                out[framework] = fx
                break
    return out


#: Host-caused buckets a covering optimizer range names more precisely (the host was late because it stepped
#: the optimizer); the ledger has no optimizer bucket of its own.
_OPT_REFINES = ("idle_host_busy", "idle_untraced")
#: Host row kinds shown as "what the host did" in a gap.
_ACTIVITY_KINDS = ("cpu_op", "python", "annotation", "runtime")


def attribute_gaps(views, pos: np.ndarray) -> dict[str, np.ndarray]:
    """The ledger's account of the steady-state idle of the gaps at positions ``pos`` of ``views.gaps``: ns per
    cause and each gap's cause.

    The ledger books every nanosecond of a gap in one idle bucket (data wait, sync drain, warm-up, a GPU-side
    dependency when the next work was already queued, host busy or untraced when it was launched late, ...).
    Its warm-up ns are one-time work the verdict sets aside, so they are no cause here: the gap's cause is its
    largest other bucket. Only the optimizer is named here: a host-busy or untraced gap that optimizer ranges
    cover for at least half is the optimizer step's (it then takes those buckets' ns).
    Returns arrays aligned with ``pos``: ``cause``, ``next_launch_end_ns`` and one ns array per cause (warm-up
    always 0). Arrays, not a frame: TI001 reads them for tens of thousands of gaps and builds rows only for the
    few it shows.
    """
    n = len(pos)
    lg = ledger_gap_columns(views)  # a gap the ledger lacks (matched by a merge) books 0

    def column(b: str) -> np.ndarray:
        return lg[b][pos] if b in lg else np.zeros(n, np.int64)

    per_bucket = np.vstack([column(b) for b in IDLE_BUCKETS]) if n else np.zeros((len(IDLE_BUCKETS), 0), np.int64)
    ns = {c: np.zeros(n, np.int64) for c in CAUSES}
    for i, b in enumerate(IDLE_BUCKETS):
        ns[BUCKET_CAUSE[b]] += per_bucket[i]
    booked = per_bucket.sum(axis=0)
    ns[CAUSE_UNKNOWN] += np.maximum(gap_columns(views)["dur_ns"][pos] - booked, 0)  # a gap the ledger lacks
    ns[CAUSE_WARMUP][:] = 0
    cause_bucket = lg["cause"][pos]
    warm = per_bucket[IDLE_BUCKETS.index(WARMUP_BUCKET)] > 0
    if warm.any():  # the ledger's cause counts warm-up; here the largest steady-state bucket is the cause
        steady = per_bucket[:, warm].copy()
        steady[IDLE_BUCKETS.index(WARMUP_BUCKET)] = -1
        cause_bucket[warm] = np.asarray(IDLE_BUCKETS, dtype=object)[steady.argmax(axis=0)]
    code, uniq = pd.factorize(cause_bucket)  # the words looked up once per distinct bucket (-1: none)
    words = np.asarray([BUCKET_CAUSE.get(c, CAUSE_UNKNOWN) for c in uniq.tolist()] + [CAUSE_UNKNOWN], dtype=object)
    cause = words[code]
    refine = np.isin(cause_bucket, _OPT_REFINES)
    if refine.any():
        refine[refine] = _optimizer_covers_half(views, pos[refine])
        for b in _OPT_REFINES:
            moved = np.where(refine, ns[BUCKET_CAUSE[b]], 0)
            ns[CAUSE_OPT] += moved
            ns[BUCKET_CAUSE[b]] -= moved
        cause[refine] = CAUSE_OPT
    cpu = (cause_bucket == "idle_host_busy") & (cause != CAUSE_OPT)
    if cpu.any():
        cpu[cpu] = _cpu_work_covers_half(views, pos[cpu])
        moved = np.where(cpu, ns[CAUSE_CPU], 0)
        ns[CAUSE_CPU_WORK] += moved
        ns[CAUSE_CPU] -= moved
        cause[cpu] = CAUSE_CPU_WORK
    return {"cause": cause, "next_launch_end_ns": lg["next_launch_end_ns"][pos], **ns}


def _cpu_work_covers_half(views, pos: np.ndarray) -> np.ndarray:
    """Per host-busy gap (positions in ``views.gaps``): do framework ops of its rank that made no GPU call
    (``rulelib.cpu_only_ops``, each at least a long gap's length) cover at least half of it?"""
    out = np.zeros(len(pos), dtype=bool)
    ops = cpu_only_ops(views, MIN_CPU_WORK_NS)
    if not len(ops["start_ns"]):
        return out
    return _covers_half(views, pos, ops["rank"], ops["start_ns"], ops["end_ns"])


def _covers_half(views, pos: np.ndarray, o_rank: np.ndarray, o_start: np.ndarray, o_end: np.ndarray) -> np.ndarray:
    """Per gap (positions in ``views.gaps``): do the host ranges (o_rank, o_start, o_end) of its rank cover at least
    half of it (their union, overlaps counted once)?"""
    out = np.zeros(len(pos), dtype=bool)
    ga = gap_columns(views)
    g_rank = ga["rank"][pos]
    g_start, g_end, g_dur = (ga[c][pos] for c in ("start_ns", "end_ns", "dur_ns"))
    for rank in np.unique(g_rank):
        gm = g_rank == rank
        om = o_rank == rank
        if om.any():
            out[gm] = Coverage(o_start[om], o_end[om]).overlap(g_start[gm], g_end[gm]) * 2 >= g_dur[gm]
    return out


def _util_columns(util: pd.DataFrame, keys: list[tuple[int, int]], columns: tuple[str, ...]) -> list[np.ndarray]:
    """``columns`` of ``views.utilization`` for each (rank, device) in ``keys``, NaN for a device it lacks: what
    ``util.set_index(["rank", "device"]).reindex(keys)`` gives, looked up on arrays (a frame index per call was a
    fifth of this rule's time on a small rank)."""
    at: dict[tuple[int, int], int] = {}
    for i, k in enumerate(zip(util["rank"].tolist(), util["device"].tolist())):
        if k in at:  # a device listed twice: the frame's reindex says what that means
            u = util.set_index(["rank", "device"]).reindex(pd.MultiIndex.from_tuples(keys))
            return [u[c].to_numpy() for c in columns]
        at[k] = i
    rows = [at.get(k) for k in keys]
    out = []
    for c in columns:
        col = util[c].to_numpy()
        if all(r is not None for r in rows):
            out.append(col[np.array(rows, dtype=np.int64)])
        else:
            out.append(np.array([np.nan if r is None else col[r] for r in rows], dtype=np.result_type(col.dtype, np.float64)))
    return out


def _optimizer_covers_half(views, pos: np.ndarray) -> np.ndarray:
    """Per gap (positions in ``views.gaps``): do optimizer host ranges (``OPTIMIZER``) of its rank cover at least
    half of it?"""
    out = np.zeros(len(pos), dtype=bool)
    host = views.host_events
    names = host["name"]
    if not may_match(names, OPTIMIZER):  # no name of an optimizer step among the categories: no gap is one
        return out
    m = np.flatnonzero(name_mask(names, OPTIMIZER))  # few rows: their kind is tested alone
    if len(m):
        m = m[kind_mask(host[["kind"]].iloc[m], ("cpu_op", "python", "annotation", "runtime", "other"))]
    if not len(m):
        return out
    hc = host_columns(views)
    return _covers_half(views, pos, hc["rank"][m], hc["start_ns"][m], hc["end_ns"][m])


class GpuIdleGaps(Rule):
    code = "TI001"
    category = "gpu_idle"
    name = "gpu-idle-gaps"
    severity = Severity.WARNING
    summary = "The GPU sits idle in long gaps between its work; each gap is traced to what the host was doing."
    why = """
    Every microsecond the GPU has nothing queued is lost throughput you already pay for. Short gaps between
    back-to-back kernels are normal; gaps of hundreds of microseconds mean the host did not keep the launch queue
    full: it was loading data, blocked in a synchronization, stepping the optimizer in Python, or simply slower
    than the GPU.
    """
    definition = """
    Per (rank, device), GPU activity (kernels, copies, memsets on all streams) is merged into busy intervals; the
    *window* runs from the first to the last activity. A gap is a hole between busy intervals, and a *long gap* one
    of at least `min_gap_us` (default **100 µs**). The impact is the summed duration of the long gaps, and it is
    graded like every finding on the common scale (share of the device's window: error >= 20 %, warning >= 5 %,
    info >= 1 %), so idle that is large in total is reported even when it sits in a few gaps.

    Warm-up is left out, and the time ledger is its one home: every nanosecond the ledger books as warm-up
    (one-time work it measured against a later repetition; TI013 reports it, the verdict sets it aside) is
    removed from the gap it sits in, as if it had not happened. A gap counts only its other nanoseconds, is long
    when those reach `min_gap_us`, and a gap that is all warm-up is no gap here; the title's and
    `metrics["long_gap_idle_pct"]`'s share is of the steady state (the window less its warm-up,
    `metrics["warmup_excluded_ns"]`). So are left out, in an inference run, gaps that begin inside the sync
    closing a step (TI002: the request's result): the idle between two requests lengthens no request
    (``metrics["between_requests_ns"]``). `min_idle_pct` (default **1 %**, the scale's floor) is the smallest
    share of the steady state reported at all.

    Thresholds against peers: HTA's idle-time breakdown calls a same-stream gap under 30 µs "kernel wait"
    (`consecutive_kernel_delay=30`) and its critical-path analysis treats up to 1.5 ms as a plausible kernel-kernel
    dependency; TraceLens splits idle into micro/macro by `micro_idle_thresh_us`; Nsight Systems' `gpu_gaps`
    reports gaps over 500 ms, far too coarse for training steps of tens of ms. 100 µs is well above launch latency
    (5–20 µs) and same-stream kernel-to-kernel delay (< 30 µs), so only host-caused stalls count, yet small enough
    to catch per-step data-loading or sync stalls.

    What each gap was is read from the time ledger (`traceinsight.derive.ledger`), which books every nanosecond of a
    gap once: data loading (a data-wait range of the host), host synchronization (the gap began while the host
    was blocked in a sync: the queue drained under it; for as long as the call blocked, the rest of a longer gap
    being the host's work after it), a GPU-side dependency (the work ending the gap had been
    queued, its launch call had returned, before the gap began: the GPU waited on an event, another stream or a
    copy), host busy in traced CPU ops or untraced host time (the work was launched late), or unknown (no launch
    linked); warm-up is no cause here, it is left out. `metrics["cause_ns"]` sums these per cause; a gap's own
    cause (its timeline label and evidence row) is the one holding most of it. A host-busy or untraced gap that optimizer ranges
    (`Optimizer.step`, `apply_gradients`, ...) cover for at least half is named the optimizer step's; a host-busy gap that
    framework ops making no GPU call (no runtime or driver call on their thread inside them, each at least 100 µs:
    `torch.randn` of a CPU tensor, a CPU-side transform) cover for at least half is named CPU work, whose fix moves
    that work to the GPU or ahead of the step rather than compiling the model. In the
    evidence, `launch_returned_after_gap_start_us` is when the call that enqueued the work ending the gap
    returned, from the gap's start (negative: the work was queued before the GPU ran dry).
    """
    fix_pytorch = Fix(
        "Match the cause. Data loading: use worker processes, pinned memory and prefetching so the next batch is "
        "ready. Synchronization: remove `.item()`, `.cpu()`, `print(tensor)` from the step (see TI002). Host busy: "
        "batch more work per launch (TI003) or capture the step with CUDA graphs.",
        """
        loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True,
                                             persistent_workers=True, prefetch_factor=4)
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            y = y.cuda(non_blocking=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            running_loss += loss.detach()          # not loss.item() every step
        model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs when the host is the bottleneck
        """,
    )
    fix_tensorflow = Fix(
        "Overlap input with compute: parallel map, prefetch (to the GPU), cache; keep Python-side logging of "
        "tensors out of the step; compile the step with XLA when the host cannot keep up.",
        """
        ds = (tf.data.Dataset.from_tensor_slices(files)
              .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .batch(256).cache().prefetch(tf.data.AUTOTUNE))
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))

        @tf.function(jit_compile=True)
        def train_step(x, y): ...
        """,
    )

    fix_jax = Fix(
        "Jit the whole step (one compiled program instead of op-by-op dispatch), donate the buffers it replaces, "
        "and keep the next batch on the device before it is needed; read metrics back every N steps, not every step.",
        """
        train_step = jax.jit(train_step, donate_argnums=(0,))   # params/opt state updated in place
        batches = flax.jax_utils.prefetch_to_device(iter(ds), size=2)
        for batch in batches:
            state, metrics = train_step(state, batch)
        """,
    )

    fix_cuda = Fix(
        "Keep the GPU fed ahead of the host: stage inputs in pinned buffers (`cudaMallocHost`) and copy them with "
        "`cudaMemcpyAsync` on a second stream while the current batch computes; replace `cudaDeviceSynchronize` "
        "with events the next stream waits on; capture a fixed sequence of launches once as a CUDA graph.",
        """
        cudaStream_t copy, compute; cudaStreamCreate(&copy); cudaStreamCreate(&compute);
        cudaEvent_t ready; cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
        cudaMemcpyAsync(d_in[next], h_in[next], bytes, cudaMemcpyHostToDevice, copy);  // h_in from cudaMallocHost
        cudaEventRecord(ready, copy);
        kernel<<<grid, block, 0, compute>>>(d_in[cur], d_out);     // overlaps the copy above
        cudaStreamWaitEvent(compute, ready, 0);                      // no host-side cudaDeviceSynchronize
        """,
    )

    min_gap_us = Option(100.0, "Gaps shorter than this (µs) are normal launch/dependency latency and are ignored.")
    min_idle_pct = Option(1.0, "Report a device when its long gaps add up to at least this % of its steady state (window less warm-up).", max=100)
    top_n = Option(10, "Evidence rows: the largest gaps shown.", min=1)

    def check(self, ctx):
        v = ctx.views
        util = v.utilization
        if util.empty:
            return
        min_gap = int(self.min_gap_us * 1e3)
        # one-off start-up (the ledger's warm-up, TI013) is not steady-state idle: a gap counts only its other ns,
        # as if the warm-up had not happened (so a gap that is all warm-up is no gap here)
        # (on the gap arrays: a frame of every gap is never copied, only the long ones become rows)
        gaps = v.gaps
        ga = gap_columns(v)
        warmup = gap_warmup_ns(v)
        steady = ga["dur_ns"] - warmup
        warm_ns = _sum_by_device(ga, warmup)  # set aside on each device
        between = request_boundary_gaps(v, gaps)  # idle between inference requests lengthens no request
        between_ns = _sum_by_device(ga, np.where(between, steady, 0)) if between.any() else {}
        pick = np.flatnonzero(~between & (steady >= min_gap))
        if not len(pick):
            return
        # per device, on arrays (``views.gaps`` is sorted by rank and device: a device's long gaps are one run)
        p_rank, p_dev = ga["rank"][pick], ga["device"][pick]
        head = np.flatnonzero(np.r_[True, (p_rank[1:] != p_rank[:-1]) | (p_dev[1:] != p_dev[:-1])])
        bounds = np.r_[head, len(pick)]
        keys = list(zip(p_rank[head].tolist(), p_dev[head].tolist()))
        if len(set(keys)) != len(keys) or keys != sorted(keys):  # not one sorted run per device: put them in order
            order = np.lexsort((pick, p_dev, p_rank))
            pick, p_rank, p_dev = pick[order], p_rank[order], p_dev[order]
            head = np.flatnonzero(np.r_[True, (p_rank[1:] != p_rank[:-1]) | (p_dev[1:] != p_dev[:-1])])
            bounds = np.r_[head, len(pick)]
            keys = list(zip(p_rank[head].tolist(), p_dev[head].tolist()))
        long_ns = np.add.reduceat(steady[pick], head)
        window, busy_of = _util_columns(util, keys, ("window_ns", "busy_pct"))
        warmup_dev = np.array([int(warm_ns.get(k, 0)) for k in keys], dtype=np.int64)
        # shares of the steady state: the window less its warm-up, as the verdict reads it
        steady_window = window - warmup_dev
        long_pct = 100.0 * long_ns / np.maximum(steady_window, 1)
        hit = np.flatnonzero(long_pct >= self.min_idle_pct)
        if not len(hit):
            return
        # the hit devices' long gaps, attributed at once (positions in ``views.gaps``, in device order)
        sel = np.concatenate([np.arange(bounds[j], bounds[j + 1]) for j in hit])
        attributed = attribute_gaps(v, pick[sel])
        first = 0
        multi = None  # several ranks or devices: findings name the rank (asked once)
        for j in hit.tolist():
            rank, device = int(keys[j][0]), int(keys[j][1])
            n_gaps = int(bounds[j + 1] - bounds[j])
            mine = slice(first, first + n_gaps)  # this device's rows of ``attributed``
            first += n_gaps
            pos = pick[bounds[j] : bounds[j + 1]]
            by_cause = [(c, int(attributed[c][mine].sum())) for c in CAUSES]
            by_cause = sorted((kv for kv in by_cause if kv[1] > 0), key=lambda kv: -kv[1])  # stable: ties in CAUSES order
            total = int(long_ns[j])
            shares = {c: round(100.0 * ns / total, 1) for c, ns in by_cause}
            top_cause = by_cause[0][0]
            g_start, g_end, g_dur = ga["start_ns"][pos], ga["end_ns"][pos], ga["dur_ns"][pos]
            cause = attributed["cause"][mine]
            s_pos, w_pos = steady[pos], warmup[pos]
            top = np.argsort(-s_pos, kind="stable")[: int(self.top_n)]  # the largest, ties in time order
            evidence = self._evidence(v, rank, g_start[top], g_end[top], g_dur[top], w_pos[top], cause[top],
                                      attributed["next_launch_end_ns"][mine][top])
            warm = int(warmup_dev[j])
            window_ns, busy_pct, pct = int(window[j]), float(busy_of[j]), float(long_pct[j])
            # the largest gap as counted here: its steady-state part (the evidence's order), said to hold warm-up
            # when it does, so the figure is never a stretch of one-time work the title leaves out
            big = int(top[0])  # top_n >= 1: the first of the largest
            big_warm = int(w_pos[big])
            largest = f"The largest gap lasted {fmt_ns(int(s_pos[big]))}" + (
                f" once its {fmt_ns(big_warm)} of warm-up is left out." if big_warm else ".")
            cause_words = ", ".join(f"{c} {shares[c]:.0f} %" for c, _ in by_cause[:3])
            if multi is None:
                multi = len(ctx.meta.ranks) > 1 or util["device"].nunique() > 1
            where = f"rank {rank} GPU {device}" if multi else f"GPU {device}"
            yield ctx.finding(
                fixes={**type(self).fixes(), **cause_fixes(v, top_cause)},
                title=f"{where} idle {pct:.0f} % of the time in long gaps, mostly {top_cause}",
                message=(
                    f"{where} was idle for {fmt_ns(total)} in {n_gaps} gaps of "
                    f"{self.min_gap_us:g} µs or more, {pct:.1f} % of its {fmt_ns(window_ns)} active window "
                    f"(all idle time: {100.0 - busy_pct:.1f} %). By cause: {cause_words}. {largest}"
                    if not warm
                    else f"{where} was idle for {fmt_ns(total)} in {n_gaps} gaps of {self.min_gap_us:g} µs or more, "
                    f"{pct:.1f} % of its {fmt_ns(int(steady_window[j]))} steady state: its {fmt_ns(window_ns)} active "
                    f"window less {fmt_ns(warm)} of warm-up (one-time start-up work, TI013), which is left out. By cause: "
                    f"{cause_words}. {largest}"
                ),
                impact_ns=total,
                evidence=evidence,
                instances=_instances(g_start, g_end, rank, device, cause),
                location=Location(rank=rank, device=device),
                metrics={
                    "idle_pct": round(100.0 - busy_pct, 3),
                    "long_gap_idle_pct": round(pct, 3),
                    "long_gap_ns": total,
                    "long_gaps": n_gaps,
                    "window_ns": window_ns,
                    "cause_ns": dict(by_cause),
                    "cause_pct": shares,
                    "top_cause": top_cause,
                    "idle_by_category": _by_category(by_cause),
                    "between_requests_ns": int(between_ns.get((rank, device), 0)),
                    "warmup_excluded_ns": warm,
                },
                key=f"rank{rank}-gpu{device}",
            )

    @staticmethod
    def _evidence(views, rank: int, start: np.ndarray, end: np.ndarray, dur: np.ndarray, warmup: np.ndarray, cause: np.ndarray,
                  next_launch_end: np.ndarray) -> pd.DataFrame:
        """The largest gaps of one device as rows for people: when, how long, why, what the host did. Given as
        arrays of those gaps (no frame of them is made: only the rows shown become one)."""
        rows = []
        warm_col = bool(warmup.any())  # shown only where some gap held warm-up
        cols = [a.tolist() for a in (start, end, dur, warmup, cause, next_launch_end)]
        for start_ns, end_ns, dur_ns, warmup_ns, cause, nl in zip(*cols):
            activity = _host_activity(views, int(rank), int(start_ns), int(end_ns))
            rows.append(
                {
                    "start_ms": start_ns / 1e6,
                    "duration_us": dur_ns / 1e3,
                    **({"warmup_us": warmup_ns / 1e3} if warm_col else {}),
                    "cause": cause,
                    "host_activity": activity,
                    "launch_returned_after_gap_start_us": None if nl != nl else (nl - start_ns) / 1e3,
                }
            )
        return pd.DataFrame(rows)


def _activity_index(views) -> dict:
    """The events' columns ``_host_activity`` reads on the few rows a gap overlaps: rank, device, start, end, the
    kind's and the name's codes, and which kind codes are ``_ACTIVITY_KINDS``. Plain arrays of the events (no copy
    of a million rows is made: a gap's rows are found on the views' zone map of the events and tested here).
    Cached: TI001 asks once per evidence row."""
    def build() -> dict:
        ev = views.events
        kind, names = ev["kind"], ev["name"]
        if isinstance(kind.dtype, pd.CategoricalDtype):
            kind_codes = kind.array.codes
            wanted = np.isin(np.asarray(kind.cat.categories, dtype=object), list(_ACTIVITY_KINDS))
        else:
            kind_codes, wanted = None, None
        start = ev["start_ns"].to_numpy()
        out = {
            "rank": ev["rank"].to_numpy(),
            "device": ev["device"].to_numpy(),
            "start": start,
            "dur": ev["dur_ns"].to_numpy(),
            "kind": kind.to_numpy() if kind_codes is None else kind_codes,
            "wanted": wanted,
            "names": names,
            # the name codes and categories once (``.cat.codes`` makes a Series each time it is read)
            "name_codes": names.array.codes if isinstance(names.dtype, pd.CategoricalDtype) else None,
            "name_cats": names.dtype.categories if isinstance(names.dtype, pd.CategoricalDtype) else None,
            "pid": ev["pid"].to_numpy(),
            "tid": ev["tid"].to_numpy(),
            "python": kind_mask(ev, "python"),
            "thread_name": ev["thread_name"] if "thread_name" in ev.columns else None,
        }
        ln = views.launches
        if not ln.empty:  # the launches by GPU start: which thread issued the work that ended a gap
            order = np.lexsort((ln["gpu_start_ns"].to_numpy(), ln["rank"].to_numpy()))
            out["ln_rank"] = ln["rank"].to_numpy()[order]
            out["ln_gpu"] = ln["gpu_start_ns"].to_numpy()[order]
            out["ln_pid"] = ln["pid"].to_numpy()[order]
            out["ln_tid"] = ln["tid"].to_numpy()[order]
        return out

    return memo(views, "TI001.activity", build)


def _thread_label(idx: dict, row: int, tid) -> str:
    """A thread as the reader can find it: its id when that is an OS thread id; its recorded name when the id is a
    64-bit line key (XPlane numbers its lines with hashes such as -1460582628198894068)."""
    names = idx["thread_name"]
    if names is not None and abs(int(tid)) >= 2**31:
        name = names.iloc[row]
        if isinstance(name, str) and name:
            return name
    return str(tid)


def _host_activity(views, rank: int, start: int, end: int) -> str:
    """The three host names with the most time inside [start, end) on the rank, with that time.

    Host rows are the events off any device; those of the activity kinds with a name count. The rows overlapping
    the gap come from the views' zone map of the events (``Views.events_overlapping``, which the HTML report's
    close-ups use too): a gap costs a look at its own few rows, never a pass over (or a sort of) every host row.
    Names are grouped on their category codes, in code order, so the largest three (ties: the earlier code) are
    those a groupby by name would give."""
    idx = _activity_index(views)
    k = views.events_overlapping(start, end)
    k = k[(idx["device"][k] < 0) & (idx["rank"][k] == rank)]
    busy = _launching_thread(idx, rank, end)
    if busy is not None:
        act = _activity_rows(idx, k)
        if not _holds(idx, act, busy, start, end):
            busy = _busiest_thread(idx, act, start, end)  # the launcher held little of the gap
    lead = ""
    if busy is not None:
        # the thread that issued the work ending the gap was the busy one (it held the GIL, it launched next); other
        # threads' ranges (a DataLoader thread sleeping in threading.py's wait) say nothing about the gap
        mine = k[(idx["pid"][k] == busy[0]) & (idx["tid"][k] == busy[1])]
        if len(mine):
            k = mine
            lead = f"thread {_thread_label(idx, mine[0], busy[1])}: "
            frame = _innermost_frame(idx, k, (start + end) // 2)
            if frame:
                lead += f"in {frame}; "
    k = _activity_rows(idx, k)
    names = idx["names"]
    if idx["name_codes"] is not None:
        c = idx["name_codes"][k].astype(np.int64)
        cats = idx["name_cats"]
    else:
        c, cats = pd.factorize(names.to_numpy()[k], sort=True)
        c = c.astype(np.int64)
    keep = c >= 0  # a row without a name is dropped, as a groupby by name drops it
    k, c = k[keep], c[keep]
    if not len(k):
        return lead + "(nothing traced)"
    s = idx["start"][k]
    e = s + idx["dur"][k]
    ov = np.minimum(e, end) - np.maximum(s, start)
    codes, inv = np.unique(c, return_inverse=True)
    sums = np.zeros(len(codes), np.int64)
    np.add.at(sums, inv.reshape(-1), ov)
    top = np.argsort(-sums, kind="stable")[:3]  # largest first, ties in code order (as Series.nlargest keeps them)
    return lead + "; ".join(f"{short_name(n, 60)} ({fmt_ns(int(t))})" for n, t in zip(np.asarray(cats, dtype=object)[codes[top]].tolist(), sums[top].tolist()))


def _activity_rows(idx: dict, k: np.ndarray) -> np.ndarray:
    """The rows among ``k`` of the kinds that say what the host did (``_ACTIVITY_KINDS``: not step markers)."""
    if idx["wanted"] is not None:
        return k[idx["wanted"][idx["kind"][k]] & (idx["kind"][k] >= 0)]
    return k[np.isin(idx["kind"][k], list(_ACTIVITY_KINDS))]


def _holds(idx: dict, k: np.ndarray, thread: tuple[int, int], start: int, end: int) -> bool:
    """Whether ``thread`` held at least a quarter of the gap: a runtime that launches from threads of its own (JAX's
    PJRT stream threads) holds only the launch call there, while the Python thread dispatching the ops holds the gap.
    Its rows' overlaps with the gap are summed (nested rows count each): a quick test, erring towards keeping the
    launching thread; ``_busiest_thread``, which picks another, merges them."""
    mine = k[(idx["pid"][k] == thread[0]) & (idx["tid"][k] == thread[1])]
    s = idx["start"][mine]
    held = int(np.clip(np.minimum(s + idx["dur"][mine], end) - np.maximum(s, start), 0, None).sum())
    return 4 * held >= end - start


def _busiest_thread(idx: dict, k: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """(pid, tid) of the host thread whose rows cover most of the gap (the innermost row at a time counts, so deep
    nesting does not outweigh a thread's time), None without host rows."""
    if not len(k):
        return None
    pairs = sorted(set(zip(idx["pid"][k].tolist(), idx["tid"][k].tolist())))
    best, best_ns = None, -1
    for p, t in pairs:
        mine = k[(idx["pid"][k] == p) & (idx["tid"][k] == t)]
        s = idx["start"][mine]
        a, b = merge_intervals(np.maximum(s, start), np.minimum(s + idx["dur"][mine], end))
        ns = int(np.clip(b - a, 0, None).sum())
        if ns > best_ns:
            best, best_ns = (int(p), int(t)), ns
    return best


def _launching_thread(idx: dict, rank: int, end: int) -> tuple[int, int] | None:
    """(pid, tid) of the launch call whose GPU work started first at or after ``end`` on the rank, or None."""
    if "ln_rank" not in idx:
        return None
    lo, hi = np.searchsorted(idx["ln_rank"], [rank, rank + 1])
    j = lo + np.searchsorted(idx["ln_gpu"][lo:hi], end)
    if j >= hi:
        return None
    return int(idx["ln_pid"][j]), int(idx["ln_tid"][j])


def _innermost_frame(idx: dict, k: np.ndarray, at: int) -> str:
    """The innermost Python frame of those rows running at ``at`` (the latest to start), shortened; "" if none."""
    py = k[idx["python"][k]]
    if not len(py):
        return ""
    s = idx["start"][py]
    py = py[(s <= at) & (s + idx["dur"][py] >= at)]
    if not len(py):
        return ""
    inner = py[np.argmax(idx["start"][py])]
    return short_name(str(idx["names"].iloc[inner]), 80)


#: Up to this many gaps a finding's instances are handed over as ``Instance`` objects; above it as a frame of
#: columns (which stays columns). Both give the same instances: the frame's fixed cost is what a small rank pays.
_FEW_INSTANCES = 64


def _instances(start: np.ndarray, end: np.ndarray, rank: int, device: int, cause: np.ndarray) -> "list[Instance] | pd.DataFrame":
    """One device's long gaps as a finding's instances, labelled with their cause."""
    if len(start) <= _FEW_INSTANCES:
        # as the frame's would read: a negative rank or device is unknown (None)
        r, d = (rank if rank >= 0 else None), (device if device >= 0 else None)
        return [Instance(s, e, r, d, str(c)) for s, e, c in zip(start.tolist(), end.tolist(), cause.tolist())]
    return pd.DataFrame({"start_ns": start, "end_ns": end, "rank": np.full(len(start), rank), "device": np.full(len(start), device), "label": cause})


def _sum_by_device(ga: dict[str, np.ndarray], values: np.ndarray) -> dict:
    """{(rank, device): sum of ``values``} over the rows of ``views.gaps`` (``gap_columns``; sorted by rank and device:
    a device's rows are one run, summed at once), exact integer sums."""
    r, d = ga["rank"], ga["device"]
    if not len(r):
        return {}
    head = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1])])
    sums = np.add.reduceat(np.asarray(values, np.int64), head)
    out: dict = {}
    for key, x in zip(zip(r[head].tolist(), d[head].tolist()), sums.tolist()):
        out[key] = out.get(key, 0) + x
    return out


def _by_category(by_cause: list[tuple[str, int]]) -> dict[str, int]:
    """Idle ns per finding category whose rule owns the cause (data loading -> input_pipeline, ...)."""
    out: dict[str, int] = {}
    for cause, ns in by_cause:
        cat = CAUSE_CATEGORY.get(str(cause))
        if cat:
            out[cat] = out.get(cat, 0) + int(ns)
    return out
