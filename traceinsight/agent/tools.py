"""What an agent can ask, as plain methods: analyse a trace, then drill into a finding, the ledger, steps, rules.

The shape follows what agent users ask of trace tools: small typed results instead of data dumps, a list first
and details on request, and the same numbers on every run. Every result is cut from the JSON report of
``render.json_report.to_dict`` (the schema of ``traceinsight analyze --format json``, docs/json-report.md), so an
agent and a CI job read one document; lists are paged (``offset``/``limit``, with ``total`` and ``next_offset``).

Safety, because the caller is a model acting for a user:

* paths are read only under the session's roots (default: the working directory), after resolving links, so
  ``../`` or a link inside a root cannot reach a file outside it; object-store URLs are refused; every file the
  engine finds inside a folder (rank files, logdir hosts, rules-folder modules) passes the same gate
  (``fence.confined``), so a link inside a job folder cannot lead out either;
* the configuration (``pyproject.toml``) is looked for from the analysed path up to its root, never above it,
  and what it set is listed in the result (``configuration``);
* nothing is written;
* rule files (``rules=``, and those a pyproject names) run only when the session was started with
  ``allow_rules``: a rule file is code; wherever named, they must lie under the roots;
* at most ``max_analyses`` analyses run at once; another is answered "busy" at once;
* strings copied from the trace reach the client with control, bidi and invisible characters written as visible
  escapes (``sanitize.data_text``), cut at ``MAX_STRING``; where prose (a verdict sentence, a title, a message,
  a warning) quotes one, it is set between ``QUOTE_OPEN`` and ``QUOTE_CLOSE``; the server's instructions say
  they are data from the trace, never instructions;
* every refusal is one line that names the argument it is about.
"""

from __future__ import annotations

import math
import numbers
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

from traceinsight.vocab.errors import TraceInsightError
from traceinsight.vocab.sanitize import data_text, terminal
from traceinsight.agent.store import Store

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

