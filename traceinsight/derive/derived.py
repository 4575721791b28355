"""The one declared store of what an analysis derives from its timeline, each piece computed once, on first use.

``Derived`` is the views (``traceinsight.derive.views``: GPU activity, gaps, launches, steps, host rows) plus what is built
on them: the time ledger, GPU memory over time, achieved FLOP/s and MFU, the what-if graphs, the whole-job view of one timeline, and ``memo``, the named slots the
rule library keeps its shared queries in (which op encloses a call, the sync calls, the ledger's gaps row for row
with the views' gaps, ...). Nothing is stashed on an object by a module that does not own it: ``contents()`` lists
everything an analysis holds.

The engine makes one ``Derived`` per timeline and hands it to every rule (``Context.views``), to the assessment
(severity, causes, verdict) and, through ``Analysis.views``, to the renderers. Being a ``Views``, it goes wherever
the views go; the ledger and what-if read it as plain views, so neither knows this store exists.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from traceinsight.derive.views import Views

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ranks.reduce import Job
    from traceinsight.derive.efficiency import Efficiency, EfficiencySettings
    from traceinsight.derive.ledger import Ledger
    from traceinsight.derive.memory import Memory
    from traceinsight.derive.whatif import Graph

T = TypeVar("T")


class Derived(Views):
    """Views of one timeline and everything derived from them, each computed once (see the module docstring)."""

    def __init__(self, timeline, *, efficiency: "EfficiencySettings | None" = None) -> None:
        super().__init__(timeline)
        #: The user's peaks and model FLOPs (``--peak-tflops``, ``--model-flops-per-step``), read by ``efficiency``.
        self.efficiency_settings = efficiency
        self._memo: dict[str, Any] = {}

    @cached_property
    def ledger(self) -> "Ledger":
        """Every ns of each device's window in one bucket (``traceinsight.derive.ledger``)."""
        from traceinsight.derive.ledger import build_ledger

        return build_ledger(self)

    @cached_property
    def memory(self) -> "Memory":
        """GPU memory per device: allocated / reserved over time, peaks, per-step headroom (``traceinsight.derive.memory``)."""
        from traceinsight.derive.memory import Memory

        return Memory(self)

    @cached_property
    def efficiency(self) -> "Efficiency":
        """Achieved FLOP/s and bytes/s per kernel class, roofline position and MFU (``traceinsight.derive.efficiency``)."""
        from traceinsight.derive.efficiency import build

        return build(self, self.efficiency_settings)

    @cached_property
    def graphs(self) -> "list[Graph]":
        """The what-if dependency graph of every rank with GPU work (``traceinsight.derive.whatif``)."""
        from traceinsight.derive.whatif import build_graphs

        return build_graphs(self)

    @cached_property
    def job(self) -> "Job":
        """This timeline seen as a job (per-rank summaries reduced across ranks), for the cross-rank rules."""
        from traceinsight.derive.ranks.reduce import reduce_summaries
        from traceinsight.derive.ranks.summary import summarize_ranks

        return reduce_summaries(summarize_ranks(self.timeline, self))

    def memo(self, key: str, build: Callable[[], T]) -> T:
        """The value kept under ``key`` ("module.query[:argument]"), built by ``build()`` the first time it is asked."""
        try:
            return self._memo[key]
        except KeyError:
            out = self._memo[key] = build()
            return out

    def contents(self) -> list[str]:
        """What has been derived so far: the views and pieces computed (by name) and the memo keys."""
        built = [k for k in vars(self) if not k.startswith("_") and k not in ("timeline", "events", "efficiency_settings")]
        return sorted(built) + sorted(f"memo:{k}" for k in self._memo)
