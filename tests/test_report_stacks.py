"""Findings point at the user's code: with Python frames recorded (``with_stack=True``) TI002, TI005 and TI003 name
``file.py:line`` of the innermost user frame (not torch internals); without them they say how to record them.
TI002 names the Python calls behind ``aten::_local_scalar_dense``."""

from __future__ import annotations

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
import numpy as np

from traceinsight.model.finding import SourceLine
from traceinsight.rulelib.usercode import innermost_user_frame, lead_source, source_line, user_frame

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _findings(path, code):
    return [f for f in traceinsight.analyze(path, select=[code]).findings if f.code == code]


def _item_steps(t: KinetoTrace, frames: bool) -> None:
    """3 steps of ``loss.item()`` that block for ~1 ms each, called from train.py line 31 (through torch code)."""
    for s in range(3):
        t0 = s * 2000.0
        t.step(s, t0, 2000.0)
        if frames:
            t.python("train.py(12): <module>", t0 + 1, 1990.0)
            t.python("train.py(31): train_step", t0 + 2, 1900.0)
            t.python("torch/_tensor.py(1012): __format__", t0 + 15, 1100.0)  # library frame: not the answer
            t.python("<built-in method item of Tensor object at 0x7f00>", t0 + 18, 1060.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 10, 1000.0, launch_us=t0)
        t.cpu_op("aten::item", t0 + 20, 1040.0)
        t.cpu_op("aten::_local_scalar_dense", t0 + 22, 1036.0)
        t.memcpy("DtoH", t0 + 1010, 2.0, 4, launch_us=t0 + 25, launch_dur_us=5.0, pageable=False)
        t.runtime("cudaStreamSynchronize", t0 + 32, 982.0)
        t.kernel("volta_sgemm_128x64_nn", t0 + 1360, 100.0, launch_us=t0 + 1350)


def test_user_frame_parsing():
    assert user_frame("train.py(42): train_step") == "train.py:42 (train_step)"
    assert user_frame("/home/me/proj/train.py(7): <module>") == "train.py:7 (<module>)"
    assert user_frame("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py(1501): _call_impl") is None
    assert user_frame("torch/_tensor.py(1012): item") is None
    assert user_frame("<built-in method item of Tensor object at 0x7f>") is None
    assert user_frame("aten::item") is None
    assert innermost_user_frame("train.py(10): <module> <- train.py(30): step <- torch/_tensor.py(1): item") == "train.py:30 (step)"
    assert innermost_user_frame("torch/a.py(1): f <- torch/b.py(2): g") is None


def test_source_line_keeps_the_recorded_path():
    assert source_line("/home/me/proj/train.py(42): step") == SourceLine("/home/me/proj/train.py", 42, "step")
    assert source_line("C:\\proj\\train.py(7): <module>") == SourceLine("C:\\proj\\train.py", 7, "<module>")
    assert source_line("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py(1501): _call_impl") is None
    assert source_line("torch/_tensor.py(1012): item") is None and source_line("aten::item") is None
    assert source_line("train.py(0): f") is None  # no line 0
    texts = np.array(["/a/train.py(3): f", None, "/b/util.py(9): g", "/a/train.py(3): f"], dtype=object)
    assert lead_source(texts) == SourceLine("/a/train.py", 3, "f")  # the most frequent, as the message names it
    assert lead_source(texts, "util.py:9 (g)") == SourceLine("/b/util.py", 9, "g")  # a finding's lead site
    assert lead_source(np.array([None, None], dtype=object)) is None


def test_ti002_names_user_line_and_item(tmp_path):
    t = KinetoTrace()
    _item_steps(t, frames=True)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI002")
    assert f.evidence["user_code"].iloc[0] == "train.py:31 (train_step)"  # innermost USER frame, not torch/_tensor.py
    assert "`.item()`" in f.message and "`aten::_local_scalar_dense`" in f.message
    assert "It is called at `train.py:31 (train_step)`." in f.message
    assert "with_stack=True" not in f.message
    assert f.source == SourceLine("train.py", 31, "train_step")  # what annotations and SARIF point at


