"""The views are the one home of sync and collective classification; renderers and rules read them."""

from __future__ import annotations

import numpy as np

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.render import html


def test_rccl_and_nccl_kernels_are_collectives_and_drawn_as_such(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0.0, 100.0)
    t.kernel("rcclKernel_AllGather", 200.0, 100.0)
    t.kernel("volta_sgemm_128x64_nn", 400.0, 100.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI001"])
    act = a.views.gpu_activity
    coll = a.views.is_collective.reindex(act.index).to_numpy()
    names = act["name"].astype(str).to_numpy()
    assert dict(zip(names, coll)) == {
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": True,
        "rcclKernel_AllGather": True,
        "volta_sgemm_128x64_nn": False,
    }
    lanes = html.context(a)["timeline"]["lanes"]
    classes = {r[3] for lane in lanes if lane["kind"] == "stream" for r in lane["rects"]}
    assert classes == {"k", "n"}


def test_sync_calls_are_classified_once(tmp_path):
    t = KinetoTrace()
    t.step(0, 0.0, 1000.0)
    t.kernel("k", 0.0, 100.0)
    t.runtime("cudaStreamSynchronize", 50.0, 60.0)
    t.runtime("cudaMemcpyAsync", 150.0, 5.0)
    a = traceinsight.analyze(t.write(tmp_path / "t.json"), select=["TI001"])
    rt = a.views.runtime_calls
    got = dict(zip(rt["name"].astype(str), a.views.is_sync_call.reindex(rt.index).to_numpy()))
    assert got["cudaStreamSynchronize"] == np.True_ and got["cudaMemcpyAsync"] == np.False_
