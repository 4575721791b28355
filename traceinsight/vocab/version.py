"""The one home of the version: ``traceinsight.__version__`` and pyproject.toml read it from here."""

__version__ = "0.1.0"
