"""Optional native accelerators; everything else is declared in pyproject.toml.

Each extension is optional: where no C compiler is available the build goes on without it and the loaders use
their pure-Python paths (same results, slower). ``traceinsight.native_status()`` tells which ones are in use.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]
#: The kineto scanner walks every byte of a trace that may be gigabytes: -O3 (unrolled and vectorised inner loops;
#: no fast-math, so every number parses the same) scans the 1.9 GB replica in 25 % less CPU (bench/README.md).
_SCAN_FLAGS = ["-O3", *_FLAGS[1:]]

setup(
    ext_modules=[
        Extension("traceinsight.ingest.kineto._kineto_scan", ["traceinsight/ingest/kineto/_kineto_scan.c"], optional=True, extra_compile_args=_SCAN_FLAGS),
        Extension("traceinsight.ingest.xplane._wire_scan", ["traceinsight/ingest/xplane/_wire_scan.c"], optional=True, extra_compile_args=_FLAGS),
        Extension("traceinsight.derive._replay", ["traceinsight/derive/_replay.c"], optional=True, extra_compile_args=_FLAGS),
    ]
)
