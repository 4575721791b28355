"""Is it a TensorFlow/JAX XSpace (``*.xplane.pb``): from the name or the first bytes, without importing the reader."""

from __future__ import annotations

from pathlib import Path


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name
    if name.endswith(".xplane.pb"):
        return True
    # content check: XSpace starts with field 1 (planes, length-delimited) whose XPlane holds a plane name
    return head[:1] == b"\x0a" and (b"/host:CPU" in head or b"/device:" in head or b"Task Environment" in head)
