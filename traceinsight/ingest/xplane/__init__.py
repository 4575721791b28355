"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``), read without importing TensorFlow.

``space`` decodes the protobuf (the C wire walker ``_wire_scan.c``, or upb with ``schema`` plus the numpy decoder
in ``wire``), ``lines`` turns XPlane lines into timeline kinds and columns (shared with ``tf``), ``reader`` strings
them together.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.input_format import InputFormat
from traceinsight.ingest.xplane.sniff import sniff

#: The format's record (``ingest.input_format``): TensorFlow's profiler, which JAX uses too; XLA's per-op costs on
#: kernels where the profiler wrote them.
FORMAT = InputFormat(
    name="tensorflow-xplane",
    label="TensorFlow/JAX profiler XSpace (*.xplane.pb)",
    sniff=sniff,
    reader="traceinsight.ingest.xplane.reader:read",
    frameworks=("tensorflow", "jax"),
    op_costs="XLA's per-op costs",
    no_flops=("FLOPs per op: not recorded in this XPlane trace (no `flops`/`bytes_accessed` HLO op stats on its "
              "device events; XProf derives them from the compiled HLO module, which the trace does not carry); "
              "pass --model-flops-per-step for MFU"),
)

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'read_columns': 'reader'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['FORMAT', 'read', 'read_columns', 'sniff']
