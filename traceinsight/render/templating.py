"""The Jinja environment every HTML view renders with: autoescaping on, compiled templates cached per user, our
CSS/JS read as trusted assets. Shared by the report (``html``) and the notebook view (``notebook``)."""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from jinja2 import Environment, FileSystemBytecodeCache, PackageLoader, select_autoescape
from jinja2.bccache import Bucket
from markupsafe import Markup, escape

from traceinsight.vocab.buckets import css as buckets_css
from traceinsight.vocab.units import fmt_ns
from traceinsight.render.common import clean


#: Where compiled templates are kept between runs: ``TRACEINSIGHT_CACHE_DIR`` (empty: keep none), else the user's
#: cache folder. Compiling the report template costs a fresh process 0.1-0.25 s, more than rendering it. The
#: cache holds code, so it is used only when this user owns the folder and no one else can write to it (docs/ci.md).
CACHE_ENV = "TRACEINSIGHT_CACHE_DIR"


#: The Environment attributes that shape a template's compiled code (the rest of the key: autoescape per template,
#: extensions, filters, tests, finalize, undefined; see ``environment_key``).
_ENV_ATTRS = (
    "block_start_string", "block_end_string", "variable_start_string", "variable_end_string", "comment_start_string",
    "comment_end_string", "line_statement_prefix", "line_comment_prefix", "trim_blocks", "lstrip_blocks",
    "newline_sequence", "keep_trailing_newline", "optimized", "is_async",
)


def _qualname(obj: Any) -> str:
    obj = getattr(obj, "__func__", obj)
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def environment_key(env: Environment, name: str) -> str:
    """Every option of ``env`` that the compiled code of template ``name`` depends on, as text: Jinja's version, the
    autoescape decision for this template, the syntax and whitespace options, and which extension, filter, test,
    finalize and undefined callables the code is compiled against. Two environments that differ in any of them
    never share a compiled template (the source checksum alone would not notice)."""
    autoescape = env.autoescape(name) if callable(env.autoescape) else env.autoescape
    parts = [f"jinja2={jinja2.__version__}", f"autoescape={bool(autoescape)}"]
    parts += [f"{a}={getattr(env, a, None)!r}" for a in _ENV_ATTRS]
    parts.append("extensions=" + ",".join(sorted(env.extensions)))
    for kind, table in (("filter", env.filters), ("test", env.tests)):
        parts += sorted(f"{kind}:{k}={_qualname(v)}" for k, v in table.items())
    parts += [f"finalize={_qualname(env.finalize) if env.finalize else None}", f"undefined={_qualname(env.undefined)}"]
    return "|".join(parts)


class TemplateCache(FileSystemBytecodeCache):
    """Jinja's file cache of compiled templates, keyed by everything of the environment the compiled code depends
    on (``environment_key``) besides the template's name and file, and never an error: a cache that cannot be read
    or written is a slower run, not a failed one."""

    def __init__(self, directory: str, env: Environment) -> None:
        super().__init__(directory, "tmpl-%s.cache")
        self.env = env

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha1(f"{environment_key(self.env, name)}|{name}|{filename}".encode()).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged or foreign file: compile again
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except Exception:
            pass


def template_cache(env: Environment) -> TemplateCache | None:
    """The compiled-template cache for ``env`` at ``TRACEINSIGHT_CACHE_DIR`` (else the user's cache folder), or None:
    the variable set empty, or a folder this user cannot safely use. Rendering never needs it."""
    root = os.environ.get(CACHE_ENV)
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "traceinsight")
    if not root:
        return None
    path = os.path.join(root, "templates")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return None
    # compiled templates are code: only from a folder that this user owns and nobody else can write to
    if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        return None
    return TemplateCache(path, env) if os.access(path, os.W_OK) else None


@lru_cache(maxsize=1)
def env() -> Environment:
    environment = Environment(
        loader=PackageLoader("traceinsight.render", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["ns"] = fmt_ns
    environment.filters["clean"] = clean
    environment.filters["inline_code"] = inline_code
    environment.bytecode_cache = template_cache(environment)  # last: its key reads the finished environment
    return environment


_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def inline_code(text: Any) -> Markup:
    """Prose with Markdown-style `code` spans as HTML: escaped first, so the only markup added is <code>."""
    return Markup(_INLINE_CODE.sub(r"<code>\1</code>", str(escape("" if text is None else text))))


def asset(name: str) -> Markup:
    text = resources.files("traceinsight.render").joinpath("templates", name).read_text(encoding="utf-8")
    # our own files; the guard only protects against a future edit closing the element early
    assert "</style" not in text.lower() and "</script" not in text.lower()
    return Markup(text)




#: Where report.css takes the bucket colours (``traceinsight.vocab.buckets.css()``), so no page paints a bucket its own way.
_BUCKET_CSS_SLOT = "/* bucket colours: generated from traceinsight.vocab.buckets (render/html.py appends buckets.css()) */\n"


def report_css() -> Markup:
    """The report stylesheet with the ledger's bucket colours filled in: every page in the report's design uses it."""
    return Markup(str(asset("report.css")).replace(_BUCKET_CSS_SLOT, buckets_css()))
