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

from ..buckets import css as buckets_css
from ..units import fmt_ns
from .common import clean


#: Where compiled templates are kept between runs: ``TRACEINSIGHT_CACHE_DIR`` (empty: keep none), else the user's
#: cache folder. Compiling the report template costs a fresh process 0.1-0.25 s, more than rendering it. The
#: cache holds code, so it is used only when this user owns the folder and no one else can write to it (docs/ci.md).
CACHE_ENV = "TRACEINSIGHT_CACHE_DIR"


class TemplateCache(FileSystemBytecodeCache):
    """Jinja's file cache of compiled templates, keyed also by the Jinja version and our environment's options
    (the compiled code depends on both, the source checksum alone would not notice), and never an error: a cache
    that cannot be read or written is a slower run, not a failed one."""

    def __init__(self, directory: str, options: str) -> None:
        super().__init__(directory, "tmpl-%s.cache")
        self.options = options

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha1(f"{jinja2.__version__}|{self.options}|{name}|{filename}".encode()).hexdigest()

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


def template_cache(options: str) -> TemplateCache | None:
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
    return TemplateCache(path, options) if os.access(path, os.W_OK) else None


@lru_cache(maxsize=1)
def env() -> Environment:
    options = {"trim_blocks": True, "lstrip_blocks": True}
    env = Environment(
        loader=PackageLoader("traceinsight.render", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        bytecode_cache=template_cache(repr(sorted(options.items()))),
        **options,
    )
    env.filters["ns"] = fmt_ns
    env.filters["clean"] = clean
    env.filters["inline_code"] = inline_code
    return env


_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def inline_code(text: Any) -> Markup:
    """Prose with Markdown-style `code` spans as HTML: escaped first, so the only markup added is <code>."""
    return Markup(_INLINE_CODE.sub(r"<code>\1</code>", str(escape("" if text is None else text))))


def asset(name: str) -> Markup:
    text = resources.files("traceinsight.render").joinpath("templates", name).read_text(encoding="utf-8")
    # our own files; the guard only protects against a future edit closing the element early
    assert "</style" not in text.lower() and "</script" not in text.lower()
    return Markup(text)




#: Where report.css takes the bucket colours (``traceinsight.buckets.css()``), so no page paints a bucket its own way.
_BUCKET_CSS_SLOT = "/* bucket colours: generated from traceinsight.buckets (render/html.py appends buckets.css()) */\n"


def report_css() -> Markup:
    """The report stylesheet with the ledger's bucket colours filled in: every page in the report's design uses it."""
    return Markup(str(asset("report.css")).replace(_BUCKET_CSS_SLOT, buckets_css()))
