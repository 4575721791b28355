"""Nsight Systems: the SQLite export (``nsys export --type sqlite``), and ``.nsys-rep`` reports where nsys is
installed. ``sql`` fetches columns, ``tables`` holds one reader per table, ``schema`` the table and enum facts,
``reader`` assembles them and reads the metadata.
"""

from .reader import read, sniff

__all__ = ["read", "sniff"]
