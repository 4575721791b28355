"""Transforms: small edits of a graph's arrays, one per modelled fix (``TRANSFORMS``), with the assumptions each
makes (``ASSUMPTIONS``), and the steady-state graph every prediction is priced on."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from traceinsight.vocab.intervals import Coverage, merge_intervals
from traceinsight.vocab.thresholds import LAUNCH_GAP_NS
from traceinsight.derive.steady import warmup_steps
from traceinsight.derive.whatif.graph import BLOCKING, DATA_WAIT, GPU, HOST, Graph
from traceinsight.derive.whatif.replay import replay, step_times
from traceinsight.derive.whatif.window import replay_window


def _in(g: Graph, windows: Iterable[tuple[int, int]]) -> np.ndarray:
    """Tasks a windowed edit applies to: those starting in a window, and GPU tasks launched in one."""
    w = np.asarray(list(windows), np.int64).reshape(-1, 2)
    if len(w) == 0:
        return np.zeros(len(g.start), bool)
    cov_s, cov_e = merge_intervals(w[:, 0], w[:, 1])

    def inside(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(cov_s, t, side="right") - 1  # -1 (before every window) reads the last one, then fails i >= 0
        return (i >= 0) & (t < cov_e[i])

    m = inside(g.start)
    gl = (g.ntype == GPU) & (g.launch >= 0)
    m[gl] |= inside(g.start[g.launch[gl]])
    return m


def _where(g: Graph, windows, m: np.ndarray) -> np.ndarray:
    """``m`` limited to the tasks ``windows`` selects (``_in``); ``m`` itself when there are no windows."""
    if windows is not None:
        m &= _in(g, windows)
    return m


def remove_data_wait(g: Graph, windows=None) -> None:
    """Batches are ready when asked for: data-wait ranges take no time (the work after them keeps its own)."""
    g.dur[_where(g, windows, g.ntype == DATA_WAIT)] = 0


def remove_host_sync(g: Graph, windows=None) -> None:
    """The host no longer waits for the GPU at synchronizing calls; the copies they issue still run on the GPU."""
    g.wait_on[_where(g, windows, g.ntype == BLOCKING)] = False


def launch_bound_to_graphs(g: Graph, windows=None) -> None:
    """CUDA-graph model: the launches of a step are replayed without host work between them.

    Host calls other than data waits, blocking calls and step markers cost nothing, and the host time between
    them (the framework's per-op overhead) goes when it is shorter than ``LAUNCH_GAP_NS``; longer host
    stretches are taken to be real host work (Python logic, CPU ops) that a graph would not remove; every GPU task can start a typical launch latency after the (now immediate) launch, and queued tasks
    follow each other at the trace's typical kernel-to-kernel delay. Blocking calls still end where the GPU does.
    """
    h = _where(g, windows, g.ntype == HOST)
    g.dur[h & (g.is_launch | (g.dur <= LAUNCH_GAP_NS))] = 0  # a long cudaMalloc or module load stays
    np.minimum(g.prev_lat, 0, out=g.prev_lat, where=h & (g.prev_lat <= LAUNCH_GAP_NS))
    np.minimum(g.cross_lat, 0, out=g.cross_lat, where=h & (g.cross_lat <= LAUNCH_GAP_NS))
    gp = _where(g, windows, g.ntype == GPU)
    np.minimum(g.launch_lat, g.defaults["launch"], out=g.launch_lat, where=gp)
    np.minimum(g.prev_lat, g.defaults["queue"], out=g.prev_lat, where=gp)


def rnn_to_cudnn(g: Graph, windows=None) -> None:
    """A per-timestep RNN loop becomes one fused call: inside ``windows`` only the GEMM kernels keep their time,
    launched back to back as in ``launch_bound_to_graphs`` (conservative: cuDNN still does the GEMMs)."""
    launch_bound_to_graphs(g, windows)
    g.dur[_where(g, windows, (g.ntype == GPU) & ~g.gemm)] = 0


def remove_warmup(g: Graph, windows=None) -> None:
    """Warm-up is left out: with ``windows`` (ranges given by the caller), the time inside them is cut
    (``cut_time``); without, the ledger's warm-up (``traceinsight.derive.steady``: leading warm-up steps are dropped from
    the steps used, the one-time work inside the others is cut). Applied once: a graph already in steady state
    (``steady_graph``) is left as it is."""
    if windows is not None:
        cut_time(g, windows)
        return
    if g.defaults.get("steady"):
        return
    g.defaults["steady"] = True
    st = g.steps
    if len(st) >= 3:
        keep = ~warmup_mask((st["t1"] - st["t0"]).to_numpy())
        if not keep.all():
            g.steps = st[keep].reset_index(drop=True)
    w = g.defaults.get("warmup")
    if w is not None:
        cut_time(g, w)


def steady_graph(g: Graph) -> Graph:
    """The graph with its warm-up left out (``remove_warmup``), built once per graph: every what-if is priced on
    the steady state, so one-time work is never part of a predicted saving. The graph itself when it has none."""
    w = g.defaults.get("warmup")
    st = g.steps
    has_steps = len(st) >= 3 and warmup_mask((st["t1"] - st["t0"]).to_numpy()).any()
    if (w is None or not len(w)) and not has_steps:
        return g
    s = g.defaults.get("steady_graph")
    if s is None:
        s = g.copy()
        remove_warmup(s)
        s.window = replay_window(s, s.steps)
        ns, ne = replay(s)
        s.defaults["base"] = step_times(s, ns, ne)
        g.defaults["steady_graph"] = s
    return s


def cut_time(g: Graph, windows) -> None:
    """The time inside ``windows`` never happened: every task's duration and every edge's latency lose the part of
    them that lies inside a window (host and GPU alike), so work on either side closes up.

    Edits the graph's timing arrays in place (a transform's graph is a copy: they are its own). Only the ranges
    that reach into the windows' hull are measured against them (warm-up lies at the start of a long trace: a few
    hundred of a million tasks); every other range loses nothing."""
    w = np.asarray(list(windows), np.int64).reshape(-1, 2)
    if len(w) == 0:
        return
    cov = Coverage(w[:, 0], w[:, 1])
    lo, hi = (int(cov.s[0]), int(cov.e[-1])) if len(cov.s) else (0, 0)

    def cut(values: np.ndarray, rows: np.ndarray | None, a: np.ndarray, b: np.ndarray) -> None:
        # values[rows] -= the covered part of [a, b), never below 0, for the ranges that meet [lo, hi) (the
        # others lose nothing)
        near = np.flatnonzero((b > lo) & (a < hi)) if hi > lo else np.zeros(0, np.intp)
        if len(near):
            at = near if rows is None else rows[near]
            values[at] = np.maximum(values[at] - cov.overlap(a[near], b[near]), 0)

    cut(g.dur, None, g.start, g.end)
    np.maximum(g.dur, 0, out=g.dur)
    own_from = g.end - g.own
    cut(g.own, None, own_from, g.end)
    del own_from
    np.maximum(g.own, 0, out=g.own)
    for pred, lat, ref in ((g.prev, g.prev_lat, g.end), (g.cross, g.cross_lat, g.end), (g.launch, g.launch_lat, g.start)):
        has = np.flatnonzero((pred >= 0) & (lat > 0))
        a = ref[pred[has]]
        cut(lat, has, a, a + lat[has])


def warmup_mask(durs: np.ndarray) -> np.ndarray:
    """Leading warm-up steps: the steady-state model's own test (``traceinsight.derive.steady.warmup_steps``)."""
    return warmup_steps(durs)


