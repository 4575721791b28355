"""Finding rules, configuring them, running them over a timeline.

Rules are discovered through the ``traceinsight.rules`` entry-point group (the built-ins register there too),
plus local ``.py`` files or folders given with ``--rules``. A rule that fails to import or crashes while
checking becomes a warning in the analysis; it never takes the run down.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import time
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Iterable

from .errors import ConfigError
from .rule_api import Context, Finding, Rule, Severity
from .causes import attach_what_if, link as link_causes
from .severity import DEFAULT_MIN_IMPACT_PCT, grade
from .summary import Summary, summarize
from .timeline import Timeline
from .views import Views

ENTRY_POINT_GROUP = "traceinsight.rules"


@dataclass
class RuleSet:
    rules: dict[str, type[Rule]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add(self, cls: type[Rule], origin: str) -> None:
        if not cls.code:
            self.warnings.append(f"rule {cls.__name__} from {origin} has no code; skipped")
            return
        if cls.code in self.rules and self.rules[cls.code] is not cls:
            self.warnings.append(f"rule code {cls.code} from {origin} is already taken by {self.rules[cls.code].__module__}; skipped")
            return
        self.rules[cls.code] = cls


def _rules_in(obj: Any) -> list[type[Rule]]:
    if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule:
        return [obj]
    if inspect.ismodule(obj):
        return [v for v in vars(obj).values() if inspect.isclass(v) and issubclass(v, Rule) and v is not Rule and v.__module__ == obj.__name__]
    if isinstance(obj, (list, tuple)):
        return [r for item in obj for r in _rules_in(item)]
    return []


def discover(extra_paths: Iterable[str | Path] = ()) -> RuleSet:
    """All rules: entry points first (built-ins and installed plugins), then local files/folders."""
    rs = RuleSet()
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        _register(rs, ep.load, f"rule plugin {ep.name} ({ep.value})", f"entry point {ep.name}")
    for p in extra_paths:
        path = Path(p)
        if not path.exists():
            rs.warnings.append(f"--rules {path}: no such file or folder")
            continue
        for f in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            if not f.name.startswith("_"):
                _register(rs, lambda f=f: _import_file(f), f"rules file {f}", str(f))
    return rs


def _register(rs: RuleSet, load, what: str, origin: str) -> None:
    """Load one plugin and add its rules; any failure becomes a warning, never a crash."""
    try:
        loaded = load()
    except Exception as exc:  # a broken plugin must not break the run
        rs.warnings.append(f"could not load {what}: {type(exc).__name__}: {exc}")
        return
    found = _rules_in(loaded)
    if not found:
        rs.warnings.append(f"{what} defines no Rule subclass")
    for cls in found:
        rs.add(cls, origin)


def _import_file(path: Path):
    name = f"traceinsight_local_rules_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python file: {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass
class Config:
    """Which rules run and with which options; built from pyproject.toml and the command line."""

    select: list[str] = field(default_factory=list)  # codes or prefixes; empty = all
    ignore: list[str] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # CODE -> {option: value}
    severity: dict[str, str] = field(default_factory=dict)  # CODE -> severity override
    rule_paths: list[str] = field(default_factory=list)
    min_impact: float = DEFAULT_MIN_IMPACT_PCT  # % of the GPU window below which findings are not reported

    @classmethod
    def from_pyproject(cls, path: str | Path | None = None) -> "Config":
        """Read ``[tool.traceinsight]`` from ``path`` or the nearest pyproject.toml above the working directory."""
        p = Path(path) if path else _find_pyproject()
        cfg = cls()
        if p is None or not p.is_file():
            return cfg
        try:
            import tomllib  # type: ignore[import-not-found]
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8")).get("tool", {}).get("traceinsight", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: invalid TOML: {exc}") from None
        cfg.select = list(data.get("select", []))
        cfg.ignore = list(data.get("ignore", []))
        cfg.rule_paths = [str((p.parent / r).resolve()) for r in data.get("rules", [])]
        if "min_impact" in data:
            try:
                cfg.min_impact = float(data["min_impact"])
            except (TypeError, ValueError):
                raise ConfigError(f"{p}: min_impact must be a number (% of the GPU window), got {data['min_impact']!r}") from None
        for code, opts in (data.get("rule") or data.get("rules_options") or {}).items():
            if not isinstance(opts, dict):
                raise ConfigError(f"{p}: [tool.traceinsight.rule.{code}] must be a table")
            opts = dict(opts)
            if "severity" in opts:
                cfg.severity[code.upper()] = str(opts.pop("severity"))
            cfg.options.setdefault(code.upper(), {}).update(opts)
        return cfg

    def set_option(self, assignment: str) -> None:
        """Apply ``CODE.option=value`` from ``--set``."""
        try:
            lhs, value = assignment.split("=", 1)
            code, opt = lhs.strip().split(".", 1)
        except ValueError:
            raise ConfigError(f"--set {assignment!r}: expected CODE.option=value, e.g. TI001.min_gap_us=500") from None
        code = code.strip().upper()
        if opt.strip() == "severity":
            self.severity[code] = value.strip()
        else:
            self.options.setdefault(code, {})[opt.strip()] = value.strip()

    def selected(self, code: str) -> bool:
        if self.select and not any(code.startswith(s.upper()) for s in self.select):
            return False
        return not any(code.startswith(i.upper()) for i in self.ignore)


def _find_pyproject() -> Path | None:
    here = Path.cwd()
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def instantiate(ruleset: RuleSet, config: Config) -> list[Rule]:
    """Selected rules with their options applied; a bad option is a usage error, not a warning."""
    for code in list(config.options) + list(config.severity):
        if code not in ruleset.rules:
            raise ConfigError(f"options given for unknown rule {code}; known: {', '.join(sorted(ruleset.rules))}")
    out = []
    for code, cls in sorted(ruleset.rules.items()):
        if not config.selected(code):
            continue
        try:
            rule = cls(**config.options.get(code, {}))
            if code in config.severity:
                rule.severity = Severity.parse(config.severity[code])  # type: ignore[misc]
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        out.append(rule)
    return out


@dataclass
class Analysis:
    """The result of analysing one timeline: summary metrics, findings (largest impact first), warnings."""

    timeline: Timeline
    summary: Summary
    findings: list[Finding]
    warnings: list[str]
    rules_run: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    baseline: Any = None  # a baseline.Comparison when the run was compared with an earlier report
    views: Views | None = None  # the rules' cached views; renderers read these instead of deriving their own
    ledger: Any = None  # the time ledger (traceinsight.ledger) once it is built; None until then

    def __post_init__(self) -> None:
        if self.views is None:
            self.views = Views(self.timeline)

    def worst_severity(self) -> Severity | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: s.rank)


def run(
    timeline: Timeline,
    rules: list[Rule],
    *,
    extra_warnings: Iterable[str] = (),
    min_impact: float = DEFAULT_MIN_IMPACT_PCT,
    severity_overrides: Iterable[str] = (),
) -> Analysis:
    views = Views(timeline)
    findings: list[Finding] = []
    warnings = list(extra_warnings)
    timings: dict[str, float] = {}
    for rule in rules:
        t0 = time.perf_counter()
        try:
            result = rule.check(Context(timeline, views, rule))
            found = list(result or [])
        except Exception as exc:  # one broken rule must not hide the others
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            warnings.append(f"rule {rule.code} failed and was skipped: {type(exc).__name__}: {exc} ({Path(tb.filename).name}:{tb.lineno})")
            found = []
        timings[rule.code] = time.perf_counter() - t0
        for f in found:
            if rule.severity != type(rule).severity and f.severity == type(rule).severity:
                f.severity = rule.severity
        findings.extend(found)
    findings = grade(findings, views, {r.code: r for r in rules}, min_impact_pct=min_impact, overridden=severity_overrides)
    findings.sort(key=lambda f: (-f.impact_ns, -f.severity.rank, f.code))
    findings = link_causes(findings)
    attach_what_if(findings, views)
    return Analysis(
        timeline=timeline,
        summary=summarize(timeline, views),
        findings=findings,
        warnings=warnings,
        rules_run=[r.code for r in rules],
        timings=timings,
        views=views,
        ledger=views.ledger,
    )
