"""The public API for rules: the built-in rules in ``traceinsight.rules`` use exactly this, nothing private.

A rule is a class::

    from traceinsight.rule_api import Rule, Option, Severity, Fix

    class SlowCopies(Rule):
        code = "ACME001"
        name = "slow-copies"
        severity = Severity.WARNING
        category = "copy"          # the bound its findings belong to (CATEGORIES); default "compute"
        summary = "Host-to-device copies slower than 5 GB/s."
        why = "Copies at pageable-memory speed hold the GPU back."
        fix_pytorch = Fix("Pin the source tensor.", "x = x.pin_memory()")
        fix_tensorflow = Fix("Let tf.data prefetch to the GPU.", "ds = ds.apply(tf.data.experimental.prefetch_to_device('/gpu:0'))")
        min_gbps = Option(5.0, "Copies below this bandwidth are reported.")

        def check(self, ctx):
            ...
            yield ctx.finding(title=..., message=..., impact_ns=..., evidence=df, instances=slow_copies_df)

Rules receive a ``Context``: the timeline, the analysis' derived data (``ctx.views``: the views, the ledger and
the memo slots, computed once), and their resolved options. They return or yield ``Finding`` objects. A rule may
declare ``what_if`` (the what-if transform that models its fix) and ``claims`` (the ledger buckets its findings
claim). Shared queries are public in ``traceinsight.rulelib``; what names mean in ``traceinsight.vocab.patterns``.

The model (``Finding``, ``Severity``, ``Fix``, ``Location``, ``Instance``...) lives in ``traceinsight.model.finding`` and
is re-exported here, so a rule imports from one place.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Required, TypedDict, Unpack

import pandas as pd

from traceinsight.model.finding import (
    CATEGORIES,
    DEFAULT_CATEGORY,
    LIFECYCLES,
    Finding,
    Fix,
    Instance,
    InstanceColumns,
    Instances,
    Location,
    Severity,
    SourceLine,
    as_instances,
    level,
    instance_columns,
)
from traceinsight.vocab.units import fmt_ns

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.model.timeline import Timeline
    from traceinsight.derive.derived import Derived
    from traceinsight.ingest.input_format import InputFormat

__all__ = [
    "CATEGORIES", "DEFAULT_CATEGORY", "LIFECYCLES", "Context", "Finding", "FindingFields", "Fix", "Instance",
    "InstanceColumns", "Instances", "Location", "Option", "Rule", "Severity", "SourceLine", "as_instances", "build_finding",
    "fmt_ns", "instance_columns", "level",
]


@dataclass
class Option:
    """A typed rule option with a default and an allowed range; the type is the default's type.

    Every value entering from the command line (``--set``), a pyproject.toml or the Python API goes through
    ``convert``: a value of the wrong type, NaN, an infinity, or one outside ``[min, max]`` (or not above
    ``above``, or not among ``choices``) is refused with the allowed range, so a configuration can never switch a
    rule off or make it crash by an absurd threshold. A numeric option declares no range only when its default
    is negative; otherwise its range starts at 0.
    """

    default: Any
    help: str = ""
    name: str = ""  # filled in by Rule.__init_subclass__
    min: float | None = None
    max: float | None = None
    above: float | None = None  # exclusive lower bound (a ratio that must exceed 1, a rate that must exceed 0)
    choices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        numeric = isinstance(self.default, (int, float)) and not isinstance(self.default, bool)
        if numeric and self.min is None and self.above is None and self.default >= 0:
            self.min = 0
        if self.choices is not None:
            self.choices = tuple(self.choices)

    def allowed(self) -> str:
        """The allowed values in words, for error messages and the rule docs."""
        kind = type(self.default)
        if kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if kind is str:
            return "a string"
        what = "an integer" if kind is int else "a finite number"
        lo = f"above {self.above:g}" if self.above is not None else (f"from {self.min:g}" if self.min is not None else "")
        hi = f"to {self.max:g}" if self.max is not None else ""
        if lo and hi:
            return f"{what} {lo} {hi}"
        if lo:
            return f"{what} {lo}" + (" up" if lo.startswith("from") else "")
        return f"{what}" + (f" up to {self.max:g}" if self.max is not None else "")

    def convert(self, value: Any) -> Any:
        kind = type(self.default)
        bad = ValueError(f"option {self.name!r} expects {self.allowed()}, got {_short_repr(value)}")
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise bad
        if kind is str:
            if not isinstance(value, str):
                raise bad
            v = value.strip() if self.choices else value
            if self.choices:
                v = v.lower()
                if v not in self.choices:
                    raise bad
            return v
        if kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise bad
            try:
                v = float(value.strip()) if isinstance(value, str) else float(value)
            except (ValueError, OverflowError):
                raise bad from None
            if not math.isfinite(v):
                raise bad
            if kind is int:
                if not v.is_integer():
                    raise bad
                v = int(v)
            if (self.min is not None and v < self.min) or (self.max is not None and v > self.max):
                raise bad
            if self.above is not None and not v > self.above:
                raise bad
            return v
        try:
            return value if isinstance(value, kind) else kind(value)
        except (TypeError, ValueError):
            raise bad from None


def _short_repr(value: Any, limit: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


class Rule:
    """Base class of every rule. Subclasses set the class attributes below and implement ``check``."""

    code: ClassVar[str] = ""  # stable, e.g. "TI001"; never reused for another meaning
    name: ClassVar[str] = ""  # kebab-case, e.g. "gpu-idle-gaps"
    severity: ClassVar[Severity] = Severity.WARNING
    category: ClassVar[str] = DEFAULT_CATEGORY  # the bound its findings belong to, one of CATEGORIES
    lifecycle: ClassVar[str] = "stable"  # "stable" or "preview"
    summary: ClassVar[str] = ""  # one line
    why: ClassVar[str] = ""  # why it matters (Markdown)
    definition: ClassVar[str] = ""  # exactly what is measured and the default thresholds (Markdown)
    fix_pytorch: ClassVar[Fix] = Fix("")
    fix_tensorflow: ClassVar[Fix] = Fix("")
    fix_jax: ClassVar[Fix] = Fix("")  # for JAX programs (jax.jit, donate_argnums, prefetch to device)
    fix_cuda: ClassVar[Fix] = Fix("")  # for plain CUDA programs (no framework in the trace)
    #: fixes that replace a framework's base fix on some GPU generations: "pytorch:pre_ampere", "tensorflow:fp8",
    #: ... (tiers in traceinsight.assess.advice; the engine picks one per framework for the trace's GPUs)
    fix_variants: ClassVar[dict[str, Fix]] = {}
    options: ClassVar[dict[str, Option]] = {}
    #: The what-if transform (``traceinsight.derive.whatif.TRANSFORMS``) that models this rule's fix, when its findings are
    #: a root cause the replay can take out (e.g. "remove_host_sync"); None: no step-time prediction.
    what_if: ClassVar[str | None] = None
    #: The ledger buckets (``traceinsight.vocab.buckets``) its findings claim their saving from; empty: those of its
    #: category (``buckets.CLAIMS``).
    claims: ClassVar[tuple[str, ...]] = ()
    #: Its findings say why the GPU waited, in a symptom's category (``gpu_idle``): a recompile in the steady state
    #: is idle time whose reason is known. Such findings may explain other idle findings (``traceinsight.assess.causes``)
    #: and are never explained by them.
    root_cause: ClassVar[bool] = False
    #: The work classes (``traceinsight.vocab.work_classes.CLASSES``: "gemm", "conv", "elementwise", ...) whose kernels
    #: its modelled speed-up makes faster: the what-if replay shortens only those. Empty: every GPU task (the
    #: finding cannot say which work gets faster).
    speeds_up: ClassVar[tuple[str, ...]] = ()
    #: Its findings offer time per sample, not step time (a larger batch makes each step longer and each sample
    #: cheaper): they carry no step figure ("0 ns" would read as "gives nothing"), and say their throughput gain in
    #: the title and metrics instead.
    per_sample: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.category not in CATEGORIES:
            raise TypeError(f"rule {cls.__name__}: category {cls.category!r} is not one of {', '.join(CATEGORIES)}")
        if cls.lifecycle not in LIFECYCLES:
            raise TypeError(f"rule {cls.__name__}: lifecycle {cls.lifecycle!r} is not one of {', '.join(LIFECYCLES)}")
        from traceinsight.vocab.buckets import BUCKETS  # the rule API sits above the vocabularies; checked once per rule class

        unknown = [b for b in cls.claims if b not in BUCKETS]
        if unknown:
            raise TypeError(f"rule {cls.__name__}: claims {', '.join(unknown)}: not ledger buckets ({', '.join(BUCKETS)})")
        from traceinsight.vocab.work_classes import CLASSES as WORK_CLASSES

        odd = [c for c in cls.speeds_up if c not in WORK_CLASSES]
        if odd:
            raise TypeError(f"rule {cls.__name__}: speeds_up {', '.join(odd)}: not work classes ({', '.join(WORK_CLASSES)})")
        opts: dict[str, Option] = {}
        for base in reversed(cls.__mro__[1:]):
            opts.update(getattr(base, "options", {}) or {})
        for attr, value in list(vars(cls).items()):
            if isinstance(value, Option):
                value.name = attr
                opts[attr] = value
        cls.options = opts

    def __init__(self, **overrides: Any) -> None:
        unknown = set(overrides) - set(self.options)
        if unknown:
            raise ValueError(f"{self.code}: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(self.options) or 'none'}")
        self.values: dict[str, Any] = {k: o.default for k, o in self.options.items()}
        for k, v in overrides.items():
            try:
                self.values[k] = self.options[k].convert(v)
            except ValueError as exc:
                raise ValueError(f"{self.code}: {exc}") from None
        for k, v in self.values.items():
            setattr(self, k, v)

    def check(self, ctx: "Context") -> Iterable[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def fixes(cls) -> dict[str, Fix]:
        out = {}
        if cls.fix_pytorch.text:
            out["pytorch"] = cls.fix_pytorch
        if cls.fix_tensorflow.text:
            out["tensorflow"] = cls.fix_tensorflow
        if cls.fix_jax.text:
            out["jax"] = cls.fix_jax
        if cls.fix_cuda.text:
            out["cuda"] = cls.fix_cuda
        out.update({k: v for k, v in cls.fix_variants.items() if v.text})
        return out

    @classmethod
    def docs(cls) -> str:
        """The rule's documentation page, generated from the rule itself (``traceinsight rule CODE``)."""
        state = "preview (thresholds and wording may still change)" if cls.lifecycle == "preview" else "stable"
        lines = [f"# {cls.code} {cls.name}", "", f"Default severity: **{cls.severity.value}** · bound: **{cls.category}** · {state}", "", cls.summary, ""]
        if cls.why:
            lines += ["## Why it matters", "", textwrap.dedent(cls.why).strip(), ""]
        if cls.definition:
            lines += ["## What is measured", "", textwrap.dedent(cls.definition).strip(), ""]
        if cls.options:
            lines += ["## Options", "", "| option | default | allowed | meaning |", "|---|---|---|---|"]
            lines += [f"| `{k}` | `{o.default!r}` | {o.allowed()} | {o.help} |" for k, o in cls.options.items()]
            lines.append("")
        tiers = {"pre_ampere": "before Ampere (sm_70-sm_75)", "fp8": "on GPUs with FP8 (sm_89, sm_90 and later)"}
        labels = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX", "cuda": "CUDA"}
        for key, fx in cls.fixes().items():
            fw, _, tier = key.partition(":")
            label = labels.get(fw, fw) + (f" {tiers.get(tier, tier)}" if tier else "")
            lines += [f"## Fix in {label}", "", textwrap.dedent(fx.text).strip(), ""]
            if fx.code:
                lang = "cuda" if fw == "cuda" else "python"
                lines += [f"```{lang}", textwrap.dedent(fx.code).strip(), "```", ""]
        return "\n".join(lines)