def typical_gpu_latencies(g: Graph, windows=None) -> None:
    """Validation, not a cause: every GPU task waits only the trace's typical launch / kernel-to-kernel delay
    after its predecessors. Any step time lost is GPU idle that no edge of the graph explains."""
    m = _where(g, windows, g.ntype == GPU)
    d_q, d_l = g.defaults["queue"], g.defaults["launch"]
    ln = np.clip(g.launch, 0, None)
    np.minimum(g.prev_lat, d_q, out=g.prev_lat, where=m)
    np.minimum(g.cross_lat, d_q, out=g.cross_lat, where=m)
    g.launch_lat[m] = np.minimum(g.launch_lat[m], d_l + (g.end[ln] - g.start[ln])[m])


def _all(g: Graph, windows=None) -> None:
    for f in (remove_warmup, remove_data_wait, remove_host_sync, launch_bound_to_graphs):
        f(g, windows)


TRANSFORMS: dict[str, Callable[..., None]] = {
    "none": lambda g, windows=None: None,
    "remove_data_wait": remove_data_wait,
    "remove_host_sync": remove_host_sync,
    "launch_bound_to_graphs": launch_bound_to_graphs,
    "rnn_to_cudnn": rnn_to_cudnn,
    "typical_gpu_latencies": typical_gpu_latencies,
    "remove_warmup": remove_warmup,
    "all": _all,
}

ASSUMPTIONS = {
    "none": "the unmodified graph replayed",
    "remove_data_wait": "data-wait ranges take no time; host work, launches and GPU work keep their measured durations; the GPU may now be the bound",
    "remove_host_sync": "the host no longer waits at synchronizing calls (copies still run); everything else as measured",
    "launch_bound_to_graphs": f"CUDA-graph model: no per-op host overhead (gaps under {LAUNCH_GAP_NS // 1000} us) between launches, typical launch latency, kernels back to back at the trace's kernel-to-kernel delay; syncs and data waits stay",
    "rnn_to_cudnn": "the RNN region keeps only its GEMM kernels, launched back to back (a conservative cuDNN equivalent)",
    "typical_gpu_latencies": "validation: every GPU task waits only the typical launch / kernel-to-kernel delay after its predecessors",
    "remove_warmup": "warm-up (the ledger's one-time work and leading warm-up steps) is left out",
    "all": "data waits, host syncs and host launch overhead all removed, warm-up left out",
}
