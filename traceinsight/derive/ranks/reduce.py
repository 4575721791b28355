"""The reduce step: rank summaries in, one job out (ranks on one clock, collectives matched into instances).

Everything here is columnar over ranks x collectives; nothing looks at an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinsight.derive.ranks.align import Alignment, align
from traceinsight.model.plausible import mixed_runs, mixed_runs_warning
from traceinsight.derive.ranks.summary import COLL_COLUMNS, STEP_COLUMNS, RankSummary


@dataclass
class Job:
    """A distributed job as the cross-rank rules see it. All times are ns on the aligned job clock."""

    summaries: list[RankSummary]
    ranks: pd.DataFrame  # one row per rank: rank, device, world_size, window/busy/compute/comm/exposed ns, wait_ns
    steps: pd.DataFrame  # rank + STEP_COLUMNS (+ dur_ns), aligned
    ledger: pd.DataFrame  # rank, bucket, ns per step (mean over the rank's steps >= 0, else its whole window)
    collectives: pd.DataFrame  # rank, instance + COLL_COLUMNS, aligned; wait_ns = time this rank waited for the last
    instances: pd.DataFrame  # one row per matched collective instance (see ``_instances``)
    alignment: Alignment
    world_size: int | None
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    shift_ns: dict[int, int] = field(default_factory=dict)  # rank -> ns added to its own trace times to get job time
    #: why the rank files seem to be different runs ("" when nothing says so: ``plausible.mixed_runs``); the
    #: cross-rank rules are then not run, since they would compare work that did not run together
    mixed_runs: str = ""

    def rank_ns(self, rank: int, job_ns):
        """Job-clock time(s) back on ``rank``'s own trace clock (where its timeline and HTML close-ups live)."""
        return job_ns - self.shift_ns.get(int(rank), 0)

    @property
    def rank_count(self) -> int:
        return len(self.ranks)

    @property
    def is_multi_rank(self) -> bool:
        """Ranks of one distributed job: two or more distinct ranks (not two GPUs of one process)."""
        return self.rank_count >= 2

    @property
    def span_ns(self) -> int:
        """The typical rank's GPU window (what a per-rank percentage is of)."""
        return int(self.ranks["window_ns"].median()) if len(self.ranks) else 0

    @property
    def step_ns(self) -> float | None:
        st = self.steps[self.steps["step"] >= 0]
        return float(st["dur_ns"].median()) if len(st) else None

    @property
    def step_count(self) -> int:
        st = self.steps[self.steps["step"] >= 0]
        return int(st.groupby("rank").size().median()) if len(st) else 0


def _dedupe_ranks(summaries: list[RankSummary], warnings: list[str]) -> list[RankSummary]:
    ranks = [s.rank for s in summaries]
    if len(set(ranks)) != len(ranks):
        summaries = sorted(summaries, key=lambda s: s.source)
        for i, s in enumerate(summaries):
            s.rank = i
        warnings.append(f"ranks repeat across the {len(ranks)} rank files (no or equal distributedInfo.rank); ranks were assigned in file-name order")
    return sorted(summaries, key=lambda s: s.rank)


