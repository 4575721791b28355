"""What an agent can ask, as plain methods: analyse a trace, then drill into a finding, the ledger, steps, rules.

The shape follows what agent users ask of trace tools: small typed results instead of data dumps, a list first
and details on request, and the same numbers on every run. Every result is cut from the JSON report of
``render.json_report.to_dict`` (the schema of ``traceinsight analyze --format json``, docs/json-report.md), so an
agent and a CI job read one document; lists are paged (``offset``/``limit``, with ``total`` and ``next_offset``).

Safety, because the caller is a model acting for a user:

* paths are read only under the session's roots (default: the working directory), after resolving links, so
  ``../`` or a link inside a root cannot reach a file outside it; object-store URLs are refused;
* nothing is written;
* rule files (``rules=``, and those a pyproject names) run only when the session was started with
  ``allow_rules``: a rule file is code;
* strings copied from the trace reach the client with control, bidi and invisible characters written as visible
  escapes (``sanitize.data_text``), cut at ``MAX_STRING``, and the server's instructions say they are data from
  the trace, never instructions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import TraceInsightError
from ..sanitize import data_text, terminal
from .store import Store

#: Version of the tool results' own envelope (the report inside carries its own ``schema_version``).
RESULT_VERSION = 1
#: Page sizes: enough for an agent to decide, small enough for its context.
FINDINGS_PAGE = 20
EVIDENCE_PAGE = 20
INSTANCES_PAGE = 20
STEPS_PAGE = 50
#: Kernel and op rows a diff result carries (largest change first).
DIFF_ROWS = 15
#: Evidence rows kept per finding in the store (the JSON report's own cap is 50; drill-down may page further).
MAX_EVIDENCE_ROWS = 500
#: Longest string a result carries; longer ones (a 1 MB kernel name) are cut with an ellipsis.
MAX_STRING = 2000

#: The finding fields the list view carries; ``finding`` returns the rest. ``saving_ns`` is the figure every report
#: shows (its kind and share beside it), ``impact_ns`` the rule's own estimate before the ledger and the replay.
_LIST_FIELDS = (
    "code", "rule", "category", "title", "severity", "saving_kind", "saving_ns", "share_pct", "impact_ns", "impact_pct_span",
    "impact_pct_step", "explains", "fingerprint",
)


class ToolError(Exception):
    """A request the session refuses or cannot answer; the message is one line for the agent."""


class Session:
    """One agent session: where it may read, whether it may run rule files, and the analyses it made."""

    def __init__(self, roots: Sequence[str | os.PathLike] = (), *, allow_rules: bool = False, store: Store | None = None) -> None:
        self.roots = [Path(r).expanduser().resolve() for r in (roots or [Path.cwd()])]
        for r in self.roots:
            if not r.is_dir():
                raise ToolError(f"root {r} is not a folder")
        self.allow_rules = allow_rules
        self.store = store or Store()

    # -- paths -------------------------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """``path`` (absolute, or relative to the first root) as a real path under a root, else a ToolError."""
        if not isinstance(path, str) or not path:
            raise ToolError("path must be a non-empty string")
        if "://" in path:
            raise ToolError("only local paths under the server's roots are read (no URLs)")
        p = Path(path).expanduser()
        if not p.is_absolute():
            p = self.roots[0] / p
        try:
            real = p.resolve(strict=True)
        except (OSError, RuntimeError):
            raise ToolError(f"no such file or folder: {terminal(path, 300)}") from None
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            raise ToolError(f"{terminal(path, 300)} is outside the server's roots ({', '.join(str(r) for r in self.roots)})")
        return real

    # -- tools -------------------------------------------------------------------------------------------------

    def analyze(
        self,
        path: str,
        *,
        select: Iterable[str] = (),
        ignore: Iterable[str] = (),
        options: dict[str, dict[str, Any]] | None = None,
        min_impact: float | None = None,
        trace_format: str | None = None,
        run: str | None = None,
        rules: Iterable[str] = (),
        offset: int = 0,
        limit: int = FINDINGS_PAGE,
    ) -> dict[str, Any]:
        """Analyse a trace: verdict, headline figures, the ledger's totals and a page of findings."""
        from .. import engine
        from ..config import Config
        from ..render.json_report import to_dict

        rules = list(rules or [])
        if rules and not self.allow_rules:
            raise ToolError("rule files run code: start the server with --allow-rules to use them")
        target = self.resolve(path)
        rule_paths = [self.resolve(r) for r in rules]
        try:
            config = Config.from_pyproject(trust=self.allow_rules)
            analysis = engine.analyze(
                target,
                select=list(select or []),
                ignore=list(ignore or []),
                options=options or None,
                rules=rule_paths,
                config=config,
                trace_format=trace_format,
                run_name=run,
                min_impact=min_impact,
            )
        except TraceInsightError as exc:
            raise ToolError(str(exc)) from None
        report = _clean(to_dict(analysis, max_evidence_rows=MAX_EVIDENCE_ROWS))
        report["trace"]["path"] = data_text(target, MAX_STRING)  # one spelling per file, whatever the agent typed
        key = repr((str(target), _stamp(target), sorted(select or []), sorted(ignore or []), sorted((options or {}).items(), key=str), min_impact, trace_format, run, [str(r) for r in rule_paths]))
        ident = self.store.put(key, report, _size(report))
        return self._overview(ident, report, offset, limit)

    def findings(self, analysis_id: str, *, offset: int = 0, limit: int = FINDINGS_PAGE) -> dict[str, Any]:
        """Another page of an analysis' findings (the list ``analyze`` starts)."""
        report = self._report(analysis_id)
        return {"result_version": RESULT_VERSION, "analysis_id": analysis_id, **_page_of_findings(report["findings"], offset, limit)}

    def finding(
        self,
        analysis_id: str,
        finding_id: int | str,
        *,
        evidence_offset: int = 0,
        evidence_limit: int = EVIDENCE_PAGE,
        instances_offset: int = 0,
        instances_limit: int = INSTANCES_PAGE,
        all_frameworks: bool = False,
    ) -> dict[str, Any]:
        """One finding in full: message, metrics, a page of evidence rows and instances, the fix, the what-if.

        ``finding_id`` is the ``id`` the list gave (its position) or the finding's ``fingerprint``. Fixes are the
        trace's own framework's unless ``all_frameworks``.
        """
        report = self._report(analysis_id)
        idx = _finding_index(report["findings"], finding_id)
        f = dict(report["findings"][idx])
        rows = f["evidence"]["rows"]
        f["evidence"] = {
            "columns": f["evidence"]["columns"],
            **_page(rows, evidence_offset, evidence_limit, total=f["evidence"]["total_rows"], key="rows"),
        }
        inst = _page(f["instances"], instances_offset, instances_limit, total=f.pop("total_instances"), key="items")
        f["instances"] = inst
        framework = report["trace"]["framework"]
        if not all_frameworks:
            own = {k: v for k, v in f["fixes"].items() if k.partition(":")[0] == framework}
            f["other_fix_frameworks"] = sorted(set(f["fixes"]) - set(own))
            f["fixes"] = own
        return {"result_version": RESULT_VERSION, "analysis_id": analysis_id, "id": idx, "framework": framework, "finding": f}

    def ledger(self, analysis_id: str, *, rank: int | None = None, device: int | None = None, step: int | None = None, offset: int = 0, limit: int = STEPS_PAGE) -> dict[str, Any]:
        """Where each GPU's window went, bucket by bucket: totals, per device, and per step (filtered, paged)."""
        led = self._report(analysis_id)["ledger"]

        def keep(row: dict[str, Any]) -> bool:
            return (rank is None or row["rank"] == rank) and (device is None or row["device"] == device) and (step is None or row["step"] == step)

        by_device = [d for d in led["by_device"] if (rank is None or d["rank"] == rank) and (device is None or d["device"] == device)]
        by_step = [s for s in led["by_step"] if keep(s)]
        return {
            "result_version": RESULT_VERSION,
            "analysis_id": analysis_id,
            "buckets": led["buckets"],
            "avoidable_buckets": led["avoidable_buckets"],
            "total": led["total"],
            "by_device": by_device,
            "by_step": _page(by_step, offset, limit, key="items"),
        }

    def steps(self, analysis_id: str, *, offset: int = 0, limit: int = STEPS_PAGE) -> dict[str, Any]:
        """The steps: the report's ``steps`` block when it has one, else each step's window from the ledger."""
        report = self._report(analysis_id)
        block = report.get("steps")
        if isinstance(block, dict):
            out = {k: v for k, v in block.items() if not isinstance(v, list)}
            for k, v in block.items():
                if isinstance(v, list):
                    out[k] = _page(v, offset, limit, key="items")
            return {"result_version": RESULT_VERSION, "analysis_id": analysis_id, "steps": out}
        rows = [
            {"rank": s["rank"], "device": s["device"], "step": s["step"], "window_ns": s["window_ns"]}
            for s in report["ledger"]["by_step"]
            if s["step"] >= 0
        ]
        return {"result_version": RESULT_VERSION, "analysis_id": analysis_id, "steps": {"source": "ledger", **_page(rows, offset, limit, key="items")}}

    def ranges(self, analysis_id: str, *, offset: int = 0, limit: int = STEPS_PAGE) -> dict[str, Any]:
        """User ranges (record_function, NVTX, TraceMe) with their GPU time, when the report has them."""
        report = self._report(analysis_id)
        block = report.get("ranges")
        rows = block.get("ranges", block.get("items", [])) if isinstance(block, dict) else (block if isinstance(block, list) else [])
        return {"result_version": RESULT_VERSION, "analysis_id": analysis_id, "ranges": _page(rows, offset, limit, key="items")}

    def diff(self, base_id: str, head_id: str, *, fail_if_slower: float | None = None, rows: int = DIFF_ROWS) -> dict[str, Any]:
        """Two analyses of this session compared (``traceinsight diff``, docs/diff-json.md): comparable or not, the
        step change with its interval and verdict, the ledger buckets that moved, kernels and ops (the ``rows``
        largest changes), findings new/fixed, the what-if check, and with ``fail_if_slower`` the gate."""
        from ..delta.compare import compare
        from ..delta.side import Side, check

        sides = []
        for ident in (base_id, head_id):
            report = self._report(ident)
            try:
                check(report, f"analysis {ident}")
            except TraceInsightError as exc:
                raise ToolError(str(exc)) from None
            sides.append(Side(report, f"analysis {ident}"))
        doc = compare(*sides, fail_if_slower=fail_if_slower)
        rows = max(int(rows), 0)
        for key in ("kernels", "ops"):
            doc[f"{key}_total"] = len(doc[key])
            doc[key] = doc[key][:rows]
        doc.pop("ledger_steps", None)  # per-step bars are for the HTML page; the per-bucket table answers "why"
        return {"result_version": RESULT_VERSION, "base_id": base_id, "head_id": head_id, "diff": _clean(doc)}

    def rules(self) -> dict[str, Any]:
        """Every built-in and installed rule: code, name, default severity, category, summary."""
        from ..plugins import discover

        rs = discover([])
        return {
            "result_version": RESULT_VERSION,
            "rules": [
                {"code": code, "name": cls.name, "severity": cls.severity.value, "category": cls.category, "lifecycle": cls.lifecycle, "summary": cls.summary}
                for code, cls in sorted(rs.rules.items())
            ],
        }

    def rule(self, code: str) -> dict[str, Any]:
        """One rule's documentation page (Markdown): why it matters, what is measured, options, fixes."""
        from ..engine import closest_code
        from ..plugins import discover

        rs = discover([])
        cls = rs.rules.get(str(code).upper())
        if cls is None:
            close = closest_code(str(code), rs.rules)
            raise ToolError(f"no rule {terminal(code, 40)}" + (f"; did you mean {close}?" if close else ""))
        return {"result_version": RESULT_VERSION, "code": cls.code, "name": cls.name, "docs": cls.docs()}

    # -- helpers -----------------------------------------------------------------------------------------------

    def _report(self, analysis_id: str) -> dict[str, Any]:
        entry = self.store.get(str(analysis_id))
        if entry is None:
            known = ", ".join(self.store.ids()) or "none"
            raise ToolError(f"no analysis {terminal(analysis_id, 40)} in this session (kept: {known}); run analyze again")
        return entry.report

    def _overview(self, ident: str, report: dict[str, Any], offset: int, limit: int) -> dict[str, Any]:
        led = report["ledger"]
        return {
            "result_version": RESULT_VERSION,
            "schema_version": report["schema_version"],
            "traceinsight_version": report["traceinsight_version"],
            "analysis_id": ident,
            "trace": report["trace"],
            "verdict": report["verdict"],
            "kpis": report["kpis"],
            "ledger_total": led["total"],
            **_page_of_findings(report["findings"], offset, limit),
            "rules_run": report["rules_run"],
            "warnings": report["warnings"],
        }


