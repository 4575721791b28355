"""Helpers shared by the built-in rules: name patterns and the queries several rules ask the same way.

Kept out of ``views`` because they are heuristics (which names mean "data loading", "a sync", "a tensor-core
kernel"), not facts about the trace; generic interval and name matching lives in ``traceinsight.views``.
Every helper is vectorized so rules stay linear in the number of events.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.patterns import COLLECTIVE, DATA_WAIT_PRIMARY, DATA_WAIT_TFDATA, SYNC_CALL, SYNC_OP  # noqa: F401  (one home, shared with the ledger)
from traceinsight.views import Coverage, codes_in, merge_intervals, name_mask  # noqa: F401  (re-exported for the rules)
from traceinsight.steady import START_UP_CALL
from traceinsight.views import kind_mask as views_kind_mask

# --- name patterns ---------------------------------------------------------------------------------------
#: Host ranges that mean "waiting for input": PyTorch DataLoader iteration, tf.data / TF iterator ops.
DATA_LOADING = re.compile(r"enumerate\(DataLoader\)|DataLoader|IteratorGetNext|Iterator::|MultiDeviceIteratorGetNextFromShard|_next_data|dataloader\.py", re.I)
#: Optimizer updates (PyTorch ``Optimizer.step#SGD.step``, fused/foreach kernels' host ops, Keras apply_gradients).
OPTIMIZER = re.compile(r"Optimizer\.step|optimizer|zero_grad|ResourceApply|apply_gradients|_foreach_", re.I)


def short_name(name: str, width: int = 80) -> str:
    """Kernel names can be kilobytes of templates; evidence tables need the head of them."""
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def pair_codes(rank: np.ndarray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (rank, device) pairs, sorted (an (n, 2) array), and each row's pair index."""
    r0, d0 = int(rank.min()), int(device.min())
    span = int(device.max()) - d0 + 1
    if r0 == int(rank.max()) and span == 1:  # one device (one file): one pair, no key
        return np.array([[r0, d0]], dtype=np.int64), np.zeros(len(rank), np.int64)
    key = (rank.astype(np.int64) - r0) * span + (device.astype(np.int64) - d0)  # one int64 key, ordered as (rank, device)
    n_keys = (int(rank.max()) - r0 + 1) * span
    if n_keys <= 4 * len(key) + 1024:  # few possible pairs: counted, not sorted
        present = np.bincount(key, minlength=n_keys) > 0
        uk = np.flatnonzero(present)
        inv = (np.cumsum(present) - 1)[key]
    else:
        uk, inv = np.unique(key, return_inverse=True)
    return np.stack([uk // span + r0, uk % span + d0], axis=1), inv.reshape(-1)


# --- interval queries ---------------------------------------------------------------------------------------
def next_launch_ns(views, gaps: pd.DataFrame) -> np.ndarray:
    """For each gap: when the host launched the GPU work that ended it (NaN where no launch is linked)."""
    out = np.full(len(gaps), np.nan)
    ln = views.launches
    if gaps.empty or ln.empty:
        return out
    first = ln.groupby(["rank", "device", "gpu_start_ns"], sort=False)["launch_start_ns"].min()
    idx = pd.MultiIndex.from_arrays([gaps["rank"].to_numpy(), gaps["device"].to_numpy(), gaps["end_ns"].to_numpy()])
    return first.reindex(idx).to_numpy(dtype=float)


def host_starved_gaps(views, gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps the host could have prevented: the work that ended them was launched after the gap began (or is
    not linked to a launch). When it was already queued, the GPU waited on a GPU-side dependency (another stream,
    an event, a peer), and a blocked host did not cause that idle."""
    nl = next_launch_ns(views, gaps)
    keep = np.isnan(nl) | (nl >= gaps["start_ns"].to_numpy(dtype=float))
    return gaps[keep]


def _rightmost_at_least(values: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """For each query: the largest i < hi with values[i] >= q, or -1 (binary lifting over a sparse max table)."""
    n = len(values)
    if n == 0:
        return np.full(len(q), -1)
    # the answer is usually among the last few candidates (a call sits in the op that started just before it):
    # probe those first, and build the table only for the queries still open
    out = np.full(len(q), -1)
    open_ = np.arange(len(q))
    for back in range(1, 9):
        i = hi[open_] - back
        ok = i >= 0
        found = np.zeros(len(open_), dtype=bool)
        found[ok] = values[i[ok]] >= q[open_[ok]]
        out[open_[found]] = i[found]
        open_ = open_[~found & ok]
        if not len(open_):
            return out
    out[open_] = _rightmost_at_least_table(values, hi[open_], q[open_])
    return out


def _rightmost_at_least_table(values: np.ndarray, hi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``_rightmost_at_least`` by binary lifting over a sparse max table."""
    n = len(values)
    table = [values]
    k = 1
    while (1 << k) <= n:
        prev = table[-1]
        half = 1 << (k - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
        k += 1
    hi = hi.copy()
    for level in range(len(table) - 1, -1, -1):
        width = 1 << level
        lo = hi - width
        ok = lo >= 0
        blockmax = np.full(len(q), np.iinfo(np.int64).max)
        blockmax[ok] = table[level][lo[ok]]
        skip = ok & (blockmax < q)
        hi[skip] = lo[skip]
    ans = hi - 1
    valid = ans >= 0
    valid[valid] = values[ans[valid]] >= q[valid]
    return np.where(valid, ans, -1)


class ThreadCodes:
    """Codes for the tuples of integer columns of one table (the (rank, pid, tid) of host rows: a thread), applied
    to the rows of others (-1: a tuple the table lacks): a key computed once for a table many queries look into.

    Per column each row's offset from the column's minimum (its position among the sorted distinct values where
    the values are spread wider than the rows are many), combined in mixed radix; where the product of the radices
    would leave int64, the key so far is first compressed to its distinct values. A column with one value adds
    nothing (usually rank and pid): the key is built in place from the others, few arrays of the table's length."""

    COLUMNS = ("rank", "pid", "tid")

    def __init__(self, columns: list[np.ndarray]) -> None:
        #: per column: (distinct keys before combining or None, lowest value, radix, sorted distinct values or None)
        self._steps: list[tuple[np.ndarray | None, int, int, np.ndarray | None]] = []
        n = len(columns[0])
        key = None
        room = 1
        for col in columns:
            col = np.asarray(col)
            lo = int(col.min()) if n else 0
            radix = int(col.max()) - lo + 1 if n else 1
            uniq = None
            if radix > 2 * n + 1024:  # sparse values (thread ids): their rank among the distinct ones
                uniq = np.sort(pd.unique(col.astype(np.int64, copy=False)))
                radix = len(uniq)
            squeeze = None
            if radix > 1 and key is not None and room * radix >= 2**62:
                squeeze, key = np.unique(key, return_inverse=True)
                key = key.reshape(-1).astype(np.int64)
                room = max(len(squeeze), 1)
            self._steps.append((squeeze, lo, radix, uniq))
            if radix == 1:
                continue
            if uniq is not None:
                code = np.searchsorted(uniq, col).astype(np.int64, copy=False)
            else:
                code = np.subtract(col, lo, dtype=np.int64)  # one pass: the copy is the offset
            if key is None:
                key = code
            else:
                key *= radix
                key += code
            room *= radix
        self.codes = key if key is not None else np.zeros(n, np.int64)

    @staticmethod
    def _find(sorted_values: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Position of each q in ``sorted_values``, -1 where absent."""
        if not len(sorted_values):
            return np.full(len(q), -1, np.int64)
        pos = np.minimum(np.searchsorted(sorted_values, q), len(sorted_values) - 1)
        return np.where(sorted_values[pos] == q, pos, -1)

    def of(self, columns: list[np.ndarray]) -> np.ndarray:
        """The code of each row given as (rank, pid, tid) arrays; -1 where the fitted table has no such thread."""
        key = np.zeros(len(columns[0]), np.int64)
        missing = np.zeros(len(key), dtype=bool)
        for (squeeze, lo, radix, uniq), col in zip(self._steps, columns):
            col = np.asarray(col, np.int64)
            if squeeze is not None:
                key = self._find(squeeze, key)
                missing |= key < 0
            code = self._find(uniq, col) if uniq is not None else col - lo
            missing |= (code < 0) | (code >= radix)
            if radix > 1:
                key = key * radix + code
        return np.where(missing, -1, key)


class Enclosing:
    """Ranges (one table's rows: thread, start, end) sorted once per thread, answering "the innermost range on
    the same thread containing [a, b)" for any number of query batches.

    "Innermost" = the latest-starting range with start <= a and end >= b (outer before inner at equal starts);
    properly nested ranges make that the deepest one. Several rules ask this of the same ranges (the host's
    framework ops): sorting them is the cost, so it is paid once (``cpu_op_enclosing``)."""

    def __init__(self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.threads = ThreadCodes([rank, pid, tid])
        key = self.threads.codes
        start = np.asarray(start, np.int64)
        end = np.asarray(end, np.int64)
        order, self.key, self.start = self._sort(key, start)
        self.order = order
        self.end = end[order]
        # rows sharing a (thread, start): outer (later end) first, as np.lexsort((-end, start, key)) orders them
        tie = (self.start[1:] == self.start[:-1]) & (self.key[1:] == self.key[:-1])
        if tie.any():
            members = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])  # positions of runs of equal keys
            sub = order[members]
            order[members] = sub[np.lexsort((-end[sub], start[sub], key[sub]))]
            self.end[members] = end[order[members]]

    @staticmethod
    def _sort(key: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stable order by (thread, start), and the keys and starts in that order.

        Host rows come in long blocks of one thread (a file's thread, or chunks of a few threads interleaved),
        each in start order: then the order is the blocks grouped by thread, a sort of the few blocks, and the
        rows need only be checked. Otherwise one stable sort of a combined int64 key (which exploits the nearly
        sorted runs there are)."""
        n = len(start)
        if not n:
            return np.zeros(0, np.int64), key[:0], start[:0]
        cut = np.flatnonzero(key[1:] != key[:-1]) + 1
        if len(cut) <= min(n // 64, 4096):
            heads, ends = np.r_[0, cut], np.r_[cut, n]
            if len(cut):  # a thread's blocks keep their order
                order = np.concatenate([np.arange(heads[b], ends[b]) for b in np.argsort(key[heads], kind="stable").tolist()])
                k, s = key[order], start[order]
            else:
                order, k, s = np.arange(n), key, start
            if bool(((s[1:] >= s[:-1]) | (k[1:] != k[:-1])).all()):
                return order, k, s
        s0 = int(start.min())
        span = int(start.max()) - s0 + 1
        if (int(key.max()) + 1) * span >= 2**62:
            order = np.lexsort((start, key))
        else:
            comp = key * span  # the combined key, built in place
            comp += start
            comp -= s0
            order = np.argsort(comp, kind="stable")
        return order, key[order], start[order]

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> "Enclosing":
        start = frame["start_ns"].to_numpy(np.int64)
        return cls(*(frame[c].to_numpy(np.int64) for c in ThreadCodes.COLUMNS), start, start + frame["dur_ns"].to_numpy(np.int64))

    def find(self, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per query: the position (in the table the ranges came from) of its innermost enclosing range, or -1."""
        out = np.full(len(start), -1, np.int64)
        if not len(start) or not len(self.key):
            return out
        qkey = self.threads.of([rank, pid, tid])
        qs = np.asarray(start, np.int64)
        qe = np.asarray(end, np.int64)
        qorder = np.argsort(qkey, kind="stable")
        qk = qkey[qorder]
        bounds = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:]):
            if qk[a] < 0:
                continue  # threads without ranges
            lo, hi = np.searchsorted(self.key, qk[a], side="left"), np.searchsorted(self.key, qk[a], side="right")
            if lo == hi:
                continue
            pos = qorder[a:b]
            h = np.searchsorted(self.start[lo:hi], qs[pos], side="right")
            idx = _rightmost_at_least(self.end[lo:hi], h, qe[pos])
            got = idx >= 0
            out[pos[got]] = self.order[lo + idx[got]]
        return out

    def find_frame(self, queries: pd.DataFrame) -> np.ndarray:
        """``find`` for the rows of a frame with rank, pid, tid, start_ns and dur_ns."""
        start = queries["start_ns"].to_numpy(np.int64)
        return self.find(*(queries[c].to_numpy(np.int64) for c in ThreadCodes.COLUMNS), start, start + queries["dur_ns"].to_numpy(np.int64))


def cpu_op_enclosing(views) -> tuple[np.ndarray, Enclosing]:
    """The host's framework ops (kind ``cpu_op``): their positions in ``views.host_events`` and an ``Enclosing``
    over them (positions it returns index the first array). Cached: TI002 and TI003 both ask which op a call
    ran in."""
    cached = views.__dict__.get("_cpu_op_enclosing")
    if cached is not None:
        return cached
    host = views.host_events
    m = kind_mask(host, "cpu_op")
    pos = np.flatnonzero(m)
    hc = host_columns(views)

    def thread_col(a: np.ndarray) -> np.ndarray:
        """The ops' values of a host column; one value for all of them (one rank, one process) is not copied
        into the key. (Reductions over the whole column, then over the ops' gathered values: a reduction with
        ``where=`` over the host rows costs ten times a plain one.)"""
        if len(pos) and a.dtype.kind == "i":
            lo = a.min()
            if lo == a.max():
                return np.broadcast_to(lo, len(pos))
            sub = a[pos]
            lo = sub.min()
            return np.broadcast_to(lo, len(pos)) if lo == sub.max() else sub
        return a[pos]

    ops = Enclosing(thread_col(hc["rank"]), thread_col(host["pid"].to_numpy()), thread_col(host["tid"].to_numpy()), hc["start_ns"][pos], hc["end_ns"][pos])
    out = (pos, ops)
    views.__dict__["_cpu_op_enclosing"] = out
    return out


def innermost_enclosing(queries: pd.DataFrame, candidates: pd.DataFrame) -> np.ndarray:
    """Row label in ``candidates`` of the innermost range on the same (rank, pid, tid) containing each query row.

    "Innermost" = the latest-starting candidate with start <= query start and end >= query end; properly nested
    ranges make that the deepest one. Returns an object array of labels (None where nothing encloses).
    """
    out = np.full(len(queries), None, dtype=object)
    pos = innermost_positions(queries, candidates)
    got = pos >= 0
    out[got] = candidates.index.to_numpy()[pos[got]]
    return out


def innermost_positions(queries: pd.DataFrame, candidates: pd.DataFrame) -> np.ndarray:
    """``innermost_enclosing`` as positions in ``candidates`` (-1 where nothing encloses): no labels boxed."""
    if queries.empty or candidates.empty:
        return np.full(len(queries), -1, np.int64)
    return Enclosing.of_frame(candidates).find_frame(queries)


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

#: Said where a trace has no Python frames, so the user knows how to get the line of their code next time.
RECORD_STACKS = "record with `torch.profiler.profile(..., with_stack=True)` to see the line of your code"


def user_frame(name: object) -> str | None:
    """``train.py:42 (train_step)`` for a Python frame of the user's own code (``path(line): func``, as kineto and
    the stack column write frames); None for library/interpreter frames and for names that are no frame."""
    if name is None or (isinstance(name, float) and name != name):
        return None
    m = _FRAME.match(str(name).strip())
    if not m or _NOT_USER.search(m["file"].replace("\\", "/")):
        return None
    file = m["file"].replace("\\", "/").rsplit("/", 1)[-1]
    func = m["func"].strip()
    return f"{file}:{m['line']}" + (f" ({func})" if func else "")


def innermost_user_frame(stack: object) -> str | None:
    """The innermost user frame of a ``stack`` cell (" <- " separated, innermost last)."""
    if stack is None or (isinstance(stack, float) and stack != stack):
        return None
    for part in reversed(str(stack).split(" <- ")):
        site = user_frame(part)
        if site:
            return site
    return None


def user_frames_at(queries: pd.DataFrame, events: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Per query row the innermost enclosing user frame (``file.py:line (func)``), or None: from the ``stack``
    column where the trace has one, else from the Python frame rows (``with_stack=True`` traces)."""
    out = np.full(len(queries), None, dtype=object)
    if queries.empty:
        return out
    if "stack" in events and "stack" in queries:
        own = queries["stack"].astype(object).to_numpy()
        out[:] = [innermost_user_frame(x) for x in own]
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
    user[seen] = [user_frame(cats[c]) is not None for c in seen]
    # only the columns innermost_enclosing reads, and only the user frames' rows
    py = host[["rank", "pid", "tid", "start_ns", "dur_ns"]].iloc[pos[(codes >= 0) & user[np.maximum(codes, 0)]]]
    enc = innermost_enclosing(queries, py)
    found = lookup(events["name"], enc)
    missing = pd.isna(out)
    out[missing] = [user_frame(x) for x in found[missing]]
    return out


def user_code_sentence(frames: np.ndarray, ctx, lead: str) -> str:
    """" <lead> `train.py:42 (step)`." for the most frequent user frame; the with_stack hint on PyTorch traces
    without Python frames; "" otherwise (no user frame found although stacks were recorded, or another format)."""
    known = pd.Series(frames, dtype=object).dropna()
    if len(known):
        top = known.value_counts()
        more = f" ({len(top) - 1} other line(s) too)" if len(top) > 1 else ""
        return f" {lead} `{top.index[0]}`{more}."
    if ctx.meta.source_format == "pytorch" and not has_python_frames(ctx.events):
        return f" The trace has no Python stacks: {RECORD_STACKS}."
    return ""


def has_python_frames(events: pd.DataFrame) -> bool:
    return bool((events["kind"] == "python").any()) or ("stack" in events and events["stack"].notna().any())


def lookup(series: pd.Series, labels: np.ndarray) -> np.ndarray:
    """``series[label]`` for each label (None -> None), in one reindex."""
    labels = np.asarray(labels, dtype=object)
    valid = ~pd.isna(labels)
    out = np.full(len(labels), None, dtype=object)
    if valid.any():
        out[valid] = series.reindex(labels[valid].astype(np.int64)).astype(object).to_numpy()
    return out

# --- input pipeline (TI005) ------------------------------------------------------------------------------
# --- GEMM / convolution kernels (TI007) ----------------------------------------------------------------
#: Kernels doing matrix-multiply or convolution work (cuBLAS, cuBLASLt, cuDNN, CUTLASS, xmma, Hopper nvjet).
GEMM_CONV = (
    r"gemm|gemv|conv(?!ert|ersion)|cutlass::Kernel|cutlass::gemm|cutlass_|cutlass3x|xmma|nvjet|wgmma|hmma|scudnn|hcudnn|"
    r"wgrad|dgrad|winograd|implicit_|cublas|magma|matmul|^bmm_|\bsm[89]\d_|h884|s884|h1688|s1688|i8816|16816|16832"
)
#: Library namespaces whose names contain "gemm" but whose kernels are not GEMMs (FBGEMM's sparse/permute ops).
NOT_GEMM = r"fbgemm_gpu::"
#: Tensor-core kernel names: tb_plugin tensor_core.py TC_Allowlist and xprof kernel_stats_utils.cc, extended with
#: CUTLASS ``tensorop``, Hopper ``wgmma``/``gmma``/``nvjet``, cuBLASLt ``sm80_``/``sm90_`` and explicit tf32/bf16/f16 tags.
TENSOR_CORE = (
    r"h884|s884|h1688|s1688|c1688|hmma|i8816|16816|i16832|xmma|tensorop|wgmma|gmma|nvjet|\bsm[89]\d_|"
    r"tf32|bf16|bfloat16|f16f16|_fp16|_f16_|imma|e4m3|e5m2|e2m1|fp8|conv1x1|conv2d_c1_k1|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel"
)
#: Names that mean CUDA cores even when a TC substring also matches (e.g. ``cutlass_80_simt_sgemm``).
NOT_TENSOR_CORE = r"simt|sgemm|gemv|scudnn|cgemm|wgrad_alg0|dgrad_engine|gemmSN|gemmk1"
#: FP64 math is not helped by AMP or TF32; left out of the share entirely.
FP64 = r"dgemm|zgemm|\bd_?gemm|double"

# --- collectives (TI008, TI009) ------------------------------------------------------------------------
NCCL = r"nccl|rccl"

#: NVIDIA GPUs before Volta (compute capability < 7): no tensor cores.
PRE_VOLTA = r"\b(?:[KMP]\d{1,3}\b|GP100|GP10\d|GTX\s*(?:9|10)\d\d|TITAN\s*X|Tesla\s*[KMP]|Quadro\s*[KMP]\d)"
#: NVIDIA GPUs with tensor cores, by marketing name (used only when compute capability is absent).
TENSOR_CORE_GPU = (
    r"V100|TITAN\s*V|T4\b|RTX|A\d{2,4}\b|A100|A800|H100|H200|H800|GH200|B100|B200|GB200|GB300|B300|L4\b|L40|"
    r"Quadro\s*(?:RTX|GV100)|GV100|Jetson\s*(?:AGX\s*)?(?:Xavier|Orin)"
)
NON_NVIDIA = r"AMD|Radeon|Instinct|\bMI\d{3}|Intel|Gaudi|TPU"
#: Kernel names that exist only for Volta or newer NVIDIA architectures (cuBLAS/cuDNN/CUTLASS arch tags): a
#: trace without device properties that runs them ran on a GPU with tensor cores.
VOLTA_PLUS_KERNEL = r"\b(volta|turing|ampere|hopper|blackwell)_|\bsm_?(7[05]|8\d|9\d|1[0-2]\d)_|cutlass_(7[05]|8\d|9\d)_|xmma|nvjet"


def matches(text: str | None, pattern: str) -> bool:
    return bool(text) and re.search(pattern, str(text), flags=re.IGNORECASE) is not None


def grid_blocks(grid: pd.Series) -> np.ndarray:
    """Blocks per launch from the ``grid`` column ("x,y,z"); NaN where the source gave none."""
    if len(grid) == 0:
        return np.zeros(0, dtype=float)
    if isinstance(grid.dtype, pd.CategoricalDtype):
        cats = pd.Series(grid.cat.categories.astype(str))
        parts = cats.str.extract(r"^\s*\[?\s*(\d+)\s*[, x]\s*(\d+)\s*[, x]\s*(\d+)")
        prod = parts.astype(float).prod(axis=1, min_count=3).to_numpy()
        codes = grid.cat.codes.to_numpy()
        out = np.full(len(grid), np.nan)
        ok = codes >= 0
        out[ok] = prod[codes[ok]]
        return out
    parts = grid.astype(str).str.extract(r"^\s*\[?\s*(\d+)\s*[, x]\s*(\d+)\s*[, x]\s*(\d+)")
    return parts.astype(float).prod(axis=1, min_count=3).to_numpy()


# --- warm-up: the time ledger is its one home (``idle_warmup``); TI001 leaves it out, TI013 reports it ----------
#: Host calls and ranges that do start-up work: one home, the steady-state model (``traceinsight.steady``).
INIT_CALL = START_UP_CALL


def warmup_by_gap(views) -> pd.DataFrame:
    """The gaps (rows of ``views.gaps``) in which the ledger booked warm-up: rank, device, start_ns, end_ns, dur_ns,
    warmup_ns, window_ns, and ``why``: the ledger's warm-up regions of the rank that cover the gap most (innermost
    first among equals), up to three. Cached: TI013 reads it, TI001 leaves the same ns out."""
    cached = views.__dict__.get("_warmup_by_gap")
    if cached is not None:
        return cached
    gaps = views.gaps
    warm = gap_warmup_ns(views)
    m = warm > 0
    g = gaps.loc[m, ["rank", "device", "start_ns", "end_ns", "dur_ns"]].assign(warmup_ns=warm[m])
    win = _device_windows(views, g["rank"].to_numpy(), g["device"].to_numpy())
    if win is not None:
        g = g.assign(window_ns=win)
    else:
        g = g.merge(views.utilization[["rank", "device", "window_ns"]], on=["rank", "device"], how="left")
    regions = views.ledger.warmup
    why = []
    for row in g.itertuples(index=False):
        r = regions[regions["rank"].to_numpy() == row.rank] if len(regions) else regions
        if not len(r):
            why.append("")
            continue
        s, e = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
        ov = np.minimum(e, row.end_ns) - np.maximum(s, row.start_ns)
        k = np.flatnonzero(ov > 0)
        k = k[np.lexsort(((e - s)[k], -ov[k]))][:3]
        why.append("; ".join(short_name(str(x), 60) for x in r["reason"].to_numpy()[k]))
    out = g.assign(why=why).reset_index(drop=True)
    views.__dict__["_warmup_by_gap"] = out
    return out


def _device_windows(views, rank: np.ndarray, device: np.ndarray) -> np.ndarray | None:
    """The active window (``views.utilization``'s window_ns) of each row's (rank, device), or None when a row's
    device has none (the caller then merges, to keep what a merge does with such rows)."""
    util = views.utilization
    if not len(rank):
        return np.zeros(0, np.int64) if len(util) else None
    u_rank, u_dev, u_win = util["rank"].to_numpy(), util["device"].to_numpy(), util["window_ns"].to_numpy()
    if len(util) == 1:
        one = (rank == u_rank[0]) & (device == u_dev[0])
        return np.full(len(rank), u_win[0]) if one.all() else None
    codes = ThreadCodes([u_rank, u_dev])
    order = np.argsort(codes.codes, kind="stable")
    keys = codes.codes[order]
    q = codes.of([rank, device])
    pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    if not bool(((q >= 0) & (keys[pos] == q)).all()):
        return None
    return u_win[order][pos]


def startup_call_gaps(views, *, min_share_pct: float = 5.0) -> pd.DataFrame:
    """Idle gaps at the head of each device's window that hold named one-off start-up calls (``INIT_CALL``) and
    are at least ``min_share_pct`` of the window, with the ledger's warm-up ns inside each.

    This is evidence about the recording, not a second account of time: the ledger books a span as warm-up only
    when it can measure it against a later repetition (a first call or step far slower than the ones after it),
    and a start-up call that happens once (a JIT compile, a module load) has nothing to compare with. TI013 names
    such gaps so the reader knows the window starts with start-up, and says their time stays in the idle figures.
    The head of a device's run ends at the rank's second step, or without steps at a tenth of its GPU operations.
    Columns: rank, device, start_ns, end_ns, dur_ns, window_ns, warmup_ns, init_calls.
    """
    key = float(min_share_pct)
    cache = views.__dict__.setdefault("_startup_call_gaps", {})
    if key in cache:
        return cache[key]
    cols = ["rank", "device", "start_ns", "end_ns", "dur_ns", "window_ns", "warmup_ns", "init_calls"]
    empty = pd.DataFrame({c: [] for c in cols})
    gaps = views.gaps
    util = views.utilization
    if gaps.empty or util.empty:
        cache[key] = empty
        return empty
    win = _device_windows(views, gaps["rank"].to_numpy(), gaps["device"].to_numpy())
    if win is not None:  # the few gaps long enough are chosen on arrays; only they become rows
        pick = np.flatnonzero(gaps["dur_ns"].to_numpy() >= min_share_pct / 100.0 * win)
        g = gaps.iloc[pick].assign(warmup_ns=gap_warmup_ns(views)[pick], window_ns=win[pick])
    else:
        g = gaps.assign(warmup_ns=gap_warmup_ns(views)).merge(util[["rank", "device", "window_ns"]], on=["rank", "device"])
        g = g[g["dur_ns"].to_numpy() >= min_share_pct / 100.0 * g["window_ns"].to_numpy()]
    if g.empty:
        cache[key] = empty
        return empty
    act = views.gpu_activity[["rank", "device", "start_ns"]]  # the groups below copy only what they use
    head_end = {}
    steps = views.steps
    for (rank, device), a in act.groupby(["rank", "device"], observed=True, sort=False):
        st = steps[steps["rank"] == rank]["start_ns"].sort_values().to_numpy() if not steps.empty else np.zeros(0)
        starts = np.sort(a["start_ns"].to_numpy())
        if len(st) >= 2:
            head_end[(int(rank), int(device))] = int(st[1])
        else:
            head_end[(int(rank), int(device))] = int(starts[min(len(starts) - 1, max(len(starts) // 10, 1))])
    he = np.array([head_end.get((int(r), int(d)), -1) for r, d in zip(g["rank"], g["device"])], dtype=np.int64)
    g = g[g["end_ns"].to_numpy() <= he]
    if g.empty:
        cache[key] = empty
        return empty
    host = views.host_events
    m = kind_mask(host, ("runtime", "cpu_op", "annotation", "python", "other")) & name_mask(host["name"], INIT_CALL)
    init = host[["rank", "name", "start_ns", "dur_ns"]].iloc[np.flatnonzero(m)]  # only the start-up calls' rows
    calls = []
    for row in g.itertuples(index=False):
        m = (init["rank"].to_numpy() == row.rank) & (init["start_ns"].to_numpy() < row.end_ns) & ((init["start_ns"] + init["dur_ns"]).to_numpy() > row.start_ns)
        names = init.loc[m, "name"].astype(str).value_counts()
        calls.append(", ".join(f"{short_name(n, 40)} ×{c}" for n, c in names.head(3).items()))
    g = g.assign(init_calls=calls)
    out = g[(g["init_calls"] != "").to_numpy()][cols].reset_index(drop=True)
    cache[key] = out
    return out


# --- inference requests (TI001, TI002) ------------------------------------------------------------------------
#: Host ops that exist only when a backward pass runs: their absence makes a rank an inference run.
TRAINING_OP = r"backward|Backward|autograd::engine|Optimizer\.step|optimizer\.step|apply_gradients|ResourceApply|gradient_tape|SGD|Adam"


def inference_ranks(views) -> frozenset[int]:
    """The ranks that run inference (or a benchmark of it): no backward pass or optimizer step on the rank's host.

    All ranks at once, one name test per distinct name, no per-rank copy of the host rows; a rank without host
    rows is not called inference. Cached on the views."""
    cached = views.__dict__.get("_inference_ranks")
    if cached is not None:
        return cached
    host = views.host_events
    rank = host["rank"].to_numpy()
    if len(rank) and rank.min() == rank.max():  # one rank (one file): is any training op on its host at all
        names = host["name"]
        if isinstance(names.dtype, pd.CategoricalDtype):
            hit = _hits_per_category(names, lambda m: m(TRAINING_OP, case=True))
            any_training = _any_code_in(names.cat.codes.to_numpy(), hit)
        else:
            any_training = bool(name_mask(names, TRAINING_OP, case=True).any())
        out = frozenset() if any_training else frozenset({int(rank[0])})
    else:
        training = names_where(host["name"], lambda m: m(TRAINING_OP, case=True))
        out = frozenset(int(r) for r in pd.unique(rank)) - frozenset(int(r) for r in pd.unique(rank[training]))
    views.__dict__["_inference_ranks"] = out
    return out


def host_columns(views) -> dict[str, np.ndarray]:
    """The host rows' rank, start, end and kind as plain arrays (cached): masks are built on these and only the
    selected rows' few columns are taken, never a row selection of the wide host frame."""
    cached = views.__dict__.get("_host_columns")
    if cached is not None:
        return cached
    host = views.host_events
    start = host["start_ns"].to_numpy()
    out = {"rank": host["rank"].to_numpy(), "start_ns": start, "dur_ns": host["dur_ns"].to_numpy(), "end_ns": start + host["dur_ns"].to_numpy()}
    views.__dict__["_host_columns"] = out
    return out


def kind_mask(frame: pd.DataFrame, kinds: "str | tuple[str, ...]") -> np.ndarray:
    """Rows of ``frame`` whose kind is one of ``kinds`` (``views.kind_mask`` on its kind column)."""
    return views_kind_mask(frame["kind"], (kinds,) if isinstance(kinds, str) else tuple(kinds))


def _any_code_in(codes: np.ndarray, hit: np.ndarray) -> bool:
    """Does any row carry a code that ``hit`` marks? Code by code for the first few, stopping at the first
    present (a training trace names a backward op within the first few), then all the others at once."""
    wanted = np.flatnonzero(hit)
    tmp = np.empty(len(codes), dtype=bool)
    for c in wanted[:16].tolist():
        np.equal(codes, c, out=tmp)
        if tmp.any():
            return True
    if len(wanted) <= 16:
        return False
    rest = np.array(hit, dtype=bool)
    rest[wanted[:16]] = False
    return bool(codes_in(codes, rest).any())


def names_where(names: pd.Series, test) -> np.ndarray:
    """Rows whose name passes ``test(match)``, where ``match(pattern, case=False)`` answers as ``name_mask`` does
    and ``test`` combines such answers (``match(A) & ~match(B)``). On a categorical column the test runs on one row
    per category and the rows are compared on their codes: one pass over the rows, not one per pattern."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        return codes_in(names.cat.codes.to_numpy(), _hits_per_category(names, test))
    return np.asarray(test(lambda p, case=False: name_mask(names, p, case=case)), dtype=bool)


def _hits_per_category(names: pd.Series, test) -> np.ndarray:
    """``names_where``'s test once per category of a categorical name column (a bool per category)."""
    # a column of the categories themselves, sharing the dtype (so name_mask's per-category cache applies)
    per_cat = pd.Series(pd.Categorical.from_codes(np.arange(len(names.cat.categories)), dtype=names.dtype))
    return np.asarray(test(lambda p, case=False: name_mask(per_cat, p, case=case)), dtype=bool)


def count_matching(names: pd.Series, rows: np.ndarray, pattern: "str | re.Pattern[str]", case: bool = False) -> int:
    """How many of the ``rows`` (a mask) have a name matching ``pattern`` (``name_mask``'s rules): one test per
    distinct name and one count per name code, no mask over every row."""
    if not rows.any():
        return 0
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return int((rows & name_mask(names, pattern, case=case)).sum())
    cats = names.cat.categories
    codes = names.cat.codes.to_numpy()
    counts = np.bincount(codes[rows & (codes >= 0)], minlength=len(cats))
    seen = np.flatnonzero(counts)
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, 0 if case else re.IGNORECASE)
    return int(sum(int(counts[i]) for i in seen if rx.search(str(cats[i])) is not None))


def sync_calls(views) -> pd.DataFrame:
    """The blocking runtime calls (``SYNC_CALL``) of the host: rank, start_ns, dur_ns, end_ns (cached)."""
    cached = views.__dict__.get("_sync_calls")
    if cached is not None:
        return cached
    host = views.host_events
    m = kind_mask(host, "runtime")
    if m.any():
        m &= names_where(host["name"], lambda m: m(SYNC_CALL))
    hc = host_columns(views)
    out = pd.DataFrame({c: hc[c][m] for c in ("rank", "start_ns", "dur_ns", "end_ns")})
    views.__dict__["_sync_calls"] = out
    return out


def ledger_gaps(views) -> pd.DataFrame:
    """The ledger's gaps (next launch, ns per idle bucket, cause) row for row with ``views.gaps`` (same index).

    Both cut each device's window the same way, so the frames normally agree row for row and this is the
    ledger's frame as is; otherwise the rows are matched on (rank, device, start_ns, end_ns). Cached.
    """
    cached = views.__dict__.get("_ledger_gaps")
    if cached is not None:
        return cached
    gaps = views.gaps
    lg = views.ledger.gaps
    keys = ["rank", "device", "start_ns", "end_ns"]
    if len(lg) == len(gaps) and all(np.array_equal(lg[c].to_numpy(np.int64), gaps[c].to_numpy(np.int64)) for c in keys):
        out = lg.set_axis(gaps.index)
    else:
        out = gaps[keys].merge(lg.drop_duplicates(keys), on=keys, how="left").set_axis(gaps.index)
    views.__dict__["_ledger_gaps"] = out
    return out


def gap_warmup_ns(views) -> np.ndarray:
    """Per row of ``views.gaps``: the ns the ledger books as warm-up (``idle_warmup``) inside the gap. The ledger is
    warm-up's one home: TI001 leaves these ns out of its idle, TI013 reports them, the verdict sets them aside."""
    lg = ledger_gaps(views)
    if "idle_warmup" not in lg:
        return np.zeros(len(lg), np.int64)
    return lg["idle_warmup"].fillna(0).to_numpy(np.int64)


def closing_syncs(stalls: pd.DataFrame, steps: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """Stalls that close their step: no GPU work is launched by the rank after the call and before the step ends.

    In an inference loop such a sync hands the request's result to the caller (or ends a latency measurement);
    it is the request's completion, not a stall the step could avoid.
    """
    out = np.zeros(len(stalls), dtype=bool)
    if stalls.empty or steps.empty:
        return out
    st = steps[["rank", "start_ns", "end_ns"]].sort_values("start_ns")
    q = pd.DataFrame({"rank": stalls["rank"].to_numpy().astype(np.int64), "t": stalls["end_ns"].to_numpy(), "pos": np.arange(len(stalls))})
    m = pd.merge_asof(q.sort_values("t"), st.assign(rank=st["rank"].astype(np.int64)), left_on="t", right_on="start_ns", by="rank", direction="backward")
    m = m[m["end_ns"].notna().to_numpy() & (m["t"].to_numpy() <= m["end_ns"].to_numpy(dtype=float))]
    if m.empty:
        return out
    if launches.empty:
        out[m["pos"].to_numpy()] = True
        return out
    closing = np.ones(len(m), dtype=bool)
    for rank, g in m.groupby("rank", sort=False):
        ls = np.sort(launches.loc[launches["rank"].to_numpy() == rank, "launch_start_ns"].to_numpy())
        after = np.searchsorted(ls, g["end_ns"].to_numpy(dtype=np.int64)) - np.searchsorted(ls, g["t"].to_numpy(), side="right")
        closing[np.flatnonzero((m["rank"] == rank).to_numpy())] = after == 0
    out[m["pos"].to_numpy()[closing]] = True
    return out


def request_boundary_gaps(views, gaps: pd.DataFrame) -> np.ndarray:
    """Gaps that begin inside a sync closing an inference step: the idle between two requests of an inference
    loop (each request's sync hands its result back), which lengthens no request."""
    out = np.zeros(len(gaps), dtype=bool)
    if gaps.empty or views.steps.empty:
        return out
    ranks = inference_ranks(views)
    if not ranks:  # a training run: no request boundaries (and no need to find its syncs here)
        return out
    calls = sync_calls(views)
    if calls.empty:
        return out
    calls = calls[np.isin(calls["rank"].to_numpy(), np.fromiter(ranks, dtype=np.int64))]
    if calls.empty:
        return out
    return starts_inside(gaps, calls[closing_syncs(calls, views.steps, views.launches)])


def starts_inside(rows: pd.DataFrame, intervals: pd.DataFrame) -> np.ndarray:
    """For each row (rank, start_ns): does it start inside one of ``intervals`` (rank, start_ns, dur_ns) of the same
    rank, end included? (A gap that opens while the host is blocked in a call belongs to that call.)"""
    out = np.zeros(len(rows), dtype=bool)
    if rows.empty or intervals.empty:
        return out
    r_rank = rows["rank"].to_numpy()
    r_start = rows["start_ns"].to_numpy(dtype=np.int64)
    i_rank = intervals["rank"].to_numpy()
    # one rank (one file): no grouping of the intervals, and no selection of the rows when they share it
    per_rank = [(i_rank[0], intervals)] if i_rank.min() == i_rank.max() else intervals.groupby("rank", sort=False, observed=True)
    for rank, c in per_rank:
        m = r_rank == rank
        every = bool(m.all())
        if not every and not m.any():
            continue
        cs = c["start_ns"].to_numpy(dtype=np.int64)
        ms, me = merge_intervals(cs, cs + c["dur_ns"].to_numpy(dtype=np.int64))
        rs = r_start if every else r_start[m]
        j = np.searchsorted(ms, rs, side="right") - 1
        inside = (j >= 0) & (rs <= me[np.clip(j, 0, None)])
        if every:
            out[:] = inside
        else:
            out[np.flatnonzero(m)] = inside
    return out
