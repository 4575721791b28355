"""TI008: kernels launch fewer blocks than the GPU has SMs, so part of the chip idles while they run."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Context, Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.vocab.masks import name_mask, texts_at
from traceinsight.vocab.patterns import COLLECTIVE
from traceinsight.rulelib.groups import descending_order, group_float_sums
from traceinsight.rulelib.names import grid_blocks, pair_codes


class SmallGrids(Rule):
    code = "TI008"
    category = "compute"
    name = "small-grids"
    severity = Severity.WARNING
    summary = "Much of the kernel time is in launches with fewer thread blocks than the GPU has SMs (batch too small)."
    why = """
    A block runs on one streaming multiprocessor. A kernel with fewer blocks than the device has SMs leaves the
    rest of the SMs empty for its whole duration (unless another stream fills them), so the GPU looks "busy" in
    a timeline while most of it does nothing. When this is most of the kernel time, the work per launch is too
    small: usually the batch (or sequence/tile) size, sometimes a model made of many narrow layers.
    """
    definition = """
    For each kernel with a ``grid`` (x,y,z; kineto and Nsight Systems record it), **blocks** = x·y·z; the
    device's SM count comes from ``meta.devices`` (kineto ``numSms``, nsys ``TARGET_INFO_GPU``). Collective kernels (NCCL/RCCL, ``multimem``/``all_reduce``…) are
    left out (they use few blocks by design). A launch is **under-filled** when blocks < SMs x ``min_waves``
    (``min_waves`` = 1).

    **Share** = under-filled kernel time / kernel time with grid info, per (rank, device). Reported when share
    >= ``min_share_pct`` = **30 %** and the under-filled time is >= ``min_time_us`` = **500 µs**. tb_plugin shows
    the same signal as "Est. SM Efficiency" = Σ min(blocks/SMs, 1)·dur / step time without a threshold; 30 %
    means "a third of the GPU time runs on part of the chip".

    **Impact** = Σ alone x (1 - blocks/SMs) over under-filled launches, where *alone* is the part of the launch
    during which no other kernel runs on its device: the SM-time left empty (the time saved if the same work filled
    the device). While another kernel runs beside it (a communication kernel given a few SMs by design, beside
    the GEMMs), the SMs it leaves are not empty, so that time costs nothing and is not priced.
    Graded on the common scale, but at most ``max_severity`` = **info** by default: modelled headroom, not time
    the GPU lost.
    Skipped silently when the trace has no grid column or no SM count.
    """
    fix_pytorch = Fix(
        "Give each kernel more parallel work: raise the batch size (scale the learning rate, or use gradient "
        "accumulation only if memory is the limit — accumulation keeps the small per-kernel batch), fuse small "
        "ops with `torch.compile`, and for inference with fixed shapes replay the step as a CUDA graph so launch "
        "overhead does not dominate either.",
        """
        loader = DataLoader(ds, batch_size=512)               # was 32: kernels had < 1 block per SM
        model = torch.compile(model, mode="max-autotune")    # fuses narrow ops, picks better tile sizes
        # inference with static shapes:
        model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs
        """,
    )
    fix_tensorflow = Fix(
        "Raise the global batch size (scale the learning rate), let XLA fuse the small ops, and keep per-replica "
        "batches large when using tf.distribute.",
        """
        ds = ds.batch(512, drop_remainder=True).prefetch(tf.data.AUTOTUNE)   # was 32
        model.compile(optimizer=opt, loss=loss, jit_compile=True)            # XLA fusion
        """,
    )
    fix_jax = Fix(
        "Give each kernel more parallel work: raise the batch size (scale the learning rate), vectorise independent "
        'work with `jax.vmap`, and keep the step in one `jax.jit` so XLA fuses the small ops.',
        """
        per_example = jax.vmap(loss_fn, in_axes=(None, 0))    # one launch over the batch
        train_step = jax.jit(train_step)
        """,
    )

    fix_cuda = Fix(
        "Launch at least a few blocks per SM: size the grid from the problem and the SM count "
        "(`cudaOccupancyMaxPotentialBlockSize` picks the block size), batch independent small problems into one "
        "launch, or run independent small kernels on separate streams so they share the GPU.",
        """
        int minGrid = 0, block = 0;
        cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, kernel, 0, 0);
        int grid = (n + block - 1) / block;          // was: a fixed handful of blocks
        kernel<<<grid, block, 0, stream>>>(d_x, n);
        """,
    )

    min_share_pct = Option(30.0, "Report when under-filled launches take at least this % of kernel time.", max=100)
    min_time_us = Option(500.0, "...and at least this much time in total (µs).")
    min_waves = Option(1.0, "A launch is under-filled below SMs x this many blocks.", above=0)

    max_severity = Option("info", "Highest severity on the common scale: modelled headroom (empty SM time, an upper bound), not time the GPU lost; the compute verdict names it. Set to warning to gate on it.", choices=("info", "warning", "error"))

    def check(self, ctx: Context):
        k = ctx.views.kernels
        if k.empty or "grid" not in k.columns:
            return
        sms = {(int(d.rank), int(d.index)): int(d.sm_count) for d in ctx.meta.devices if d.sm_count}
        if not sms:
            return
        # on arrays of the kernels: the rows kept are chosen on masks, and only their values are taken
        blocks = grid_blocks(k["grid"])
        sel = ~np.isnan(blocks)
        if not sel.any():
            return
        names = k["name"]
        sel &= ~name_mask(names, COLLECTIVE)
        if not sel.any():
            return
        v = ctx.views
        pos = np.flatnonzero(sel)
        rank, device, blocks = v.array("kernels", "rank")[pos], v.array("kernels", "device")[pos], blocks[pos]
        uniform = len(set(sms.values())) == 1
        fallback = next(iter(sms.values())) if uniform else np.nan
        sm = _map_sms(rank, device, sms, fallback)
        known = ~np.isnan(sm)
        if not known.any():
            return
        if not known.all():
            pos, rank, device, blocks, sm = pos[known], rank[known], device[known], blocks[known], sm[known]
        dur = v.array("kernels", "dur_ns")[pos].astype(float)
        under = blocks < sm * float(ctx.options["min_waves"])
        alone = _alone_ns(v, pos)
        lost = np.where(under, alone * (1.0 - np.minimum(blocks / sm, 1.0)), 0.0)
        # per (rank, device), grouped on one code per row (sorted pairs): the groupby's own float sums, without
        # factorizing two key columns
        pairs, code = pair_codes(rank, device)
        kernel_ns, under_ns, lost_ns = group_float_sums(code, (dur, np.where(under, dur, 0.0), lost))
        # the test on arrays (a Series operation costs a tenth of a millisecond on a few rows); the rest only for a hit
        share_pct = 100.0 * under_ns / np.maximum(kernel_ns, 1)
        is_hit = (share_pct >= ctx.options["min_share_pct"]) & (under_ns >= ctx.options["min_time_us"] * 1e3)
        if not is_hit.any():
            return
        first = np.unique(code, return_index=True)[1]
        h = np.flatnonzero(is_hit)
        h_rank, h_dev = pairs[h, 0].astype(rank.dtype), pairs[h, 1].astype(device.dtype)
        h_sms, h_share = sm[first][h], share_pct[h]
        keys = h_rank.astype(np.int64) * 1_000_003 + h_dev.astype(np.int64)
        kkey = rank.astype(np.int64) * 1_000_003 + device.astype(np.int64)
        m = np.isin(kkey, keys) & under
        ev = top_kernels(texts_at(names, pos[m]), blocks[m], dur[m], 20)
        lost_total = float(lost_ns[h].sum())
        impact = int(lost_total)
        under_ns = float(under_ns[h].sum())
        kern_ns = float(kernel_ns[h].sum())
        share = 100.0 * under_ns / max(kern_ns, 1.0)
        sm_list = np.unique(h_sms).tolist()  # sorted, distinct
        sm_txt = "/".join(str(int(x)) for x in sm_list)
        where = (
            f"rank {int(h_rank[0])} device {int(h_dev[0])}" if len(h) == 1 else f"{len(h)} of {len(pairs)} GPUs"
        )
        yield ctx.finding(
            title=f"{share:.0f}% of kernel time in launches smaller than the GPU ({sm_txt} SMs)",
            message=(
                f"On {where}, {fmt_ns(under_ns)} of {fmt_ns(kern_ns)} kernel time ({share:.1f}%) is in launches with fewer "
                f"blocks than the GPU has SMs ({sm_txt}); about {fmt_ns(impact)} of SM time stayed empty while no other "
                f"kernel ran beside them "
                f"(top: `{ev['name'].iat[0][:120]}`, median {ev['median_blocks'].iat[0]:g} blocks). "
                f"The work per launch (often the batch size) is too small for this GPU."
            ),
            impact_ns=impact,
            evidence=ev,
            location=Location(rank=int(h_rank[0]), device=int(h_dev[0])) if len(h) == 1 else Location(),
            metrics={
                "share_pct": round(share, 3),
                "underfilled_ns": int(under_ns),
                "kernel_ns_with_grid": int(kern_ns),
                "empty_sm_time_ns": impact,
                "sm_count": [int(x) for x in sm_list],
                "devices": int(len(h)),
                "per_device_share_pct": {f"{int(r)}:{int(d)}": round(float(v), 3) for r, d, v in zip(h_rank.tolist(), h_dev.tolist(), h_share.tolist())},
                "est_sm_efficiency_pct": round(100.0 * (1.0 - lost_total / max(kern_ns, 1.0)), 3),
            },
            key="small-grids",
        )


def per_kernel(names: np.ndarray, blocks: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """name, count, total_ms (still ns here), median_blocks per kernel name, names sorted: what
    ``groupby("name").agg(count=..., total_ms=("dur", "sum"), median_blocks=("blocks", "median"))`` gives, on
    arrays (the sums are of whole ns, exact in either order; a median is the middle value or the mean of the two)."""
    uniq, count, total, median = _per_kernel_arrays(names, blocks, dur)
    return pd.DataFrame({"name": pd.Index(uniq), "count": count, "total_ms": total, "median_blocks": median})


def _per_kernel_arrays(names: np.ndarray, blocks: np.ndarray, dur: np.ndarray):
    uniq, group = np.unique(names, return_inverse=True)
    count = np.bincount(group, minlength=len(uniq)).astype(np.int64)
    total = np.zeros(len(uniq))
    np.add.at(total, group, dur)
    order = np.lexsort((blocks, group))
    b = blocks[order]
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    median = (b[start + (count - 1) // 2] + b[start + count // 2]) / 2
    return uniq, count, total, median


def top_kernels(names: np.ndarray, blocks: np.ndarray, dur: np.ndarray, n: int) -> pd.DataFrame:
    """The evidence: ``per_kernel(...).sort_values("total_ms", ascending=False).head(n).reset_index(drop=True)``
    with total_ms in ms, one frame built from the arrays. The order is pandas' own for a descending sort of one
    column (``descending_order``), so ties come out as the frame's sort gave them."""
    uniq, count, total, median = _per_kernel_arrays(names, blocks, dur)
    if np.isnan(total).any():  # NaN totals are placed by pandas' own rules
        ev = per_kernel(names, blocks, dur).sort_values("total_ms", ascending=False).head(n).reset_index(drop=True)
        ev["total_ms"] = ev["total_ms"] / 1e6
        return ev
    order = descending_order(total)[:n]
    return pd.DataFrame({"name": pd.Index(uniq[order]), "count": count[order], "total_ms": total[order] / 1e6, "median_blocks": median[order]})


def _alone_ns(v, pos: np.ndarray) -> np.ndarray:
    """For the kernels at ``pos``: the ns of each during which it is the only kernel running on its (rank, device),
    from the device's concurrency count over time (one sweep per device, then a lookup per kernel)."""
    rank_all, dev_all = v.array("kernels", "rank").astype(np.int64), v.array("kernels", "device").astype(np.int64)
    start_all = v.array("kernels", "start_ns").astype(np.int64)
    end_all = start_all + v.array("kernels", "dur_ns").astype(np.int64)
    out = np.zeros(len(pos))
    key_all = rank_all * 1_000_003 + dev_all
    key = key_all[pos]
    one_device = len(key_all) > 0 and key_all.min() == key_all.max()
    for k in np.unique(key):
        on = np.flatnonzero(key_all == k) if not one_device else None
        s, e = (start_all, end_all) if on is None else (start_all[on], end_all[on])
        n = len(s)
        # the kernels' ends, then their starts, in time order (stable): at a tie an end comes before a start, so
        # touching kernels do not overlap
        t = np.concatenate([e, s])
        order = np.argsort(t, kind="stable")
        t = t[order]
        running = np.cumsum(np.where(order >= n, 1, -1))
        seg = np.diff(t).astype(float) * (running[:-1] == 1)  # [t[i], t[i+1]) runs exactly one kernel
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        # each kernel's own start and end are instants of ``t``: the alone time before an instant is ``cum`` at
        # its place in the order (instants that tie add nothing between them, so any of their places gives it)
        at = np.empty(2 * n, np.intp)
        at[order] = np.arange(2 * n)
        mine = np.flatnonzero(key == k)
        row = pos[mine] if on is None else np.searchsorted(on, pos[mine])  # the kernel's row among this device's
        out[mine] = np.maximum(cum[at[row]] - cum[at[n + row]], 0.0)
    return out


def _map_sms(rank: np.ndarray, device: np.ndarray, sms: dict, fallback: float) -> np.ndarray:
    """SM count per kernel row (its rank and device) via a merge (the vectorized path for real traces)."""
    if len(rank) and rank.min() == rank.max() and device.min() == device.max():  # one device: one lookup
        return np.full(len(rank), float(sms.get((int(rank[0]), int(device[0])), fallback)))
    table = pd.DataFrame([(r, d, s) for (r, d), s in sms.items()], columns=["rank", "device", "_sms"])
    left = pd.DataFrame({"rank": rank.astype(int), "device": device.astype(int)})
    out = left.merge(table, on=["rank", "device"], how="left")["_sms"].to_numpy(dtype=float)
    return np.where(np.isnan(out), fallback, out)
