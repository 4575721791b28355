"""Running rule code we did not write: a time limit, a check of what it returned, one line when it fails.

A rule (a ``--rules`` file, an installed plugin, or a built-in with a bug) can raise anything, ``SystemExit``
included, return strings instead of findings, put NaN in a figure, or never return. Any of these used to end a CI
gate silently (``sys.exit()`` in ``check`` gave exit 0 and no report) or with a traceback. Here each becomes a
``RuleFailure``: one line naming the rule and the file it came from. The engine keeps every other rule's
findings, the report shows the failure, and the command exits with ``EXIT_RULE_FAILED`` (errors.py).

The time limit. A Python thread cannot be killed, and running each rule in a worker process would mean shipping
the timeline and its views (hundreds of MB on a large trace) to it and the findings (with DataFrames) back. The
rule therefore runs where it is, and the limit raises ``RuleTimeout`` inside it:

* on the main thread (the command line, a ``ProcessPoolExecutor`` worker of the job path) through
  ``signal.setitimer(ITIMER_REAL)``: the handler raises at the next bytecode boundary, and a blocking sleep or
  read is interrupted as well;
* on any other thread (a Dask worker's task thread, a notebook's executor) a watchdog ``threading.Timer`` uses
  ``PyThreadState_SetAsyncExc`` to raise it in the rule's thread, at the next bytecode boundary.

``RuleTimeout`` derives from ``BaseException`` so a rule's ``except Exception`` cannot swallow it. What neither
way can stop is one C call that never returns to Python (a numpy sort of 10^10 rows); the limit then fires as
soon as that call returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import math
import numbers
import signal
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from traceinsight.rule_api import Finding, Location, Severity, SourceLine

#: Seconds a rule may run before it is stopped (``--rule-timeout``; 0 = no limit). Built-in rules take well under
#: a second on a million-event trace (bench/README.md), so this only ever stops a rule that hangs.
DEFAULT_RULE_TIMEOUT_S = 120.0
#: Findings one rule may return; more means a rule reporting every event, not a diagnosis.
MAX_FINDINGS_PER_RULE = 10_000


class RuleTimeout(BaseException):
    """Raised inside a rule that ran past its time limit."""


@dataclass(frozen=True)
class RuleFailure:
    """A rule that failed to load, raised, returned something malformed or ran out of time."""

    code: str  # the rule's code ("?" when the file failed before defining one)
    origin: str  # the file (or module) the rule came from
    reason: str  # one line

    def line(self) -> str:
        return f"rule {self.code} ({self.origin}) failed: {self.reason}; its findings are missing from this report"


def origin_of(obj: Any) -> str:
    """The file a rule class (or instance) was defined in, else its module name."""
    cls = obj if inspect.isclass(obj) else type(obj)
    try:
        return inspect.getsourcefile(cls) or inspect.getfile(cls)
    except (TypeError, OSError):
        return getattr(cls, "__module__", "?")


def describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` of where the exception was raised, one line."""
    if isinstance(exc, SystemExit):
        what = f"called sys.exit({exc.code!r})"
    elif isinstance(exc, RuleTimeout):
        return str(exc)
    else:
        msg = " ".join(str(exc).split())
        what = f"{type(exc).__name__}: {msg[:300]}" if msg else type(exc).__name__
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        frame = tb[-1]
        what += f" ({Path(frame.filename).name}:{frame.lineno})"
    return what


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise ``RuleTimeout`` in this thread when the block runs longer than ``seconds`` (None or 0: no limit)."""
    if not seconds or seconds <= 0:
        yield
        return
    message = f"ran longer than --rule-timeout {seconds:g} s and was stopped"
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def _alarm(signum: int, frame: Any) -> None:
            raise RuleTimeout(message)

        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        return
    ident = threading.get_ident()
    done = threading.Event()

    def _fire() -> None:
        if not done.is_set():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(RuleTimeout))

    timer = threading.Timer(seconds, _fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except RuleTimeout:
        raise RuleTimeout(message) from None
    finally:
        done.set()
        timer.cancel()


def _bad_number(value: Any, *, optional: bool = False) -> bool:
    if value is None:
        return not optional
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return True
    return not math.isfinite(float(value)) or float(value) < 0


def finding_problem(f: Any, code: str) -> str | None:
    """Why ``f`` is not a well-formed finding of rule ``code``; None when it is."""
    if not isinstance(f, Finding):
        return f"returned a {type(f).__name__} where a Finding belongs"
    if not isinstance(f.code, str) or f.code != code:
        return f"returned a finding with code {str(f.code)[:40]!r}, not its own code {code}"
    for name in ("title", "message"):
        if not isinstance(getattr(f, name), str):
            return f"returned a finding whose {name} is a {type(getattr(f, name)).__name__}, not text"
    if not isinstance(f.severity, Severity):
        return f"returned a finding whose severity is {str(f.severity)[:40]!r}, not a Severity"
    if _bad_number(f.impact_ns) or (isinstance(f.impact_ns, float) and not float(f.impact_ns).is_integer()):
        return f"returned a finding with impact_ns={f.impact_ns!r:.40} (a whole number of ns, 0 or more, is required)"
    if _bad_number(f.impact_pct_span):
        return f"returned a finding with impact_pct_span={f.impact_pct_span!r:.40} (a finite %, 0 or more, is required)"
    if _bad_number(f.impact_pct_step, optional=True):
        return f"returned a finding with impact_pct_step={f.impact_pct_step!r:.40} (a finite %, 0 or more, or None)"
    if not isinstance(f.evidence, pd.DataFrame):
        return f"returned a finding whose evidence is a {type(f.evidence).__name__}, not a DataFrame"
    if not isinstance(f.location, Location) or not isinstance(f.metrics, dict) or not isinstance(f.fixes, dict):
        return "returned a finding whose location, metrics or fixes have the wrong type"
    for name in ("rank", "device", "stream", "start_ns", "end_ns"):
        v = getattr(f.location, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
            return f"returned a finding whose location.{name} is {v!r:.40}, not an integer"
    if f.source is not None and not isinstance(f.source, SourceLine):
        return f"returned a finding whose source is a {type(f.source).__name__}, not a SourceLine"
    return None


def collect(result: Any, code: str) -> list[Finding]:
    """The findings of one ``check`` call (a list, a generator, None), validated; ValueError names the first
    problem. Iterating a generator runs the rule, so this belongs inside the time limit."""
    if result is None:
        return []
    if isinstance(result, (str, bytes, dict, Finding)) or not hasattr(result, "__iter__"):
        raise _Malformed(f"returned a {type(result).__name__}, not an iterable of Finding")
    out: list[Finding] = []
    for f in result:
        problem = finding_problem(f, code)
        if problem:
            raise _Malformed(problem)
        out.append(f)
        if len(out) > MAX_FINDINGS_PER_RULE:
            raise _Malformed(f"returned more than {MAX_FINDINGS_PER_RULE:,} findings")
    return out


class _Malformed(Exception):
    """A rule's result is not a list of well-formed findings."""


def run_guarded(rule: Any, call: Any, timeout: float | None) -> tuple[list[Finding], RuleFailure | None]:
    """``call()`` (one rule's check) under the time limit, its result validated; a failure never propagates
    (``KeyboardInterrupt`` excepted: the user asked to stop)."""
    try:
        with time_limit(timeout, rule.code):
            return collect(call(), rule.code), None
    except KeyboardInterrupt:
        raise
    except _Malformed as exc:
        return [], RuleFailure(rule.code, origin_of(rule), str(exc))
    except BaseException as exc:  # noqa: BLE001 - SystemExit, RuleTimeout and anything a rule raises
        return [], RuleFailure(rule.code, origin_of(rule), describe(exc))
