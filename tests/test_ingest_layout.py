"""The ingest package's shared machinery: the format map, the one finishing stage in ``load``, the native switch,
rank folders read on threads, and GPU descriptions resolved when event device ids are not deviceProperties ids."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import traceinsight
from traceinsight.vocab import native
from traceinsight.ingest import FORMATS, assemble, kineto
from traceinsight.ingest.kineto import reader as kineto_reader
from traceinsight.ingest.parts import ReadResult, Rows
from traceinsight.model.timeline import KINDS, TraceMeta

from .conftest import corpus_file
from .helpers.kineto_writer import KinetoTrace


def _two_kernel_trace(**kw) -> KinetoTrace:
    t = KinetoTrace(**kw)
    t.step(1, 0, 1000)
    t.kernel("gemm", 100, 50, launch_us=90)
    t.kernel("relu", 300, 20, launch_us=280)
    return t


def test_format_map_holds_functions_not_module_names():
    assert list(FORMATS) == ["nsys", "tensorflow-xplane", "pytorch", "tensorflow-logdir", "tensorflow-json"]
    assert FORMATS["pytorch"].read is kineto.read and callable(FORMATS["nsys"].sniff)


def test_detection_imports_only_the_reader_it_needs(tmp_path):
    """Detecting a kineto file imports the sniffers, and reading it the kineto reader alone (cold start)."""
    import subprocess
    import sys

    path = _two_kernel_trace().write(tmp_path / "t.json")
    code = (
        "import sys; from traceinsight.ingest import load; load(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.startswith('traceinsight.ingest.') and m.endswith('.reader')))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['traceinsight.ingest.kineto.reader']"


def test_readers_return_columns_and_load_finishes(tmp_path):
    path = _two_kernel_trace().write(tmp_path / "t.json")
    result = kineto.read(path)
    assert isinstance(result, ReadResult) and all(isinstance(p, Rows) for p in result.parts)
    tl = assemble(result)
    assert tl.events["start_ns"].min() == 0  # rebased by assemble, not by the reader
    kernels = tl.events[tl.events["kind"] == "kernel"]
    assert kernels["step"].tolist() == [1, 1]  # steps assigned once, in assemble
    assert tl.meta.start_unix_ns is not None and tl.meta.start_unix_ns > 10**18


def test_assemble_drops_rows_no_analysis_can_place():
    meta = TraceMeta(source_format="pytorch")
    kinds = pd.Categorical.from_codes(np.full(4, KINDS.index("kernel"), dtype=np.int8), categories=list(KINDS))
    rows = Rows({"kind": kinds, "name": ["a", "b", "c", "d"], "start_ns": np.array([10, 20, (1 << 63) - 1, 40]),
                 "dur_ns": np.array([5, -3, 1, 2]), "device": np.zeros(4, dtype=np.int64)})
    tl = assemble(ReadResult([rows], meta))
    assert tl.events["name"].astype(str).tolist() == ["a", "d"]
    assert tl.span_ns == 32 and (tl.events["dur_ns"] >= 0).all()
    assert any("2 events with a negative duration or a time out of range were dropped" in w for w in tl.meta.warnings)


def test_one_native_switch_covers_both_scanners(monkeypatch):
    from traceinsight.ingest.kineto.columns import native_available
    from traceinsight.ingest.xplane.space import native_scanner

    monkeypatch.setenv(native.PURE_ENV, "1")
    assert not native_available() and native_scanner() is None
    monkeypatch.delenv(native.PURE_ENV)
    assert native_available() == (native.built("pytorch") is not None)
    assert (native_scanner() is not None) == (native.built("tensorflow-xplane") is not None)


@pytest.mark.parametrize("pool", ["threads", "processes", "serial"])
def test_rank_folder_pools_agree(tmp_path, monkeypatch, pool):
    for rank in range(3):
        _two_kernel_trace(rank=rank, world_size=3, origin_us=1_234_567_890.125 + rank * 7).write(tmp_path / f"r{rank}.json")
    monkeypatch.setattr(kineto_reader, "RANK_POOL", "serial")
    expected = traceinsight.load(tmp_path)
    monkeypatch.setattr(kineto_reader, "RANK_POOL", pool)
    got = traceinsight.load(tmp_path)
    pd.testing.assert_frame_equal(got.events, expected.events)
    assert got.meta.ranks == [0, 1, 2] and sorted(set(got.events["rank"])) == [0, 1, 2]


def test_threads_are_the_rank_pool():
    assert kineto_reader.RANK_POOL == "threads"


# --- GPU ids in events that deviceProperties does not list (ROCm virtual functions) ------------------------------


def test_event_device_ids_outside_device_properties_take_the_listed_description(tmp_path):
    t = KinetoTrace(device_name="AMD Instinct MI300X", sm_count=304, devices=1, compute_capability=(9, 4))
    t.kernel("gemm", 100, 50, launch_us=90, device=8)
    tl = traceinsight.load(t.write(tmp_path / "vf.json"))
    dev = {d.index: d for d in tl.meta.devices}
    assert dev[8].name == "AMD Instinct MI300X" and dev[8].sm_count == 304 and dev[8].compute_capability == "9.4"
    assert any("not ids in deviceProperties" in w for w in tl.meta.warnings)


def test_mixed_models_are_matched_to_unused_ids_in_order(tmp_path):
    t = KinetoTrace(devices=2)
    t.device_props[1] = dict(t.device_props[1], name="NVIDIA H100", numSms=132)
    t.kernel("a", 100, 50, launch_us=90, device=0)
    t.kernel("b", 200, 50, launch_us=190, device=5)
    tl = traceinsight.load(t.write(tmp_path / "mixed.json"))
    dev = {d.index: d for d in tl.meta.devices}
    assert dev[0].name == "NVIDIA A100-SXM4-80GB" and dev[5].name == "NVIDIA H100" and dev[5].sm_count == 132


def test_listed_ids_keep_their_own_description(tmp_path):
    t = KinetoTrace(devices=2)
    t.kernel("a", 100, 50, launch_us=90, device=1)
    tl = traceinsight.load(t.write(tmp_path / "plain.json"))
    assert not any("deviceProperties" in w for w in tl.meta.warnings)


def test_mi300x_corpus_kernels_have_a_described_gpu():
    tl = traceinsight.load(corpus_file("pytorch/tracelens_mi300x_resnet_act_ckpt_rank0of8.json.gz"))
    used = set(tl.events.loc[tl.events["kind"] == "kernel", "device"].unique().tolist())
    dev = {d.index: d for d in tl.meta.devices}
    assert used and all(dev[d].name == "AMD Instinct MI300X" and dev[d].sm_count == 304 for d in used)
