"""Findings as plain data: the categories a finding belongs to, its severity, fixes, location and the intervals
(instances) it is about. Floor 1 (model): rules build these, the engine grades and links them, renderers read them.
``traceinsight.rule_api`` re-exports every public name here, so rule authors import from one place.
"""

from __future__ import annotations

import enum
import hashlib
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import pandas as pd

from traceinsight.vocab import categories

#: The bounds a finding can belong to (the category record, ``vocab.categories``). The verdict names the category
#: whose largest finding costs most; "trace_quality" findings describe the recording, not the run, and never become
#: the verdict.
CATEGORIES: tuple[str, ...] = categories.RULE_CATEGORIES
#: A rule's maturity: "preview" rules are new and may change their thresholds or wording.
LIFECYCLES: tuple[str, ...] = ("stable", "preview")
#: The category of a rule that declares none (``categories.DEFAULT``).
DEFAULT_CATEGORY = categories.DEFAULT


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


#: The one severity scale (``traceinsight.assess.severity`` grades every finding with it): (share of the window in %,
#: severity), highest first.
SCALE: tuple[tuple[float, Severity], ...] = ((20.0, Severity.ERROR), (5.0, Severity.WARNING), (1.0, Severity.INFO))

def level(share_pct: float) -> Severity:
    """The severity of a finding costing ``share_pct`` % of its window (info below the info threshold too)."""
    for threshold, sev in SCALE:
        if share_pct >= threshold:
            return sev
    return Severity.INFO


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
class Location:
    """Where a finding happens; None fields mean 'all'."""

    rank: int | None = None
    device: int | None = None
    stream: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None


@dataclass(frozen=True)
class SourceLine:
    """The line of the user's own code a finding is about, as the trace recorded it (a Python frame of a
    ``with_stack=True`` recording): what a pull-request annotation or a code-scanning result points at.

    ``file`` is the path as recorded: absolute, or relative to where the program ran. Where that is inside a
    checkout is the renderer's question (``traceinsight.render.sources``): the trace does not know the checkout.
    """

    file: str
    line: int
    function: str = ""

    def __post_init__(self) -> None:
        line = int(self.line)
        if line < 1:
            raise ValueError(f"a source line counts from 1, got {line}")
        object.__setattr__(self, "file", str(self.file))
        object.__setattr__(self, "line", line)
        object.__setattr__(self, "function", str(self.function or ""))


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




def _columns_of(items: Iterable[Any]) -> InstanceColumns:
    """Columns of any instance-like objects (``start_ns``/``end_ns``, optional ``rank``/``device``/``label``)."""
    items = list(items)

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


#: Instances up to which string labels are coded in a dict (``_small_labels``) rather than by factorize and a take:
#: a finding on a small rank has a handful, where pandas' fixed costs are most of the finding's making.
SMALL_LABELS = 256


def _small_labels(lab: pd.Series) -> tuple[np.ndarray | None, list[str] | None]:
    """``as_instances``' label codes and texts for labels that are strings or missing: codes in order of first
    appearance, missing values (None, NaN, NA) sharing one that reads "nan", as ``factorize`` and ``astype(str)``
    give them. (None, None) when a label is anything else (a number, bytes): the general path converts those."""
    seen: dict[object, int] = {}
    code = []
    for x in lab.tolist():
        if type(x) is not str:
            if not (x is None or x is pd.NA or (isinstance(x, float) and x != x)):
                return None, None
            x = _MISSING
        k = seen.get(x)
        if k is None:
            k = seen[x] = len(seen)
        code.append(k)
    return np.array(code, dtype=np.int64), ["nan" if x is _MISSING else x for x in seen]


_MISSING = object()


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
        c = value[col]
        # a plain numeric column is already what ``to_numeric`` would give: read it as float directly
        numeric = isinstance(c.dtype, np.dtype) and c.dtype.kind in "iuf"
        v = c.to_numpy(dtype=float) if numeric else pd.to_numeric(c, errors="coerce").to_numpy(dtype=float)
        if np.isinf(v).any():
            raise OverflowError("cannot convert float infinity to integer")
        return np.where(v < 0, np.nan, np.trunc(v))  # NaN stays NaN: unknown

    rank, device = ids("rank"), ids("device")
    back = np.flatnonzero(ends < starts)
    if len(back):
        raise ValueError(f"instance ends before it starts: {int(starts[back[0]])} > {int(ends[back[0]])}")
    if "label" in value:
        lab = value["label"]
        code, labels = _small_labels(lab) if n <= SMALL_LABELS else (None, None)
        if code is None:
            # each distinct label converted once, exactly as ``astype(str)`` converts it (missing values read
            # "nan"); codes count up in order of appearance, missing values sharing one
            code, _ = pd.factorize(lab, use_na_sentinel=False)
            code = code.astype(np.int64)
            _, first = np.unique(code, return_index=True)  # the row where each label first appears
            labels = [str(x) for x in lab.iloc[first].astype(str).tolist()]
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
    #: the kind of saving ``saving_ns`` is, set by the engine (traceinsight.assess.savings): "idle" (GPU idle it claims),
    #: "modelled" (an assumed speed-up of busy work, what the replay gives back), "none" (no step-time figure: trace
    #: quality, or a gain per sample such as a larger batch's, ``Rule.per_sample``, preset when the finding is built)
    saving_kind: str = ""
    saving_ns: int | None = None  # the figure the reports show (``impact_ns`` is the rule's own estimate)
    share_pct: float | None = None  # saving_ns as % of the steady-state GPU window the finding is about
    claims: tuple[str, ...] = ()  # the ledger buckets its rule claims (``Rule.claims``); empty: its category's
    #: its rule names why the GPU waited (``Rule.root_cause``): it may explain symptom findings although its
    #: category is a symptom's (a recompile is idle time with a known reason)
    root_cause: bool = False
    #: the line of the user's code it is about (the innermost user frame of its lead site), when the trace
    #: recorded Python stacks; not part of the fingerprint (a moved line is the same problem)
    source: SourceLine | None = None

    @property
    def fingerprint(self) -> str:
        """Stable across runs of the same problem: the rule, the key and the place, not the numbers."""
        loc = self.location
        basis = f"{self.code}|{self.key}|{loc.rank}|{loc.device}|{loc.stream}"
        return hashlib.sha1(basis.encode()).hexdigest()[:16]
