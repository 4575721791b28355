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

Rules receive a ``Context``: the timeline, the shared derived views (computed once, cached) and their
resolved options. They return or yield ``Finding`` objects.
"""

from __future__ import annotations

import enum
import hashlib
import math
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from .timeline import Timeline
    from .views import Views


#: The bounds a finding can belong to. The verdict names the category whose largest finding costs most;
#: "trace_quality" findings describe the recording, not the run, and never become the verdict.
CATEGORIES: tuple[str, ...] = (
    "gpu_idle",
    "host_sync",
    "launch_overhead",
    "input_pipeline",
    "copy",
    "compute",
    "communication",
    "trace_quality",
)
#: A rule's maturity: "preview" rules are new and may change their thresholds or wording.
LIFECYCLES: tuple[str, ...] = ("stable", "preview")
#: The category of a rule that declares none: a finding about the work the GPU does rather than about what
#: keeps it waiting, so an undeclared plugin can never be mistaken for an explanation of idle time.
DEFAULT_CATEGORY = "compute"


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 1, "warning": 2, "error": 3}[self.value]

    @classmethod
    def parse(cls, value: "str | Severity") -> "Severity":
        try:
            return cls(str(getattr(value, "value", value)).lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r}; use info, warning or error") from None


@dataclass(frozen=True)
class Fix:
    """How to fix a finding in one framework: a sentence or two, and a code snippet."""

    text: str
    code: str = ""

    def __post_init__(self) -> None:
        # Rules write snippets as indented triple-quoted strings; store them as they must be pasted: the common
        # indent removed, no blank first or last line (every renderer shows ``code`` as is).
        object.__setattr__(self, "code", textwrap.dedent(self.code).strip("\n").rstrip())


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


@dataclass
class Location:
    """Where a finding happens; None fields mean 'all'."""

    rank: int | None = None
    device: int | None = None
    stream: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None


@dataclass(frozen=True)
class Instance:
    """One time interval a finding is about (a gap, a stall, a copy, a region), in trace nanoseconds.

    Renderers draw timeline markers and close-ups from these and nothing else, so a rule that wants its
    evidence on the timeline passes ``instances=`` to ``ctx.finding``.
    """

    start_ns: int
    end_ns: int
    rank: int | None = None
    device: int | None = None
    label: str = ""

    def __post_init__(self) -> None:
        start, end = int(self.start_ns), int(self.end_ns)
        if end < start:
            raise ValueError(f"instance ends before it starts: {start} > {end}")
        object.__setattr__(self, "start_ns", start)
        object.__setattr__(self, "end_ns", end)
        object.__setattr__(self, "rank", None if self.rank is None else int(self.rank))
        object.__setattr__(self, "device", None if self.device is None else int(self.device))
        object.__setattr__(self, "label", str(self.label))

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class InstanceColumns(NamedTuple):
    """A finding's instances as arrays, one entry per instance: what the ledger and the renderers read.

    ``rank`` and ``device`` are float64 with NaN for "unknown" (None); ``label_code`` indexes ``labels``.
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    rank: np.ndarray
    device: np.ndarray
    label_code: np.ndarray
    labels: list[str]

    def label(self, i: int) -> str:
        return self.labels[int(self.label_code[i])]


def _opt_id(x: float) -> int | None:
    return None if x != x else int(x)


def _instance_fast(start: int, end: int, rank: int | None, device: int | None, label: str) -> Instance:
    """An Instance from values already in its normal form (ints, None, str): no validation pass."""
    inst = object.__new__(Instance)
    inst.__dict__.update(start_ns=start, end_ns=end, rank=rank, device=device, label=label)
    return inst


