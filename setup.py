"""Optional native accelerators; everything else is declared in pyproject.toml.

Each extension is optional: where no C compiler is available the build goes on without it and the loaders use
their pure-Python paths (same results, slower). ``traceinsight.native_status()`` tells which ones are in use.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension("traceinsight.ingest.kineto._kineto_scan", ["traceinsight/ingest/kineto/_kineto_scan.c"], optional=True, extra_compile_args=_FLAGS),
        Extension("traceinsight.ingest.xplane._wire_scan", ["traceinsight/ingest/xplane/_wire_scan.c"], optional=True, extra_compile_args=_FLAGS),
        Extension("traceinsight.derive._replay", ["traceinsight/derive/_replay.c"], optional=True, extra_compile_args=_FLAGS),
    ]
)
