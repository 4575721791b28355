"""TensorFlow/JAX profiler ingestion against the real corpus (../shared/traces/tf)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import traceinsight
from traceinsight.vocab.errors import EXIT_UNREADABLE, TraceReadError
from traceinsight.ingest import detect
from traceinsight.derive.tf_signals import recurrent_loop_signature

from .conftest import corpus_file
from .helpers.xplane_wire import count_events

E4040_RUN = "tf/e4040-t4-keras-cnn/train/plugins/profile/2022_11_04_21_26_12"
E4040 = f"{E4040_RUN}/instance-ecbm.xplane.pb"
E4040_JSON = f"{E4040_RUN}/instance-ecbm.trace.json.gz"
DEMO = "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
DEMO_JSON = "tf/tensorflow-profiler-demo/GPU-multi-worker/34.83.195.179_6003.trace.json.gz"
JAX = "tf/tracelens-jax-mi300x/tw003.xplane.pb"
DERIVED = {"TensorFlow Ops", "TensorFlow Name Scope", "Steps"}


def _independent_counts(path):
    """Stream / derived / host event counts from the raw wire reader (no descriptors shared with the parser)."""
    counts = count_events(path.read_bytes())
    gpu_stream, derived, host = {}, 0, 0
    for plane, lines in counts.items():
        for line, n in lines.items():
            if plane.startswith("/device:GPU:"):
                dev = int(plane.rsplit(":", 1)[1])
                if line.startswith("Stream #"):
                    gpu_stream[dev] = gpu_stream.get(dev, 0) + n
                elif line in DERIVED - {"Steps"}:
                    derived += n
            elif plane == "/host:CPU":
                host += n
    return gpu_stream, derived, host


@pytest.mark.parametrize("rel", [E4040, DEMO, JAX])
def test_xplane_event_counts_match_wire_count(rel):
    path = corpus_file(rel)
    tl = traceinsight.load(path)
    ev = tl.events
    gpu_stream, derived, host = _independent_counts(path)
    gpu = ev[ev["kind"].isin(["kernel", "memcpy", "memset"])]
    assert gpu.groupby("device").size().to_dict() == gpu_stream
    assert int((ev["kind"] == "gpu_annotation").sum()) == derived
    assert int((ev["device"] < 0).sum()) - int((ev["kind"] == "step").sum()) == host
    assert ev["start_ns"].min() == 0
    assert (ev["dur_ns"] >= 0).all()


@pytest.fixture(scope="module")
def e4040():
    """The E4040 XPlane timeline, loaded once for the tests of this file (they only read it)."""
    return traceinsight.load(corpus_file(E4040))


@pytest.fixture(scope="module")
def demo():
    """The 8-GPU demo XPlane timeline, loaded once for the tests of this file (they only read it)."""
    return traceinsight.load(corpus_file(DEMO))


def test_e4040_values(e4040):
    tl = e4040
    ev = tl.events
    assert tl.meta.source_format == "tensorflow-xplane"
    assert [(d.index, d.compute_capability, d.sm_count) for d in tl.meta.devices] == [(0, "7.5", 40)]
    assert tl.meta.devices[0].memory_bytes == 15843721216
    assert (ev["kind"] == "kernel").sum() == 116 and (ev["kind"] == "memcpy").sum() == 8
    cp = ev[ev["kind"] == "memcpy"]
    assert cp["copy_kind"].value_counts().to_dict() == {"HtoD": 5, "DtoH": 3, "DtoD": 0, "HtoH": 0, "PtoP": 0, "other": 0}
    assert int(cp["bytes"].max()) == 802816  # memcpy_details "size:802816"
    steps = ev[ev["kind"] == "step"]
    assert steps["name"].tolist() == ["Step 0"] and steps["dur_ns"].tolist() == [9008359]
    k = ev[ev["kind"] == "kernel"]
    assert set(k["stream"]) == {13, 17}
    assert k["registers"].notna().all() and k["grid"].notna().all()
    # every GPU row joins its host launch on (rank, pid, correlation)
    launches = ev[ev["kind"] == "runtime"][["rank", "pid", "correlation"]]
    joined = ev[ev["device"] >= 0].merge(launches, on=["rank", "pid", "correlation"])
    assert len(joined) == 124
    # inherited from the launches: 120 of 124 launches sit inside the step (4 were issued just before it)
    assert int((ev.loc[ev["kind"].isin(["kernel", "memcpy"]), "step"] == 0).sum()) == 120
    # tf.data iterator events keep their names
    names = set(ev["name"].astype(str))
    assert {"IteratorGetNextOp::DoCompute", "IteratorGetNext:IteratorGetNext", "Iterator::Model"} <= names
    assert tl.span_ns == pytest.approx(10.83e6, rel=0.01)


def test_kernel_details_parsed(demo):
    ev = demo.events
    row = ev[(ev["kind"] == "kernel") & ev["grid"].astype(str).eq("160,1,1")].iloc[0]
    assert row["registers"] == 38 and row["shared_mem"] == 0 and row["block"] == "1024,1,1"


def test_multi_gpu_demo_shows_gpus_with_events(demo):
    tl = demo
    ev = tl.events
    assert len(tl.meta.devices) == 8
    assert {d.compute_capability for d in tl.meta.devices} == {"7.0"}
    assert sorted(ev.loc[ev["kind"] == "kernel", "device"].unique()) == [4, 6]
    assert sorted(ev.loc[ev["kind"] == "memcpy", "device"].unique()) == [1, 4, 6]
    assert (ev["kind"] == "kernel").sum() == 1330
    # the Steps line on GPU 4 and GPU 6 is one step, not two
    assert (ev["kind"] == "step").sum() == 1
    # derived op lines are annotations, never GPU activity
    assert not ev.loc[ev["kind"] == "gpu_annotation", "name"].astype(str).str.contains("EigenMetaKernel").any()


def test_jax_mi300x_loads():
    tl = traceinsight.load(corpus_file(JAX))
    ev = tl.events
    assert {d.vendor for d in tl.meta.devices} == {"AMD"} and len(tl.meta.devices) == 8
    assert tl.meta.devices[0].sm_count == 304 and tl.meta.devices[0].compute_capability == "9.4"
    assert ev.loc[ev["kind"] == "kernel"].groupby("device").size().to_dict() == {0: 60, 1: 25, 2: 25, 3: 25, 4: 25, 5: 25, 6: 25, 7: 25}
    assert tl.meta.start_unix_ns is not None and tl.meta.start_unix_ns >= 1771595639214724894
    rt = ev[ev["kind"] == "runtime"]
    assert rt["name"].astype(str).str.startswith("hip").all()
    assert tl.meta.tool.startswith("JAX")


def test_trace_json_matches_xplane(e4040):
    a = traceinsight.load(corpus_file(E4040_JSON))
    b = e4040
    assert a.meta.source_format == "tensorflow-json"
    for kind in ("kernel", "memcpy", "runtime", "step", "gpu_annotation"):
        assert (a.events["kind"] == kind).sum() == (b.events["kind"] == kind).sum(), kind
    assert a.span_ns == pytest.approx(b.span_ns, abs=2)
    big = traceinsight.load(corpus_file(DEMO_JSON)).events
    assert big.loc[big["kind"] == "kernel"].groupby("device").size().to_dict() == {4: 665, 6: 665}


def test_detect():
    assert detect(corpus_file(E4040)) == "tensorflow-xplane"
    assert detect(corpus_file(E4040_JSON)) == "tensorflow-json"
    assert detect(corpus_file(E4040_RUN)) == "tensorflow-logdir"
    assert detect(corpus_file("tf/e4040-t4-keras-cnn")) == "tensorflow-logdir"


def test_tf_json_sniff_rejects_kineto():
    from pathlib import Path

    from traceinsight.ingest import read_head
    from traceinsight.ingest.tf.sniff import sniff_json

    for p in sorted((corpus_file("pytorch")).glob("*.json*"))[:3]:
        assert not sniff_json(Path(p), read_head(Path(p)))


def test_logdir_newest_run_and_warning(tmp_path):
    src = corpus_file(E4040)
    for run in ("2022_11_04_21_26_12", "2021_01_01_00_00_00", "2020_05_05_05_05_05"):
        d = tmp_path / "train" / "plugins" / "profile" / run
        d.mkdir(parents=True)
        shutil.copy(src, d / "instance-ecbm.xplane.pb")
    tl = traceinsight.load(tmp_path)
    assert tl.meta.extra["run"] == "2022_11_04_21_26_12"
    # source_format names the files read (docs/timeline.md); the logdir and run folder are in extra
    assert tl.meta.source_format == "tensorflow-xplane"
    assert tl.meta.extra["logdir"] == str(tmp_path)
    assert tl.meta.extra["run_dir"] == str(tmp_path / "train" / "plugins" / "profile" / "2022_11_04_21_26_12")
    assert any(w.startswith("3 runs found, read newest 2022_11_04_21_26_12") for w in tl.meta.warnings)
    old = traceinsight.load(tmp_path, run="2021_01_01_00_00_00")
    assert old.meta.extra["run"] == "2021_01_01_00_00_00"
    with pytest.raises(TraceReadError, match="no profile run named"):
        traceinsight.load(tmp_path, run="nope")


def test_logdir_of_trace_json_reports_json_format(tmp_path):
    d = tmp_path / "plugins" / "profile" / "2022_11_04_21_26_12"
    d.mkdir(parents=True)
    shutil.copy(corpus_file(E4040_JSON), d / "instance-ecbm.trace.json.gz")
    tl = traceinsight.load(tmp_path)
    assert tl.meta.source_format == "tensorflow-json"
    assert tl.meta.extra["run"] == "2022_11_04_21_26_12" and tl.meta.extra["hosts"] == ["instance-ecbm"]
    assert (tl.events["kind"] == "kernel").sum() == 116


def test_logdir_multi_host_ranks(tmp_path):
    src = corpus_file(DEMO)
    run = tmp_path / "plugins" / "profile" / "2020_12_23_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(src, run / "34.83.195.179_6003.xplane.pb")
    shutil.copy(src, run / "34.83.195.180_6003.xplane.pb")
    tl = traceinsight.load(tmp_path)
    ev = tl.events
    assert tl.meta.ranks == [0, 1] and tl.meta.world_size == 2
    assert ev.groupby("rank").size().tolist() == [23127, 23127]
    assert ((ev["kind"] == "kernel") & (ev["rank"] == 1)).sum() == 1330
    assert len(tl.meta.devices) == 16 and {d.rank for d in tl.meta.devices} == {0, 1}
    assert ev["start_ns"].min() == 0


@pytest.mark.parametrize(
    "variant,act,per_iter_matmul",
    [("keras3-lstm_cudnn_eligible", "tanh", 2.0), ("keras2-lstm_cudnn_eligible", "tanh", 2.0),
     ("keras3-lstm_relu_activation", "relu", 2.0), ("keras2-lstm_recurrent_dropout", "tanh", None)],
)
def test_recurrent_loop_signature_generated_cpu(variant, act, per_iter_matmul):
    tl = traceinsight.load(corpus_file(f"tf/generated-cpu/{variant}"))
    sig = recurrent_loop_signature(tl)
    fwd = sig[sig["direction"] == "forward"].iloc[0]
    assert fwd["iterations"] == 64  # 4 steps x 16 timesteps
    assert fwd["sigmoid"] == 192
    assert fwd[act] == 128
    if per_iter_matmul:
        assert fwd["matmul_per_iteration"] == per_iter_matmul
    else:
        assert fwd["matmul_per_iteration"] > 2  # recurrent dropout multiplies the recurrent kernel per gate
    assert (sig["direction"] == "backward").sum() == 1
    assert (sig["cudnn_ops"] == 0).all()
    if variant.startswith("keras2"):
        assert fwd["steps"] == 4 and fwd["iterations_per_step"] == 16


def test_keras3_has_no_steps_and_warns():
    tl = traceinsight.load(corpus_file("tf/generated-cpu/keras3-lstm_cudnn_eligible"))
    assert (tl.events["kind"] == "step").sum() == 0
    assert any("no step markers" in w for w in tl.meta.warnings)
    assert any("host-only capture" in w for w in tl.meta.warnings)


def test_keras2_train_markers_are_steps():
    tl = traceinsight.load(corpus_file("tf/generated-cpu/keras2-lstm_cudnn_eligible"))
    steps = tl.events[tl.events["kind"] == "step"]
    assert steps["name"].astype(str).tolist() == [f"train {i}" for i in range(4)]
    assert sorted(tl.events.loc[tl.events["step"] >= 0, "step"].unique()) == sorted(
        int(s.rsplit(" ", 1)[1]) for s in steps["name"].astype(str))


@pytest.mark.parametrize("cut", [0.3, 0.7])
def test_truncated_xplane_one_line_error(tmp_path, cut):
    data = corpus_file(E4040).read_bytes()
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(TraceReadError) as info:
        traceinsight.load(bad)
    assert "\n" not in str(info.value) and "bad.xplane.pb" in str(info.value)


def test_garbage_xplane_and_cli_exit_code(tmp_path):
    bad = tmp_path / "junk.xplane.pb"
    bad.write_bytes(b"\xff\xfe\x00garbage" * 50)
    with pytest.raises(TraceReadError):
        traceinsight.load(bad)
    code = "import sys; from traceinsight.cli.app import main; sys.argv = ['traceinsight', 'analyze', sys.argv[1]]; main()"
    proc = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True)
    assert proc.returncode == EXIT_UNREADABLE, proc.stderr
    err_lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(err_lines) <= 2


def test_import_does_not_import_tensorflow():
    code = "import sys, traceinsight, traceinsight.keras, traceinsight.derive.tf_signals, traceinsight.ingest.xplane.reader; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_schema_has_no_tensorflow_dependency():
    from traceinsight.ingest.xplane.schema import file_descriptor, messages

    fdp = file_descriptor()
    assert not fdp.dependency
    assert set(messages()) == {"XSpace", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata"}
    assert np.all([f.number for f in fdp.message_type[2].field] == [1, 10, 2, 11, 3, 9, 4])


# -- hostile trace.json.gz fields (issue 14): a bad field drops its event, never the trace, never a traceback --------

_TF_DOC = {"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "Stream #2(Compute)"}},
    {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/host:CPU"}},
    {"ph": "X", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "name": "gemm", "args": {"correlation_id": "7"}},
    {"ph": "X", "pid": 1, "tid": 2, "ts": 20, "dur": 5, "name": "MemcpyH2D",
     "args": {"memcpy_details": "size:4096", "correlation_id": "8"}},
    {"ph": "X", "pid": 3, "tid": 4, "ts": 8, "dur": 1, "name": "cudaLaunchKernel", "args": {"correlation_id": "7"}},
    {"ph": "X", "pid": 3, "tid": 4, "ts": 0, "dur": 40, "name": "train", "args": {"step_num": "1"}}]}
_HOSTILE = ["1e400", "-1e400", "1e300", "9223372036854775808", "-9223372036854775809", "1" * 70, '"12"', '"x"',
            "[1]", "{}", "null", "true", "NaN", "-1", "0.5", '"\\u001b[2J"', '[[1, 2], null]']
_FIELDS = ["ts", "dur", "pid", "tid", "name", "args", "args.correlation_id", "args.step_num", "args.kernel_details",
           "args.memcpy_details", "args.long_name", "ph"]


def _tf_doc_with(edits: list[tuple[int, str, str]]) -> bytes:
    import copy
    import json

    doc = copy.deepcopy(_TF_DOC)
    raw = {}
    for k, (which, field, token) in enumerate(edits):
        ev = doc["traceEvents"][which % len(doc["traceEvents"])]
        marker = f"@@{k}@@"
        if field.startswith("args."):
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            ev["args"][field[5:]] = marker
        else:
            ev[field] = marker
        raw[json.dumps(marker)] = token
    text = json.dumps(doc)
    for marker, token in raw.items():
        text = text.replace(marker, token)
    return text.encode()


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=120, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 6), st.sampled_from(_FIELDS), st.sampled_from(_HOSTILE)), max_size=4))
def test_trace_json_any_field(tmp_path, edits):
    import gzip

    path = tmp_path / "h.trace.json.gz"
    path.write_bytes(gzip.compress(_tf_doc_with(edits)))
    try:
        tl = traceinsight.load(path, format="tensorflow-json")
    except TraceReadError as exc:
        msg = str(exc)
        assert "\n" not in msg and "cannot read" not in msg, msg  # "cannot read": an exception escaped the reader
        return
    ev = tl.events
    assert (ev["dur_ns"] >= 0).all() and (ev["start_ns"] >= 0).all() and 0 <= tl.span_ns < 1 << 62


@pytest.mark.parametrize("token", ["1e400", "9223372036854775808", '"x"', "[1]", "null", "true"])
def test_trace_json_bad_time_drops_the_event(tmp_path, token):
    import gzip

    path = tmp_path / "h.trace.json.gz"
    path.write_bytes(gzip.compress(_tf_doc_with([(3, "ts", token)])))
    tl = traceinsight.load(path, format="tensorflow-json")
    assert "gemm" not in set(tl.events["name"].astype(str))
    assert len(tl.events) == 3
    assert any("1 event dropped: ts or dur is not a number within range" in w for w in tl.meta.warnings)


@pytest.mark.parametrize("field,token", [("pid", "[1]"), ("tid", "{}"), ("tid", "1e400"), ("args", "[1]"),
                                         ("args.correlation_id", "[1, 2]"), ("args.step_num", '"x"'),
                                         ("tid", "9223372036854775808")])
def test_trace_json_odd_ids_and_args_load(tmp_path, field, token):
    import gzip

    path = tmp_path / "h.trace.json.gz"
    path.write_bytes(gzip.compress(_tf_doc_with([(3, field, token), (6, field, token)])))
    tl = traceinsight.load(path, format="tensorflow-json")
    assert len(tl.events) >= (2 if field == "pid" else 4)  # an unnamed pid is on no plane: its events are not read
