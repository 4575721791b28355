"""What-if step times: replay a step's dependency graph with one root cause taken out (Daydream-style).

Why a replay and not a subtraction: removing 70 ms of data loading from a 176 ms step does not give 106 ms when
the GPU was still busy with the previous step during those 70 ms; the next step's kernels then queue behind it.
Only a model that knows which task waits for which can say how much of a removed cost the step really gets back.

The model (docs/whatif.md has the long form):

* **Nodes.** Host tasks per host thread in program order: runtime/driver calls, data-wait ranges (the calls
  inside them belong to the wait) and zero-length step markers. GPU tasks per stream in stream order: kernels,
  copies, memsets.
* **Edges.** Program order on a thread and stream order on a stream; launch call -> its GPU task through
  (rank, pid, correlation); GPU -> host for blocking calls (a synchronize or a blocking copy cannot return before
  the GPU work it waits for has ended); a hand-off between host threads of one process (a thread that sat idle
  until another thread's call ended resumes after it, e.g. PyTorch's autograd thread); GPU-side dependencies
  between streams, from recorded ``cudaEventRecord`` / ``cudaStreamWaitEvent`` calls, and inferred where a task
  started right after another stream's task ended and nothing on its own stream or launch explains the wait.
* **Latencies.** Every edge keeps the time the trace shows between the predecessor and the task (host work
  between calls, launch latency, kernel-to-kernel delay) for the predecessor that bound the task; an edge that
  did not bind gets the trace's typical latency of its type (never more than it had). Replaying the unmodified
  graph therefore reproduces the measured times; a difference means an edge contradicts the trace.
* **Replay.** Events are processed in original time order, which is a topological order of the graph: a task
  starts at the latest of (predecessor end or launch start) + latency; a blocking call ends at the latest of its
  own cost and the end of the GPU work it waits for plus its return latency. Tasks before the replayed steps stay
  where they were. The only Python loop is this one, over the tasks of the replayed steps.
* **Step time.** A step's boundary is the later of its marker's start and the end of the GPU work the step
  before launched; step time is the distance between boundaries (the period a training loop sees), so a host
  that runs ahead cannot make a step shorter than its GPU work.

Transforms are small edits of the graph's arrays (``TRANSFORMS``); ``predict_step_ns`` replays with one applied.

The steps, one module each: ``graph`` (the ``Graph`` record, node types, the model's constants), ``nodes`` (a
rank's rows as node columns), ``edges`` (order, hand-offs, launches, what blocking calls wait for), ``build``
(``build_graph``), ``window`` (the steps replayed and the event order), ``replay`` (the pass and step times),
``transforms`` (the edits and their assumptions) and ``predict`` (``predict_step_ns`` and the entry points findings
use).
"""

# The names callers use stay importable from here; the steps' own helpers are read from their modules.
from traceinsight.vocab.patterns import DATA_WAIT_PRIMARY, SYNC_CALL  # noqa: F401
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS  # noqa: F401
from traceinsight.vocab.units import format_what_if  # noqa: F401  (the reports' one-line form of a prediction)
from traceinsight.derive.whatif.graph import (  # noqa: F401
    BLOCKING, DATA_WAIT, DEFAULT_LAUNCH_NS, DEFAULT_QUEUE_NS, GPU, HANDOFF_MIN_GAP_NS, HOST, MARKER, MAX_STEPS, MIN_SAMPLES,
    STREAM_DEP_MAX_NS, STRUCTURE, Graph,
)
from traceinsight.derive.whatif.edges import QUEUE_FULL_CALL_NS, QUEUE_FULL_PENDING  # noqa: F401
from traceinsight.derive.whatif.replay import replay, step_times  # noqa: F401
from traceinsight.derive.whatif.build import build_graph  # noqa: F401
from traceinsight.derive.whatif.transforms import (  # noqa: F401
    ASSUMPTIONS, TRANSFORMS, cut_time, launch_bound_to_graphs, remove_data_wait, remove_host_sync, remove_warmup, rnn_to_cudnn,
    steady_graph, typical_gpu_latencies, warmup_mask,
)
from traceinsight.derive.whatif.predict import (  # noqa: F401
    WINDOWED, build_graphs, faster_gpu_work, grow_batch, predict_step_ns, what_if_batch, what_if_faster, what_if_for, windows_of,
)
