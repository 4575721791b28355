"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``), read without importing TensorFlow.

``space`` decodes the protobuf (the C wire walker ``_wire_scan.c``, or upb with ``schema`` plus the numpy decoder
in ``wire``), ``lines`` turns XPlane lines into timeline kinds and columns (shared with ``tf``), ``reader`` strings
them together.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.xplane.sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'read_columns': 'reader'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['read', 'read_columns', 'sniff']
