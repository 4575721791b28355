"""Which marker makes the steps: ``ProfilerStep#N`` and TF steps when the trace has them, else a user range picked
by repetition and coverage, or the range the user names (``--step-range NAME``).

Everything per step (the ledger's per-step account, warm-up steps, the what-if replay) rests on step boundaries,
and most traces without ``ProfilerStep`` still mark their loop: an NVTX ``train_step`` range, a
``record_function("iteration")`` block, a TraceMe. A range is a step candidate when it repeats (at least
``MIN_REPEATS`` instances of one name, numbers at the end of the name ignored), its instances follow each other
without overlapping, and together they cover at least ``MIN_COVERAGE`` of the rank's GPU window; the candidate
that covers most wins (the outer loop range over the forward inside it). Its instances must be alike in length
(``MIN_P10_OF_MEDIAN``), and every instance must hold GPU work (a GPU row starting in it, or launched from it): a
step that holds none is no step, and only ranks with GPU work get steps this way. Library ranges are never steps
(``LIBRARY_RANGE``: CUB, Thrust, NCCL, cuDNN, cuBLAS, Triton internals, framework ops; and framework dispatch, ``patterns.FRAMEWORK_DISPATCH``): a library's ranges repeat
per call, not per iteration, and one of them taken as the step invents hundreds of "iterations". Nor are a
runtime's own ranges (``patterns.RUNTIME_INTERNAL``: PJRT's ``BufferSequencingEvent::Execute``, TF's
``ExecutorState::Process``, CUDA/HIP calls): a JAX micro-benchmark's three ``Execute`` ranges covered 63 % of its
window, the first holding the whole compilation and the last no GPU work at all.

The choice and its reason are kept in ``meta.extra["steps_source"]`` (marker, how, why) for the reports.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.model.timeline import step_times
from traceinsight.vocab.masks import kind_mask, name_mask
from traceinsight.vocab.patterns import DATA_WAIT_PRIMARY, FRAMEWORK_DISPATCH, RUNTIME_INTERNAL

#: Fewest instances of a range for it to be picked as the step without being named.
MIN_REPEATS = 3
#: ...and the least share of the rank's GPU window (first to last GPU activity) its instances must cover together.
MIN_COVERAGE = 0.5
#: A step's instances are alike: the shortest tenth of them must be at least this share of the median one
#: (per-op ranges of a framework vary a hundredfold).
MIN_P10_OF_MEDIAN = 0.25
#: Ranges of libraries and framework internals: never a step.
LIBRARY_RANGE = re.compile(
    r"^(cub::|thrust::|cccl|nccl|rccl|c10d::|cudnn|cublas|cutlass|cutlass::|triton|hipblas|rocblas|miopen|nvjpeg|cufft|curand|cusparse|cusolver"
    r"|aten::|autograd::|torch::|nn\.Module|Optimizer\.|Memcpy|Memset|cuda|hip|ProfilerStep"
    r"|Eager|Executor|tf_|tensorflow::|TensorFlow|ThreadPool|PjRt|Xla|XLA)"
    r"|^(void |at::native::|\{|\[)",
    re.IGNORECASE,
)
#: Framework dispatch (TF eager, JAX/PjRt): one range per op or call, never per iteration.
_DISPATCH = re.compile(FRAMEWORK_DISPATCH)
_RUNTIME = re.compile(RUNTIME_INTERNAL)
_TRAILING_NUMBER = re.compile(r"[\s#_:.\-]*\d+$")
_STEP_KINDS = ("annotation",)


def _base(name: str) -> str:
    return _TRAILING_NUMBER.sub("", name).strip()


def candidates(events: pd.DataFrame) -> pd.DataFrame:
    """Repeated user ranges per (rank, base name): rank, name (the base), count, coverage (of the rank's GPU
    window), overlapping (instances that start before the previous one ended), regular, idle (instances that hold
    no GPU work). Library ranges and a runtime's own ranges are left out."""
    rows = np.flatnonzero(events["kind"].isin(_STEP_KINDS).to_numpy())  # on category codes: no 10^6 strings
    cols = ["rank", "name", "count", "coverage", "overlapping", "regular", "idle"]
    if not len(rows):
        return pd.DataFrame({c: [] for c in cols})
    names = events["name"].take(rows).astype(str).to_numpy()
    uniq, inv = np.unique(names, return_inverse=True)
    base = np.array([_base(n) for n in uniq], dtype=object)
    ok = np.array([bool(b) and len(b) <= 200 and not LIBRARY_RANGE.search(b) and not _DISPATCH.search(b) and not _RUNTIME.search(b)
                   and not re.search(DATA_WAIT_PRIMARY, n) for b, n in zip(base, uniq)])
    keep = ok[inv]
    rows, base_of = rows[keep], base[inv][keep]
    if not len(rows):
        return pd.DataFrame({c: [] for c in cols})
    dev = events["device"].to_numpy()
    rank_all = events["rank"].to_numpy()
    start_all = events["start_ns"].to_numpy(np.int64)
    end_all = start_all + np.maximum(events["dur_ns"].to_numpy(np.int64), 0)
    windows = {}
    for r in np.unique(rank_all[rows]):
        g = (rank_all == r) & (dev >= 0)
        if g.any():  # a rank without GPU work has no steps to find (host-only captures keep their own markers)
            windows[int(r)] = (int(start_all[g].min()), int(end_all[g].max()))
    f = pd.DataFrame({"rank": rank_all[rows].astype(np.int64), "name": base_of, "start": start_all[rows], "end": end_all[rows]})
    work = _gpu_work_times(events, rank_all, start_all)
    out = []
    for (r, n), g in f.groupby(["rank", "name"], sort=True):
        if int(r) not in windows:
            continue
        g = g.sort_values("start")
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        overlapping = int((s[1:] < e[:-1]).sum()) if len(s) > 1 else 0
        w0, w1 = windows[int(r)]
        cov = float(np.clip(np.minimum(e, w1) - np.maximum(s, w0), 0, None).sum()) / max(w1 - w0, 1)
        d = e - s
        regular = bool(len(d) and np.percentile(d, 10) >= MIN_P10_OF_MEDIAN * np.median(d))
        t = work.get(int(r), np.zeros(0, np.int64))
        idle = int((np.searchsorted(t, e, side="left") == np.searchsorted(t, s, side="left")).sum())
        out.append((int(r), n, len(g), cov, overlapping, regular, idle))
    return pd.DataFrame(out, columns=cols)


