"""Nsight Systems: the SQLite export (``nsys export --type sqlite``), and ``.nsys-rep`` reports where nsys is
installed. ``sql`` fetches columns, ``tables`` holds one reader per table, ``schema`` the table and enum facts,
``reader`` assembles them and reads the metadata.
"""

from .sniff import sniff

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader'}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


__all__ = ['read', 'sniff']