def reduce_summaries(summaries: list[RankSummary], failures: list[str] | None = None) -> Job:
    warnings: list[str] = []
    summaries = _dedupe_ranks(list(summaries), warnings)
    mixed = mixed_runs([s.world_size for s in summaries], [s.device_names for s in summaries])
    if mixed:
        warnings.append(mixed_runs_warning("", mixed))
    ranks = [s.rank for s in summaries]
    coll = _concat(summaries, "collectives", COLL_COLUMNS)
    coll["start_ns"] += coll["origin_ns"]
    coll["end_ns"] += coll["origin_ns"]
    coll = _match(coll, warnings)
    origin = pd.Series({s.rank: s.origin_ns for s in summaries}, dtype=np.int64)
    alignment = align(ranks, coll.loc[coll["instance"] >= 0, ["rank", "instance", "end_ns"]])
    bad = _inconsistent(coll, alignment)
    if len(bad):
        # Calls that do not end together once clocks agree were not one collective: leave them out and align again
        # on the rest, so they bias neither the offsets nor the straggler analysis.
        spread = bad.max()
        n_total = int(coll.loc[coll["instance"] >= 0, "instance"].nunique())
        coll.loc[coll["instance"].isin(bad.index), "instance"] = -1
        warnings.append(
            f"{len(bad)} of {n_total} collective calls matched by stream position do not end together on all ranks after clock "
            f"alignment (by up to {spread / 1e6:.3f} ms, tolerance {END_TOLERANCE_NS / 1e6:.1f} ms): they are not one collective "
            "(point-to-point send/recv with other peers, or traces of different windows) and are left out of the alignment and "
            "the straggler analysis"
        )
        alignment = align(ranks, coll.loc[coll["instance"] >= 0, ["rank", "instance", "end_ns"]])
    offset = pd.Series(alignment.offsets_ns, dtype=np.int64)
    shift = (origin - offset.reindex(origin.index).fillna(0).astype(np.int64)).astype(np.int64)  # rank time -> job time
    starts = np.array([s.window_start_ns for s in summaries], np.int64) + shift.reindex(ranks).to_numpy()
    zero = int(starts.min()) if len(starts) else 0
    shift -= zero
    coll["start_ns"] += -coll["origin_ns"] + coll["rank"].map(shift).to_numpy()
    coll["end_ns"] += -coll["origin_ns"] + coll["rank"].map(shift).to_numpy()
    coll = coll.drop(columns="origin_ns")
    inst = _instances(coll)
    if len(inst):
        last = coll["instance"].map(inst.set_index("instance")["last_start_ns"])
        coll["wait_ns"] = (last - coll["start_ns"]).clip(lower=0).fillna(0).astype(np.int64)
    else:
        coll["wait_ns"] = np.zeros(len(coll), np.int64)

    steps = _concat(summaries, "steps", STEP_COLUMNS)
    for c in ("start_ns", "end_ns"):
        steps[c] = steps[c] + steps["rank"].map(shift).to_numpy()
    steps = steps.drop(columns="origin_ns")
    steps["dur_ns"] = steps["end_ns"] - steps["start_ns"]
    # Time this rank's collectives waited for a later rank, per step (the collective's start decides its step).
    if len(coll) and len(steps):
        coll["step"] = _step_of(coll, steps)
        if coll["wait_ns"].to_numpy().any():
            w = coll[coll["step"] >= 0].groupby(["rank", "step"], as_index=False)["wait_ns"].sum()
            steps = steps.merge(w, on=["rank", "step"], how="left")
            steps["wait_ns"] = steps["wait_ns"].fillna(0).astype(np.int64)
        else:  # no collective waited (one rank: none is matched): the sums are all 0, no grouping needed
            steps["wait_ns"] = np.zeros(len(steps), np.int64)
    else:
        coll["step"] = -1
        steps["wait_ns"] = 0

    per = pd.DataFrame(
        {
            "rank": ranks,
            "device": [s.device for s in summaries],
            "window_ns": [s.window_ns for s in summaries],
            "busy_ns": [s.busy_ns for s in summaries],
            "compute_ns": [s.compute_ns for s in summaries],
            "comm_ns": [s.comm_ns for s in summaries],
            "exposed_ns": [s.exposed_ns for s in summaries],
        }
    )
    per["wait_ns"] = per["rank"].map(coll.groupby("rank")["wait_ns"].sum()).fillna(0).astype(np.int64) if coll["wait_ns"].to_numpy().any() else 0
    sizes = [s.world_size for s in summaries if s.world_size]
    for s in summaries:
        warnings.extend(f"rank {s.rank}: {w}" for w in s.warnings)
    return Job(
        summaries=summaries,
        ranks=per,
        steps=steps,
        ledger=_ledger_per_step(summaries),
        collectives=coll,
        instances=inst,
        alignment=alignment,
        world_size=max(sizes) if sizes else (len(summaries) if len(summaries) > 1 else None),
        warnings=warnings,
        failures=list(failures or []),
        shift_ns={int(r): int(v) for r, v in shift.items()},
        mixed_runs=mixed,
    )


def _concat(summaries: list[RankSummary], attr: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """Every rank's ``attr`` frame stacked, with ``rank`` and ``origin_ns`` in front.

    The frames are stacked as they are and the two rank columns written once as repeated arrays: assigning them to
    each rank's frame first costs a frame copy per rank, most of the reduce step of a job of thousands of tiny ranks.
    """
    frames = [(s, getattr(s, attr)) for s in summaries if len(getattr(s, attr))]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "origin_ns", *columns)}).astype({"group": object, "kind": object} if "group" in columns else {})
    lens = np.array([len(f) for _, f in frames], np.int64)
    out = pd.concat([f for _, f in frames], ignore_index=True)[list(columns)]
    out.insert(0, "origin_ns", np.repeat(np.array([s.origin_ns for s, _ in frames], np.int64), lens))
    out.insert(0, "rank", np.repeat(np.array([s.rank for s, _ in frames], np.int64), lens))
    return out


