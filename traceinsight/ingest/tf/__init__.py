"""TensorFlow's other containers: the Chrome-trace JSON export (``trace_json``) and TensorBoard logdirs
(``logdir``, which reads each host's XSpace or JSON file as a rank). Both classify events with ``xplane.lines``.
"""

from .sniff import sniff_json, sniff_logdir

#: The readers, imported when a file of this format is read (detection needs only the sniffers).
_LAZY = {"read_json": ("trace_json", "read"), "read_logdir": ("logdir", "read")}


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{target[0]}", __name__), target[1])
    globals()[name] = value
    return value


__all__ = ["read_json", "read_logdir", "sniff_json", "sniff_logdir"]