def test_ti002_without_stacks_says_how_to_record(tmp_path):
    t = KinetoTrace()
    _item_steps(t, frames=False)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI002")
    assert f.evidence["user_code"].iloc[0] == "(no stack)"
    assert "torch.profiler.profile(..., with_stack=True)" in f.message
    assert f.source is None
    assert "`.item()`" in f.message


def _loader_steps(t: KinetoTrace, frames: bool) -> None:
    for s in range(5):  # 1 ms compute, then 2 ms in the DataLoader with the GPU idle
        t0 = s * 3000.0
        t.step(s, t0, 3000.0)
        for i in range(20):
            t.kernel("volta_sgemm_128x64_nn", t0 + 10 + i * 50, 50.0, launch_us=t0 + i * 0.5)
        if frames:
            t.python("train.py(12): <module>", t0 + 1, 2995.0)
            t.python("train.py(44): <module>", t0 + 1010.0, 1990.0)
            t.python("site-packages/torch/utils/data/dataloader.py(633): __next__", t0 + 1012.0, 1985.0)
        t.annotation(DL, t0 + 1015.0, 1980.0)


def test_ti005_names_user_line(tmp_path):
    t = KinetoTrace()
    _loader_steps(t, frames=True)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI005")
    assert "The wait is at `train.py:44 (<module>)`." in f.message
    assert f.source == SourceLine("train.py", 44, "<module>")


def test_ti005_without_stacks_says_how_to_record(tmp_path):
    t = KinetoTrace()
    _loader_steps(t, frames=False)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI005")
    assert "with_stack=True" in f.message and "The wait is at" not in f.message
    assert f.source is None


def _tiny_steps(t: KinetoTrace, frames: bool) -> None:
    for s in range(4):
        t0 = s * 1000.0
        t.step(s, t0, 1000.0)
        if frames:
            t.python("model.py(88): forward", t0 + 1, 990.0)
        for i in range(40):
            t.kernel("elementwise_kernel", t0 + 20 + i * 20, 2.0, launch_us=t0 + 5 + i * 20, launch_dur_us=6.0)


def test_ti003_names_user_line(tmp_path):
    t = KinetoTrace()
    _tiny_steps(t, frames=True)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI003")
    assert "Most of them are launched from `model.py:88 (forward)`." in f.message
    assert f.source == SourceLine("model.py", 88, "forward")


def test_ti003_without_stacks_says_how_to_record(tmp_path):
    t = KinetoTrace()
    _tiny_steps(t, frames=False)
    (f,) = _findings(t.write(tmp_path / "t.json"), "TI003")
    assert "with_stack=True" in f.message


def test_gap_host_activity_names_the_launching_thread_not_a_sleeping_one(tmp_path):
    """With Python stacks, TI001's evidence names the thread that issued the work ending the gap and its innermost
    frame there, not another thread sleeping in threading.py across the whole gap (issue 23)."""
    import traceinsight
    from tests.helpers.kineto_writer import KinetoTrace

    t = KinetoTrace()
    main, loader = 1, 2
    for i in range(4):
        b = i * 5_000
        t.python("threading.py(320): wait", b, 4_900, tid=loader)  # a DataLoader thread asleep, longer than anything
        t.python("train.py(10): <module>", b, 4_900, tid=main)
        t.python("train.py(31): train_step", b + 100, 4_700, tid=main)
        t.python("model.py(77): preprocess", b + 600, 3_600, tid=main)  # the busy host work inside the gap
        t.kernel("gemm", b + 300, 200, launch_us=b + 250, tid=main)
        t.kernel("gemm", b + 4_500, 200, launch_us=b + 4_450, tid=main)
    a = traceinsight.analyze(t.write(tmp_path / "threads.json"), select=["TI001"], min_impact=0)
    (f,) = [f for f in a.findings if f.code == "TI001"]
    acts = f.evidence["host_activity"].tolist()
    assert acts and all(x.startswith(f"thread {main}: in ") for x in acts), acts
    assert sum(x.startswith(f"thread {main}: in model.py(77): preprocess") for x in acts) >= 4  # the 4 ms gaps
    assert not any("threading.py" in x for x in acts)
    from traceinsight.render import render

    page = render(a, "html")  # the Python lane draws the launching thread's frames, named as such
    assert f"Python (thread {main})" in page and "threading.py" not in page
