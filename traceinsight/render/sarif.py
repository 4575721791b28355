"""SARIF 2.1.0 (the OASIS Static Analysis Results Interchange Format), for code scanning: ``--format sarif``.

One run of one tool: the rule table (every built-in rule, and any other rule that ran or found something: its
code as ``id``, its name, summary, documentation page, i.e. ``docs/rules/CODE.md``, and its default severity as
the default level) and one result per finding with its title and message, its level, the line of the user's
code where the trace recorded one inside the checkout (``render.sources``; else the trace file itself when it
is in the checkout, so code scanning, which needs a location, still shows the finding), a fingerprint that is
stable across runs of the same problem, and the saving and what-if in its property bag.

GitHub's code scanning refuses a whole upload when one result has no location: a finding with neither a line of
the checkout nor a trace file inside it has none (SARIF allows that), and the run's ``unlocated_results`` property
counts them; keep the trace inside the checkout for an upload (docs/ci.md).

Untrusted text stays text: every trace string is a JSON string value (the encoder escapes what JSON needs, and
``sanitize.data_text`` / ``json_text`` make invisible and control characters visible), file paths are
percent-encoded URI references. ``tests/test_github_sarif.py`` validates the output against the official schema.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from traceinsight.model.analysis import Analysis
from traceinsight.model.serialize import jsonable
from traceinsight.vocab.sanitize import data_text, json_text
from traceinsight.vocab.version import __version__
from traceinsight.render.common import figure_text, shown_fixes, shown_ns, what_if_text
from traceinsight.render.sources import SourceRoot

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: A finding's severity as a SARIF level.
LEVELS = {"info": "note", "warning": "warning", "error": "error"}
#: The base the result paths are relative to: the source root (the name code scanning's examples use; it resolves
#: relative paths against the checkout and ignores ``originalUriBaseIds``, which records the root for other readers).
ROOT_ID = "%SRCROOT%"
FINGERPRINT_KEY = "traceinsightFinding/v1"


def _text(value: Any, limit: int | None = 4000) -> str:
    return data_text(value, limit)


def _descriptor(code: str, cls: Any = None, name: str = "") -> dict[str, Any]:
    if cls is None:  # a rule known only from its findings (a plugin the table does not list)
        return {"id": _text(code, 40), "name": _text(name or code, 80), "shortDescription": {"text": _text(name or code, 200)},
                "defaultConfiguration": {"level": "warning"}}
    summary = str(cls.summary or cls.name or cls.code)
    return {
        "id": cls.code,
        "name": _text(cls.name or cls.code, 80),
        "shortDescription": {"text": _text(summary, 1000)},
        "fullDescription": {"text": _text(" ".join(str(cls.why or summary).split()), 4000)},
        "help": {"text": _text(summary, 1000), "markdown": _text(cls.docs(), 20000)},
        "defaultConfiguration": {"level": LEVELS.get(cls.severity.value, "warning")},
        "properties": {"category": cls.category, "lifecycle": cls.lifecycle, "tags": ["performance", "gpu", cls.category]},
    }


def rule_table(analysis: Analysis) -> list[dict[str, Any]]:
    """Descriptors of the built-in rules, then of any other rule that ran or found something, by code."""
    from traceinsight.pipeline.plugins import builtin_rules

    builtins = builtin_rules()
    names = {f.code: f.rule_name for f in analysis.findings}
    codes = sorted({*builtins, *analysis.rules_run, *names})
    return [_descriptor(c, builtins.get(c), names.get(c, "")) for c in codes]


def _location(path: str, line: int | None, function: str = "") -> dict[str, Any]:
    phys: dict[str, Any] = {"artifactLocation": {"uri": quote(path, safe="/"), "uriBaseId": ROOT_ID}}
    if line is not None:
        phys["region"] = {"startLine": int(line)}
    loc: dict[str, Any] = {"physicalLocation": phys}
    if function:
        loc["logicalLocations"] = [{"name": _text(function, 200), "kind": "function"}]
    return loc


def _result(f: Any, index: int, root: SourceRoot, trace_path: str | None) -> dict[str, Any]:
    fig = figure_text(f)
    fixes = shown_fixes(f, all_frameworks=False)
    text = f"{str(f.title).rstrip('.')}. {f.message}" + (f" ({fig})" if fig else "")
    if fixes:
        text += f" Fix: {fixes[0][1].text.strip()}"
    path = root.path_of(getattr(f, "source", None))
    locations = []
    if path is not None:
        locations.append(_location(path, f.source.line, f.source.function))
    elif trace_path is not None:
        locations.append(_location(trace_path, None))
    props: dict[str, Any] = {
        "severity": f.severity.value,
        "category": f.category,
        "saving_ns": shown_ns(f),
        "saving_kind": f.saving_kind or "idle",
        "share_pct": None if f.share_pct is None else round(float(f.share_pct), 3),
        "saving": fig,
    }
    if f.what_if:
        props["what_if"] = _plain(f.what_if)
        props["what_if_text"] = what_if_text(f)
    if path is None and getattr(f, "source", None) is not None:
        props["recorded_source"] = f"{_text(f.source.file, 500)}:{f.source.line}"  # a line outside the checkout
    out: dict[str, Any] = {
        "ruleId": _text(f.code, 40),
        "ruleIndex": index,
        "level": LEVELS.get(f.severity.value, "warning"),
        "message": {"text": _text(text, 8000)},
        "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint},
        "properties": props,
    }
    if locations:
        out["locations"] = locations
    return out


def _plain(value: Any) -> Any:
    """A what-if dict as JSON values (``serialize.jsonable``), its text made visible and bounded."""
    value = jsonable(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return _text(value, 2000) if isinstance(value, str) else value


def to_dict(analysis: Analysis, source_root: Any = None) -> dict[str, Any]:
    root = SourceRoot(source_root)
    rules = rule_table(analysis)
    index = {r["id"]: i for i, r in enumerate(rules)}
    meta = analysis.timeline.meta
    trace_path = root.local(meta.path) if meta.path else None
    results = [_result(f, index[_text(f.code, 40)], root, trace_path) for f in analysis.findings]
    notes = [{"level": "error", "message": {"text": _text(r.line(), 2000)}} for r in analysis.rule_failures]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "traceinsight", "version": __version__, "semanticVersion": __version__, "rules": rules}},
                "originalUriBaseIds": {ROOT_ID: {"uri": root.root.as_uri().rstrip("/") + "/"}},
                "invocations": [{"executionSuccessful": not analysis.rule_failures, "toolExecutionNotifications": notes}],
                "results": results,
                "properties": {"verdict": _text(analysis.verdict.get("headline", ""), 300), "source_format": _text(meta.source_format, 40),
                               "unlocated_results": sum(1 for r in results if "locations" not in r)},
            }
        ],
    }


def render(analysis: Analysis, source_root: Any = None, **_: Any) -> str:
    return json_text(json.dumps(to_dict(analysis, source_root), indent=2, ensure_ascii=False)) + "\n"
