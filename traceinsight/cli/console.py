"""The installed ``traceinsight`` command: the command line (``cli.main``), imported with the cyclic garbage
collector paused and its modules frozen out of later collections.

Importing pandas, typer and the command's modules creates a few hundred thousand long-lived objects and no garbage
cycles worth finding; the collector still walks them, over and over, while they are created (0.03-0.05 s of CPU on
every run, as much as a fifth of ``import pandas`` itself: bench/README.md, "Cold start"). Paused during the
imports and then ``gc.freeze()``-d, those objects are never walked again; everything the run creates afterwards is
collected as usual. Only this short-lived process does it: importing ``traceinsight.cli.app`` (tests, notebooks, the
API) leaves the collector alone.
"""

from __future__ import annotations

import gc


def main() -> None:
    was_on = gc.isenabled()
    gc.disable()
    try:
        from traceinsight.cli.app import main as run
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
    run()
