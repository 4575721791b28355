"""Is it one of TensorFlow's other containers: a TensorBoard logdir (profile runs under ``plugins/profile``) or the
Chrome-trace JSON export; judged from the folder layout or the first bytes, without importing the readers."""

from __future__ import annotations

from pathlib import Path

XPLANE_SUFFIX = ".xplane.pb"
JSON_SUFFIX = ".trace.json.gz"
#: Keys only PyTorch's kineto writes; their presence means the file is not ours.
KINETO_MARKERS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"', b'"cat": "kernel"',
                  b'"cat":"kernel"', b'"cat": "cpu_op"', b'"cat":"cpu_op"')
PLANE_MARKERS = (b'"/host:CPU"', b'"/device:GPU:', b'"/device:TPU:', b'"/device:CPU:')


def has_profile_files(d: Path) -> bool:
    try:
        return any(p.name.endswith((XPLANE_SUFFIX, JSON_SUFFIX)) for p in d.iterdir() if p.is_file())
    except OSError:
        return False


def sniff_logdir(path: Path, head: bytes) -> bool:
    if not path.is_dir():
        return False
    if has_profile_files(path):
        return True
    for sub in ("plugins/profile", "train/plugins/profile", "profile"):
        d = path / sub
        if d.is_dir() and any(has_profile_files(r) for r in d.iterdir() if r.is_dir()):
            return True
    # deeper layouts (logs/fit/<time>/train/plugins/profile/<run>)
    return any(True for _ in path.glob(f"**/plugins/profile/*/*{XPLANE_SUFFIX}")) or any(
        True for _ in path.glob(f"**/plugins/profile/*/*{JSON_SUFFIX}"))


def sniff_json(path: Path, head: bytes) -> bool:
    if path.is_dir() or not head:
        return False
    if any(k in head for k in KINETO_MARKERS):
        return False
    return b'"displayTimeUnit"' in head and (any(k in head for k in PLANE_MARKERS) or b'"process_name"' in head
                                             and b'"traceEvents"' in head and path.name.endswith(".trace.json.gz"))
