"""The replayed steps and window: the step markers used (the middle ``MAX_STEPS``) and the events of the replay
in a topological order."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.derive.whatif.graph import BLOCKING, GPU, Graph
from traceinsight.derive.whatif.replay import step_columns


def _steps(start: np.ndarray, nh: int, marker_steps: np.ndarray, max_steps: int) -> pd.DataFrame:
    """Step markers (start/end node ids), the middle ``max_steps`` when there are more. The markers are the last
    host nodes (``host_nodes``): a start node per step, then an end node per step."""
    return step_table(start, nh, marker_steps, max_steps)[0]


def step_table(start: np.ndarray, nh: int, marker_steps: np.ndarray, max_steps: int) -> tuple[pd.DataFrame, dict | None]:
    """``_steps``, and its columns as ``step_columns`` gives them when the markers are already in order and few
    enough (the arrays the frame was made of; None otherwise, to be read off the frame)."""
    m = len(marker_steps)
    if m == 0:
        return pd.DataFrame(columns=["step", "start_node", "end_node", "t0", "t1"]), None
    a = np.arange(nh - 2 * m, nh - m)
    b = a + m
    t0, t1 = start[a], start[b]
    # int64 columns as one block: half the cost of a frame of separate columns, paid once per rank on tiny ranks too
    st = pd.DataFrame(np.vstack([marker_steps, a, b, t0, t1]).T, columns=["step", "start_node", "end_node", "t0", "t1"])
    cols: dict | None = {"start_node": a, "end_node": b, "t0": t0, "t1": t1}
    if len(t0) > 1 and not bool((t0[1:] > t0[:-1]).all()):  # strictly increasing: already the one sorted order
        st, cols = st.sort_values("t0").reset_index(drop=True), None
    if len(st) > max_steps:
        lo = (len(st) - max_steps) // 2
        st, cols = st.iloc[lo: lo + max_steps].reset_index(drop=True), None
    return st, cols


def replay_window(g: Graph, steps: pd.DataFrame) -> np.ndarray:
    """Replay events in a topological order: (time, phase) with blocking calls ending in a second event."""
    is_gpu = g.ntype == GPU
    if steps.empty:  # no markers: the GPU's active window, from the first task's launch
        ws = int(min(g.start[is_gpu].min(), g.start[g.launch[is_gpu & (g.launch >= 0)]].min(initial=np.iinfo(np.int64).max)))
        we = int(g.end[is_gpu].max())
    else:
        cols = step_columns(g, steps)
        ws, we = int(cols["t0"].min()), int(cols["t1"].max())
    n = len(g.seq)
    nh = n - int(np.count_nonzero(is_gpu))
    if is_gpu[:nh].any():  # not host nodes first (never from build_graph): one mask over every node
        return _window_mixed(g, is_gpu, ws, we)
    # host nodes are ids < nh, GPU nodes (launched by host nodes) the rest: each part on its own slice
    hs = g.start[:nh]
    host_in = (hs >= ws) & (hs <= we)
    gl = g.launch[nh:]
    gs = g.start[nh:]
    gpu_in = np.where(gl >= 0, np.take(host_in, gl, mode="clip"), (gs >= ws) & (gs <= we))
    hid = np.flatnonzero(host_in)
    gid = np.flatnonzero(gpu_in)
    b = hid[g.ntype[hid] == BLOCKING]
    nh_, ng_ = len(hid), len(gid)
    # per event (host starts, GPU starts, blocking ends): its time, and (phase, seq) as one number (seq < n, so
    # phase * n + seq sorts as the pair does), each written in place into its part
    keys_t = np.empty(nh_ + ng_ + len(b), np.int64)
    keys_p = np.empty(len(keys_t), np.int64)
    np.take(hs, hid, out=keys_t[:nh_])
    t_g = keys_t[nh_: nh_ + ng_]
    np.take(gs, gid, out=t_g)
    # GPU tasks never before their launch; at equal times: blocking ends, then host starts, then GPU tasks
    lgi = gl[gid]
    has = lgi >= 0
    t_g[has] = np.maximum(t_g[has], g.start[lgi[has]])
    np.take(g.end, b, out=keys_t[nh_ + ng_:])
    gid += nh
    np.take(g.seq, hid, out=keys_p[:nh_])
    keys_p[:nh_] += n
    np.take(g.seq, gid, out=keys_p[nh_: nh_ + ng_])
    keys_p[nh_: nh_ + ng_] += 2 * n
    np.take(g.seq, b, out=keys_p[nh_ + ng_:])
    return _event_order(np.r_[hid, gid, -1 - b], keys_t, keys_p, n)


def _window_mixed(g: Graph, is_gpu: np.ndarray, ws: int, we: int) -> np.ndarray:
    """``replay_window`` for node types in any order."""
    host_in = ~is_gpu & (g.start >= ws) & (g.start <= we)
    gpu_in = is_gpu & np.where(g.launch >= 0, np.take(host_in, g.launch, mode="clip"), (g.start >= ws) & (g.start <= we))
    ids = np.flatnonzero(host_in | gpu_in)
    t = g.start[ids]
    gl = is_gpu[ids] & (g.launch[ids] >= 0)
    t[gl] = np.maximum(t[gl], g.start[g.launch[ids][gl]])
    phase = np.where(is_gpu[ids], 2, 1)
    b = ids[g.ntype[ids] == BLOCKING]
    n = len(g.seq)
    return _event_order(np.r_[ids, -1 - b], np.r_[t, g.end[b]], np.r_[phase * n + g.seq[ids], g.seq[b]], n)


def _event_order(ev: np.ndarray, keys_t: np.ndarray, keys_p: np.ndarray, n: int) -> np.ndarray:
    """``ev`` sorted by (keys_t, keys_p); keys_p (phase * n + seq, below 3 n) is unique per event. As one int64
    where the times' span allows: one sort of a few nearly sorted runs instead of a two-key lexsort."""
    if len(ev) == 0:
        return ev
    t0 = int(keys_t.min())
    if int(keys_t.max()) - t0 < (2**62) // (3 * n):
        key = keys_t - t0
        key *= 3 * n
        key += keys_p
        return ev[np.argsort(key, kind="stable")]
    return ev[np.lexsort((keys_p, keys_t))]
