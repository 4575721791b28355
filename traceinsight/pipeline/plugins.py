"""Finding rules: the built-ins, installed plugins, and local files.

The built-in rules are every public module of ``traceinsight.rules`` (the top-level ``rules/`` folder): a new
rule is one new file there, listed nowhere else. Third-party packages register rules in the
``traceinsight.rules`` entry-point group; local ``.py`` files or folders come from ``--rules``. A rule that fails
to import (an exception, ``SystemExit`` included), defines no rule, or reuses a taken code is a ``RuleFailure``: the
run goes on without it, the report lists it and the command exits with ``EXIT_RULE_FAILED``, so a gate never
passes with a rule silently missing.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from traceinsight.vocab.fence import roots as allowed_roots, inside, why_outside
from traceinsight.rule_api import Rule
from traceinsight.pipeline.rule_guard import RuleFailure, describe

ENTRY_POINT_GROUP = "traceinsight.rules"
BUILTIN_PACKAGE = "traceinsight.rules"


@dataclass
class RuleSet:
    rules: dict[str, type[Rule]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    failures: list[RuleFailure] = field(default_factory=list)  # rules that could not be loaded (rule_guard)

    def add(self, cls: type[Rule], origin: str) -> None:
        if not cls.code:
            self.failures.append(RuleFailure("?", origin, f"rule class {cls.__name__} has no code"))
            return
        if cls.code in self.rules and self.rules[cls.code] is not cls:
            self.failures.append(RuleFailure(cls.code, origin, f"its code is already taken by {self.rules[cls.code].__module__}"))
            return
        self.rules[cls.code] = cls

    def problems(self) -> list[str]:
        """Failures and warnings as lines, failures first (for ``traceinsight rules``)."""
        return [*(f.line() for f in self.failures), *self.warnings]


def builtin_modules() -> list[str]:
    """Module names of the built-in rules: the public modules of the rules package, sorted."""
    pkg = importlib.import_module(BUILTIN_PACKAGE)
    return sorted(f"{BUILTIN_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def discover(extra_paths: Iterable[str | Path] = ()) -> RuleSet:
    """All rules: built-ins, then installed plugins (entry points), then local files/folders."""
    rs = RuleSet()
    for mod in builtin_modules():
        _register(rs, lambda mod=mod: importlib.import_module(mod), f"built-in rule module {mod}", mod)
    for ep in installed_plugins():
        _register(rs, ep.load, f"rule plugin {ep.name} ({ep.value})", f"entry point {ep.name}")
    for p in extra_paths:
        path = Path(p)
        if not path.exists():
            rs.failures.append(RuleFailure("?", str(path), "--rules names no such file or folder"))
            continue
        if not path.is_dir() and allowed_roots() is not None and not inside(path, allowed_roots()):
            rs.failures.append(RuleFailure("?", str(path), "a rules file outside the server's roots; not loaded"))
            continue
        for f in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            why = why_outside(f, path, "rules folder") if path.is_dir() else None
            if why:  # a module of a rules folder that links elsewhere: code the user never pointed at
                rs.failures.append(RuleFailure("?", str(f), why))
            elif not f.name.startswith("_"):
                _register(rs, lambda f=f: _import_file(f), f"rules file {f}", str(f))
    return rs


def builtin_rules() -> dict[str, type[Rule]]:
    """The built-in rules by code (no plugin, no local file: nothing but the package's own modules is imported)."""
    rs = RuleSet()
    for mod in builtin_modules():
        _register(rs, lambda mod=mod: importlib.import_module(mod), f"built-in rule module {mod}", mod)
    return rs.rules


def installed_plugins() -> list[Any]:
    """The entry points of the ``traceinsight.rules`` group, by name (``importlib.metadata``), or none at once when
    no installed distribution can declare one (``group_may_be_declared``)."""
    if not group_may_be_declared():
        return []
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def group_may_be_declared(path: Iterable[Any] | None = None) -> bool:
    """Whether some distribution on ``path`` (default ``sys.path``) may register rules: one whose
    ``entry_points.txt`` contains the group's name anywhere. False only when that is certain.

    ``importlib.metadata.entry_points`` imports the email and socket machinery and parses the entry points of
    every installed distribution (0.03 s of CPU in a venv with torch and TensorFlow, on every run); reading the
    same files for one byte string costs a tenth of that. Where the answer cannot be read that simply (a zip or
    egg file on the path, a path entry that is not text, a distribution finder other than the standard one),
    the answer is True and importlib.metadata does the full search."""
    if any(getattr(f, "find_distributions", None) is not None and f is not importlib.machinery.PathFinder for f in sys.meta_path):
        return True
    needle = ENTRY_POINT_GROUP.encode()
    for entry in sys.path if path is None else path:
        if not isinstance(entry, str):
            return True
        root = entry or "."
        try:
            names = os.listdir(root)
        except NotADirectoryError:
            return True  # a zip or egg file: its metadata is inside it
        except OSError:
            continue  # a folder that does not exist adds no distribution
        egg = root.lower().endswith(".egg")
        for name in names:
            low = name.lower()
            if not (low.endswith((".dist-info", ".egg-info")) or (egg and low == "egg-info")):
                continue
            try:
                with open(os.path.join(root, name, "entry_points.txt"), "rb") as f:
                    if needle in f.read():
                        return True
            except OSError:
                continue  # no entry points (or a metadata file, not a folder)
    return False


def _rules_in(obj: Any) -> list[type[Rule]]:
    if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule:
        return [obj]
    if inspect.ismodule(obj):
        return [v for v in vars(obj).values() if inspect.isclass(v) and issubclass(v, Rule) and v is not Rule and v.__module__ == obj.__name__]
    if isinstance(obj, (list, tuple)):
        return [r for item in obj for r in _rules_in(item)]
    return []


def _register(rs: RuleSet, load: Callable[[], Any], what: str, origin: str) -> None:
    """Load one plugin and add its rules; any failure (``SystemExit`` included) becomes a RuleFailure, never a crash."""
    try:
        loaded = load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a broken plugin must not break the run, nor end it
        rs.failures.append(RuleFailure("?", origin, f"could not load {what}: {describe(exc)}"))
        return
    found = _rules_in(loaded)
    if not found:
        rs.failures.append(RuleFailure("?", origin, f"{what} defines no Rule subclass"))
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
