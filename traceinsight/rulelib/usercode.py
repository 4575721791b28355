"""The user's own code in a trace: the innermost Python frame that is not a library's, and the words that name it
in a finding (or say how to record it).

Part of ``traceinsight.rulelib``, the public helper library of the rules (built-in and third-party).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.rulelib.enclosing import innermost_enclosing
from traceinsight.rulelib.names import kind_mask, lookup
from traceinsight.model.finding import SourceLine


#: Python frames that are not the user's code: the interpreter's and libraries' own files. A frame is the user's
#: when its file is none of these, so the report can name ``train.py:42`` instead of ``torch/_tensor.py``.
_NOT_USER = re.compile(
    r"site-packages|dist-packages|/lib/python\d|^<built-in|^<frozen|^<string>|^\s*(torch|tensorflow|keras|jax|numpy|"
    r"threading|contextlib|runpy|multiprocessing|asyncio|concurrent|functools|selectors|queue|socket)[/\\.]"
)


_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\):\s*(?P<func>.*)$")


#: What a Python user writes that ends in each synchronizing ATen op (for messages: name the call, not the op).
SYNC_CALLS: dict[str, str] = {
    "aten::_local_scalar_dense": "`.item()`, `float(t)`, `print(t)` or `if t:` on a GPU tensor",
    "aten::item": "`.item()`, `float(t)`, `print(t)` or `if t:` on a GPU tensor",
    "aten::is_nonzero": "`if t:` / `bool(t)` on a GPU tensor",
    "aten::nonzero": "`torch.nonzero`, boolean-mask indexing `t[mask]` or `torch.unique` (output size read back)",
    "aten::masked_select": "boolean-mask indexing `t[mask]` (output size read back)",
    "aten::to": "`.cpu()`, `.to(\"cpu\")`, `.numpy()` or `.tolist()` on a GPU tensor",
    "aten::_to_copy": "`.cpu()`, `.to(\"cpu\")`, `.numpy()` or `.tolist()` on a GPU tensor",
    "aten::copy_": "a copy to host memory (`.cpu()`, `.numpy()`, `t_cpu.copy_(t_gpu)`)",
}


def no_stacks_sentence(ctx) -> str:
    """" The trace has no Python stacks: <how to record them>." where the trace's format can hold Python frames
    (its record's ``record_stacks``) and this trace has none, so the user knows how to get the line of their code
    next time; "" otherwise."""
    how = ctx.input_format.record_stacks
    if how and not has_python_frames(ctx.events):
        return f" The trace has no Python stacks: {how}."
    return ""


def _user_match(name: object) -> "re.Match[str] | None":
    """The parsed frame (``path(line): func``) when ``name`` is a frame of the user's own code, else None."""
    if name is None or (isinstance(name, float) and name != name):
        return None
    m = _FRAME.match(str(name).strip())
    if not m or _NOT_USER.search(m["file"].replace("\\", "/")):
        return None
    return m


def user_frame(name: object) -> str | None:
    """``train.py:42 (train_step)`` for a Python frame of the user's own code (``path(line): func``, as kineto and
    the stack column write frames); None for library/interpreter frames and for names that are no frame."""
    m = _user_match(name)
    if m is None:
        return None
    file = m["file"].replace("\\", "/").rsplit("/", 1)[-1]
    func = m["func"].strip()
    return f"{file}:{m['line']}" + (f" ({func})" if func else "")


def source_line(name: object) -> SourceLine | None:
    """The ``SourceLine`` of a user frame, with the file as recorded (full path, not just its name); None for
    library/interpreter frames and for names that are no frame."""
    m = _user_match(name)
    if m is None or int(m["line"]) < 1:
        return None
    return SourceLine(m["file"].strip(), int(m["line"]), m["func"].strip())


def _innermost_user_part(stack: object) -> str | None:
    """The innermost frame of a ``stack`` cell (" <- " separated, innermost last) that is the user's, as written."""
    if stack is None or (isinstance(stack, float) and stack != stack):
        return None
    for part in reversed(str(stack).split(" <- ")):
        if _user_match(part) is not None:
            return part
    return None


def innermost_user_frame(stack: object) -> str | None:
    """The innermost user frame of a ``stack`` cell (" <- " separated, innermost last)."""
    return user_frame(_innermost_user_part(stack))


def user_frame_texts(queries: pd.DataFrame, events: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Per query row the innermost enclosing user frame as the trace wrote it (``/home/me/train.py(42): step``),
    or None: from the ``stack`` column where the trace has one, else from the Python frame rows (``with_stack=True``
    traces). ``user_frames_at`` shows these; ``lead_source`` turns the most frequent into a ``SourceLine``."""
    out = np.full(len(queries), None, dtype=object)
    if queries.empty:
        return out
    if "stack" in events and "stack" in queries:
        own = queries["stack"].astype(object).to_numpy()
        out[:] = [_innermost_user_part(x) for x in own]
    is_py = kind_mask(host, "python")
    if not is_py.any():
        return out
    pos = np.flatnonzero(is_py)
    names = host["name"]
    if hasattr(names, "cat"):
        codes, cats = names.cat.codes.to_numpy()[pos], names.cat.categories
    else:
        codes, cats = pd.factorize(names.to_numpy()[pos])
    user = np.zeros(len(cats), dtype=bool)
    seen = np.unique(codes[codes >= 0])  # only the names the Python rows use (a categorical holds every name)
    user[seen] = [_user_match(cats[c]) is not None for c in seen]
    # only the columns innermost_enclosing reads, and only the user frames' rows
    py = host[["rank", "pid", "tid", "start_ns", "dur_ns"]].iloc[pos[(codes >= 0) & user[np.maximum(codes, 0)]]]
    enc = innermost_enclosing(queries, py)
    found = lookup(events["name"], enc)
    missing = pd.isna(out)
    out[missing] = [x if _user_match(x) is not None else None for x in found[missing]]
    return out


def shown_frames(texts: np.ndarray) -> np.ndarray:
    """``user_frame`` of each frame text (``train.py:42 (step)``, None where there is none), each distinct text
    converted once."""
    out = np.full(len(texts), None, dtype=object)
    known = ~pd.isna(texts)
    if known.any():
        codes, uniq = pd.factorize(texts[known])
        out[known] = np.array([user_frame(u) for u in uniq], dtype=object)[codes]
    return out


def user_frames_at(queries: pd.DataFrame, events: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Per query row the innermost enclosing user frame (``file.py:line (func)``), or None: from the ``stack``
    column where the trace has one, else from the Python frame rows (``with_stack=True`` traces)."""
    return shown_frames(user_frame_texts(queries, events, host))


def lead_source(texts: np.ndarray, shown: str | None = None) -> SourceLine | None:
    """The ``SourceLine`` a finding points at: the first frame text shown as ``shown`` (a finding's lead site), or,
    without ``shown``, as the most frequent user frame (the one ``user_code_sentence`` names). None without one."""
    frames = shown_frames(texts)
    if shown is None:
        known = pd.Series(frames, dtype=object).dropna()
        if not len(known):
            return None
        shown = known.value_counts().index[0]
    hit = np.flatnonzero(frames == shown)
    return source_line(texts[hit[0]]) if len(hit) else None


def user_code_sentence(frames: np.ndarray, ctx, lead: str) -> str:
    """" <lead> `train.py:42 (step)`." for the most frequent user frame; how to record stacks where the trace's
    format can and it has no Python frames (``no_stacks_sentence``); "" otherwise (no user frame found although
    stacks were recorded, or a format without Python frames)."""
    known = pd.Series(frames, dtype=object).dropna()
    if len(known):
        top = known.value_counts()
        more = f" ({len(top) - 1} other line(s) too)" if len(top) > 1 else ""
        return f" {lead} `{top.index[0]}`{more}."
    return no_stacks_sentence(ctx)


def has_python_frames(events: pd.DataFrame) -> bool:
    return bool((events["kind"] == "python").any()) or ("stack" in events and events["stack"].notna().any())
