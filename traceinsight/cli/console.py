"""The installed ``traceinsight`` command: the command line (``cli.main``), imported with the cyclic garbage
collector paused and its modules frozen out of later collections.

Importing pandas, typer and the command's modules creates a few hundred thousand long-lived objects and no garbage
cycles worth finding; the collector still walks them, over and over, while they are created (0.03-0.05 s of CPU on
every run, as much as a fifth of ``import pandas`` itself: bench/README.md, "Cold start"). Paused during the
imports and then ``gc.freeze()``-d, those objects are never walked again; everything the run creates afterwards is
collected as usual. Only this short-lived process does it: importing ``traceinsight.cli.app`` (tests, notebooks, the
API) leaves the collector alone.

The same imports load numpy, whose OpenBLAS starts a thread per core that spins for about 0.1 s of CPU waiting for
work (measured: ``import numpy`` 0.15 s of CPU on 2 cores, 0.03 s with one thread; on 16 cores 15 such threads).
The command does no linear algebra, so it asks for one BLAS thread while numpy loads, unless the user chose a
number, and takes the variable out of the environment again, so the scripts ``traceinsight record`` runs (child
processes that inherit it) keep their own BLAS threads.
"""

from __future__ import annotations

import gc
import os

#: The variable OpenBLAS reads when it loads (numpy's wheels bundle it), and the thread count the command needs.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    was_on = gc.isenabled()
    gc.disable()
    name, one = BLAS_THREADS
    ours = name not in os.environ
    if ours:
        os.environ[name] = one
    try:
        from traceinsight.cli.app import main as run
    finally:
        if ours:
            os.environ.pop(name, None)  # read once, when numpy loaded: children see the environment they were given
        gc.freeze()
        if was_on:
            gc.enable()
    run()
