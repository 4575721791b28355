"""Nsight Systems: the SQLite export (``nsys export --type sqlite``), and ``.nsys-rep`` reports where nsys is
installed. ``sql`` fetches columns, ``tables`` holds one reader per table, ``schema`` the table and enum facts,
``reader`` assembles them and reads the metadata.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.nsys.sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['read', 'sniff']