#: Analyses that may run at once (each holds a trace in memory); one more is answered "busy".
MAX_ANALYSES = 2
#: Around a trace string quoted inside the tool's own prose (verdict sentence, titles, messages, warnings).
QUOTE_OPEN, QUOTE_CLOSE = "\u27e6", "\u27e7"
#: Trace strings shorter than this are not looked for in prose (too short to carry a sentence; "compute" is a word).
MIN_QUOTED = 8
#: Report keys whose strings are the tool's prose, which may quote trace strings.
PROSE_KEYS = frozenset({"sentence", "title", "message", "headline", "warnings", "notes", "note", "what_if_note", "reasons", "reason"})

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

    def __init__(self, roots: Sequence[str | os.PathLike] = (), *, allow_rules: bool = False, store: Store | None = None,
                 max_analyses: int = MAX_ANALYSES) -> None:
        try:
            self.roots = [Path(r).expanduser().resolve() for r in (roots or [Path.cwd()])]
        except (OSError, ValueError, RuntimeError) as exc:
            raise ToolError(f"--root: not a usable folder ({terminal(exc, 200)})") from None
        for r in self.roots:
            if not r.is_dir():
                raise ToolError(f"--root {terminal(r, 300)} is not a folder")
        if isinstance(max_analyses, bool) or not isinstance(max_analyses, int) or not 1 <= max_analyses <= 64:
            raise ToolError(f"--max-analyses expects a whole number from 1 to 64, got {terminal(max_analyses, 40)}")
        self.allow_rules = allow_rules
        self.store = store or Store()
        self.max_analyses = max_analyses
        self._running = threading.BoundedSemaphore(max_analyses)

    # -- paths -------------------------------------------------------------------------------------------------

    def resolve(self, path: str, arg: str = "path") -> Path:
        """``path`` (absolute, or relative to the first root) as a real path under a root, else a ToolError whose
        line starts with ``arg`` (the argument's name)."""
        if not isinstance(path, str) or not path:
            raise ToolError(f"{arg}: must be a non-empty string")
        if "\x00" in path:
            raise ToolError(f"{arg}: a path cannot hold a NUL byte")
        if "://" in path:
            raise ToolError(f"{arg}: only local paths under the server's roots are read (no URLs)")
        try:
            p = Path(path).expanduser()
            if not p.is_absolute():
                p = self.roots[0] / p
            os.stat(p)  # as the system reads it: "trace.json.gz/.." is no folder, whatever resolve() makes of it
            real = p.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            raise ToolError(f"{arg}: no such file or folder: {terminal(path, 300)}") from None
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            raise ToolError(f"{arg}: {terminal(path, 300)} is outside the server's roots ({', '.join(str(r) for r in self.roots)})")
        return real

    def root_of(self, real: Path) -> Path:
        """The root ``real`` (a resolved path under the roots) lies in: the deepest one that holds it."""
        return max((r for r in self.roots if real == r or real.is_relative_to(r)), key=lambda r: len(r.parts))

    def configuration(self, target: Path) -> "Any":
        """The ``[tool.traceinsight]`` of the nearest pyproject.toml from ``target`` up to its root (never above it,
        never the server's working directory's), checked: a pyproject.toml that links out of the roots is refused,
        rule files it names must lie under the roots."""
        from traceinsight.pipeline.config import Config, find_pyproject
        from traceinsight.vocab.fence import inside

        root = self.root_of(target)
        found = find_pyproject(target if target.is_dir() else target.parent, stop=root)
        if found is None:
            return Config()
        if not inside(found, self.roots):
            raise ToolError(f"configuration: {terminal(found, 300)} is a link to a file outside the server's roots; not read")
        config = Config.from_pyproject(found, trust=self.allow_rules, implicit=True)
        for r in config.rule_paths:
            if not inside(r, self.roots):
                raise ToolError(f"configuration: {terminal(found, 300)} names the rule file {terminal(r, 300)}, outside the server's roots; not run")
        return config

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
        from traceinsight.pipeline import engine
        from traceinsight.vocab.fence import confined
        from traceinsight.render.json_report import to_dict

        select, ignore = _str_list(select, "select"), _str_list(ignore, "ignore")
        rules = _str_list(rules, "rules")
        if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) and isinstance(v, dict) for k, v in options.items())):
            raise ToolError("options: expects {CODE: {option: value}}")
        for arg, value in (("trace_format", trace_format), ("run", run)):
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise ToolError(f"{arg}: expects a string")
        if rules and not self.allow_rules:
            raise ToolError("rules: rule files run code: start the server with --allow-rules to use them")
        target = self.resolve(path)
        rule_paths = [self.resolve(r, "rules") for r in rules]
        if not self._running.acquire(blocking=False):
            raise ToolError(f"path: busy: {self.max_analyses} analyses are running in this session; try again when one has finished")
        try:
            config = self.configuration(target)
            with confined(self.roots):
                analysis = engine.analyze(
                    target,
                    select=select,
                    ignore=ignore,
                    options=options or None,
                    rules=rule_paths,
                    config=config,
                    trace_format=trace_format,
                    run_name=run,
                    min_impact=min_impact,
                )
            raw = to_dict(analysis, max_evidence_rows=MAX_EVIDENCE_ROWS)
            _quote_in_prose(raw, _trace_strings(analysis))
            del analysis
        except TraceInsightError as exc:
            raise ToolError(terminal(exc, 2000)) from None
        except MemoryError:
            raise ToolError(f"path: out of memory while analysing {terminal(path, 300)}") from None
        except RecursionError:
            raise ToolError(f"path: {terminal(path, 300)} nests too deep to analyse") from None
        finally:
            self._running.release()
        report = _clean(raw)
        report["trace"]["path"] = data_text(target, MAX_STRING)  # one spelling per file, whatever the agent typed
        report["configuration"] = _clean(config.described())
        key = repr((str(target), _stamp(target), sorted(select), sorted(ignore), sorted((options or {}).items(), key=str), min_impact, trace_format, run, [str(r) for r in rule_paths]))
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
        evidence_offset, evidence_limit = _int(evidence_offset, "evidence_offset"), _int(evidence_limit, "evidence_limit")
        instances_offset, instances_limit = _int(instances_offset, "instances_offset"), _int(instances_limit, "instances_limit")
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
        from traceinsight.pipeline.config import check_fail_if_slower
        from traceinsight.delta.compare import compare
        from traceinsight.delta.side import Side, check

        if fail_if_slower is not None:
            try:
                fail_if_slower = check_fail_if_slower(fail_if_slower, "fail_if_slower")
            except TraceInsightError as exc:
                raise ToolError(terminal(exc, 300)) from None
        rows = max(_int(rows, "rows"), 0)
        sides = []
        for arg, ident in (("base_id", base_id), ("head_id", head_id)):
            report = self._report(ident, arg)
            try:
                check(report, f"{arg}: analysis {terminal(ident, 40)}")
            except TraceInsightError as exc:
                raise ToolError(terminal(exc, 600)) from None
            sides.append(Side(report, f"analysis {ident}"))
        try:
            doc = compare(*sides, fail_if_slower=fail_if_slower)
        except MemoryError:
            raise ToolError("base_id, head_id: out of memory while comparing these analyses") from None
        for key in ("kernels", "ops"):
            doc[f"{key}_total"] = len(doc[key])
            doc[key] = doc[key][:rows]
        doc.pop("ledger_steps", None)  # per-step bars are for the HTML page; the per-bucket table answers "why"
        names = [str(r.get("name")) for s in sides for key in ("kernels", "ops") for r in ((s.workload or {}).get(key) or [])
                 if isinstance(r, dict) and len(str(r.get("name"))) >= MIN_QUOTED]
        _quote_in_prose(doc, names)  # the diff's sentences quote kernel and op names too
        return {"result_version": RESULT_VERSION, "base_id": base_id, "head_id": head_id, "diff": _clean(doc)}

    def rules(self) -> dict[str, Any]:
        """Every built-in and installed rule: code, name, default severity, category, summary."""
        from traceinsight.pipeline.plugins import discover

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
        from traceinsight.pipeline.engine import closest_code
        from traceinsight.pipeline.plugins import discover

        rs = discover([])
        cls = rs.rules.get(str(code).upper())
        if cls is None:
            close = closest_code(str(code)[:40], rs.rules)
            raise ToolError(f"code: no rule {terminal(code, 40)}" + (f"; did you mean {close}?" if close else ""))
        return {"result_version": RESULT_VERSION, "code": cls.code, "name": cls.name, "docs": cls.docs()}

    # -- helpers -----------------------------------------------------------------------------------------------

    def _report(self, analysis_id: str, arg: str = "analysis_id") -> dict[str, Any]:
        entry = self.store.get(str(analysis_id))
        if entry is None:
            known = ", ".join(self.store.ids()) or "none"
            raise ToolError(f"{arg}: no analysis {terminal(analysis_id, 40)} in this session (kept: {known}); run analyze again")
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
            "configuration": report.get("configuration"),
        }


