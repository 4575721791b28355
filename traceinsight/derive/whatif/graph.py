"""The what-if graph record: one rank's tasks and edges as flat arrays (``Graph``), the node types and the
model's constants."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinsight.vocab.work_classes import CLASSES as WORK_CLASSES

#: A host thread idle this long (ns) before resuming right after another thread's call is taken to have waited
#: for that thread (a hand-off), rather than to have been busy with untraced work.
HANDOFF_MIN_GAP_NS = 20_000
#: A GPU task that starts within this many ns of another stream's task ending, with its own stream and launch
#: explaining less of its wait, is taken to depend on that task (an event wait).
STREAM_DEP_MAX_NS = 10_000
#: Typical delays when the trace shows too few (< MIN_SAMPLES) tasks bound by that edge: kernel-to-kernel delay of
#: queued work and launch-call start to kernel start (a few µs on current NVIDIA and AMD GPUs).
DEFAULT_QUEUE_NS = 2_000
DEFAULT_LAUNCH_NS = 6_000
MIN_SAMPLES = 20
#: Most steps replayed per rank (the middle of the run when there are more); bounds the Python loop.
MAX_STEPS = 24


# node types
HOST, DATA_WAIT, BLOCKING, MARKER, GPU = 0, 1, 2, 3, 4


@dataclass
class Graph:
    """One rank's dependency graph as flat arrays (index = node id).

    Transforms edit a ``copy``: its timing arrays (``dur``, ``own``, the latencies, ``wait_on``) are its own; the
    structure (``STRUCTURE``: node types, original times, edges, window) is shared with the graph it was copied
    from and read-only, so a transform that wants another structure assigns a new array instead of editing one.
    """

    rank: int
    ntype: np.ndarray  # HOST / DATA_WAIT / BLOCKING / MARKER / GPU
    start: np.ndarray  # original start, ns
    end: np.ndarray  # original end, ns
    dur: np.ndarray  # replayed own duration (host calls, GPU tasks)
    prev: np.ndarray  # thread / stream predecessor (-1: none); reference = its end
    prev_lat: np.ndarray
    cross: np.ndarray  # hand-off thread or producer stream (-1: none); reference = its end
    cross_lat: np.ndarray
    launch: np.ndarray  # GPU task's launch call (-1: none); reference = its start
    launch_lat: np.ndarray
    own: np.ndarray  # blocking call: its cost once the GPU work is done
    waits: list  # blocking call: node ids of the GPU tasks it waits for (one per stream)
    wait_on: np.ndarray  # bool: blocking edge active
    is_launch: np.ndarray  # host node that launched GPU work
    gemm: np.ndarray  # GPU node that is a GEMM/convolution kernel (``work_classes.GEMM_CLASSES``)
    work: np.ndarray  # int8 per node: its kernel's position in ``work_classes.CLASSES`` (-1: not a kernel)
    steps: pd.DataFrame  # step, name, start_node, end_node, orig start/end, dur_ns (marker), in order
    window: np.ndarray  # node ids replayed, in event order (node id; negative -1-id for a blocking end event)
    defaults: dict = field(default_factory=dict)  # typical latencies: launch, queue (kernel-to-kernel)
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # position in thread / stream order

    def copy(self, writes: "tuple[str, ...] | None" = None) -> "Graph":
        """A copy for a transform to edit: its timing arrays its own, the structure shared. ``writes``: the timing
        arrays the transform edits (its ``writes`` attribute, e.g. ``("dur",)``), the only ones copied; the others
        are shared read-only, so an edit the transform did not declare fails loudly instead of changing this graph
        (a graph's copy is a few hundred MB on a gigabyte trace). None: every timing array is copied."""

        def field_of(k: str, v):
            if k in STRUCTURE or not isinstance(v, (np.ndarray, dict)):
                return v
            if isinstance(v, dict) or writes is None or k in writes:
                return v.copy()
            shared = v.view()
            shared.flags.writeable = False
            return shared

        return Graph(**{k: field_of(k, v) for k, v in vars(self).items()})

    def freeze(self) -> "Graph":
        """Make the structure read-only (it is shared by every copy)."""
        for k in STRUCTURE:
            v = getattr(self, k)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        return self


#: The fields of a ``Graph`` that its copies share (never edited in place by a transform).
STRUCTURE = ("ntype", "start", "end", "prev", "cross", "launch", "waits", "is_launch", "gemm", "work", "window", "seq")
#: The work classes in ``Graph.work``'s code order.
WORK = tuple(WORK_CLASSES)
