"""The finding categories and verdict bounds: one record each, beside the ledger's bucket record (``buckets``).

A rule declares the category its findings belong to (``Rule.category``); the verdict names one as the bound. What a
category means is written here once and read by everyone who asks: the rule API's list of categories
(``finding.CATEGORIES``), which kind of saving its findings carry (``assess.savings``), whether the severity scale
grades them (``assess.severity``), whether they are symptoms or causes (``assess.causes``), the verdict's label and
headline (``assess.verdict``, ``job.verdict``) and the job page's words for a straggler's cause. Which ledger buckets
a category claims stays in the bucket record (``Bucket.claimed_by``, read through ``claims``), and which category
a bucket names when it is the largest cost in ``Bucket.verdict``. Floor 0: plain data.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceinsight.vocab import buckets

#: Roles a category's findings play in root-cause linking (``assess.causes``).
SYMPTOM, CAUSE = "symptom", "cause"


@dataclass(frozen=True)
class Category:
    """One finding category or verdict bound."""

    id: str  # stable: Rule.category, JSON "category"
    label: str  # the verdict's name for it: "Bound by <label>"
    #: A rule may declare it (``finding.CATEGORIES``); False: a bound only the verdict names (from a ledger bucket,
    #: or no bound at all).
    rule: bool = True
    #: Its findings are about busy work: their saving is a modelled speed-up unless they explain idle time.
    busy: bool = False
    #: ``SYMPTOM``: the GPU waited, and a cause may explain it; ``CAUSE``: a reason the GPU waited, or a region
    #: that behaves a known way; "": neither.
    role: str = ""
    #: Its findings describe the recording, not the run: not graded by cost, no saving, never the verdict.
    recording: bool = False
    #: Idle a finding attributes to no kind: it claims its buckets after every finding that names a kind.
    catch_all: bool = False
    #: The verdict's headline where this names no bound ("" for a bound: "Bound by <label>").
    headline: str = ""
    #: On the job page, why the straggler rank is slow when this is its cause ("it waits longer for input data").
    job_words: str = ""

    @property
    def graded(self) -> bool:
        """Graded on the severity scale by the GPU time it costs (every category but those about the recording)."""
        return not self.recording

    @property
    def bound(self) -> bool:
        """The verdict says "Bound by <label>" (False: it has a headline of its own)."""
        return not self.headline

    @property
    def claims(self) -> tuple[str, ...]:
        """The ledger buckets its findings claim their saving from, in table order (``buckets.claims``)."""
        return buckets.claims(self.id)


TABLE: tuple[Category, ...] = (
    Category("gpu_idle", "unattributed GPU idle", role=SYMPTOM, catch_all=True,
             job_words="its host is busier (Python, launches, untraced work) and leaves the GPU idle"),
    Category("host_sync", "host syncs", role=CAUSE, job_words="it blocks longer in host syncs"),
    Category("launch_overhead", "launch overhead", role=SYMPTOM),
    Category("input_pipeline", "input pipeline", role=CAUSE, job_words="it waits longer for input data"),
    Category("copy", "copies", busy=True, role=CAUSE),
    Category("compute", "compute", busy=True, role=CAUSE,
             job_words="it has more GPU work (slower kernels or a bigger share of the data)"),
    Category("communication", "communication", busy=True, role=CAUSE),
    Category("trace_quality", "trace quality", recording=True),
    # bounds only the verdict names: the ledger's other idle buckets, and the verdicts that name no bound
    Category("host_overhead", "host/Python overhead", rule=False),
    Category("host_untraced", "untraced host time", rule=False),
    Category("gpu_dependency", "GPU-side waits", rule=False),
    Category("warmup", "warm-up", rule=False),
    Category("cannot_judge", "cannot judge this window", rule=False, headline="Cannot judge this window"),
    Category("unexplained", "idle that no finding explains", rule=False, headline="No finding explains the idle time"),
    Category("no_gpu", "no GPU activity", rule=False, headline="No GPU activity"),
)

BY_ID: dict[str, Category] = {c.id: c for c in TABLE}
#: The categories a rule may declare, in table order.
RULE_CATEGORIES: tuple[str, ...] = tuple(c.id for c in TABLE if c.rule)
#: The category of a rule that declares none: a finding about the work the GPU does rather than about what keeps it
#: waiting, so an undeclared plugin can never be mistaken for an explanation of idle time.
DEFAULT = "compute"
#: The verdict's label of each category.
LABELS: dict[str, str] = {c.id: c.label for c in TABLE}
BUSY: tuple[str, ...] = tuple(c.id for c in TABLE if c.rule and c.busy)
UNGRADED: frozenset[str] = frozenset(c.id for c in TABLE if not c.graded)
SYMPTOMS: tuple[str, ...] = tuple(c.id for c in TABLE if c.role == SYMPTOM)
CAUSES: tuple[str, ...] = tuple(c.id for c in TABLE if c.role == CAUSE)
(CATCH_ALL,) = (c.id for c in TABLE if c.catch_all)


def about_recording(category: str | None) -> bool:
    """Findings of ``category`` describe the recording, not the run (an unknown category: no)."""
    c = BY_ID.get(category or "")
    return c is not None and c.recording


def is_busy(category: str | None) -> bool:
    """Findings of ``category`` are about busy work (compute, copies, communication)."""
    c = BY_ID.get(category or "")
    return c is not None and c.rule and c.busy
