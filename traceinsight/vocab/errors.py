"""Errors a user can act on, each with its own process exit code (see README "Exit codes")."""

from __future__ import annotations

#: Exit codes of the ``traceinsight`` command.
EXIT_OK = 0
EXIT_FINDINGS = 1  # --fail-on threshold reached
EXIT_USAGE = 2  # bad command line, unknown rule code, bad option value
EXIT_UNREADABLE = 3  # the trace could not be read (empty, corrupt, truncated beyond repair, unknown format)
EXIT_SLOWER = EXIT_FINDINGS  # diff --fail-if-slower: HEAD is slower than the threshold, outside the noise
EXIT_NOT_COMPARABLE = 4  # diff: BASE and HEAD run different workloads; no verdict
EXIT_INCONCLUSIVE = 5  # diff --fail-if-slower: slower than the threshold but within the noise, or too few steps
EXIT_RULE_FAILED = 6  # a rule failed to load, raised, returned malformed findings or timed out (report still written)
EXIT_SCHEDULER = 7  # the Dask scheduler (--scheduler / TRACEINSIGHT_SCHEDULER) is malformed or unreachable
EXIT_RANKS_MISSING = 8  # a whole job was analysed with some rank files unreadable or skipped (--allow-missing-ranks)
EXIT_OUT_OF_MEMORY = 9  # the input needs more memory than the machine has (never 1: a gate must not read it as "slower")


class TraceInsightError(Exception):
    """Base class: the message is one line meant for the user."""

    exit_code = EXIT_USAGE


class TraceReadError(TraceInsightError):
    """The trace cannot be read at all."""

    exit_code = EXIT_UNREADABLE


class UnknownFormatError(TraceReadError):
    """The content is none of the supported formats."""


class TraceTooLargeError(TraceReadError):
    """The trace (or what it inflates to) is over the size ceiling; reading stopped at the ceiling."""


class OutOfMemoryError(TraceReadError):
    """Reading or comparing the input ran out of memory: one line and its own exit code, never a traceback and
    never the code of a verdict (1 is "slower" to a diff gate)."""

    exit_code = EXIT_OUT_OF_MEMORY


class SchedulerError(TraceInsightError):
    """The Dask scheduler address is malformed or nothing answers there in time."""

    exit_code = EXIT_SCHEDULER


class ConfigError(TraceInsightError):
    """A rule selection, option or config file is wrong."""

    exit_code = EXIT_USAGE


class OutputError(TraceInsightError):
    """A report cannot be written where it was asked for (an input file, a folder, a full or read-only disk)."""

    exit_code = EXIT_USAGE
