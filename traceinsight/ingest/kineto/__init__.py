"""PyTorch Profiler (kineto) Chrome-trace JSON: one file, a gzip of one, or a folder of per-rank files.

``decode`` (msgspec) and the native scanner (``_kineto_scan.c``) both give ``columns.EventColumns``; ``reader``
turns those into timeline columns.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.kineto.sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'rank_files': 'sniff'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['rank_files', 'read', 'sniff']
