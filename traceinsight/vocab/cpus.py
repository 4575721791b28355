"""How many CPUs this process may run on: what a reader sizes its threads by. Floor 0: imports nothing from the package.

The affinity mask, not the machine's count: a container or a ``taskset`` limits the process to fewer CPUs than the
machine has, and threads past those only wait for them.
"""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