class Context:
    """What a rule sees: the timeline, the analysis' derived data (``views``: a ``traceinsight.derive.derived.Derived``:
    the views' frames (``ctx.views.gaps``), the ledger, memory, efficiency and the named memo slots of the rule
    library), what the trace's format records (``input_format``), and its resolved options."""

    def __init__(self, timeline: "Timeline", views: "Derived", rule: Rule) -> None:
        self.timeline = timeline
        self.events = timeline.events
        self.meta = timeline.meta
        self.views = views
        self.rule = rule
        self.options = dict(rule.values)

    @property
    def input_format(self) -> "InputFormat":
        """The record of the trace's format (``traceinsight.ingest.input_format``): ask it what the format can
        record (``shapes``, ``record_stacks`` ...) instead of comparing ``meta.source_format`` with names."""
        from traceinsight.ingest import input_format

        return input_format(self.meta.source_format)

    def what_if_batch(self, factor: float, fixed_below_ns: int) -> dict | None:
        """The what-if replay of this trace with ``factor`` times the batch: GPU tasks of at least ``fixed_below_ns``
        take ``factor`` times as long, shorter (launch-bound) ones keep their time, host work stays
        (``traceinsight.derive.whatif.what_if_batch``): ``step_ns``, ``baseline_step_ns``, ``per_sample_ratio``,
        ``throughput_gain``, ``assumptions``; None without steps to replay."""
        from traceinsight.derive.whatif import what_if_batch

        return what_if_batch(self.views.graphs, factor, fixed_below_ns)

    def finding(self, **fields: Unpack["FindingFields"]) -> Finding:
        """A Finding filled with this rule's code, severity and fixes (``build_finding``), its impact percentages
        measured against this timeline's span and steps."""
        return build_finding(self.rule, self.views.span_ns, self.views.mean_step_ns, self.views.step_count, **fields)


