"""TI014: the trace lost events (cut short, capped, dropped): its figures cover only what was kept."""

from __future__ import annotations

import re

import pandas as pd

from traceinsight.rule_api import Context, Fix, Rule, Severity

#: Reader warnings that mean events are missing, not merely unusual.
LOST = re.compile(r"truncat|cut short|were dropped|are lost|is lost|lost|dropped|overflow|buffer.*full|capped|max.*events|limit", re.I)


class EventsLost(Rule):
    code = "TI014"
    name = "events-lost"
    category = "trace_quality"
    severity = Severity.WARNING
    summary = "Part of the trace was lost (file cut short, events dropped or capped): the findings cover only what was kept."
    why = """
    A trace written by a killed job stops mid-file; a profiler whose activity buffers fill drops records; some
    exporters cap the number of events. The analysis of what remains is still right about what remains, but
    a gap may be a hole in the record rather than idle time, and totals are lower bounds.
    """
    definition = """
    Reported when a reader said it lost events: a truncated JSON or gzip stream (the part before the cut is
    read), events dropped for unusable timestamps or impossible durations, buffers or event caps that cut the
    capture. The reader warnings are the evidence. A trace-quality finding: never a performance verdict, not
    graded by cost.
    """
    fix_pytorch = Fix(
        "Let the profiler finish writing (export after `prof.stop()`, before the process exits), keep the active "
        "window to a few steps so the trace stays small, and raise CUPTI's buffer size if records are dropped.",
        """
        with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                                    on_trace_ready=torch.profiler.tensorboard_trace_handler("./tb")) as prof:
            ...
        """,
    )
    fix_tensorflow = Fix(
        "Profile fewer steps (`profile_batch=(10, 12)`) so the host tracer stays under its event limit, and let "
        "the profiler stop before the job ends.",
        """
        tb = tf.keras.callbacks.TensorBoard(log_dir, profile_batch=(10, 12))
        """,
    )
    fix_jax = Fix(
        "Trace fewer steps: start `jax.profiler.start_trace` after warm-up and stop it a few steps later, after "
        "`jax.block_until_ready`, so the host tracer stays under its event limit and finishes writing before the "
        'process exits.',
        """
        for i, batch in enumerate(batches):
            if i == 10:
                jax.profiler.start_trace("/tmp/trace")
            state, loss = train_step(state, batch)
            if i == 13:
                jax.block_until_ready(state)
                jax.profiler.stop_trace()
        """,
    )

    fix_cuda = Fix(
        "Let nsys finish writing: capture a few iterations rather than the whole run (`--capture-range=cudaProfilerApi "
        "--capture-range-end=stop` or a short `--duration`), so its buffers do not fill, end the capture before the "
        "process exits, and export the report (`nsys export --type sqlite`) only once it is complete.",
        """
        cudaProfilerStart();                          // nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop
        for (int it = 0; it < 5; ++it) step();        // a few iterations, not the whole run
        cudaDeviceSynchronize();                      // the last kernels finish inside the capture
        cudaProfilerStop();                           // the report is written while the process still runs
        """,
    )

    def check(self, ctx: Context):
        lost = [w for w in ctx.meta.warnings if LOST.search(w)]
        if not lost:
            return
        yield ctx.finding(
            title="Events were lost while recording or reading this trace",
            message="The reader reported lost events: " + "; ".join(lost) + ". Findings cover only the events that were kept.",
            evidence=pd.DataFrame({"reader_warning": lost}),
            metrics={"warnings": len(lost)},
            key="events-lost",
        )
