"""The one declared store of what an analysis derives from its timeline, each piece computed once, on first use.

``Derived`` *has* the views (``traceinsight.derive.views``: GPU activity, gaps, launches, steps, host rows) and what
is built on them: the time ledger, the steady-state judgement, GPU memory over time, achieved FLOP/s and MFU, the
what-if graphs, the whole-job view of one timeline, and ``memo``, the named slots the steady-state model and the
rule library keep their shared queries in (which op encloses a call, the sync calls, the ledger's gaps row for row
with the views' gaps, ...). Nothing is stashed on an object by a module that does not own it: ``contents()`` lists
everything an analysis holds.

The store is the top of the derived floor, and data flows one way through it: each piece is built by a function of
a lower module that gets its inputs as arguments (the views, the ledger's warm-up regions, the user's settings) and
never sees this store. The ledger, the steady-state model, memory, efficiency and the what-if are therefore
usable on plain views, and none of them can reach back for something the store has not built yet.

The engine makes one ``Derived`` per timeline and hands it to every rule (``Context.views``), to the assessment
(severity, causes, verdict) and, through ``Analysis.views``, to the renderers. For them it forwards the views'
public attributes (``VIEW_ATTRIBUTES``: ``ctx.views.gaps`` is ``ctx.views.views.gaps``), a declared list, so a
reader sees what the store offers without knowing which piece holds it.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from traceinsight.derive.views import Views

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ranks.reduce import Job
    from traceinsight.derive.efficiency import Efficiency, EfficiencySettings
    from traceinsight.derive.ledger import Ledger
    from traceinsight.derive.memory import Memory
    from traceinsight.derive.whatif import Graph

#: The views' public attributes the store answers for its readers (rules, assessment, renderers), each the views'
#: own: the frames and figures (cached there), and the queries over them.
VIEW_ATTRIBUTES: tuple[str, ...] = (
    "timeline", "events", "span_ns",
    "gpu_activity", "kernels", "is_collective", "runtime_calls", "is_sync_call", "busy", "gaps", "utilization",
    "launches", "steps", "step_count", "mean_step_ns", "host_events", "device_keys", "WINDOWED", "ZONE_ROWS",
    "array", "rows_overlapping", "events_overlapping", "device_rows", "host_rows_overlapping", "memo",
)


def _forward(name: str) -> property:
    def get(self: "Derived") -> Any:
        return getattr(self.views, name)

    return property(get, doc=f"``views.{name}`` (``traceinsight.derive.views.Views.{name}``).")


class Derived:
    """Views of one timeline and everything derived from them, each computed once (see the module docstring)."""

    def __init__(self, timeline, *, efficiency: "EfficiencySettings | None" = None) -> None:
        #: The views of the timeline: the lower floors' one input.
        self.views = Views(timeline)
        #: The user's peaks and model FLOPs (``--peak-tflops``, ``--model-flops-per-step``), read by ``efficiency``.
        self.efficiency_settings = efficiency

    @cached_property
    def ledger(self) -> "Ledger":
        """Every ns of each device's window in one bucket (``traceinsight.derive.ledger``)."""
        from traceinsight.derive.ledger import build_ledger

        return build_ledger(self.views)

    @cached_property
    def steady(self) -> dict:
        """Whether the window holds enough steady state to judge (``traceinsight.derive.steady.judgement``: the ledger's
        totals and warm-up regions against the steps)."""
        from traceinsight.derive.steady import judgement

        return judgement(self.ledger, self.views.steps)

    @cached_property
    def memory(self) -> "Memory":
        """GPU memory per device: allocated / reserved over time, peaks, per-step headroom (``traceinsight.derive.memory``)."""
        from traceinsight.derive.memory import Memory

        return Memory(self.views, warmup=lambda: self.ledger.warmup)

    @cached_property
    def efficiency(self) -> "Efficiency":
        """Achieved FLOP/s and bytes/s per kernel class, roofline position and MFU (``traceinsight.derive.efficiency``)."""
        from traceinsight.derive.efficiency import build

        return build(self.views, self.efficiency_settings, ledger=lambda: self.ledger)

    @cached_property
    def graphs(self) -> "list[Graph]":
        """The what-if dependency graph of every rank with GPU work, the ledger's warm-up marked (``traceinsight.derive.whatif``)."""
        from traceinsight.derive.whatif import build_graphs

        return build_graphs(self.views, self.ledger.warmup)

    @cached_property
    def job(self) -> "Job":
        """This timeline seen as a job (per-rank summaries reduced across ranks), for the cross-rank rules."""
        from traceinsight.derive.ranks.reduce import reduce_summaries
        from traceinsight.derive.ranks.summary import summarize_ranks

        return reduce_summaries(summarize_ranks(self.timeline, self.views, by_step=lambda: self.ledger.by_step))

    def contents(self) -> list[str]:
        """What has been derived so far: the views and pieces computed (by name) and the memo keys."""
        own = [k for k in vars(self) if not k.startswith("_") and k not in ("views", "efficiency_settings")]
        views = [k for k in vars(self.views) if not k.startswith("_") and k not in ("timeline", "events")]
        return sorted(own + views) + [f"memo:{k}" for k in self.views.memo_keys()]


for _name in VIEW_ATTRIBUTES:
    setattr(Derived, _name, _forward(_name))
del _name