class Instances(Sequence[Instance]):
    """``Finding.instances`` as a read-only sequence of ``Instance`` backed by columns.

    A rule that reports a DataFrame of 10^5 gaps gets its instances as five arrays, not 10^5 objects: the ledger
    claim and the renderers read the arrays (``columns()``), and an ``Instance`` is only made when someone
    indexes or iterates (then all are made once and kept). To change a finding's instances, assign a new list.
    """

    __slots__ = ("_cols", "_items")

    def __init__(self, items: Iterable[Instance] = ()) -> None:
        self._items: list[Instance] | None = list(items)
        self._cols: InstanceColumns | None = None

    @classmethod
    def from_columns(cls, cols: InstanceColumns) -> "Instances":
        out = cls.__new__(cls)
        out._items, out._cols = None, cols
        return out

    def columns(self) -> InstanceColumns:
        if self._cols is None:
            self._cols = _columns_of(self._items or [])
        return self._cols

    def _list(self) -> list[Instance]:
        if self._items is None:
            c = self._cols
            assert c is not None
            names = [c.labels[k] for k in c.label_code.tolist()]
            ranks = [_opt_id(x) for x in c.rank.tolist()]
            devices = [_opt_id(x) for x in c.device.tolist()]
            self._items = list(map(_instance_fast, c.start_ns.tolist(), c.end_ns.tolist(), ranks, devices, names))
        return self._items

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else len(self._cols.start_ns)  # type: ignore[union-attr]

    def __getitem__(self, i: Any) -> Any:  # an index gives an Instance, a slice a list of them
        return self._list()[i]

    def __iter__(self) -> Iterator[Instance]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Instances):
            return list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Instances({self._list()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Instances, (self._list(),))


def applies_to(n: int, ranks: np.ndarray | None, devices: np.ndarray | None, rank: int | None, device: int | None) -> np.ndarray:
    """Which of ``n`` instances apply to (rank, device): an unknown (NaN) or absent rank/device applies to all, and
    a None ``rank``/``device`` asks for any."""
    keep = np.ones(n, dtype=bool)
    if ranks is not None and rank is not None:
        keep &= np.isnan(ranks) | (ranks == rank)
    if devices is not None and device is not None:
        keep &= np.isnan(devices) | (devices == device)
    return keep


def _columns_of(items: Iterable[Any]) -> InstanceColumns:
    """Columns of any instance-like objects (``start_ns``/``end_ns``, optional ``rank``/``device``/``label``)."""
    items = items if isinstance(items, list) else list(items)

    def opt(name: str) -> np.ndarray:
        return np.array([np.nan if (v := getattr(it, name, None)) is None else float(v) for it in items], dtype=float)

    codes: dict[str, int] = {}
    label_code = np.array([codes.setdefault(str(getattr(it, "label", "") or ""), len(codes)) for it in items], dtype=np.int64)
    return InstanceColumns(
        np.array([int(it.start_ns) for it in items], dtype=np.int64),
        np.array([int(it.end_ns) for it in items], dtype=np.int64),
        opt("rank"),
        opt("device"),
        label_code,
        list(codes),
    )


def instance_columns(instances: "Iterable[Any] | None") -> InstanceColumns:
    """The columns of ``Finding.instances`` whatever it holds: an ``Instances`` (free) or a list of Instance."""
    if isinstance(instances, Instances):
        return instances.columns()
    return _columns_of(instances or [])


def as_instances(value: "Iterable[Instance] | pd.DataFrame | None") -> "Instances | list[Instance]":
    """Instances from a list of ``Instance`` or a DataFrame with start_ns, end_ns and optional rank, device, label.

    Missing or negative rank/device values mean "unknown" (None); times keep full nanosecond precision. A
    DataFrame stays columns (``Instances``): no object per row is made unless someone asks for one.
    """
    if value is None:
        return []
    if not isinstance(value, pd.DataFrame):
        out = list(value)
        bad = [type(v).__name__ for v in out if not isinstance(v, Instance)]
        if bad:
            raise TypeError(f"instances must be Instance objects or a DataFrame, got {bad[0]}")
        return Instances(out)
    missing = {"start_ns", "end_ns"} - set(value.columns)
    if missing:
        raise ValueError(f"instances DataFrame lacks column(s) {', '.join(sorted(missing))}")
    n = len(value)
    starts = value["start_ns"].to_numpy(dtype="int64")
    ends = value["end_ns"].to_numpy(dtype="int64")

    def ids(col: str) -> np.ndarray:
        if col not in value:
            return np.full(n, np.nan)
        v = pd.to_numeric(value[col], errors="coerce").to_numpy(dtype=float)
        if np.isinf(v).any():
            raise OverflowError("cannot convert float infinity to integer")
        with np.errstate(invalid="ignore"):
            return np.where(v < 0, np.nan, np.trunc(v))  # NaN stays NaN: unknown

    rank, device = ids("rank"), ids("device")
    back = np.flatnonzero(ends < starts)
    if len(back):
        raise ValueError(f"instance ends before it starts: {int(starts[back[0]])} > {int(ends[back[0]])}")
    if "label" in value:
        # each distinct label converted once, exactly as ``astype(str)`` converts it (missing values read "nan")
        lab = value["label"]
        code, _ = pd.factorize(lab, use_na_sentinel=True)
        code = code.astype(np.int64)
        u, first = np.unique(code, return_index=True)  # the row where each label first appears
        labels = [str(x) for x in lab.iloc[first].astype(str).tolist()]
        if len(u) and u[0] < 0:  # missing labels: one more code at the end
            labels = labels[1:] + labels[:1]
            code[code < 0] = len(labels) - 1
    else:
        code, labels = np.zeros(n, np.int64), [""]
    return Instances.from_columns(InstanceColumns(starts, ends, rank, device, code, labels))


@dataclass
class Finding:
    """One diagnosis, with the numbers that back it and what to do about it."""

    code: str
    title: str
    severity: Severity
    message: str
    impact_ns: int = 0  # estimated time that fixing this would save
    impact_pct_span: float = 0.0  # impact as % of the analysed span
    impact_pct_step: float | None = None  # impact per step as % of the mean step, when steps exist
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame)  # a small table: when, where, what
    fixes: dict[str, Fix] = field(default_factory=dict)  # "pytorch" / "tensorflow" -> Fix
    location: Location = field(default_factory=Location)
    metrics: dict[str, Any] = field(default_factory=dict)  # rule-specific numbers for JSON consumers
    rule_name: str = ""
    key: str = ""  # what makes this finding distinct within its rule (device, kernel name, ...)
    category: str = DEFAULT_CATEGORY  # the bound it belongs to (CATEGORIES), from the rule
    #: the intervals it is about, full ns precision: a sequence of Instance (``Instances``, columns inside)
    instances: Sequence[Instance] = field(default_factory=list)
    explains: list[str] = field(default_factory=list)  # fingerprints of the symptom findings this cause explains
    what_if: dict[str, Any] | None = None  # e.g. {"step_ns": ..., "baseline_step_ns": ..., "assumptions": "..."}

    @property
    def fingerprint(self) -> str:
        """Stable across runs of the same problem: the rule, the key and the place, not the numbers."""
        loc = self.location
        basis = f"{self.code}|{self.key}|{loc.rank}|{loc.device}|{loc.stream}"
        return hashlib.sha1(basis.encode()).hexdigest()[:16]


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
    fix_cuda: ClassVar[Fix] = Fix("")  # for plain CUDA programs (no framework in the trace)
    #: fixes that replace a framework's base fix on some GPU generations: "pytorch:pre_ampere", "tensorflow:fp8",
    #: ... (tiers in traceinsight.advice; the engine picks one per framework for the trace's GPUs)
    fix_variants: ClassVar[dict[str, Fix]] = {}
    options: ClassVar[dict[str, Option]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.category not in CATEGORIES:
            raise TypeError(f"rule {cls.__name__}: category {cls.category!r} is not one of {', '.join(CATEGORIES)}")
        if cls.lifecycle not in LIFECYCLES:
            raise TypeError(f"rule {cls.__name__}: lifecycle {cls.lifecycle!r} is not one of {', '.join(LIFECYCLES)}")
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
        labels = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "cuda": "CUDA"}
        for key, fx in cls.fixes().items():
            fw, _, tier = key.partition(":")
            label = labels.get(fw, fw) + (f" {tiers.get(tier, tier)}" if tier else "")
            lines += [f"## Fix in {label}", "", textwrap.dedent(fx.text).strip(), ""]
            if fx.code:
                lang = "cuda" if fw == "cuda" else "python"
                lines += [f"```{lang}", textwrap.dedent(fx.code).strip(), "```", ""]
        return "\n".join(lines)