def _gpu_work_times(events: pd.DataFrame, rank_all: np.ndarray, start_all: np.ndarray) -> dict[int, np.ndarray]:
    """Per rank, the sorted times that place its GPU rows in a step (``timeline.step_times``). A range holds GPU
    work when one of these times falls inside it."""
    gpu = events["device"].to_numpy() >= 0
    r, t = rank_all[gpu], step_times(events, start_all)[gpu]
    return {int(k): np.sort(t[r == k]) for k in np.unique(r)}


def choose(events: pd.DataFrame, name: str | None = None) -> dict | None:
    """The range to use as the step: ``{"marker", "how", "why"}``, or None when none qualifies. ``name``: the
    user's choice (a base name or a full range name); else the repeated range that covers most."""
    cand = candidates(events)
    if name is not None:
        want = _base(name)
        hit = cand[(cand["name"] == want) | (cand["name"] == name)]
        if hit.empty:
            raw = events["name"].astype(str)
            n = int((raw == name).sum() + raw.map(_base).eq(want).sum()) if len(raw) else 0
            if not n:
                return None
            return {"marker": want, "how": "chosen", "why": f"--step-range {name}: {n} ranges named so"}
        h = hit.iloc[0]
        return {"marker": str(h["name"]), "how": "chosen",
                "why": f"--step-range {name}: {int(h['count'])} ranges covering {100 * h['coverage']:.0f} % of the GPU window"}
    ok = cand[(cand["count"] >= MIN_REPEATS) & (cand["overlapping"] == 0) & (cand["coverage"] >= MIN_COVERAGE) & cand["regular"].astype(bool)
              & (cand["idle"] == 0)]
    if ok.empty:
        return None
    best = ok.sort_values(["coverage", "count"], ascending=[False, True]).iloc[0]
    others = len(ok) - 1
    return {"marker": str(best["name"]), "how": "auto",
            "why": (f"no ProfilerStep or TF step markers; '{best['name']}' repeats {int(best['count'])} times without overlap and "
                    f"covers {100 * best['coverage']:.0f} % of the GPU window" + (f" (the widest of {others + 1} repeated ranges)" if others else "")
                    + ", each instance holding GPU work; library ranges (CUB, Thrust, NCCL, cuDNN, cuBLAS, Triton) and a runtime's own"
                    " ranges (PJRT, XLA, the TF executor, CUDA/HIP calls) are never steps")}


