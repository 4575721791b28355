"""Every Python fix snippet names real API (issue 23): its module attributes resolve in the installed framework
and its keyword arguments are ones the called function takes. Snippets for a framework that is not installed
(JAX here) are checked as fragments: they parse, and every name they use is a framework root or a user variable."""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any, Iterator

import pytest

from traceinsight.pipeline.engine import discover

#: How snippets spell a framework's modules, per fix key.
ROOTS = {
    "pytorch": {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"},
    "tensorflow": {"tf": "tensorflow"},
    "jax": {"jax": "jax", "jnp": "jax.numpy", "flax": "flax", "optax": "optax"},
}
#: Bare names snippets use as the framework's (the usual imports, left out of the snippet).
BARE = {
    "pytorch": {
        "DataLoader": "torch.utils.data.DataLoader",
        "DDP": "torch.nn.parallel.DistributedDataParallel",
        "DistributedSampler": "torch.utils.data.distributed.DistributedSampler",
    },
    "tensorflow": {},
    "jax": {},
}
MODULE = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}


def _snippets() -> Iterator[tuple[str, str, str]]:
    """(where, framework, code) of every Python snippet a rule can show: class fixes, GPU variants, per-cause fixes,
    the fixes for techniques already in use."""
    rules = discover().rules
    for code, cls in sorted(rules.items()):
        for key, fx in cls.fixes().items():
            fw = key.partition(":")[0]
            if fx.code and fw in ROOTS:
                yield f"{code} {key}", fw, fx.code
        mod = importlib.import_module(cls.__module__)
        tables = [("cause_fixes", getattr(cls, "cause_fixes", None)), ("CAUSE_FIXES", getattr(mod, "CAUSE_FIXES", None))]
        for name, table in tables:
            for cause, fixes in (table or {}).items():
                for fw, fx in fixes.items():
                    if fx.code and fw in ROOTS:
                        yield f"{code} {name}[{cause}] {fw}", fw, fx.code
        # the fixes for what the trace shows is already in use: framework -> (cause, techniques) -> fix
        for fw, table in (getattr(mod, "FIX_IN_USE", None) or {}).items():
            for (cause, techniques), fx in table.items():
                if fx.code and fw in ROOTS:
                    yield f"{code} FIX_IN_USE[{cause}, {techniques}] {fw}", fw, fx.code


SNIPPETS = sorted(set(_snippets()))


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _resolve(path: list[str], fw: str) -> tuple[Any, str] | None:
    """The object a dotted name in a snippet stands for, or None when it is not the framework's."""
    roots, bare = ROOTS[fw], BARE[fw]
    head = path[0]
    if head in roots:
        full = roots[head].split(".") + path[1:]
    elif head in bare:
        full = bare[head].split(".") + path[1:]
    else:
        return None
    obj = importlib.import_module(full[0])
    for i, part in enumerate(full[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(full[: i + 1]))
            except ImportError:
                raise AssertionError(f"{'.'.join(full)}: no {part!r} in {'.'.join(full[:i])}") from None
    return obj, ".".join(full)


def _check(code: str, fw: str) -> list[str]:
    tree = ast.parse(code)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) or isinstance(node, ast.Name):
            path = _dotted(node)
            if path is None or (isinstance(node, ast.Name) and path[0] not in BARE[fw]):
                continue
            try:
                _resolve(path, fw)
            except AssertionError as exc:
                problems.append(str(exc))
        if isinstance(node, ast.Call):
            path = _dotted(node.func)
            if path is None:
                continue
            try:
                found = _resolve(path, fw)
            except AssertionError:
                continue  # reported above
            if found is None or not callable(found[0]):
                continue
            try:
                sig = inspect.signature(found[0])
            except (TypeError, ValueError):  # a C function without a signature: its name resolved, that is all
                continue
            params = sig.parameters.values()
            if any(p.kind is p.VAR_KEYWORD for p in params):
                continue
            names = {p.name for p in params}
            for kw in node.keywords:
                if kw.arg is not None and kw.arg not in names:
                    problems.append(f"{found[1]}() takes no keyword {kw.arg!r}")
    return problems


@pytest.mark.parametrize("where,fw,code", SNIPPETS, ids=[w for w, _, _ in SNIPPETS])
def test_snippet_is_real_api(where, fw, code):
    try:
        importlib.import_module(MODULE[fw])
    except ImportError:
        ast.parse(code)  # a fragment for a framework not installed here: it must still be Python
        pytest.skip(f"{MODULE[fw]} not installed: {where} checked as a fragment (parses)")
    assert not _check(code, fw), f"{where}:\n{code}"


def test_the_checker_catches_made_up_api():
    pytest.importorskip("torch")
    assert _check("loss = torch.nn.functional.cross_entropyy(x, y)", "pytorch")
    assert _check("DataLoader(ds, num_workerz=4)", "pytorch")
    assert not _check("DataLoader(ds, num_workers=4, pin_memory=True)\nloss = loss_fn(model(x), y)", "pytorch")


def test_no_snippet_calls_a_method_on_a_model_output_as_a_loss():
    assert not [w for w, _, c in SNIPPETS if ".loss_fn(" in c]
