"""TI012: the trace holds too little GPU work to judge the run (start-up only, graph capture, a cut profile)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.rulelib.names import count_matching, kind_mask
from traceinsight.vocab.intervals import pair_opens
from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import CAPTURE_BEGIN, CAPTURE_END, GRAPH_CAPTURE_CALL, LAUNCH_CALL


class LittleGpuWork(Rule):
    code = "TI012"
    name = "too-little-gpu-work"
    category = "trace_quality"
    severity = Severity.WARNING
    summary = "Too little GPU work was recorded to judge the run: its busy % and gaps describe start-up or a capture, not a workload."
    why = """
    A verdict such as "compute-bound, 100 % busy" or "idle 98 %" means something only over real work. A trace
    with a few microseconds of kernels (a CUDA/HIP graph being *captured*, whose launches are recorded but not
    executed; a capture stopped during start-up; a single test kernel) has a busy % of whatever the few events
    happen to give. Performance findings on it are kept at info and the verdict says the trace cannot be judged.
    """
    definition = """
    Reported when all devices together were busy less than `min_busy_us` (default **100 µs**) in total, or ran
    fewer than `min_gpu_ops` (default **10**, the ledger verdict's limit too) kernels, copies and memsets adding up to less than `few_ops_busy_us`
    (default **1000 µs**): too little to form a pattern (a busy % over two kernels says nothing; a few long
    operations still show where the time goes), so the trace holds start-up, a single test or a capture rather
    than a workload in steady state. Also reported (whatever the amounts) when graph capture is seen: the host recorded at least `capture_ratio` (default **5**) times more
    kernel launches than kernels ran (and at least 20), or called `cudaStreamBeginCapture` /
    `cudaGraphInstantiate` and recorded more launches than kernels ran (one capture among steps whose kernels
    run, as XLA and `torch.compile` do while warming up, is warm-up, not a capture window). This is a trace-quality finding: never a performance verdict, not graded by cost;
    while it stands, performance findings are capped at info.
    """
    fix_pytorch = Fix(
        "Profile a few steady-state steps of the real workload after warm-up (`schedule(wait=1, warmup=2, "
        "active=5)`), and profile graph *replays* (`g.replay()`), not the capture.",
        """
        from torch.profiler import profile, schedule, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=1, warmup=2, active=5)) as prof:
            for step in range(8):
                g.replay()        # or train_step(batch)
                prof.step()
        """,
    )
    fix_tensorflow = Fix(
        "Profile steps after the first (tracing and autotuning happen there): `profile_batch=(10, 15)`.",
        """
        tb = tf.keras.callbacks.TensorBoard(log_dir, profile_batch=(10, 15))
        """,
    )
    fix_jax = Fix(
        "Profile a few steady-state steps of the real workload: compilation happens on a jitted function's first call, "
        'so run a few steps and `jax.block_until_ready` before tracing the next ones.',
        """
        for _ in range(3):
            state, loss = train_step(state, batch)            # compile and warm up
        jax.block_until_ready(state)
        with jax.profiler.trace("/tmp/trace"):
            for _ in range(5):
                state, loss = train_step(state, batch)
            jax.block_until_ready(state)
        """,
    )

    fix_cuda = Fix(
        "Record a few steady iterations of the real workload: `nsys profile --capture-range=cudaProfilerApi "
        "--capture-range-end=stop` with `cudaProfilerStart()`/`cudaProfilerStop()` around iterations after "
        "warm-up (or `--capture-range=nvtx` with an NVTX range around them), and for a CUDA graph record its "
        "launches (`cudaGraphLaunch`), not its capture and instantiation.",
        """
        for (int it = 0; it < 3; ++it) step();        // warm-up, graph capture and instantiate: outside the capture
        cudaDeviceSynchronize();
        cudaProfilerStart();                          // nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop
        for (int it = 0; it < 5; ++it) cudaGraphLaunch(exec, stream);   // or step(): the work, replayed
        cudaStreamSynchronize(stream);
        cudaProfilerStop();
        """,
    )

    min_gpu_ops = Option(10, "Report when all devices together ran fewer kernels, copies and memsets than this.")
    min_busy_us = Option(100.0, "Report when all devices together were busy less than this (µs).")
    few_ops_busy_us = Option(1000.0, "...or ran fewer than min_gpu_ops operations adding up to less than this (µs).")
    capture_ratio = Option(5.0, "Report graph capture when recorded launches exceed executed kernels this many times.", min=1)

    def check(self, ctx: Context):
        v = ctx.views
        u = v.utilization
        if u.empty:
            return  # TI011's case
        busy = int(v.array("utilization", "busy_ns").sum())
        kernels = int(len(v.kernels))
        host = v.host_events
        rt = kind_mask(host, "runtime")  # counted per name code: no copy of the runtime rows
        ops = int(len(v.gpu_activity))
        little = busy < self.min_busy_us * 1e3 or (ops < self.min_gpu_ops and busy < self.few_ops_busy_us * 1e3)
        n_rt = int(rt.sum())
        if not little and n_rt < 20 and n_rt <= kernels:
            return  # launches <= runtime calls: neither capture test below can pass, and no name need be read
        launches = count_matching(host["name"], rt, LAUNCH_CALL, case=True)
        captures = count_matching(host["name"], rt, GRAPH_CAPTURE_CALL, case=True)
        # a capture call alone is no capture window: XLA builds its command buffers, torch.compile captures once
        # during warm-up, and the kernels that ran still outnumber the launches the capture recorded
        capture = (captures > 0 and launches > kernels) or (launches >= 20 and launches >= self.capture_ratio * max(kernels, 1))
        if not (little or capture):
            return
        why = []
        if capture:
            inside, spans, span_ns = _captured_launches(host, rt)
            why.append(
                f"graph capture: {inside} kernel launches were recorded inside {spans} stream capture(s) ({fmt_ns(span_ns)}), "
                "where they do not run" if inside else
                f"graph capture: {launches} kernel launches were recorded but {kernels} kernel(s) ran"
                + (f" ({captures} capture/instantiate calls)" if captures else "")
            )
        if little:
            why.append(f"the GPU was busy only {fmt_ns(busy)} in total ({ops} kernels/copies/memsets)")
        evidence = pd.DataFrame(
            {
                "rank": u["rank"].astype(int),
                "device": u["device"].astype(int),
                "window_ms": (u["window_ns"] / 1e6).round(3),
                "busy_us": (u["busy_ns"] / 1e3).round(1),
                "busy_pct": u["busy_pct"].astype(float).round(2),
            }
        )
        yield ctx.finding(
            # a capture window may hold plenty of GPU work (the eager run before the capture): it is the capture
            # that makes it unjudgeable, and the title says which
            title=("Too little GPU work to judge: " if little else "Cannot judge this window: ") + "; ".join(why),
            message=(
                "This trace cannot say what bounds the workload: " + "; ".join(why) + ". Its busy % and idle gaps "
                "describe start-up, a capture or a single test, not a run in steady state, so performance findings "
                "are kept at info. Profile a few steady steps of the real work."
            ),
            evidence=evidence,
            location=Location(),
            metrics={
                "gpu_busy_ns": busy,
                "gpu_ops": ops,
                "kernels": kernels,
                "launch_calls": launches,
                "capture_calls": captures,
                "graph_capture": bool(capture),
                "withholds_judgement": True,
            },
            key="little-gpu-work",
        )


def _captured_launches(host: pd.DataFrame, rt) -> tuple[int, int, int]:
    """(launch calls inside stream captures, captures, their total length): each ``*StreamBeginCapture`` paired
    with the next ``*StreamEndCapture`` on its rank and thread (``vocab.intervals.pair_opens``, the pairing the
    steady-state model uses). (0, 0, 0) without a paired capture."""
    names = host["name"]
    r = np.flatnonzero(rt)
    if not len(r):
        return 0, 0, 0
    sub = names.take(r)
    begin = r[name_mask(sub, CAPTURE_BEGIN.pattern, case=False)]
    end = r[name_mask(sub, CAPTURE_END.pattern, case=False)]
    if not len(begin) or not len(end):
        return 0, 0, 0
    rank, tid, start = host["rank"].to_numpy(), host["tid"].to_numpy(), host["start_ns"].to_numpy(np.int64)
    b, e = pair_opens(rank, tid, start, begin, end)
    if not len(b):
        return 0, 0, 0
    stop = start[e] + host["dur_ns"].to_numpy(np.int64)[e]
    launch = r[name_mask(sub, LAUNCH_CALL, case=True)]
    inside = np.zeros(len(launch), dtype=bool)
    for o, a, z in zip(b.tolist(), start[b].tolist(), stop.tolist()):
        inside |= (rank[launch] == rank[o]) & (tid[launch] == tid[o]) & (start[launch] >= a) & (start[launch] <= z)
    return int(inside.sum()), len(b), int((stop - start[b]).sum())