#: The optimizer's own ranges, which PyTorch records once per iteration whatever else the trace marks: the last
#: resort for iterations when no step marker and no repeated user range is found. ``zero_grad`` first (it opens
#: or closes an iteration, and its starts are evenly spaced either way), then ``step`` (its ends close one).
OPTIMIZER_RANGES = (re.compile(r"^Optimizer\.zero_grad#"), re.compile(r"^Optimizer\.step#"))
#: The name of the step rows made from optimizer ranges (numbered in time order).
OPTIMIZER_STEP = "iteration (between optimizer calls)"


def optimizer_iterations(events: pd.DataFrame) -> tuple[pd.DataFrame, dict] | None:
    """Iterations from the optimizer's ranges, for a trace with no other step marker: per rank with GPU work, the
    starts of ``Optimizer.zero_grad#...`` (else the ends of ``Optimizer.step#...``) are the boundaries, and each
    iteration runs from one boundary to the next (the last one, after a ``zero_grad``, to the end of the optimizer
    step that closes it, when that is a whole iteration: ``_last_is_whole``). At least ``MIN_REPEATS`` boundaries on a rank, top-level ranges only (not nested in each
    other). Returns (rank, start_ns, end_ns, source row) per iteration and the ``steps_source`` entry, or None."""
    host_rows = kind_mask(events["kind"], ("cpu_op", "annotation"))
    zero_all = host_rows & name_mask(events["name"], OPTIMIZER_RANGES[0])  # once per distinct name, not per row
    step_all = host_rows & name_mask(events["name"], OPTIMIZER_RANGES[1])
    host = np.flatnonzero(zero_all | step_all)
    if not len(host):
        return None
    zero, step = zero_all[host], step_all[host]
    rank_all = events["rank"].to_numpy()
    gpu_ranks = set(np.unique(rank_all[events["device"].to_numpy() >= 0]).tolist())
    start_all = events["start_ns"].to_numpy(np.int64)
    end_all = start_all + np.maximum(events["dur_ns"].to_numpy(np.int64), 0)
    out = []
    used = None
    for r in sorted(gpu_ranks):
        on = rank_all[host] == r
        z, st = host[on & zero], host[on & step]
        if len(z) >= MIN_REPEATS:
            z = z[np.argsort(start_all[z], kind="stable")]
            b = start_all[z]
            after = end_all[st][start_all[st] >= b[-1]]
            last = [int(after.max())] if len(after) and _last_is_whole(b, start_all[st], end_all[st]) else []
            ends = np.r_[b[1:], last].astype(np.int64)
            rows = z[: len(ends)]
            used = used or "Optimizer.zero_grad"
        elif len(st) >= MIN_REPEATS:
            st = st[np.argsort(end_all[st], kind="stable")]
            b = end_all[st]
            ends, rows = b[1:], st[1:]
            b = b[:-1]
            used = used or "Optimizer.step"
        else:
            continue
        begins = b[: len(ends)]
        keep = ends > begins
        out.append(pd.DataFrame({"rank": r, "start_ns": begins[keep], "end_ns": ends[keep], "row": rows[keep]}))
    if not out:
        return None
    it = pd.concat(out, ignore_index=True)
    why = (f"no ProfilerStep, TF step or repeated user range; the optimizer's own {used} ranges mark the iterations "
           f"({len(it)} found, each from one call to the next)")
    return it, {"marker": OPTIMIZER_STEP, "how": "optimizer", "why": why}


#: The share of an iteration that may follow its optimizer step (the next ``zero_grad`` comes that much later, at
#: the median) before the last iteration, which has nothing after its step to end it, is left out as cut short.
MAX_TAIL_SHARE = 0.05