class Context:
    """What a rule sees: the timeline, the shared views, and its resolved options."""

    def __init__(self, timeline: "Timeline", views: "Views", rule: Rule) -> None:
        self.timeline = timeline
        self.events = timeline.events
        self.meta = timeline.meta
        self.views = views
        self.rule = rule
        self.options = dict(rule.values)

    def finding(
        self,
        *,
        title: str,
        message: str,
        impact_ns: int = 0,
        evidence: pd.DataFrame | None = None,
        location: Location | None = None,
        severity: Severity | None = None,
        metrics: dict[str, Any] | None = None,
        key: str = "",
        fixes: dict[str, Fix] | None = None,
        instances: "Iterable[Instance] | pd.DataFrame | None" = None,
        explains: Iterable[str] = (),
        what_if: dict[str, Any] | None = None,
    ) -> Finding:
        """A Finding filled with this rule's code, severity and fixes, and impact percentages derived here."""
        return build_finding(
            self.rule, self.views.span_ns, self.views.mean_step_ns, self.views.step_count,
            title=title, message=message, impact_ns=impact_ns, evidence=evidence, location=location, severity=severity,
            metrics=metrics, key=key, fixes=fixes, instances=instances, explains=explains, what_if=what_if,
        )


def build_finding(
    rule: Rule,
    span_ns: float,
    step_ns: float | None,
    n_steps: int,
    *,
    title: str,
    message: str,
    impact_ns: int = 0,
    evidence: pd.DataFrame | None = None,
    location: Location | None = None,
    severity: Severity | None = None,
    metrics: dict[str, Any] | None = None,
    key: str = "",
    fixes: dict[str, Fix] | None = None,
    instances: "Iterable[Instance] | pd.DataFrame | None" = None,
    explains: Iterable[str] = (),
    what_if: dict[str, Any] | None = None,
) -> Finding:
    """One home for filling a Finding from its rule: the per-timeline and the cross-rank contexts both call it, each
    with the span and step it measures percentages against."""
    impact_ns = int(max(impact_ns, 0))
    return Finding(
        code=rule.code,
        rule_name=rule.name,
        title=title,
        severity=severity or rule.severity,
        message=message,
        impact_ns=impact_ns,
        impact_pct_span=100.0 * impact_ns / span_ns if span_ns else 0.0,
        impact_pct_step=(100.0 * impact_ns / n_steps / step_ns) if step_ns and n_steps else None,
        evidence=evidence if evidence is not None else pd.DataFrame(),
        fixes=fixes if fixes is not None else type(rule).fixes(),
        location=location or Location(),
        metrics=metrics or {},
        key=key,
        category=type(rule).category,
        instances=as_instances(instances),
        explains=list(explains),
        what_if=what_if,
    )


def fmt_ns(ns: float) -> str:
    """Human time: 950 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    ns = float(ns)
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"
