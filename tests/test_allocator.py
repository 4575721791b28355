"""The command line keeps freed memory for reuse (traceinsight.vocab.allocator): measured by page faults, not by time."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from traceinsight.vocab import allocator
from traceinsight.cli.app import app

from .helpers.kineto_writer import KinetoTrace

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"
)

# Allocate 20 MiB, free it, allocate it again, and count the minor page faults of the second allocation.
PROBE = """
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from traceinsight.vocab.allocator import keep_freed_memory
    assert keep_freed_memory()
n = 20 * 2**20 // 8
a = np.ones(n)
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(n)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    """Minor faults of the probe, in 4 KiB pages: numpy would ask for transparent huge pages on a 20 MiB array,
    and then a few 2 MiB faults (or hundreds, by how fragmented memory is at that moment) would cover it."""
    import os

    env = dict(os.environ, NUMPY_MADVISE_HUGEPAGE="0")
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.strip())


@glibc
def test_a_freed_array_is_reused_without_page_faults():
    plain, tuned = _faults("plain"), _faults("tuned")
    assert plain >= 100  # glibc unmapped the 20 MiB block: it is faulted in again (hundreds of faults)
    assert tuned < plain / 10


def test_the_analyze_command_asks_for_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.kernel("volta_sgemm_128x64_nn", 50, 400)
    res = CliRunner().invoke(app, ["analyze", str(t.write(tmp_path / "t.json")), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert calls == [1]


def test_other_platforms_change_nothing(monkeypatch):
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.keep_freed_memory() is False


@glibc
def test_in_process_a_freed_block_is_reused_without_page_faults():
    """The same measure in this process (what the command line does to its own): after the call a freed 20 MiB
    block comes back without faulting its pages in again (an mmap threshold of 0, or a heap trimmed on every free,
    would fault all ~5,000 of them)."""
    import resource

    import numpy as np

    assert allocator.keep_freed_memory() is True
    n = 20 * 2**20 // 8
    a = np.ones(n)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(n)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 50  # untuned: hundreds (thousands without huge pages)
    del b


def test_other_platforms_and_other_c_libraries_change_nothing(monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.keep_freed_memory() is False
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", "glibc"))  # a version but no glibc name
    assert allocator.keep_freed_memory() is False