def _last_is_whole(b: np.ndarray, step_start: np.ndarray, step_end: np.ndarray) -> bool:
    """Whether the iteration after the last ``zero_grad`` boundary ``b[-1]``, which can only end with its optimizer
    step, is a whole one. Where ``zero_grad`` opens an iteration, the time from its step's end to the next
    boundary (the loss read, logging, the next batch's fetch) belongs to it; the last iteration has none of it and
    would be a step shorter than the rest by that tail (a data-bound run's shortest step). Kept only when the
    other iterations' median tail is under ``MAX_TAIL_SHARE`` of their median length (``zero_grad`` right after
    the step: the iteration ends with its step)."""
    if len(b) < 2 or not len(step_end):
        return True
    order = np.argsort(step_start, kind="stable")
    ss, se = step_start[order], np.maximum.accumulate(step_end[order])
    # per full iteration k: the latest end of a step that started in [b[k], b[k+1])
    hi = np.searchsorted(ss, b[1:], side="left") - 1
    lo = np.searchsorted(ss, b[:-1], side="left")
    has = hi >= lo
    if not has.any():
        return True
    tail = (b[1:] - se[np.maximum(hi, 0)])[has]
    length = np.diff(b)[has]
    return float(np.median(np.maximum(tail, 0))) <= MAX_TAIL_SHARE * float(np.median(length))


def add_iterations(events: pd.DataFrame, it: pd.DataFrame) -> pd.DataFrame:
    """The events with one ``step`` row per iteration of ``it`` (from ``optimizer_iterations``) appended, named
    ``OPTIMIZER_STEP #n`` (n in time order per rank) and copied from the optimizer row that opened it otherwise
    (its rank, process and thread)."""
    rows = events.iloc[it["row"].to_numpy()].copy()
    n = it.groupby("rank").cumcount().to_numpy()
    labels = [f"{OPTIMIZER_STEP} #{i}" for i in n]
    for col in ("kind", "name", "raw_name", "category"):
        if col not in rows:
            continue
        want = "step" if col == "kind" else (labels if col != "category" else "optimizer iteration")
        if isinstance(events[col].dtype, pd.CategoricalDtype):
            new = [v for v in ([want] if isinstance(want, str) else want) if v not in events[col].cat.categories]
            if new:
                events[col] = events[col].cat.add_categories(pd.unique(np.asarray(new, dtype=object)))
                rows[col] = rows[col].cat.set_categories(events[col].cat.categories)
        rows[col] = want
        if isinstance(events[col].dtype, pd.CategoricalDtype):
            rows[col] = rows[col].astype(events[col].dtype)
    rows["start_ns"] = it["start_ns"].to_numpy().astype(events["start_ns"].dtype)
    rows["dur_ns"] = (it["end_ns"] - it["start_ns"]).to_numpy().astype(events["dur_ns"].dtype)
    if "external_id" in rows:
        rows["external_id"] = -1
    return pd.concat([events, rows], ignore_index=True)


def mark(events: pd.DataFrame, marker: str, replace: bool = False) -> int:
    """Make the ranges whose base name is ``marker`` the step rows (in place); with ``replace``, existing step rows
    become plain annotations first. Returns the number of step rows."""
    kind = events["kind"]
    is_step = (kind == "step").to_numpy()
    if replace and is_step.any():
        events.loc[is_step, "kind"] = "annotation"
    names = events["name"]
    uniq = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else pd.unique(names.astype(str))
    hit = {n for n in map(str, uniq) if _base(n) == marker or n == marker}
    m = names.isin(hit).to_numpy() & events["kind"].isin(("annotation", "cpu_op", "step")).to_numpy()
    events.loc[m, "kind"] = "step"
    return int(m.sum())


def source_of(events: pd.DataFrame) -> dict:
    """What made the steps of a trace that came with its own markers."""
    pos = np.flatnonzero((events["kind"] == "step").to_numpy())  # the first step row's name is all that is read
    return source_named(str(events["name"].iloc[int(pos[0])]) if len(pos) else None)


def source_named(first: str | None) -> dict:
    """``source_of`` from the name of the first step row (None: the trace has no step rows)."""
    if first is None:
        return {"marker": None, "how": "none", "why": "no step markers and no repeated user range covering the window: the whole window is one step"}
    base = _base(first) or first
    return {"marker": base, "how": "profiler", "why": f"the profiler's own step markers ({base})"}


