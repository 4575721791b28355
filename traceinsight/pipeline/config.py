"""Which rules run and with which options: ``[tool.traceinsight]`` in a pyproject.toml, plus explicit settings.

Rule files named in a pyproject.toml are Python that runs on import. A CI job that analyses a pull request's trace
inside the pull request's checkout would otherwise run that pull request's code with the job's secrets, so rule
paths are honoured only from a file named explicitly (``--config PATH``, ``Config.from_pyproject(PATH)``) or
when the environment opts in with ``TRACEINSIGHT_TRUST_PYPROJECT=1``. The nearest pyproject.toml found on its
own still gives the plain options (select, ignore, rule options and severities), which run nothing.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from traceinsight.vocab.errors import ConfigError
from traceinsight.assess.severity import DEFAULT_MIN_IMPACT_PCT

#: Set to 1 to let the implicitly found pyproject.toml load its ``rules`` files (see docs/ci.md).
TRUST_ENV = "TRACEINSIGHT_TRUST_PYPROJECT"


@dataclass
class Config:
    """Which rules run and with which options. Treated as a value: ``with_overrides`` returns a new one."""

    select: list[str] = field(default_factory=list)  # codes or prefixes; empty = all
    ignore: list[str] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # CODE -> {option: value}
    severity: dict[str, str] = field(default_factory=dict)  # CODE -> severity override
    rule_paths: list[str] = field(default_factory=list)
    min_impact: float = DEFAULT_MIN_IMPACT_PCT  # % of the GPU window below which findings are not reported
    warnings: list[str] = field(default_factory=list)  # what reading the configuration left out, for the report
    source: str | None = None  # the pyproject.toml read, if any
    from_file: dict[str, Any] = field(default_factory=dict)  # what that file set, as it set it

    @classmethod
    def from_pyproject(cls, path: str | Path | None = None, *, trust: bool | None = None, implicit: bool = False) -> "Config":
        """``[tool.traceinsight]`` of ``path``, or of the nearest pyproject.toml above the working directory.

        Rule paths are kept when ``path`` is given (unless ``implicit``: a file found by a search, e.g. the MCP
        server's from its root), or ``trust`` (default: the ``TRACEINSIGHT_TRUST_PYPROJECT`` environment variable)
        allows it; otherwise they are dropped with a warning.
        """
        explicit = path is not None and not implicit
        p = Path(path) if path is not None else find_pyproject()
        cfg = cls()
        if p is None:
            return cfg
        if not p.is_file():
            if explicit:
                raise ConfigError(f"--config {p}: no such file")
            return cfg
        import tomllib  # only where a pyproject.toml is read

        try:
            data = tomllib.loads(p.read_text(encoding="utf-8")).get("tool", {}).get("traceinsight", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: invalid TOML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: [tool.traceinsight] must be a table")
        cfg.source = str(p)
        cfg.from_file = copy.deepcopy(data)
        if "min_impact" in data:
            cfg.min_impact = check_min_impact(data["min_impact"], f"{p}: min_impact")
        cfg.select = _str_list(data.get("select", []), p, "select")
        cfg.ignore = _str_list(data.get("ignore", []), p, "ignore")
        rules = _str_list(data.get("rules", []), p, "rules")
        if trust is None:
            trust = os.environ.get(TRUST_ENV, "") == "1"
        if rules and not (explicit or trust):
            cfg.warnings.append(
                f"{p} names rule files ({', '.join(rules)}) that were NOT loaded: rule files run code, so they are "
                f"only loaded with --config {p} or {TRUST_ENV}=1"
            )
        else:
            cfg.rule_paths = [str((p.parent / r).resolve()) for r in rules]
        table = data.get("rule") or {}
        if not isinstance(table, dict):
            raise ConfigError(f"{p}: [tool.traceinsight.rule] must be a table")
        for code, opts in table.items():
            if not isinstance(opts, dict):
                raise ConfigError(f"{p}: [tool.traceinsight.rule.{code}] must be a table")
            cfg._apply(code, opts)
        return cfg

    def described(self) -> dict[str, Any]:
        """Where the configuration came from and what that file set (for results that must say what shaped them)."""
        return {"file": self.source, "settings": self.from_file, "rule_files": list(self.rule_paths),
                "warnings": list(self.warnings)}

    def with_overrides(
        self,
        *,
        select: Iterable[str] = (),
        ignore: Iterable[str] = (),
        options: dict[str, dict[str, Any]] | None = None,
        min_impact: float | None = None,
    ) -> "Config":
        """A copy with explicit settings on top: select / ignore replace the configured ones when given, options
        (a ``"severity"`` key sets the severity) are merged per rule. ``self`` is left unchanged."""
        cfg = copy.deepcopy(self)
        cfg.select = list(select) or cfg.select
        cfg.ignore = list(ignore) or cfg.ignore
        for code, opts in (options or {}).items():
            cfg._apply(code, opts)
        if min_impact is not None:
            cfg.min_impact = check_min_impact(min_impact, "--min-impact")
        return cfg

    def _apply(self, code: str, opts: dict[str, Any]) -> None:
        code = code.strip().upper()
        opts = dict(opts)
        if "severity" in opts:
            self.severity[code] = str(opts.pop("severity"))
        if opts:
            self.options.setdefault(code, {}).update(opts)

    def selected(self, code: str) -> bool:
        if self.select and not any(code.startswith(s.upper()) for s in self.select):
            return False
        return not any(code.startswith(i.upper()) for i in self.ignore)


def check_number(value: Any, where: str, lo: float, hi: float, what: str) -> float:
    """``value`` as a finite float within ``[lo, hi]``, else a ConfigError (exit 2) stating the allowed range.

    Every numeric setting that is not a rule option enters through here (rule options through ``Option``), so
    NaN, an infinity or a string never reaches a comparison that would silently pass or drop everything.
    """
    try:
        if isinstance(value, bool):
            raise TypeError
        v = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:59] + "…"
        raise ConfigError(f"{where} expects {what} from {lo:g} to {hi:g}, got {shown}")
    return v


def check_min_impact(value: Any, where: str = "--min-impact") -> float:
    return check_number(value, where, 0.0, 100.0, "a % of the GPU window")


def check_worse_by(value: Any, where: str = "--worse-by") -> float:
    return check_number(value, where, 0.0, 1e6, "a growth in percent")


def check_fail_if_slower(value: Any, where: str = "--fail-if-slower") -> float:
    """The diff gate's threshold: a finite slowdown in percent (1000 % is an 11× slower step)."""
    return check_number(value, where, 0.0, 1000.0, "a slowdown in percent")


#: Ranges of the user's efficiency figures: no GPU computes 10 PFLOP/s dense or moves 100 TB/s, and none is under
#: a GFLOP/s; a model step of 10^22 FLOPs is far beyond any trained today on one device.
PEAK_TFLOPS_RANGE = (1e-3, 1e4)
PEAK_GBS_RANGE = (1.0, 1e5)
MODEL_FLOPS_RANGE = (1.0, 1e22)


def check_efficiency(settings: Any) -> Any:
    """``settings`` (an ``EfficiencySettings`` or None) with every given figure checked against its range."""
    if settings is None:
        return None
    for attr, flag, (lo, hi), what in (("peak_tflops", "--peak-tflops", PEAK_TFLOPS_RANGE, "dense TFLOP/s"),
                                       ("peak_bandwidth_gbs", "--peak-bandwidth", PEAK_GBS_RANGE, "GB/s"),
                                       ("model_flops_per_step", "--model-flops-per-step", MODEL_FLOPS_RANGE, "FLOPs per step")):
        v = getattr(settings, attr, None)
        if v is not None:
            setattr(settings, attr, check_number(v, flag, lo, hi, what))
    return settings


def check_rule_timeout(value: Any, where: str = "--rule-timeout") -> float | None:
    """Seconds a rule may run (0 or None: no limit)."""
    if value is None:
        return None
    return check_number(value, where, 0.0, 86_400.0, "seconds") or None


def parse_assignments(assignments: Iterable[str]) -> dict[str, dict[str, str]]:
    """``CODE.option=value`` strings (``--set``) as an options mapping; ``CODE.severity=...`` included."""
    out: dict[str, dict[str, str]] = {}
    for a in assignments:
        try:
            lhs, value = a.split("=", 1)
            code, opt = lhs.strip().split(".", 1)
        except ValueError:
            raise ConfigError(f"--set {a!r}: expected CODE.option=value, e.g. TI001.min_gap_us=500") from None
        if not code.strip() or not opt.strip():
            raise ConfigError(f"--set {a!r}: expected CODE.option=value, e.g. TI001.min_gap_us=500")
        out.setdefault(code.strip().upper(), {})[opt.strip()] = value.strip()
    return out


def find_pyproject(start: Path | None = None, stop: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from ``start`` (default: the working directory) upward, not above ``stop``."""
    here = Path.cwd() if start is None else Path(start)
    for d in (here, *here.parents):
        if stop is not None and not (d == stop or d.is_relative_to(stop)):
            return None
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def _str_list(value: Any, p: Path, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{p}: [tool.traceinsight] {key} must be a list of strings")
    return list(value)
