"""Synthetic analyses for the report tests: they must not wait for parsers or built-in rules to exist.

The builders make a small two-GPU timeline with steps, idle gaps and host syncs, plus two stand-in rules,
so every renderer path (findings with evidence, fixes, locations, warnings) is exercised with known numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import traceinsight
from traceinsight.rule_api import Fix, Location, Rule, Severity
from traceinsight.model.timeline import DeviceInfo, Timeline, TraceMeta, build_events

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "A" * 10_000,
    "ctl" + "".join(chr(c) for c in range(0x20)) + "end",
    "rtl\u202egnp.exe|`code`|*bold*",
    "</textarea></svg></style><b id=injected>x</b>",
]


def synthetic_timeline(hostile: bool = False, n_steps: int = 4) -> Timeline:
    """Steps of 10 ms: compute kernels on two streams of two devices, a 3 ms sync gap in each step."""
    rows: dict[str, list] = {k: [] for k in ("kind", "name", "start_ns", "dur_ns", "device", "stream", "rank", "tid", "correlation")}

    def add(kind, name, start, dur, device=-1, stream=-1, tid=1, corr=-1):
        rows["kind"].append(kind)
        rows["name"].append(name)
        rows["start_ns"].append(int(start))
        rows["dur_ns"].append(int(dur))
        rows["device"].append(device)
        rows["stream"].append(stream)
        rows["rank"].append(0)
        rows["tid"].append(tid)
        rows["correlation"].append(corr)

    names = HOSTILE if hostile else ["volta_sgemm_128x64_nn", "elementwise_kernel<float>", "reduce_kernel"]
    corr = 0
    for s in range(n_steps):
        t0 = s * 10_000_000
        add("step", f"ProfilerStep#{s}", t0, 10_000_000)
        add("cpu_op", names[s % len(names)] if hostile else "aten::linear", t0 + 10_000, 5_400_000)
        # the host blocks while the last kernels still run, so the GPU drains under it: a sync stall
        add("runtime", "cudaDeviceSynchronize", t0 + 5_500_000, 3_500_000)
        for dev in (0, 1):
            t = t0 + 100_000
            for i in range(60):
                corr += 1
                name = names[(i + s) % len(names)]
                add("runtime", "cudaLaunchKernel", t - 50_000, 5_000, corr=corr)
                add("kernel", name, t, 80_000, device=dev, stream=7 + (i % 2), corr=corr)
                t += 95_000
            corr += 1
            add("runtime", "cudaMemcpyAsync", t0 + 9_050_000, 20_000, corr=corr)
            add("memcpy", "Memcpy HtoD (Pageable -> Device)", t0 + 9_200_000, 600_000, device=dev, stream=7, corr=corr)
    ev = build_events(rows)
    meta = TraceMeta(
        source_format="pytorch",
        path="synthetic.json" if not hostile else "<script>alert('path')</script>.json",
        tool="PyTorch Profiler (kineto)" if not hostile else "<b>tool</b>",
        tool_version="2.5.0",
        devices=[DeviceInfo(index=0, name="NVIDIA A100-SXM4-80GB", sm_count=108), DeviceInfo(index=1, name=HOSTILE[0] if hostile else "NVIDIA A100-SXM4-80GB")],
        warnings=["trace truncated: 12 events had no end"] + ([HOSTILE[1]] if hostile else []),
    )
    return Timeline(ev, meta)


class FakeIdleGaps(Rule):
    code = "XT001"
    category = "gpu_idle"
    name = "gpu-idle-gaps"
    severity = Severity.WARNING
    summary = "GPU idle between kernels."
    fix_pytorch = Fix("Overlap host work with GPU work.", "for x, y in loader:\n    x = x.cuda(non_blocking=True)")
    fix_tensorflow = Fix("Prefetch with tf.data.", "ds = ds.prefetch(tf.data.AUTOTUNE)")

    def check(self, ctx):
        g = ctx.views.gaps
        g = g[g["dur_ns"] >= 1_000_000]
        if g.empty:
            return
        for dev, gg in g.groupby("device"):
            ev = gg[["rank", "device", "start_ns", "dur_ns"]].reset_index(drop=True)
            yield ctx.finding(
                title=f"GPU {dev} idle in {len(gg)} gaps",
                message=f"GPU {dev} sat idle {len(gg)} times for at least 1 ms.",
                impact_ns=int(gg["dur_ns"].sum()),
                evidence=ev,
                instances=gg.assign(label="idle"),
                location=Location(rank=0, device=int(dev), start_ns=int(gg["start_ns"].min()), end_ns=int(gg["end_ns"].max())),
                key=f"dev{dev}",
            )


class FakeSyncs(Rule):
    code = "XT002"
    category = "host_sync"
    name = "host-sync-stalls"
    severity = Severity.ERROR
    summary = "Host synchronizations stall the GPU."
    fix_pytorch = Fix("Avoid .item() in the loop.", "loss_sum += loss.detach()  # not loss.item()")
    fix_tensorflow = Fix("Avoid .numpy() in the step.", "")

    def check(self, ctx):
        ev = ctx.events
        s = ev[(ev["kind"] == "runtime") & (ev["name"] == "cudaDeviceSynchronize")]
        if s.empty:
            return
        evidence = pd.DataFrame({"name": s["name"].astype(str).to_numpy(), "start_ns": s["start_ns"].to_numpy(), "dur_ns": s["dur_ns"].to_numpy()})
        ops = ev[ev["kind"] == "cpu_op"]["name"].astype(str).to_numpy()
        evidence["op"] = np.resize(ops, len(evidence)) if len(ops) else ""
        yield ctx.finding(
            title="cudaDeviceSynchronize every step",
            message="Each step waits for the GPU on the host; " + (str(ops[0]) if len(ops) else ""),
            impact_ns=int(s["dur_ns"].sum() * 0.9),
            evidence=evidence,
            instances=pd.DataFrame({"start_ns": s["start_ns"], "end_ns": s["start_ns"] + s["dur_ns"], "rank": s["rank"], "label": "sync"}),
            location=Location(rank=0, start_ns=int(s["start_ns"].min()), end_ns=int((s["start_ns"] + s["dur_ns"]).max())),
        )


class FakeInfo(Rule):
    code = "XT003"
    category = "launch_overhead"
    name = "tiny-kernels"
    severity = Severity.INFO
    summary = "Many tiny kernels."

    def check(self, ctx):
        yield ctx.finding(title="Kernels shorter than launch cost", message="Consider torch.compile.", impact_ns=150_000)


def synthetic_analysis(hostile: bool = False, n_steps: int = 4):
    tl = synthetic_timeline(hostile=hostile, n_steps=n_steps)
    return traceinsight.analyze(tl, select=["XT"], extra_rules=[FakeIdleGaps, FakeSyncs, FakeInfo])


def test_synthetic_analysis_has_findings():
    a = synthetic_analysis()
    # the host syncs (a cause) come first, each GPU's idle gaps (symptoms it explains) after them
    assert [(f.code, f.key) for f in a.findings] == [("XT002", ""), ("XT001", "dev0"), ("XT001", "dev1")]
    assert a.findings[0].explains == [a.findings[1].fingerprint, a.findings[2].fingerprint]
    # two GPUs, each busy 21.6 ms of a 39.7 ms window (60 kernels of 80 µs and a 600 µs copy per step)
    assert [(d["busy_ns"], d["window_ns"]) for d in a.summary.devices] == [(21_600_000, 39_700_000)] * 2
    assert a.summary.gpu_busy_pct == 100.0 * 21_600_000 / 39_700_000
