"""Command-line values converted without pydantic when they are plain: the command and group classes of the CLI.

Typer (0.29 and later) converts every parameter through a pydantic ``TypeAdapter``, built for each parameter of
the command that runs, even for those left unset. Importing pydantic and building those adapters costs about
0.06 s of CPU on every ``traceinsight analyze``, a fifth of what the command adds to ``import pandas``
(bench/README.md, "Cold start"). Nearly every value the command line sees is plain: unset, a string, a path, a
default number or enum member, a decimal written out. Those are converted here to exactly what typer's own
conversion returns (tests/test_cli_coerce.py compares the two on every parameter); anything else, and every
value that typer would reject, goes to typer's conversion, which gives the result or the error message.

Where typer is older (no per-parameter conversion objects) or changes how it converts, nothing is replaced and
typer converts everything as usual.
"""

from __future__ import annotations

import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from typer.core import TyperCommand, TyperGroup

#: A conversion's answer for "not plain: let typer convert it".
DEFER = object()

_INT = re.compile(r"(0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


def _within(info: Any, x: float) -> bool:
    lo, hi = getattr(info, "min", None), getattr(info, "max", None)
    return (lo is None or x >= lo) and (hi is None or x <= hi)


def _number(kind: type, info: Any) -> Callable[[Any, Any], Any] | None:
    if getattr(info, "clamp", False):
        return None
    pattern = _INT if kind is int else _FLOAT

    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is kind:
            x = value
        elif type(value) is str and pattern.fullmatch(value):
            x = kind(value)
        else:
            return DEFER
        return x if _within(info, x) else DEFER

    return convert


def _plain_path_options(info: Any) -> bool:
    """Typer's defaults for a path: no existence, resolving, dash or write checks; only readability."""
    want = {"exists": False, "resolve_path": False, "allow_dash": False, "writable": False, "path_type": None, "parser": None,
            "file_okay": True, "dir_okay": True, "readable": True}
    return all(k in vars(info) and vars(info)[k] == v for k, v in want.items())


def _path(value: Any) -> Any:
    """A path as typer gives it: ``Path(value)``, checked for readability when it exists (typer says why not)."""
    if isinstance(value, Path):
        p = value
    elif type(value) is str and value:
        p = Path(value)
    else:
        return DEFER
    try:
        os.stat(p)
    except OSError:
        return p
    except ValueError:  # a NUL in the name: whatever typer makes of it
        return DEFER
    return p if os.access(p, os.R_OK) else DEFER


def _choice(kind: type[Enum], info: Any) -> Callable[[Any, Any], Any] | None:
    if not getattr(info, "case_sensitive", False):
        return None
    by_text = {str(member.value): member for member in kind}

    def convert(value: Any, ctx: Any) -> Any:
        if isinstance(value, kind):
            return value
        if type(value) is str and getattr(ctx, "token_normalize_func", None) is None:
            return by_text.get(value, DEFER)
        return DEFER

    return convert


def _leaf(annotation: Any, info: Any) -> Callable[[Any, Any], Any] | None:
    if annotation is str:
        return lambda value, ctx: value if type(value) is str else DEFER
    if annotation in (int, float):
        return _number(annotation, info)
    if annotation is Path and _plain_path_options(info):
        return lambda value, ctx: _path(value)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(annotation, info)
    return None


def converter(param: Any) -> Callable[[Any, Any], Any] | None:
    """The plain conversion of one typer parameter, or None when it has none (typer converts every value)."""
    desc = getattr(param, "type_descriptor", None)
    annotation, info = getattr(desc, "annotation", None), getattr(desc, "parameter_info", None)
    if annotation is None or info is None or getattr(info, "parser", None) is not None or getattr(desc, "file_annotation", None) is not None:
        return None
    if getattr(annotation, "__origin__", None) is list and len(annotation.__args__) == 1:
        item = _leaf(annotation.__args__[0], info)
        if item is None:
            return None

        def each(value: Any, ctx: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                return DEFER
            out = [item(v, ctx) for v in value]
            return DEFER if any(v is DEFER for v in out) else out

        return each
    return _leaf(annotation, info)


class PlainValues:
    """Stands in for a parameter's typer conversion object (``coerce(value, param, ctx)``): unset and plain values
    here, everything else through typer's own, built on first need."""

    def __init__(self, param: Any, convert: Callable[[Any, Any], Any] | None) -> None:
        self._param = param
        self._convert = convert

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # typer's own rule for unset values, before any conversion
            return () if (param.multiple or param.nargs == -1) else None
        if self._convert is not None:
            out = self._convert(value, ctx)
            if out is not DEFER:
                return out
        return type(self._param).get_runtime_param(self._param).coerce(value, param=param, ctx=ctx)


def install(params: list[Any]) -> list[Any]:
    """Give each typer parameter the plain conversion (once); parameters of an older typer are left alone."""
    for p in params:
        if "get_runtime_param" in vars(p) or not callable(getattr(type(p), "get_runtime_param", None)):
            continue
        plain = PlainValues(p, converter(p))
        p.get_runtime_param = lambda plain=plain: plain
    return params


class Command(TyperCommand):
    """A typer command whose plain values skip pydantic (module docstring)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return install(super().get_params(ctx))


class Group(TyperGroup):
    """The command group (``--version``, ``--help``) with the same plain conversion."""

    def get_params(self, ctx: Any) -> list[Any]:
        return install(super().get_params(ctx))
