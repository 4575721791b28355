"""PyTorch Profiler (kineto) Chrome-trace JSON: one file, a gzip of one, or a folder of per-rank files.

``decode`` (msgspec) and the native scanner (``_kineto_scan.c``) both give ``columns.EventColumns``; ``reader``
turns those into timeline columns.
"""

from .sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'rank_files': 'sniff'}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


__all__ = ['rank_files', 'read', 'sniff']