def _page_of_findings(findings: list[dict[str, Any]], offset: int, limit: int) -> dict[str, Any]:
    rows = [{"id": i, **{k: f[k] for k in _LIST_FIELDS}} for i, f in enumerate(findings)]
    page = _page(rows, offset, limit, key="findings")
    page["findings_total"] = page.pop("total")
    return page


def _int(value: Any, arg: str) -> int:
    """A whole-number argument (an int, or a string of ASCII digits as some clients send), else a ToolError naming it."""
    if isinstance(value, bool):
        raise ToolError(f"{arg}: expects a whole number, got {terminal(value, 40)}")
    if isinstance(value, numbers.Integral):
        return max(min(int(value), 1 << 62), -(1 << 62))
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isascii() and value.strip().lstrip("-").isdigit() and len(value) < 20:
        return int(value)
    raise ToolError(f"{arg}: expects a whole number, got {terminal(repr(value), 40)}")


def _str_list(value: Any, arg: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and "\x00" not in v for v in value):
        raise ToolError(f"{arg}: expects a list of strings")
    return list(value)


def _page(rows: list[Any], offset: int, limit: int, *, total: int | None = None, key: str) -> dict[str, Any]:
    """``rows[offset:offset+limit]`` with the count and where the next page starts (``None`` at the end)."""
    offset = max(_int(offset, "offset"), 0)
    limit = min(max(_int(limit, "limit"), 1), 1000)
    part = rows[offset : offset + limit]
    end = offset + len(part)
    return {key: part, "total": len(rows) if total is None else int(total), "offset": offset, "next_offset": end if end < len(rows) else None}