def _match(coll: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """Number each (group, seq) seen on two or more ranks with the same kind; -1 for the rest."""
    coll = coll.copy()
    if coll.empty:
        coll["instance"] = pd.Series(dtype="int64")
        return coll
    r = coll["rank"].to_numpy()
    if r.min() == r.max():  # one rank: no call is seen on two ranks, nothing matches
        coll["instance"] = np.full(len(coll), -1, np.int64)
        return coll
    # (group, seq) numbered in order of first appearance, as factorizing the pairs would: one int key per pair
    g_code, _ = pd.factorize(coll["group"].to_numpy())
    seq = coll["seq"].to_numpy(np.int64)
    s_lo = int(seq.min())
    codes, _ = pd.factorize(g_code.astype(np.int64) * (int(seq.max()) - s_lo + 1) + (seq - s_lo))
    g = pd.Series(coll["rank"].to_numpy()).groupby(codes)
    n = g.transform("nunique").to_numpy()
    kinds = pd.Series(coll["kind"].to_numpy()).groupby(codes).transform("nunique").to_numpy()
    bad = (n >= 2) & (kinds > 1)
    if bad.any():
        warnings.append(
            f"{len(np.unique(codes[bad]))} collective calls differ in kind across ranks at the same position of their stream "
            "(the traces cover different windows, or groups use different streams); they were left out of the cross-rank match"
        )
    ok = (n >= 2) & ~bad
    inst = np.full(len(coll), -1, np.int64)
    inst[ok] = pd.factorize(codes[ok])[0]
    coll["instance"] = inst
    return coll


#: After alignment, the kernels of one collective end within this of each other on every rank (they finish
#: together once the last rank joins; what remains is clock jitter, µs to tens of µs). Calls that disagree by more
#: were not one collective: point-to-point send/recv with other peers, or traces of different windows.
END_TOLERANCE_NS = 500_000


def _inconsistent(coll: pd.DataFrame, alignment: Alignment) -> pd.Series:
    """End spread (ns) of the matched instances whose ends disagree by more than END_TOLERANCE_NS once aligned."""
    m = coll["instance"].to_numpy() >= 0
    if not m.any():
        return pd.Series(dtype=np.int64)
    sub = coll.loc[m, ["rank", "instance", "end_ns"]]
    off = sub["rank"].map(pd.Series(alignment.offsets_ns, dtype=np.int64)).fillna(0).to_numpy(np.int64)
    end = sub["end_ns"].to_numpy(np.int64) - off
    g = pd.Series(end).groupby(sub["instance"].to_numpy())
    spread = g.max() - g.min()
    return spread[spread > END_TOLERANCE_NS]


def _instances(coll: pd.DataFrame) -> pd.DataFrame:
    """Per instance: ranks, the last rank to arrive, and how long it alone held the others (last - second-last start).

    Columns: instance, group, seq, kind, n_ranks, first_start_ns, last_start_ns, second_start_ns, last_rank,
    end_ns (median end), held_ns, mean_wait_ns (mean over the other ranks of last start - their start),
    transfer_ns (the last arriver's kernel time: the collective itself, without waiting).
    """
    m = coll[coll["instance"] >= 0].sort_values(["instance", "start_ns", "rank"], kind="stable")
    if m.empty:
        return pd.DataFrame(columns=["instance", "group", "seq", "kind", "n_ranks", "first_start_ns", "last_start_ns", "second_start_ns", "last_rank", "end_ns", "held_ns", "mean_wait_ns", "transfer_ns"])
    g = m.groupby("instance", sort=True)
    last = g.tail(1).set_index("instance")
    second = g.nth(-2).set_index("instance")["start_ns"]
    n = g.size()
    sum_start = g["start_ns"].sum()
    out = pd.DataFrame(
        {
            "group": last["group"],
            "seq": last["seq"],
            "kind": last["kind"],
            "n_ranks": n,
            "first_start_ns": g["start_ns"].min(),
            "last_start_ns": last["start_ns"],
            "second_start_ns": second.reindex(last.index),
            "last_rank": last["rank"],
            "end_ns": g["end_ns"].median().round().astype(np.int64),
            "transfer_ns": last["end_ns"] - last["start_ns"],
        }
    )
    out["held_ns"] = (out["last_start_ns"] - out["second_start_ns"]).clip(lower=0).astype(np.int64)
    # mean over the others of (last - start): (n * last - sum of starts) / (n - 1)
    out["mean_wait_ns"] = ((out["n_ranks"] * out["last_start_ns"] - sum_start) / (out["n_ranks"] - 1)).round().astype(np.int64)
    return out.reset_index()


def _step_of(coll: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The step number (of the same rank) whose window holds each collective's start; -1 outside steps.

    Steps and collectives are each sorted by (rank, start) once; each rank's collectives then search only that
    rank's slice of the steps (slices of arrays, no grouping: a job of thousands of ranks has a step or two each).
    """
    out = np.full(len(coll), -1, np.int64)
    keep = steps["step"].to_numpy() >= 0
    s_rank = steps["rank"].to_numpy()[keep]
    s_start = steps["start_ns"].to_numpy()[keep]
    s_end = steps["end_ns"].to_numpy()[keep]
    s_num = steps["step"].to_numpy()[keep]
    order = np.lexsort((s_start, s_rank))
    s_rank, s_start, s_end, s_num = s_rank[order], s_start[order], s_end[order], s_num[order]
    c_rank = coll["rank"].to_numpy()
    c_start = coll["start_ns"].to_numpy()
    c_order = np.argsort(c_rank, kind="stable")
    c_sorted = c_rank[c_order]
    ranks, lo = np.unique(s_rank, return_index=True)
    hi = np.append(lo[1:], len(s_rank))
    c_lo = np.searchsorted(c_sorted, ranks, side="left")
    c_hi = np.searchsorted(c_sorted, ranks, side="right")
    for a, b, ca, cb in zip(lo.tolist(), hi.tolist(), c_lo.tolist(), c_hi.tolist()):
        if ca == cb:
            continue
        m = c_order[ca:cb]
        s, e, num = s_start[a:b], s_end[a:b], s_num[a:b]
        i = np.searchsorted(s, c_start[m], side="right") - 1
        ok = (i >= 0) & (c_start[m] < e[np.clip(i, 0, None)])
        out[m[ok]] = num[i[ok]]
    return out


def _ledger_per_step(summaries: list[RankSummary]) -> pd.DataFrame:
    """Each rank's ledger as ns per step: per rank and bucket, the sum over its steps >= 0 divided by how many
    steps it has (its whole window, divided by 1, when it has none); buckets in sorted order within a rank, ranks in
    the order given, as a per-rank groupby would give them.

    All ranks at once, on arrays: one sort by (rank, bucket) and one segmented sum, instead of a small frame per
    rank (a job of thousands of tiny ranks spent most of its reduce step here).
    """
    parts = [s for s in summaries if s.ledger is not None and not s.ledger.empty]
    if not parts:
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "bucket": pd.Series(dtype=object), "ns": pd.Series(dtype="float64")})
    lens = np.array([len(s.ledger) for s in parts], np.int64)
    pos = np.repeat(np.arange(len(parts)), lens)
    led = pd.concat([s.ledger for s in parts], ignore_index=True)
    step = led["step"].to_numpy()
    bucket = led["bucket"]
    ns = led["ns"].to_numpy(np.int64)
    inside = step >= 0
    pairs = np.unique(np.stack([pos[inside], step[inside].astype(np.int64)]), axis=1)
    n_steps = np.bincount(pairs[0], minlength=len(parts))
    use = np.flatnonzero(inside | (n_steps[pos] == 0))
    code, uniq = pd.factorize(bucket.to_numpy()[use], sort=True)
    use, code = use[code >= 0], code[code >= 0]  # a missing bucket is no group (as a groupby drops it)
    key = pos[use].astype(np.int64) * max(len(uniq), 1) + code
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
    sums = np.add.reduceat(ns[use][order], starts) if len(k) else np.zeros(0, np.int64)
    group_pos = pos[use][order[starts]]
    div = np.maximum(n_steps, 1)[group_pos]
    rank = np.array([s.rank for s in parts], np.int64)[group_pos]
    return pd.DataFrame({"rank": rank, "bucket": bucket.iloc[use[order[starts]]].reset_index(drop=True), "ns": sums / div})

