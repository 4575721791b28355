"""TensorFlow / JAX profiler XSpace (``*.xplane.pb``), read without importing TensorFlow.

``space`` decodes the protobuf (the C wire walker ``_wire_scan.c``, or upb with ``schema`` plus the numpy decoder
in ``wire``), ``lines`` turns XPlane lines into timeline kinds and columns (shared with ``tf``), ``reader`` strings
them together.
"""

from .sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'read_columns': 'reader'}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


__all__ = ['read', 'read_columns', 'sniff']
