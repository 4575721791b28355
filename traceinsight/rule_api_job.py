"""The public API for cross-rank rules: rules that judge a whole distributed job from its rank summaries.

A cross-rank rule is a ``Rule`` (same code, name, docs, options and fixes) whose ``check_job`` receives a
``JobContext``: one compact summary per rank (``traceinsight.derive.ranks.summary.RankSummary``), the collectives of all
ranks matched into instances and put on one clock, and the resolved options. It never sees events, so it runs on
the coordinator of a 1,000-rank job in memory proportional to ranks x summary size::

    from traceinsight.rule_api_job import CrossRankRule, JobContext

    class SlowRanks(CrossRankRule):
        code = "ACME101"
        name = "slow-ranks"
        summary = "Ranks whose steps take 20 % longer than the median."

        def check_job(self, job: JobContext):
            per = job.job.steps.groupby("rank")["dur_ns"].median()
            ...
            yield job.finding(title=..., message=..., impact_ns=...)

The same rule also runs in the single-timeline path (``traceinsight analyze trace.json``): ``check`` summarises
each rank of that timeline in memory and calls ``check_job``, so a rule written once serves both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterable, Unpack

import pandas as pd

from traceinsight.rule_api import Context, Finding, FindingFields, Rule, build_finding

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.derive.ranks.reduce import Job


class CrossRankRule(Rule):
    """A rule over the rank summaries of a job (see the module docstring)."""

    #: Cross-rank rules judge communication between ranks unless they say otherwise.
    category = "communication"
    #: The fewest ranks the rule can judge (stragglers and imbalance need two): on a timeline with fewer, the
    #: single-timeline path does not summarise the ranks for it.
    min_ranks: ClassVar[int] = 1
    #: The rule judges collectives only: a timeline without collective kernels is not summarised for it.
    needs_collectives: ClassVar[bool] = False
    #: Each finding names one rank the others wait for (``metrics``: ``rank``, ``held_per_step_ns``, and ``cause``, a
    #: category id): the job verdict names the worst of them as the rank that sets the pace.
    names_late_rank: ClassVar[bool] = False

    def check(self, ctx: Context) -> Iterable[Finding]:
        """Single-timeline path: summarise the ranks of this timeline here, then judge them as a job."""
        if not self.applies_to(ctx):
            return
        yield from self.check_job(JobContext(job_of(ctx), self))

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Whether the timeline has what the rule declares it needs (``min_ranks``, ``needs_collectives``)."""
        if cls.min_ranks > 1:
            rank = ctx.events["rank"].to_numpy()
            n = 0 if not len(rank) else 1 if rank.min() == rank.max() else len(pd.unique(rank))
            if n < cls.min_ranks:
                return False
        return not cls.needs_collectives or bool(ctx.views.is_collective.any())

    def check_job(self, job: "JobContext") -> Iterable[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError


class JobContext:
    """What a cross-rank rule sees: the reduced job (summaries, matched collectives, clock alignment) and options."""

    def __init__(self, job: "Job", rule: Rule) -> None:
        self.job = job
        self.rule = rule
        self.options = dict(rule.values)

    def finding(self, **kwargs: Unpack[FindingFields]) -> Finding:
        """``Context.finding`` for cross-rank rules (the same keywords); percentages are of the job's typical rank
        window and step.

        ``instances`` are on each rank's own clock (its trace's time frame): ``job.job.rank_ns`` converts.
        """
        return build_finding(self.rule, self.job.span_ns, self.job.step_ns, self.job.step_count, **kwargs)


def job_of(ctx: Context) -> "Job":
    """The job view of one timeline, built once per analysis (``Derived.job``) and shared by every cross-rank rule."""
    return ctx.views.job
