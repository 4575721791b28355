"""Predictions: a transform replayed on every rank's steady-state graph, next to the unmodified replay and the
measured steps (``predict_step_ns``), and the entry points findings use (per rule, faster work, a larger batch)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from traceinsight.model.finding import instance_columns
from traceinsight.vocab.work_classes import CLASSES as WORK_CLASSES, GEMM_CLASSES
from traceinsight.derive.views import Views
from traceinsight.derive.whatif.graph import GPU, Graph, WORK
from traceinsight.derive.whatif.build import build_graph
from traceinsight.derive.whatif.replay import median_of, replay, step_times
from traceinsight.derive.whatif.transforms import ASSUMPTIONS, TRANSFORMS, steady_graph
from traceinsight.derive.whatif.window import replay_window


def build_graphs(views: Views, warmup: "pd.DataFrame | None") -> list[Graph]:
    """The graphs of every rank with GPU work; ``warmup``: the ledger's warm-up regions (rank, start_ns, end_ns),
    the one-time work the replay prices apart (``Derived.graphs`` passes its ledger's)."""
    ranks = sorted(int(r) for r in pd.unique(views.gpu_activity["rank"])) if not views.gpu_activity.empty else []
    return [gr for gr in (build_graph(views, r, warmup=warmup) for r in ranks) if gr is not None]


def _resolve(transform, windows) -> tuple[Callable[..., None], str, str]:
    """(function, name, assumptions) of a transform given by name, function, or list of them (applied in order)."""
    if isinstance(transform, (list, tuple)):
        parts = [_resolve(*(t if isinstance(t, tuple) else (t, windows))) + ((t[1] if isinstance(t, tuple) else windows),) for t in transform]

        def combined(g: Graph, _windows=None) -> None:
            for fn, _, _, w in parts:
                fn(g, w)

        return combined, "+".join(p[1] for p in parts), "; ".join(p[2] for p in parts)
    if isinstance(transform, str):
        if transform not in TRANSFORMS:
            raise ValueError(f"unknown what-if transform {transform!r}; known: {', '.join(TRANSFORMS)}")
        return TRANSFORMS[transform], transform, ASSUMPTIONS[transform]
    return transform, getattr(transform, "__name__", "custom"), (transform.__doc__ or "").strip().split("\n")[0]


def predict_step_ns(graphs: list[Graph], transform="all", windows=None) -> dict:
    """Median step time with ``transform`` applied, next to the unmodified replay and the measured steps, over
    ``graphs`` (``build_graphs``; an analysis keeps its own, ``Derived.graphs``).

    ``transform``: a name in ``TRANSFORMS``, a function editing a ``Graph`` in place, or a list of names,
    functions and ``(name, windows)`` pairs applied together (e.g. the transforms of the causes found, for
    ``kpis.what_if_all_step_ns``). ``windows``: optional (start_ns, end_ns) ranges (e.g. a finding's instances)
    the edit is limited to.
    """
    fn, name, words = _resolve(transform, windows)
    measured, base, pred, full_b, full_m, marked = [], [], [], [], [], []
    for g in graphs:
        buf = None
        if "base" not in g.defaults:  # the unmodified replay, once per graph
            ns, ne = buf = replay(g)
            g.defaults["base"] = step_times(g, ns, ne)
            g.defaults["measured"] = step_times(g, g.start, g.end)
        m = g.defaults["measured"]
        mk = (g.steps["t1"] - g.steps["t0"]).to_numpy(np.int64) if not g.steps.empty else np.zeros(0, np.int64)
        full_b.append(g.defaults["base"])
        full_m.append(m)
        s = steady_graph(g)  # priced on the steady state: one-time work is never a saving
        b = s.defaults["base"]
        t = s.copy(getattr(fn, "writes", None))  # only the arrays the transform edits are copied
        fn(t, windows)
        if len(t.steps) != len(s.steps):
            t.window = replay_window(t, t.steps)
            b = b[s.steps["start_node"].isin(t.steps["start_node"]).to_numpy()]
        if len(t.steps) != len(g.steps):
            used = g.steps["start_node"].isin(t.steps["start_node"]).to_numpy()
            m, mk = m[used], mk[used]
        ns2, ne2 = replay(t, buf)
        p = step_times(t, ns2, ne2)
        measured.append(m)
        marked.append(mk)
        base.append(b)
        pred.append(p)
    if not base:
        return {"step_ns": None, "baseline_step_ns": None, "measured_step_ns": None, "steps_used": 0,
                "transform": name, "assumptions": "no GPU work to replay", "replay_error_pct": None}
    m, b, p, mk = (np.concatenate(x) for x in (measured, base, pred, marked))
    med_m, med_b, med_p = (median_of(x) if len(x) else None for x in (m, b, p))
    fb, fm = np.concatenate(full_b), np.concatenate(full_m)
    med_fm = median_of(fm) if len(fm) else 0.0
    err = round(100.0 * (median_of(fb) - med_fm) / med_fm, 3) if len(fm) and med_fm else None
    if any(steady_graph(gr) is not gr for gr in graphs):
        words += "; priced on the steady state (the ledger's warm-up left out of baseline and prediction)"
    no_steps = all(gr.steps.empty for gr in graphs)
    if no_steps:
        words += "; no step markers: the whole traced window is one step"
    return {
        "step_ns": None if med_p is None else int(round(med_p)),
        "baseline_step_ns": None if med_b is None else int(round(med_b)),
        "measured_step_ns": None if med_m is None else int(round(med_m)),
        # the same steps as their markers time them (host start to host end): what the report's step line shows; the
        # replay's step ends when the step's GPU work does too, so the two differ where the GPU finishes later
        "marker_step_ns": int(round(median_of(mk))) if len(mk) else None,
        "steps_used": int(len(p)),
        "transform": name,
        "assumptions": words,
        "replay_error_pct": err,
    }


def windows_of(instances) -> list[tuple[int, int]] | None:
    """(start_ns, end_ns) pairs from a finding's instances (a list of ``Instance`` or a DataFrame); None if none."""
    if instances is None:
        return None
    if isinstance(instances, pd.DataFrame):
        if instances.empty:
            return None
        return list(zip(instances["start_ns"].astype(np.int64), instances["end_ns"].astype(np.int64)))
    cols = instance_columns(instances)
    return list(zip(cols.start_ns.tolist(), cols.end_ns.tolist())) or None


#: Causes whose edit is limited to the finding's own instances (the syncs that stalled, the RNN region); the
#: others act on every task of their kind.
WINDOWED = {"remove_host_sync", "rnn_to_cudnn"}


def what_if_for(graphs: list[Graph], name: str | None, instances=None) -> dict | None:
    """``Finding.what_if`` for a root-cause finding whose rule declares transform ``name`` (``Rule.what_if``; None
    for symptoms and rules without a model).

    The windowed transforms (``WINDOWED``) edit only the finding's instances (stalling syncs, RNN regions); without
    instances there is nothing to edit and no prediction.
    """
    if name is None:
        return None
    windows = windows_of(instances) if name in WINDOWED else None
    if name in WINDOWED and windows is None:
        return None
    r = predict_step_ns(graphs, name, windows=windows)
    return r if r["step_ns"] is not None else None


def _selected(g: Graph, classes: tuple[str, ...] | None) -> np.ndarray:
    """The GPU nodes a modelled speed-up shortens: kernels of the work ``classes`` (``work_classes``), or every
    GPU task when the finding cannot say which (None)."""
    sel = g.ntype == GPU
    if classes is not None:
        sel = sel & np.isin(g.work, [WORK.index(c) for c in classes if c in WORK])
    return sel


def _classes_label(classes: tuple[str, ...] | None) -> str:
    if classes is None:
        return "GPU tasks"
    if tuple(classes) == GEMM_CLASSES:
        return "GEMM/convolution kernels"
    return "/".join(WORK_CLASSES.get(c, c) for c in classes) + " kernels"


def faster_gpu_work(saved_ns: int, gemm_only: bool = False, classes: tuple[str, ...] | None = None) -> Callable[..., None]:
    """A transform for a modelled speed-up of busy work (tensor cores, fuller grids, pinned copies): the GPU tasks
    it names (kernels of the work ``classes`` the rule declares, ``gemm_only`` = the GEMM/convolution classes; else
    every GPU task, when the finding cannot say which) get shorter by one common factor, so that together they lose
    ``saved_ns`` over the whole trace. What the step gets back is then what the critical path gets back: kernels
    that only ever run while the host is the bound give back nothing."""
    classes = GEMM_CLASSES if gemm_only and classes is None else (tuple(classes) if classes is not None else None)

    def faster(g: Graph, windows=None) -> None:
        sel = _selected(g, classes)
        total = float(g.dur[sel].sum())
        if total <= 0:
            return
        factor = 1.0 - min(float(saved_ns) / total, 0.95)
        g.dur[sel] = np.round(g.dur[sel] * factor).astype(g.dur.dtype)

    faster.writes = ("dur",)  # type: ignore[attr-defined]
    faster.__doc__ = (
        f"the {_classes_label(classes)} get shorter by one factor, {saved_ns / 1e6:.3g} ms "
        "in all; host work, launches and every wait keep their measured times"
    )
    return faster


def what_if_faster(graphs: list[Graph], saved_ns: int, gemm_only: bool = False, classes: tuple[str, ...] | None = None) -> dict | None:
    """``Finding.what_if`` for a modelled speed-up of busy work (:func:`faster_gpu_work`), or None without steps to
    replay. The factor is taken over every rank's selected GPU time, so the ranks shrink alike."""
    gs = graphs
    if not gs or saved_ns <= 0:
        return None
    classes = GEMM_CLASSES if gemm_only and classes is None else (tuple(classes) if classes is not None else None)
    per_sel = [float(g.dur[_selected(g, classes)].sum()) for g in gs]
    total = sum(per_sel)
    if total <= 0:
        return None
    share = float(saved_ns) / total
    per_rank = [share * t for t in per_sel]
    fns = [(g.ntype, faster_gpu_work(int(ns), classes=classes)) for g, ns in zip(gs, per_rank)]

    def faster(g: Graph, windows=None) -> None:
        # ``g`` is a copy of one of ``gs``: copies share the structure arrays, so its node types name its source
        fn = next((f for ntype, f in fns if ntype is g.ntype), None)
        if fn is not None:
            fn(g, windows)

    faster.__doc__ = fns[0][1].__doc__
    faster.__name__ = "faster_gpu_work"
    faster.writes = ("dur",)  # type: ignore[attr-defined]
    r = predict_step_ns(gs, faster)
    return r if r["step_ns"] is not None else None


def grow_batch(factor: float, fixed_below_ns: int) -> Callable[..., None]:
    """A transform for a larger batch (TI030): GPU tasks of at least ``fixed_below_ns`` take ``factor`` times as long
    (their work scales with the batch), shorter ones keep their time (launch-bound: a larger grid in the same
    latency); host work, launches and every wait keep their measured times. A model, not a measurement: a larger
    batch can pick other kernels, and host work per step can grow with it too (data loading)."""

    def grow(g: Graph, windows=None) -> None:
        sel = (g.ntype == GPU) & (g.dur >= fixed_below_ns)
        g.dur[sel] = np.round(g.dur[sel] * float(factor)).astype(g.dur.dtype)

    grow.writes = ("dur",)  # type: ignore[attr-defined]
    grow.__doc__ = (f"GPU tasks of {fixed_below_ns / 1e3:g} µs or longer take {factor:.3g}x as long (they scale with the batch); "
                    "shorter, launch-bound ones keep their time; host work, launches and every wait keep their measured times")
    return grow


def what_if_batch(graphs: list[Graph], factor: float, fixed_below_ns: int) -> dict | None:
    """The replay at ``factor`` times the batch (:func:`grow_batch`): ``Finding.what_if`` plus ``per_sample_ratio``
    (time per sample after / before: step after / (factor x step before)) and ``throughput_gain`` (its inverse);
    None without steps to replay."""
    if factor <= 0:
        return None
    r = predict_step_ns(graphs, grow_batch(factor, fixed_below_ns))
    if r["step_ns"] is None or not r["baseline_step_ns"]:
        return None
    if factor >= 1 and r["step_ns"] < r["baseline_step_ns"]:
        r["step_ns"] = r["baseline_step_ns"]  # more work per step never shortens it (a replay's rounding can)
    ratio = float(r["step_ns"]) / (float(factor) * float(r["baseline_step_ns"]))
    r["batch_factor"] = float(factor)
    r["per_sample_ratio"] = ratio
    r["throughput_gain"] = 1.0 / ratio if ratio > 0 else None
    return r