class FindingFields(TypedDict, total=False):
    """What a rule says about one finding (``Context.finding``, ``JobContext.finding``, ``build_finding``); the rule's
    code, name, category and default severity and fixes are filled in from the rule."""

    title: Required[str]
    message: Required[str]
    impact_ns: int  # the time a fix would save
    evidence: pd.DataFrame | None  # a small table for people
    location: Location | None
    severity: Severity | None  # overrides the rule's
    metrics: dict[str, Any] | None  # rule-specific numbers for JSON consumers
    key: str  # what makes this finding distinct within its rule
    fixes: dict[str, Fix] | None  # overrides the rule's
    instances: "Iterable[Instance] | pd.DataFrame | None"  # the intervals it is about
    explains: Iterable[str]  # fingerprints of the symptom findings this cause explains
    what_if: dict[str, Any] | None
    source: SourceLine | None  # the line of the user's code it is about (``rulelib.usercode.lead_source``)


def build_finding(rule: Rule, span_ns: float, step_ns: float | None, n_steps: int, **fields: Unpack[FindingFields]) -> Finding:
    """One home for filling a Finding from its rule: the per-timeline and the cross-rank contexts both call it, each
    with the span and step it measures percentages against."""
    impact_ns = int(max(fields.get("impact_ns", 0), 0))
    evidence, fixes, instances = fields.get("evidence"), fields.get("fixes"), fields.get("instances")
    return Finding(
        code=rule.code,
        rule_name=rule.name,
        title=fields["title"],
        severity=fields.get("severity") or rule.severity,
        message=fields["message"],
        impact_ns=impact_ns,
        impact_pct_span=100.0 * impact_ns / span_ns if span_ns else 0.0,
        impact_pct_step=(100.0 * impact_ns / n_steps / step_ns) if step_ns and n_steps else None,
        evidence=evidence if evidence is not None else pd.DataFrame(),
        fixes=fixes if fixes is not None else type(rule).fixes(),
        location=fields.get("location") or Location(),
        metrics=fields.get("metrics") or {},
        key=fields.get("key", ""),
        category=type(rule).category,
        instances=as_instances(instances),
        explains=list(fields.get("explains", ())),
        what_if=fields.get("what_if"),
        claims=tuple(type(rule).claims),
        root_cause=bool(type(rule).root_cause),
        source=fields.get("source"),
        saving_kind="none" if getattr(type(rule), "per_sample", False) else "",
    )