def _finding_index(findings: list[dict[str, Any]], finding_id: int | str) -> int:
    """The position of a finding: its ``id`` as the list gives it (an int, or the same digits as a string) or its
    ``fingerprint``."""
    if isinstance(finding_id, bool) or not isinstance(finding_id, (int, str)):
        raise ToolError(f"finding_id: expects the id the findings list gives (a whole number) or a fingerprint, got {terminal(repr(finding_id), 40)}")
    text = finding_id.strip() if isinstance(finding_id, str) else None
    if isinstance(finding_id, int) or (text and text.isascii() and text.isdigit() and len(text) < 20):
        i = int(finding_id)
        if 0 <= i < len(findings):
            return i
    else:
        for i, f in enumerate(findings):
            if f["fingerprint"] == finding_id:
                return i
    ids = f"ids 0-{len(findings) - 1}" if findings else "none"
    raise ToolError(f"finding_id: no finding {terminal(finding_id, 80)} in this analysis ({len(findings)} findings: {ids})")


def _trace_strings(analysis: Any) -> list[str]:
    """The distinct strings the trace brought (event, thread and category names) that prose may quote."""
    ev = analysis.timeline.events
    out: set[str] = set()
    for col in ("name", "raw_name", "thread_name", "category"):
        if col in ev.columns:
            values = ev[col].cat.categories if hasattr(ev[col], "cat") else ev[col].dropna().unique()
            out.update(str(v) for v in values if isinstance(v, str) and len(v) >= MIN_QUOTED)
    meta = analysis.timeline.meta
    out.update(str(d.name) for d in meta.devices if d.name and len(str(d.name)) >= MIN_QUOTED)
    return list(out)


class _Quoter:
    """Finds the trace strings inside a piece of prose, whole or cut with "…" (``short_name``), and sets each
    between ``QUOTE_OPEN`` and ``QUOTE_CLOSE``. Keyed by each string's first characters, so a text is scanned once
    whatever the number of names."""

    KEY = 12

    def __init__(self, names: Iterable[str]) -> None:
        self.long: dict[str, list[str]] = {}
        self.short: set[str] = set()
        for n in names:
            if len(n) >= self.KEY:
                self.long.setdefault(n[: self.KEY], []).append(n)
            elif len(n) >= MIN_QUOTED:
                self.short.add(n)
        for v in self.long.values():
            v.sort(key=len, reverse=True)
        self.short_lens = sorted({len(n) for n in self.short}, reverse=True)

    def _match(self, s: str, i: int) -> int:
        cut = 0
        for n in self.long.get(s[i : i + self.KEY], ()):
            if s.startswith(n, i):
                return len(n)
            k = len(os.path.commonprefix([n, s[i : i + len(n)]]))
            if s.startswith("…", i + k):
                cut = max(cut, k + 1)
        if cut:
            return cut
        for ln in self.short_lens:
            if s[i : i + ln] in self.short:
                return ln
        return 0

    def __call__(self, s: str) -> str:
        if not (self.long or self.short):
            return s
        out, i, last = [], 0, 0
        while i < len(s):
            if s.startswith(QUOTE_OPEN, i):  # quoted already (a title a diff repeats): left as it is
                end = s.find(QUOTE_CLOSE, i)
                i = len(s) if end < 0 else end + 1
                continue
            m = self._match(s, i)
            if m:
                piece = s[i : i + m].replace(QUOTE_OPEN, "\\u27e6").replace(QUOTE_CLOSE, "\\u27e7")
                out += [s[last:i], QUOTE_OPEN, piece, QUOTE_CLOSE]
                i += m
                last = i
            else:
                i += 1
        return "".join(out) + s[last:] if out else s


def _quote_in_prose(value: Any, names: list[str]) -> None:
    """Every prose string of a report (``PROSE_KEYS``) with the trace strings it quotes delimited, in place."""
    quote = _Quoter(names)

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in PROSE_KEYS and isinstance(x, str):
                    v[k] = quote(x)
                elif k in PROSE_KEYS and isinstance(x, list) and all(isinstance(y, str) for y in x):
                    v[k] = [quote(y) for y in x]
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)


def _clean(value: Any) -> Any:
    """Every string in a report with controls, bidi and invisible characters made visible, and bounded; every
    non-finite number made ``None`` (JSON has no NaN: one would make the whole result unreadable)."""
    if isinstance(value, str):
        return data_text(value, MAX_STRING)
    if isinstance(value, float) and not math.isfinite(value):
        return None
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