# --- choosing the window ---------------------------------------------------------------------------------------
def _pair(value, what: str, cast) -> tuple:
    """"3:8" or (3, 8) -> (3, 8); a bad value raises ``ValueError`` with what was expected."""
    if isinstance(value, str):
        a, sep, b = value.partition(":")
        if not sep:
            raise ValueError(f"{what}: expected START:END, got {value!r}")
        try:
            lo, hi = (cast(a) if a.strip() else None), (cast(b) if b.strip() else None)
        except ValueError:
            raise ValueError(f"{what}: expected START:END as numbers, got {value!r}") from None
    else:
        lo, hi = value
    for v in (lo, hi):  # inf, NaN or a number past any clock would overflow the ns arithmetic
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) <= _PAIR_LIMIT):
            raise ValueError(f"{what}: expected START:END as finite numbers of at most {_PAIR_LIMIT:g}, got {str(value)[:60]!r}")
    return lo, hi


#: Largest step number or time in ms ``--steps`` / ``--window`` take (10^12 ms is 31 years; it fits the ns clock).
_PAIR_LIMIT = 1e12


def window_of(events: pd.DataFrame, *, steps=None, range_name: str | None = None, window_ms=None) -> tuple[int, int, str]:
    """The (start_ns, end_ns, description) a user asked for: ``steps`` "A:B" (step numbers A through B, both
    included, on every rank), ``range_name`` (first to last instance of that user range, numbers at its end
    ignored), ``window_ms`` "START:END" in ms on the trace's clock (0 = its first event). Either end may be left
    open. Raises ``ValueError`` when the choice selects nothing."""
    start = events["start_ns"].to_numpy(np.int64)
    end = start + np.maximum(events["dur_ns"].to_numpy(np.int64), 0)
    lo, hi = int(start.min()) if len(start) else 0, int(end.max()) if len(end) else 0
    what = []
    if steps is not None:
        a, b = _pair(steps, "--steps", int)
        st = (events["kind"] == "step").to_numpy()
        num = events["step"].to_numpy()
        m = st & (num >= (a if a is not None else -(2**31))) & (num <= (b if b is not None else 2**31))
        if not m.any():
            have = sorted(set(num[st].tolist()))
            raise ValueError(f"--steps {steps}: no such steps (the trace has {('steps ' + str(have[0]) + '..' + str(have[-1])) if have else 'no steps'})")
        lo, hi = max(lo, int(start[m].min())), min(hi, int(end[m].max()))
        what.append(f"steps {a if a is not None else ''}:{b if b is not None else ''}")
    if range_name is not None:
        names = events["name"].astype(str)
        base = _base(range_name)
        m = (names == range_name).to_numpy() | names.map(_base).eq(base).to_numpy()
        m &= np.isin(events["kind"].astype(str).to_numpy(), ("annotation", "step", "cpu_op"))
        if not m.any():
            raise ValueError(f"--range {range_name}: no range of that name in the trace")
        lo, hi = max(lo, int(start[m].min())), min(hi, int(end[m].max()))
        what.append(f"range {range_name}")
    if window_ms is not None:
        a, b = _pair(window_ms, "--window", float)
        if a is not None:
            lo = max(lo, int(round(a * 1e6)))
        if b is not None:
            hi = min(hi, int(round(b * 1e6)))
        what.append(f"window {window_ms if isinstance(window_ms, str) else f'{a}:{b}'} ms")
    if hi <= lo:
        raise ValueError(f"{', '.join(what) or 'window'}: selects no time ({lo / 1e6:.3f}-{hi / 1e6:.3f} ms)")
    return lo, hi, ", ".join(what)


def crop(events: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """The events overlapping [lo, hi), clipped to it (a copy): every figure then describes the chosen window."""
    start = events["start_ns"].to_numpy(np.int64)
    dur = np.maximum(events["dur_ns"].to_numpy(np.int64), 0)
    end = start + dur
    keep = (end > lo) & (start < hi) | ((dur == 0) & (start >= lo) & (start < hi))
    out = events.loc[keep].copy()
    s = np.clip(start[keep], lo, hi)
    e = np.clip(end[keep], lo, hi)
    out["start_ns"] = s.astype(events["start_ns"].dtype, copy=False)
    out["dur_ns"] = (e - s).astype(events["dur_ns"].dtype, copy=False)
    return out.reset_index(drop=True)
