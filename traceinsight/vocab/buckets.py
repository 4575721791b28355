"""The time ledger's buckets: one record each, the only place a bucket's words, colour and claimants are written.

Every nanosecond of each GPU's window sits in exactly one bucket (``traceinsight.derive.ledger``). The ledger, the verdict,
TI001's gap causes, the text/Markdown/HTML tables, the notebook view (and its colours, as CSS variables generated
here: ``css()``) and the whole-job report all read this table, so no two of them can call or paint a bucket
differently. Floor 0: plain data, no imports from the package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    """One ledger bucket."""

    id: str  # stable: JSON keys, CSS classes
    busy: bool  # GPU busy time (True) or idle time (False)
    avoidable: bool  # idle a change on the host side removes
    verdict: str  # the verdict category this bucket names when it is the largest cost (verdict.LABELS)
    label: str  # in report legends
    short: str  # in table heads
    sentence: str  # in the verdict's sentence: "the largest cost is <sentence>"
    cause: str  # what an idle gap booked here was, in TI001's evidence (busy buckets: their label)
    colour: str  # light theme
    colour_dark: str  # dark theme
    claimed_by: tuple[str, ...]  # the finding categories (finding.CATEGORIES) whose savings come out of it
    #: Set aside, not a cost: one-time work (warm-up) that no change to the steady state removes. Its time is left
    #: out of the window causes are judged on, never chosen as the bound, and drawn hatched.
    set_aside: bool = False


TABLE: tuple[Bucket, ...] = (
    Bucket("compute", True, False, "compute", "compute", "compute", "compute", "compute",
           "#2f9e44", "#51cf66", ("compute",)),
    Bucket("communication", True, False, "communication", "communication (exposed)", "comm", "communication not overlapped with compute",
           "exposed communication", "#9c36b5", "#da77f2", ("communication",)),
    Bucket("copy", True, False, "copy", "copies", "copy", "copies", "copies",
           "#0c8599", "#3bc9db", ("copy",)),
    Bucket("idle_data_wait", False, True, "input_pipeline", "idle: data wait", "data wait", "GPU idle while the host waits for input data",
           "data loading", "#f76707", "#f76707", ("gpu_idle", "input_pipeline")),
    Bucket("idle_host_sync", False, True, "host_sync", "idle: host sync", "sync", "GPU idle after the host blocked in a sync",
           "host synchronization", "#c92a2a", "#ff8787", ("gpu_idle", "host_sync")),
    Bucket("idle_launch_bound", False, True, "launch_overhead", "idle: launch-bound", "launch", "GPU idle between kernels the host launches too slowly",
           "launch overhead (host launching back to back)", "#fab005", "#fab005", ("gpu_idle", "launch_overhead")),
    Bucket("idle_host_busy", False, True, "host_overhead", "idle: host busy", "host busy", "GPU idle while the host runs other framework/Python work",
           "host busy in CPU ops (launch queue empty)", "#e64980", "#e64980", ("gpu_idle",)),
    Bucket("idle_untraced", False, True, "host_untraced", "idle: untraced host", "untraced", "GPU idle while the host does something the trace does not show",
           "untraced host time (launch queue empty)", "#a61e4d", "#a61e4d", ("gpu_idle",)),
    Bucket("idle_gpu_dependency", False, False, "gpu_dependency", "idle: GPU-side wait", "GPU wait", "GPU idle with work already queued (waiting on events or other streams)",
           "kernel-to-kernel delay (launched early; GPU-side dependency)", "#15aabf", "#15aabf", ()),
    Bucket("idle_warmup", False, False, "warmup", "idle: warm-up", "warm-up", "warm-up",
           "warm-up (one-time start-up work)", "#adb5bd", "#5c636e", (), set_aside=True),
    Bucket("idle_other", False, False, "gpu_idle", "idle: other", "other", "GPU idle with no launch in the trace to explain it",
           "unknown (no launch linked)", "#868e96", "#adb5bd", ()),
)

BY_ID: dict[str, Bucket] = {b.id: b for b in TABLE}
BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE)
BUSY_BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE if b.busy)
IDLE_BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE if not b.busy)
#: The bucket of one-time work (warm-up), set aside rather than counted as a cost: the one bucket with ``set_aside``.
SET_ASIDE_BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE if b.set_aside)
(WARMUP_BUCKET,) = SET_ASIDE_BUCKETS
#: Idle time that counts as a cost: every idle bucket but the one set aside.
IDLE_COST_BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE if not b.busy and not b.set_aside)
#: Idle a change on the host side removes (input pipeline, syncs, launch overhead, host work, untraced host time).
AVOIDABLE_BUCKETS: tuple[str, ...] = tuple(b.id for b in TABLE if b.avoidable)
LABELS: dict[str, str] = {b.id: b.label for b in TABLE}
SHORT: dict[str, str] = {b.id: b.short for b in TABLE}
SENTENCE: dict[str, str] = {b.id: b.sentence for b in TABLE}
CAUSE: dict[str, str] = {b.id: b.cause for b in TABLE}
VERDICT: dict[str, str] = {b.id: b.verdict for b in TABLE}


def claims(category: str) -> tuple[str, ...]:
    """The buckets findings of a category (``finding.CATEGORIES``) claim their saving from, in table order.
    Trace-quality findings describe the recording, not the run, and claim nothing."""
    return tuple(b.id for b in TABLE if category in b.claimed_by)


def css() -> str:
    """The bucket colours as CSS: ``--b-<id>`` variables (light, and dark under ``prefers-color-scheme``) and one
    ``.lb-<id>`` background class each. Warm-up is hatched: it is set aside, not a cost."""
    light = " ".join(f"--b-{b.id}: {b.colour};" for b in TABLE)
    dark = " ".join(f"--b-{b.id}: {b.colour_dark};" for b in TABLE)
    classes = "\n".join(f".lb-{b.id} {{ background: var(--b-{b.id}); }}" for b in TABLE if not b.set_aside)
    hatch = "\n".join(f".lb-{b.id} {{ background: repeating-linear-gradient(45deg, var(--b-{b.id}), var(--b-{b.id}) 3px, "
                      f"var(--soft, transparent) 3px, var(--soft, transparent) 6px); }}\n.sw.lb-{b.id} {{ background: var(--b-{b.id}); }}"
                      for b in TABLE if b.set_aside)
    return f":root {{ {light} }}\n@media (prefers-color-scheme: dark) {{ :root {{ {dark} }} }}\n{classes}\n{hatch}\n"
