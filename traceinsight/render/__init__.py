"""Renderers: each turns an Analysis into one document. They read findings and the summary, nothing else."""

from __future__ import annotations

import importlib

from ..analysis import Analysis

_MODULES = {"text": "text", "json": "json_report", "md": "markdown", "html": "html"}


def render(analysis: Analysis, fmt: str, **kwargs) -> str:
    if fmt not in _MODULES:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(_MODULES)}")
    mod = importlib.import_module(f"{__name__}.{_MODULES[fmt]}")
    return mod.render(analysis, **kwargs)
