"""The rules' public helper library: the queries several rules ask the same way, vectorized, documented, stable.

Built-in rules (``traceinsight.rules``) and third-party rules import from here, never from each other. By topic:

* ``names``: name and code queries (``names_where``, ``count_matching``, ``short_name``, ``pair_codes``, ``grid_blocks``);
* ``enclosing``: which host range encloses which (``Enclosing``, ``cpu_op_enclosing``, ``starts_inside``);
* ``usercode``: the user's own Python line behind a call (``user_frames_at``, ``user_code_sentence``), and the
  ``SourceLine`` a finding points at (``user_frame_texts``, ``lead_source``);
* ``gaps``: idle gaps as the rules read them (``ledger_gaps``, ``host_starved_gaps``, ``sync_calls``, ``inference_ranks``);
* ``cache``: ``memo``, the analysis' named slot for a query several rules ask;
* ``groups``: rows grouped by several keys in first-appearance order, without a grouped frame (``first_seen_groups``);
* ``releases``: whether releases of device memory were asked for or the allocator's own flush
  (``asked_for``, ``outside_framework_ops``, ``ASKED_BELOW_PEAK_SHARE``), and whether the allocator caches at all
  (``uncached_allocator``, ``allocator_off_calls``);
* ``cpuwork``: framework ops that computed on the CPU and made no GPU call (``cpu_only_ops``);
* ``inuse``: what the trace shows is already in use (foreach/fused optimizer, torch.compile, CUDA graphs:
  ``in_use``), so no fix advises it again;
* ``warmup``: the ledger's warm-up per gap and start-up calls (``gap_warmup_ns``, ``warmup_by_gap``, ``startup_call_gaps``),
  warm-up steps and steady-state recompiles (``warmup_steps``, ``steady_recompiles``).

What names mean lives in ``traceinsight.vocab.patterns``; intervals and masks in ``traceinsight.vocab.intervals`` and
``traceinsight.vocab.masks``. Helpers that several rules ask keep their answer in the analysis' store
(``traceinsight.derive.derived.Derived.memo``), so the second rule to ask pays nothing.
"""

from traceinsight.rulelib.cache import memo
from traceinsight.rulelib.groups import first_seen_groups
from traceinsight.rulelib.names import short_name, pair_codes, lookup, matches, grid_blocks, kind_mask, any_code_in, names_where, hits_per_category, count_matching
from traceinsight.rulelib.enclosing import ThreadCodes, Enclosing, host_columns, cpu_op_enclosing, innermost_enclosing, innermost_positions, starts_inside
from traceinsight.rulelib.usercode import SYNC_CALLS, no_stacks_sentence, user_frame, innermost_user_frame, user_frames_at, user_code_sentence, has_python_frames, user_frame_texts, shown_frames, lead_source, source_line
from traceinsight.rulelib.gaps import next_launch_ns, host_starved_gaps, sync_calls, ledger_gaps, closing_syncs, inference_ranks, request_boundary_gaps
from traceinsight.rulelib.warmup import gap_warmup_ns, warmup_by_gap, startup_call_gaps, steady_recompiles, warmup_steps
from traceinsight.rulelib.inuse import IN_USE, in_use
from traceinsight.rulelib.cpuwork import cpu_only_ops
from traceinsight.rulelib.releases import ASKED_BELOW_PEAK_SHARE, asked_for, outside_framework_ops, uncached_allocator, allocator_off_calls

__all__ = [
    "memo",
    "cpu_only_ops",
    "first_seen_groups",
    "short_name",
    "pair_codes",
    "lookup",
    "matches",
    "grid_blocks",
    "kind_mask",
    "any_code_in",
    "names_where",
    "hits_per_category",
    "count_matching",
    "ThreadCodes",
    "Enclosing",
    "host_columns",
    "cpu_op_enclosing",
    "innermost_enclosing",
    "innermost_positions",
    "starts_inside",
    "SYNC_CALLS",
    "no_stacks_sentence",
    "user_frame",
    "innermost_user_frame",
    "user_frames_at",
    "user_code_sentence",
    "user_frame_texts",
    "shown_frames",
    "lead_source",
    "source_line",
    "has_python_frames",
    "next_launch_ns",
    "host_starved_gaps",
    "sync_calls",
    "ledger_gaps",
    "closing_syncs",
    "inference_ranks",
    "request_boundary_gaps",
    "gap_warmup_ns",
    "warmup_by_gap",
    "startup_call_gaps",
    "steady_recompiles",
    "warmup_steps",
    "ASKED_BELOW_PEAK_SHARE",
    "asked_for",
    "outside_framework_ops",
    "uncached_allocator",
    "allocator_off_calls",
    "IN_USE",
    "in_use",
]
