"""The one-way store (``traceinsight.derive.derived``): ``Derived`` *has* the views and builds each piece from
arguments, so every piece can be built on plain views and gives the same answer; the store forwards a declared list
of the views' attributes; warm-up is a bucket attribute, named by string only where it is defined."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceinsight
from traceinsight.derive.derived import VIEW_ATTRIBUTES, Derived
from traceinsight.derive.views import Views

from .helpers.kineto_writer import KinetoTrace

REPO = Path(__file__).resolve().parents[1]


def _trace(tmp_path) -> Path:
    """Five steps, each a GEMM and a sync; steps 0 and 2 open with a 1.5 ms module load (one-time work, the second
    after the first step: the memory view's warm-up end comes from the ledger's regions, not the first step)."""
    t = KinetoTrace()
    at = 0.0
    for s, dur in enumerate((3000.0, 1000.0, 3000.0, 1000.0, 1000.0)):
        t.step(s, at, dur)
        head = 0.0
        if dur > 1000:
            t.runtime("cuModuleLoadData", at + 5, 1500)
            head = 1600.0
        t.kernel("volta_sgemm_128x64_nn", at + head + 100, 400, launch_us=at + head + 50)
        t.runtime("cudaDeviceSynchronize", at + head + 600, 300)
        at += dur
    return t.write(tmp_path / "store.json")


def test_derived_is_not_a_views_and_forwards_a_declared_list():
    assert not issubclass(Derived, Views)
    public = {n for n in dir(Views) if not n.startswith("_") and n != "memo_keys"} | {"timeline", "events"}
    assert public == set(VIEW_ATTRIBUTES)  # a new view is either forwarded or left out on purpose here
    assert not hasattr(Derived, "__getattr__")


def test_the_store_answers_the_views_own_objects(tmp_path):
    tl = traceinsight.load(_trace(tmp_path))
    d = Derived(tl)
    for name in ("gaps", "steps", "launches", "utilization", "host_events"):
        assert getattr(d, name) is getattr(d.views, name)
    assert d.memo("k", lambda: [1]) is d.views.memo("k", lambda: [2])  # one memo
    assert "memo:k" in d.contents() and "gaps" in d.contents()


def test_every_piece_builds_on_plain_views_with_the_stores_answer(tmp_path):
    """Lower floors get their inputs as arguments: the ledger, steady judgement, memory, efficiency and the what-if
    graphs, built on fresh plain views, equal what the store holds."""
    from traceinsight.derive import efficiency, steady, whatif
    from traceinsight.derive.ledger import build_ledger
    from traceinsight.derive.memory import Memory

    tl = traceinsight.load(_trace(tmp_path))
    store = Derived(tl)
    plain = Views(tl)
    led = build_ledger(plain)
    assert led.totals() == store.ledger.totals() and led.totals()["idle_warmup"] > 0
    pd.testing.assert_frame_equal(led.warmup, store.ledger.warmup)
    assert steady.judgement(led, plain.steps) == store.steady
    assert Memory(plain, warmup=lambda: led.warmup).warmup_end == store.memory.warmup_end == {0: int(led.warmup["end_ns"].max())}
    assert int(led.warmup["end_ns"].max()) > int(plain.steps["end_ns"].iloc[0])  # past the first step
    assert efficiency.build(plain).class_rows == store.efficiency.class_rows and store.efficiency.gpu_time_ns > 0
    gs = whatif.build_graphs(plain, led.warmup)
    assert [g.rank for g in gs] == [g.rank for g in store.graphs]
    assert whatif.predict_step_ns(gs, "none") == whatif.predict_step_ns(store.graphs, "none")
    assert np.array_equal(gs[0].defaults["warmup"], store.graphs[0].defaults["warmup"]) and len(gs[0].defaults["warmup"])


def _calls_on(tree: ast.AST, fn: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn]


@pytest.mark.parametrize("folder", ["derive", "rulelib", "assess", "render", "job", "pipeline"])
def test_no_probe_asks_whether_it_was_handed_the_store(folder):
    """No ``getattr(views, ...)`` / ``hasattr(..., "ledger")``: the store's attributes are declared."""
    store_names = {"memo", "ledger", "graphs", "job", "memory", "efficiency", "steady"}
    for path in sorted((REPO / "traceinsight" / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for call in _calls_on(tree, "getattr") + _calls_on(tree, "hasattr"):
            args = call.args
            if not args or not ("views" in ast.unparse(args[0]) or ast.unparse(args[0]).endswith("analysis")):
                continue  # a probe of something else (a timeline built before a column existed, a rule's option)
            probed = args[1].value if len(args) > 1 and isinstance(args[1], ast.Constant) else None
            assert probed not in store_names | {"views"}, f"{path.relative_to(REPO)}:{call.lineno} probes {probed!r}"


def test_warm_up_is_an_attribute_named_by_string_only_where_defined():
    from traceinsight.vocab.buckets import SET_ASIDE_BUCKETS, TABLE, WARMUP_BUCKET

    assert SET_ASIDE_BUCKETS == (WARMUP_BUCKET,) == tuple(b.id for b in TABLE if b.set_aside)
    files = [p for p in [*(REPO / "traceinsight").rglob("*.py"), *(REPO / "rules").glob("*.py")] if "idle_warmup" in p.read_text()]
    # the record, the ledger's booking rules (its package's docstring), and TI013's page naming the JSON key users read
    assert sorted(p.relative_to(REPO).as_posix() for p in files) == [
        "rules/warmup_in_window.py", "traceinsight/derive/ledger/__init__.py", "traceinsight/vocab/buckets.py"]


def test_rules_keep_no_runtime_api_names_of_their_own():
    """Runtime/driver API names (cuda*, hip*, cu*) are the vocabulary's (``vocab/patterns``): no rule module binds a
    regex literal that names them."""
    for path in sorted((REPO / "rules").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                text = node.value.value
                assert not (("|" in text or "^" in text) and any(w in text for w in ("cuda", "hip", "cuLaunch", "cuMemcpy"))), \
                    f"{path.name}:{node.lineno}"