def _page_of_findings(findings: list[dict[str, Any]], offset: int, limit: int) -> dict[str, Any]:
    rows = [{"id": i, **{k: f[k] for k in _LIST_FIELDS}} for i, f in enumerate(findings)]
    page = _page(rows, offset, limit, key="findings")
    page["findings_total"] = page.pop("total")
    return page


def _page(rows: list[Any], offset: int, limit: int, *, total: int | None = None, key: str) -> dict[str, Any]:
    """``rows[offset:offset+limit]`` with the count and where the next page starts (``None`` at the end)."""
    offset = max(int(offset), 0)
    limit = min(max(int(limit), 1), 1000)
    part = rows[offset : offset + limit]
    end = offset + len(part)
    return {key: part, "total": len(rows) if total is None else int(total), "offset": offset, "next_offset": end if end < len(rows) else None}


def _finding_index(findings: list[dict[str, Any]], finding_id: int | str) -> int:
    if isinstance(finding_id, int) or (isinstance(finding_id, str) and finding_id.isdigit()):
        i = int(finding_id)
        if 0 <= i < len(findings):
            return i
    else:
        for i, f in enumerate(findings):
            if f["fingerprint"] == finding_id:
                return i
    raise ToolError(f"no finding {terminal(finding_id, 80)} in this analysis ({len(findings)} findings: ids 0-{len(findings) - 1})")


def _clean(value: Any) -> Any:
    """Every string in a report with controls, bidi and invisible characters made visible, and bounded."""
    if isinstance(value, str):
        return data_text(value, MAX_STRING)
    if isinstance(value, dict):
        return {_clean(k) if isinstance(k, str) else k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _size(report: dict[str, Any]) -> int:
    import msgspec

    return len(msgspec.json.encode(report))


def _stamp(path: Path) -> tuple[int, int]:
    """What changes when a trace is re-recorded in place: size and modification time."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns
