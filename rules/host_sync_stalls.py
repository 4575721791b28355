"""TI002: the host thread blocked waiting for the GPU, and drained the GPU's queue while it waited."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.rule_api import Fix, Location, Option, Rule, Severity, fmt_ns

from traceinsight.vocab.masks import name_mask
from traceinsight.vocab.patterns import SYNC_CALL, SYNC_OP, SYNC_RANGE
from traceinsight.rulelib.enclosing import cpu_op_enclosing, innermost_enclosing
from traceinsight.rulelib.gaps import closing_syncs, host_starved_gaps, inference_ranks
from traceinsight.rulelib.groups import first_seen_groups
from traceinsight.rulelib.names import kind_mask, lookup, names_where, short_name
from traceinsight.rulelib.warmup import inside_warmup
from traceinsight.rulelib.usercode import has_python_frames, lead_source, no_stacks_sentence, shown_frames, SYNC_CALLS, user_frame_texts


def find_stalls(events: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """All blocking host calls (any length): explicit syncs and blocking copies/memsets. ``gpu_sync`` rows stand in
    for the host call only on ranks whose trace has no blocking runtime rows (they record the same wait from the
    GPU side). Async copies that pageable memory makes blocking are TI006's (judged there on the GPU's clock).
    """
    # the masks on plain arrays, then one take of the few matching rows (not of every host runtime row)
    m = (events["device"].to_numpy() < 0) & kind_mask(events, "runtime")
    if m.any():
        m &= names_where(events["name"], lambda n: n(SYNC_CALL))
    calls = events[m].assign(reason="synchronizing call")
    parts = [calls]
    am = (events["device"].to_numpy() < 0) & kind_mask(events, "annotation")
    if am.any():
        am &= names_where(events["name"], lambda n: n(SYNC_RANGE))
        if am.any():  # JAX reads a device value for the host: no runtime call records the wait
            parts.append(events[am].assign(reason="blocking read of a device value"))
    gm = kind_mask(events, "gpu_sync")
    gs = events[gm] if gm.any() else events.iloc[:0]  # no frame take when there are none (most traces)
    if not gs.empty:
        covered = set(calls["rank"].unique()) if len(calls) else set()
        gs = gs[~gs["rank"].isin(covered)]
        if not gs.empty:
            parts.append(gs.assign(reason="GPU-side sync record"))
    out = pd.concat([p for p in parts if not p.empty]) if any(not p.empty for p in parts) else calls
    return out.sort_values("start_ns", kind="stable")


def _any_long_blocking(events: pd.DataFrame, min_ns: int) -> bool:
    """Could ``find_stalls`` keep a row of at least ``min_ns``? True when some host runtime or annotation row, or
    some ``gpu_sync`` row, lasts that long and its name is a blocking one: a superset of the stalls kept, tested
    on arrays first by duration, so most ranks (no long blocking call) answer without a frame."""
    long = events["dur_ns"].to_numpy() >= min_ns
    if not long.any():
        return False
    host = long & (events["device"].to_numpy() < 0)
    calls = host & kind_mask(events, "runtime")
    if calls.any() and (calls & names_where(events["name"], lambda n: n(SYNC_CALL))).any():
        return True
    notes = host & kind_mask(events, "annotation")
    if notes.any() and (notes & names_where(events["name"], lambda n: n(SYNC_RANGE))).any():
        return True
    return bool((long & kind_mask(events, "gpu_sync")).any())


def call_sites(s: pd.DataFrame, stacks: bool) -> pd.DataFrame:
    """One row per (call, framework op, user frame, kind) of the stalls ``s``, in order of first appearance:
    calls, blocked_ns, max_ns, gpu_idle_ns, first_ns. What ``groupby(..., sort=False).agg(...)`` gives, without
    the grouped frame (``first_seen_groups``)."""
    keys = {"name": s["name"].astype(str), "site": s["site"].fillna("(none)"),
            "frame": s["frame"].fillna("(no user frame)" if stacks else "(no stack)"), "reason": s["reason"]}
    group, values = first_seen_groups(list(keys.values()))
    n = len(values[0])
    dur, idle = s["dur_ns"].to_numpy(np.int64), s["gpu_idle_ns"].to_numpy(np.int64)
    blocked, max_ns, idle_ns = np.zeros(n, np.int64), np.full(n, np.iinfo(np.int64).min), np.zeros(n, np.int64)
    first_ns = np.full(n, np.iinfo(np.int64).max)
    np.add.at(blocked, group, dur)
    np.maximum.at(max_ns, group, dur)
    np.add.at(idle_ns, group, idle)
    np.minimum.at(first_ns, group, s["start_ns"].to_numpy(np.int64))
    out = {k: pd.Series(v) for k, v in zip(keys, values)}
    out.update(calls=np.bincount(group, minlength=n).astype(np.int64), blocked_ns=blocked, max_ns=max_ns, gpu_idle_ns=idle_ns, first_ns=first_ns)
    return pd.DataFrame(out)


def _blocked_by(key: pd.Series, dur: pd.Series) -> dict[str, int]:
    """Blocked ns per value of ``key``, keys in sorted order (what ``dur.groupby(key).sum()`` lists)."""
    group, (values,) = first_seen_groups([key])
    total = np.zeros(len(values), np.int64)
    np.add.at(total, group, dur.to_numpy(np.int64))
    return {str(k): int(n) for k, n in sorted(zip(values.tolist(), total.tolist()))}


class HostSyncStalls(Rule):
    code = "TI002"
    what_if = "remove_host_sync"  # the what-if transform that models this rule's fix
    category = "host_sync"
    name = "host-sync-stalls"
    severity = Severity.WARNING
    summary = "The host blocks on the GPU (explicit syncs, .item(), .cpu(), blocking copies) and the GPU runs dry meanwhile."
    why = """
    PyTorch and TensorFlow launch GPU work asynchronously: the host queues kernels and runs ahead. A
    synchronization makes the host wait until the queue is empty; when it resumes, the GPU has nothing to do until
    the host has launched new work. One `loss.item()` per step turns the pipeline into lock-step execution and
    leaves the GPU idle for the whole host-side time of the next step's first operators.
    """
    definition = """
    A *stall* is a host call that blocks until GPU work finishes: `cudaDeviceSynchronize`, `cudaStreamSynchronize`,
    `cudaEventSynchronize` (and `cu*`/`hip*` equivalents) and synchronous `cudaMemcpy*` / `cudaMemset*` (no
    `Async`). (`cudaMemcpyAsync` made blocking by pageable memory is TI006's.) GPU-side `cuda_sync` records are
    used only when a trace has no such host calls. Calls shorter than `min_stall_us` (default **50 µs**) are
    ignored: a sync on an already idle stream returns in a few µs and costs nothing.

    **The cost is the GPU's, not the host's.** While the host blocks, the GPU finishes what was queued; that
    blocked time is not lost unless the GPU then runs dry. The impact is the GPU idle the stall causes: of the idle
    gap of the rank's GPU that begins while the call is blocked, at most the call's own duration (without the
    call the host would have queued the next work that much sooner; the rest of the gap is what the host did
    next, which TI001 attributes). Only gaps the host could have prevented count: when the work that ends the
    gap was already queued before the gap began, the GPU waited on a GPU-side dependency, not on the host. So a sync
    after the last kernel or at the end of the profiled region (no later GPU work: no gap), or one that returns
    while the GPU stays busy, costs nothing. In an inference run (no backward pass or optimizer step recorded on
    the rank), a sync that closes its step (no GPU work launched after it within the step) hands the request's
    result to the caller: it is the request's completion, not a stall, and is counted in
    `metrics["closing_syncs"]` only. One finding per rank, graded on the common scale (impact as a share of the
    rank's GPU active window).

    Each stall is attributed to its innermost enclosing framework op on the same thread (`aten::item`,
    `aten::_local_scalar_dense`, `aten::nonzero`, `aten::to`/`aten::copy_` for `.cpu()`, ...) and, when the trace has
    stacks, to the innermost Python frame. The *GPU idle caused* is the idle gap of the rank's GPU that begins
    while the call is blocked (the queue drained under it), up to when the GPU gets work again, and at most the
    call's own duration: without the call the host would have gone on that much earlier, so a longer gap is the
    host's work after it (TI001 says what), as the time ledger books it. The impact is that GPU idle.

    Peers: Nsight Systems' `cuda_api_sync` lists every `cudaDeviceSynchronize`/`cudaStreamSynchronize` with no
    duration threshold, `cuda_memcpy_sync` every blocking copy except small H2D ones, `cuda_memcpy_async` every
    pageable async copy; HTA flags runtime calls over 50 µs as outliers (`runtime_cutoff=50`), which is the
    threshold used here.
    """
    fix_pytorch = Fix(
        "Keep values on the GPU inside the step: accumulate losses/metrics as tensors and read them once per "
        "logging interval; replace data-dependent shapes (`nonzero`, boolean masks) with fixed-shape ops "
        "(`torch.where`); copy results to pinned memory with `non_blocking=True`. "
        "`torch.cuda.set_sync_debug_mode('warn')` reports every implicit sync.",
        """
        torch.cuda.set_sync_debug_mode("warn")        # find the hidden syncs
        total = torch.zeros((), device="cuda")
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
            total += loss.detach()                    # was: total += loss.item()
            if step % 100 == 0:
                print(total.item() / 100)             # one sync per 100 steps
                total.zero_()
        out_host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        out_host.copy_(out, non_blocking=True)        # was: out.cpu()
        """,
    )
    fix_tensorflow = Fix(
        "Avoid `.numpy()`, `float(tensor)` and Python control flow on tensor values inside the training loop; keep "
        "the step in a `tf.function`, let Keras aggregate metrics on the device, and raise `steps_per_execution` "
        "so the host syncs once per several steps.",
        """
        model.compile(optimizer="adam", loss=loss_fn, metrics=["accuracy"], steps_per_execution=32)

        @tf.function
        def train_step(x, y):
            ...
            train_loss.update_state(loss)            # not print(loss.numpy())
        """,
    )
    fix_jax = Fix(
        "JAX dispatches asynchronously until a value is read on the host: do not call `.block_until_ready()`, "
        "`float(x)`, `x.item()` or `jax.device_get` inside the loop; return metrics from the jitted step and fetch "
        "them every N steps.",
        """
        state, metrics = train_step(state, batch)     # async: returns at once
        if step % 100 == 0:
            print(jax.device_get(metrics))            # one host round-trip per 100 steps
        """,
    )

    fix_cuda = Fix(
        "Do not block the host inside the loop: drop `cudaDeviceSynchronize`/`cudaStreamSynchronize` between "
        "launches (stream order already serialises them), order streams with `cudaEventRecord` + "
        "`cudaStreamWaitEvent`, and read results back with `cudaMemcpyAsync` into pinned memory once per "
        "iteration batch.",
        """
        for (int i = 0; i < iters; ++i) {
            step<<<grid, block, 0, s>>>(d_x, d_y);      // was: followed by cudaDeviceSynchronize()
        }
        cudaMemcpyAsync(h_y, d_y, bytes, cudaMemcpyDeviceToHost, s);  // h_y from cudaMallocHost
        cudaEventRecord(done, s);
        cudaEventSynchronize(done);                    // one wait, after all the work is queued
        """,
    )

    min_stall_us = Option(50.0, "Blocking calls shorter than this (µs) are ignored (HTA's runtime outlier cutoff).")
    top_n = Option(10, "Evidence rows: the call sites that block longest.", min=1)

    def check(self, ctx):
        ev = ctx.events
        v = ctx.views
        if v.gpu_activity.empty:
            return  # the cost is GPU idle: nothing to measure without GPU activity (TI011 says so)
        if not _any_long_blocking(ev, int(self.min_stall_us * 1e3)):
            return  # no blocking row lasts min_stall_us: no stall (the frames of ``find_stalls`` are not built)
        stalls = find_stalls(ev, v.launches)
        stalls = stalls[stalls["dur_ns"] >= int(self.min_stall_us * 1e3)]
        if stalls.empty:
            return
        span = max(v.span_ns, 1)
        stalls = stalls.copy()
        stalls["end_ns"] = stalls["start_ns"] + stalls["dur_ns"]
        # framework op and Python frame around each call
        host = v.host_events
        span = host[["rank", "pid", "tid", "start_ns", "dur_ns"]]  # all innermost_enclosing reads
        cpu_ops, ops = cpu_op_enclosing(v)  # the framework ops, sorted once for every rule that asks
        at = ops.find_frame(stalls)
        enc = np.full(len(stalls), None, dtype=object)
        enc[at >= 0] = host.index.to_numpy()[cpu_ops[at[at >= 0]]]
        names = ev["name"]  # lookup converts only the rows it returns
        stalls["op"] = lookup(names, enc)
        sync_ops = span.iloc[np.flatnonzero(name_mask(host["name"], SYNC_OP))]
        enc_sync = innermost_enclosing(stalls, sync_ops)
        stalls["sync_op"] = lookup(names, enc_sync)
        frame_texts = user_frame_texts(stalls, ev, host)  # the line of the user's code that blocked, as recorded
        stalls["frame"] = shown_frames(frame_texts)
        stacks = has_python_frames(ev)
        stalls["site"] = stalls["sync_op"].where(stalls["sync_op"].notna(), stalls["op"])
        stalls["gpu_idle_ns"] = self._idle_after(host_starved_gaps(v, v.gaps), stalls)
        closing = closing_syncs(stalls, v.steps, v.launches)
        inf_ranks = inference_ranks(v)
        inference = {int(r): int(r) in inf_ranks for r in stalls["rank"].unique()}
        stalls["closing"] = closing & stalls["rank"].map(inference).to_numpy(dtype=bool)
        stalls.loc[stalls["closing"].to_numpy(), "gpu_idle_ns"] = 0

        # a call the ledger sets aside as warm-up (it waits on work queued before the window) is said, not counted
        stalls["warmup"] = inside_warmup(v, stalls["rank"].to_numpy(), stalls["start_ns"].to_numpy(), stalls["end_ns"].to_numpy())

        for rank, s in stalls.groupby("rank", sort=True):
            w = s["warmup"].to_numpy()
            aside, n_aside = int(s.loc[w, "dur_ns"].sum()), int(w.sum())
            s = s.loc[~w]
            if s.empty:
                continue  # every stall of the rank is warm-up: TI013 reports it, nothing here is a cost
            blocked = int(s["dur_ns"].sum())
            idle = int(s["gpu_idle_ns"].sum())
            util = v.utilization
            win = util.loc[util["rank"] == rank, "window_ns"]
            base = int(win.max()) if len(win) and win.max() > 0 else span
            n_closing = int(s["closing"].sum())
            grp = call_sites(s, stacks).sort_values("blocked_ns", ascending=False)
            top = grp.head(int(self.top_n))
            evidence = pd.DataFrame(
                {
                    "call": top["name"].map(short_name),
                    "framework_op": top["site"],
                    "user_code": top["frame"].map(lambda f: short_name(f, 70)),
                    "kind": top["reason"],
                    "calls": top["calls"],
                    "blocked_ms": top["blocked_ns"] / 1e6,
                    "max_us": top["max_ns"] / 1e3,
                    "gpu_idle_after_ms": top["gpu_idle_ns"] / 1e6,
                    "first_at_ms": top["first_ns"] / 1e6,
                }
            )
            lead = top.iloc[0]
            where = f"rank {rank}: " if len(ctx.meta.ranks) > 1 else ""
            site = lead["site"] if lead["site"] != "(none)" else lead["name"]
            call = SYNC_CALLS.get(str(site))
            said = f" `{site}` is what {call} runs." if call else ""
            source = None
            if lead["frame"] not in ("(no stack)", "(no user frame)"):
                said += f" It is called at `{lead['frame']}`."
                source = lead_source(frame_texts[(stalls["rank"] == rank).to_numpy()], lead["frame"])
            elif not stacks:
                said += no_stacks_sentence(ctx)
            yield ctx.finding(
                title=(f"{where}host blocked on the GPU {len(s)} times for {fmt_ns(blocked)}, mostly in {short_name(site, 50)}"
                       + (f" (+{fmt_ns(aside)} of warm-up, set aside)" if aside else "")),
                message=(
                    (f"{where}{n_aside} blocking call(s) ({fmt_ns(aside)}) wait on work queued before the window or on one-time "
                     f"work: warm-up, set aside (TI013) and counted in no figure here. " if aside else "")
                    + f"{where}{len(s)} blocking calls of {self.min_stall_us:g} µs or more held the host for {fmt_ns(blocked)} "
                    f"({100.0 * blocked / base:.1f} % of the GPU's active window); the GPU ran dry under them and sat idle for {fmt_ns(idle)} until new work arrived. "
                    + (f"{n_closing} of them close an inference step (the request's result) and cost nothing. " if n_closing else "")
                    + 
                    f"The top site is {short_name(lead['name'], 40)} "
                    f"{'outside any framework op' if lead['site'] == '(none)' else 'under ' + short_name(site, 50)} "
                    f"({int(lead['calls'])} calls, {fmt_ns(lead['blocked_ns'])}).{said}"
                ),
                impact_ns=idle,
                evidence=evidence,
                instances=pd.DataFrame({"start_ns": s["start_ns"], "end_ns": s["end_ns"], "rank": s["rank"], "label": s["name"].astype(str)}),
                location=Location(rank=int(rank)),
                source=source,
                metrics={
                    "stalls": int(len(s)),
                    "blocked_ns": blocked,
                    "blocked_pct": round(100.0 * blocked / base, 3),
                    "warmup_blocked_ns": aside,
                    "warmup_stalls": n_aside,
                    "gpu_idle_ns": idle,
                    "closing_syncs": n_closing,
                    "inference": bool(inference.get(int(rank), False)),
                    "by_call": _blocked_by(s["name"].astype(str), s["dur_ns"]),
                    "by_site": _blocked_by(s["site"].fillna("(none)"), s["dur_ns"]),
                    "gpu_sync_rows": int((ev["kind"] == "gpu_sync").sum()),
                },
                key=f"rank{rank}",
            )

    @staticmethod
    def _idle_after(gaps: pd.DataFrame, stalls: pd.DataFrame) -> np.ndarray:
        """GPU idle each blocking call causes: of the gap that begins while the call blocks (the queue drained under
        it), at most the call's own duration. Without the call the host would have gone on that much earlier and
        queued the next work that much sooner; the rest of the gap is what the host did afterwards (TI001 says what).

        Matched with one merge_asof per rank: the latest gap starting at or before the call's end, kept when it
        starts after the call did. A gap is charged once even if two calls overlap it.
        """
        out = np.zeros(len(stalls), np.int64)
        if gaps.empty:
            return out
        q = pd.DataFrame(
            {
                "rank": stalls["rank"].to_numpy().astype(np.int64),
                "t": stalls["end_ns"].to_numpy(),
                "s": stalls["start_ns"].to_numpy(),
                "call_ns": stalls["dur_ns"].to_numpy().astype(np.int64),
                "pos": np.arange(len(stalls)),
            }
        )
        g = gaps.assign(rank=gaps["rank"].astype(np.int64), gid=np.arange(len(gaps)))[["rank", "start_ns", "dur_ns", "gid"]]
        m = pd.merge_asof(q.sort_values("t"), g.sort_values("start_ns"), left_on="t", right_on="start_ns", by="rank", direction="backward")
        ok = m["start_ns"].notna().to_numpy() & (m["start_ns"].to_numpy(dtype=float) >= m["s"].to_numpy())
        m = m[ok]
        m = m.sort_values("call_ns", ascending=False).drop_duplicates("gid")
        out[m["pos"].to_numpy()] = np.minimum(m["dur_ns"].to_numpy(dtype=np.int64), m["call_ns"].to_numpy(dtype=np.int64))
        return out
