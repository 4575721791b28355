"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``), read without importing TensorFlow.

``space`` decodes the protobuf (the C wire walker ``_wire_scan.c``, or upb with ``schema`` plus the numpy decoder
in ``wire``), ``lines`` turns XPlane lines into timeline kinds and columns (shared with ``tf``), ``reader`` strings
them together.
"""

from .reader import read, read_columns, sniff

__all__ = ["read", "read_columns", "sniff"]
