"""``traceinsight record``: unmodified scripts run under the injected bootstrap, a steady-state window recorded and
analysed; ``--sweep`` compares runs. The recording tests run real (tiny) PyTorch and Keras programs and skip when
the framework is absent; the command-line and pass-through tests need no framework."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from traceinsight.record import sweep

ROOT = Path(__file__).resolve().parents[1]
#: Small windows keep the runs short: 3 steps skipped, 1 warmed up, 3 recorded -> steps 5-7.
WINDOW = ["--skip", "3", "--warmup", "1", "--active", "3"]

TRAIN = """
import sys
import torch
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
fail_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(steps):
    if i == fail_at:
        raise ValueError(f"boom at step {i}")
    with torch.profiler.record_function(f"userstep{i + 1}"):
        opt.zero_grad()
        model(torch.randn(batch, 16)).pow(2).mean().backward()
        opt.step()
print(f"trained {steps} steps")
"""

INFER = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(32, 4)))
with torch.no_grad():
    for i in range(12):
        with torch.profiler.record_function(f"userstep{i + 1}"):
            model(torch.randn(8, 16))
print("inferred")
"""


def _script(tmp_path: Path, text: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env.update(TF_CPP_MIN_LOG_LEVEL="2", **extra)
    return env


def _record(out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "traceinsight.cli.app", "record", "-o", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env or _env(), timeout=300)


def _statuses(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "status").glob("*.status"))]


def _user_steps(trace: Path) -> list[str]:
    import gzip

    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {e["name"] for e in events if str(e.get("name", "")).startswith("userstep")}
    return sorted(names, key=lambda n: int(n.removeprefix("userstep")))


# -- recording with PyTorch -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_training_script_recorded_after_warmup(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "--", sys.executable, str(_script(tmp_path, TRAIN)), "12")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained 12 steps\n"  # the program's output is its own, unchanged
    (status,) = _statuses(out)
    assert status["driver"] == "optimizer" and status["steps_seen"] == 12 and status["window"] == [5, 7] and status["complete"]
    (trace,) = (out / "trace").glob("*.pt.trace.json.gz")
    assert _user_steps(trace) == ["userstep5", "userstep6", "userstep7"]  # after the skipped and warm-up steps
    report = json.loads((out / "traceinsight-report.json").read_text())
    assert report["steps"]["count"] == 3 and report["steps"]["source"]["marker"] == "ProfilerStep"
    assert report["efficiency"]["shapes_recorded"] is True  # shapes on by default
    assert report["verdict"]["category"] == "no_gpu"  # a CPU run says so, and judges no GPU
    assert (out / "traceinsight-report.html").is_file() and (out / "traceinsight-report.md").is_file()
    assert "recorded steps 5-7 (optimizer steps; 3 skipped, 1 warm-up); 12 step(s) seen in all" in done.stderr
    assert "no GPU was visible to the program" in done.stderr
    kept = json.loads((out / "record.json").read_text())  # what was run and recorded, beside the trace
    assert kept["exit_code"] == 0 and kept["trace"] == f"trace/{trace.name}" and kept["window"]["first_step"] == 5


@pytest.mark.slow
def test_inference_script_steps_are_outermost_forwards(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", sys.executable, str(_script(tmp_path, INFER)))
    assert done.returncode == 0, done.stderr
    (status,) = _statuses(out)
    assert status["driver"] == "forward" and status["steps_seen"] == 12 and status["window"] == [5, 7]
    (trace,) = (out / "trace").glob("*.pt.trace.json.gz")
    assert _user_steps(trace) == ["userstep5", "userstep6", "userstep7"]  # nested Sequential: one step per batch
    assert json.loads((out / "traceinsight-report.json").read_text())["steps"]["count"] == 3


@pytest.mark.slow
def test_script_ending_inside_the_window_is_analysed(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", sys.executable, str(_script(tmp_path, TRAIN)), "6")
    assert done.returncode == 0, done.stderr
    assert "ended after 6 step(s) (optimizer steps), inside the recording window (steps 5-7): 2 of 3 step(s) recorded" in done.stderr
    (trace,) = (out / "trace").glob("*.pt.trace.json.gz")
    assert _user_steps(trace) == ["userstep5", "userstep6"]  # step 7 never ran
    assert (out / "traceinsight-report.json").is_file()


@pytest.mark.slow
def test_script_ending_before_the_window_says_so(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "--", sys.executable, str(_script(tmp_path, TRAIN)), "3")
    assert done.returncode == 3  # the program succeeded, but there is nothing to analyse
    assert "the program ended after 3 step(s) (optimizer steps), before the recording window (steps 5-7): nothing recorded" in done.stderr
    assert not list((out / "trace").iterdir()) and not (out / "traceinsight-report.html").exists()


@pytest.mark.slow
def test_script_that_raises_keeps_its_traceback_and_exit_code(tmp_path):
    pytest.importorskip("torch")
    script = _script(tmp_path, TRAIN)
    plain = subprocess.run([sys.executable, str(script), "12", "8", "9"], capture_output=True, text=True, env=_env())
    assert plain.returncode == 1 and plain.stderr.startswith("Traceback (most recent call last):")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", sys.executable, str(script), "12", "8", "9")
    assert done.returncode == plain.returncode
    assert plain.stderr in done.stderr  # the traceback reaches the user unchanged
    assert (out / "traceinsight-report.json").is_file()  # the window (steps 5-7) was recorded before the error


@pytest.mark.slow
def test_stop_after_window_ends_the_program(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--stop-after-window", "--", sys.executable, str(_script(tmp_path, TRAIN)), "500")
    assert done.returncode == 0 and "trained" not in done.stdout  # ended at step 7, not 500
    (status,) = _statuses(out)
    assert status["steps_seen"] == 7 and status["complete"]


@pytest.mark.slow
def test_sweep_of_two_batch_sizes(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "sweep"
    done = _record(out, *WINDOW, "-f", "html", "--sweep", "BATCH=4,32", "--", sys.executable, str(_script(tmp_path, TRAIN)), "10", "{BATCH}")
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "traceinsight-sweep.json").read_text())
    assert [r["value"] for r in doc["runs"]] == ["4", "32"] and doc["samples_per_step"] == "value" and doc["y"] == "sample_ms"
    for r in doc["runs"]:
        run = out / f"BATCH={r['value']}"
        assert (run / "traceinsight-report.html").is_file() and (run / "traceinsight-report.json").is_file()
        assert r["steps"] == 3 and r["sample_ms"] == pytest.approx(r["step_ms"] / int(r["value"]))
        assert r["gpu"] is False and r["bound_category"] == "no_gpu"
    page = (out / "traceinsight-sweep.html").read_text()
    assert "<svg" in page and "time per sample" in page and 'href="BATCH=4/traceinsight-report.html"' in page
    assert "| 4 |" in (out / "traceinsight-sweep.md").read_text()


@pytest.mark.slow
def test_step_marker_with_torch(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "steplib.py").write_text(textwrap.dedent("""
        import torch
        def one_step(i, x):
            with torch.profiler.record_function(f"userstep{i + 1}"):
                return (x @ x).sum()
    """))
    script = _script(tmp_path, "import torch, steplib\nfor i in range(9):\n    steplib.one_step(i, torch.randn(32, 32))\n")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--step-marker", "steplib:one_step", "--", sys.executable, str(script),
                   env=_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)])))
    assert done.returncode == 0, done.stderr
    (status,) = _statuses(out)
    assert status["driver"] == "marker" and status["window"] == [5, 7] and status["complete"]
    (trace,) = (out / "trace").glob("*.pt.trace.json.gz")
    assert _user_steps(trace) == ["userstep5", "userstep6", "userstep7"]


@pytest.mark.slow
def test_torchrun_records_every_rank_into_a_job(tmp_path):
    pytest.importorskip("torch")
    import shutil

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("no torchrun next to this Python")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", torchrun, "--nproc_per_node", "2", str(_script(tmp_path, TRAIN)), "10")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "trace").iterdir()) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert sorted(s["name"] for s in _statuses(out)) == ["rank0", "rank1"]  # the launcher itself recorded nothing
    job = json.loads((out / "traceinsight-report.json").read_text())
    assert job["summary"]["ranks"] == 2 and job["summary"]["steps_per_rank"] == 3


@pytest.mark.slow
def test_dataloader_workers_are_left_alone(tmp_path):
    """Spawned DataLoader workers start a fresh interpreter, so the bootstrap runs in them too; they must neither
    count steps nor write a status or a trace: only the training process does."""
    pytest.importorskip("torch")
    script = _script(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Augmented(Dataset):  # transforms are often modules (torchvision's are): forwards inside the workers
            def __init__(self):
                self.augment = torch.nn.Dropout(0.1)
            def __len__(self):
                return 80
            def __getitem__(self, i):
                return self.augment(torch.randn(16)), torch.randn(1)

        if __name__ == "__main__":
            ds = Augmented()
            loader = DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="spawn")
            model = torch.nn.Linear(16, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    """)
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", sys.executable, str(script))
    assert done.returncode == 0, done.stderr
    (status,) = _statuses(out)  # one process recorded: the one that trains
    assert status["steps_seen"] == 10 and status["complete"]
    assert len(list((out / "trace").iterdir())) == 1


# -- recording with Keras -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_keras_fit_recorded_without_edits(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    out = tmp_path / "run"
    done = _record(out, *WINDOW, "-f", "json", "--", sys.executable, str(ROOT / "examples" / "keras_tiny.py"), "--batches", "10")
    assert done.returncode == 0, done.stderr
    assert "trained 10 batches" in done.stdout
    (status,) = _statuses(out)
    assert status["driver"] == "keras" and status["steps_seen"] == 10 and status["window"] == [5, 7] and status["complete"]
    report = json.loads((out / "traceinsight-report.json").read_text())
    steps = report["steps"]["per_step"]
    assert [s["step"] for s in steps] == [5, 6, 7]  # the batches after the warm-up, marked as steps


# -- the command line and pass-through (no framework needed) ---------------------------------------------------------
def test_no_command_is_a_usage_error(tmp_path):
    done = _record(tmp_path / "run")
    assert done.returncode == 2 and "give the command to run after --" in done.stderr


def test_bad_analyze_option_fails_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').close()")
    done = _record(tmp_path / "run", "--min-impact", "lots", "--", sys.executable, str(script))
    assert done.returncode == 2 and "--min-impact" in done.stderr and not marker.exists()


def test_unknown_command_exits_127(tmp_path):
    done = _record(tmp_path / "run", "--", str(tmp_path / "no-such-program"))
    assert done.returncode == 127 and "cannot run" in done.stderr


def test_signal_and_no_steps_pass_through(tmp_path):
    script = _script(tmp_path, "import os, signal\nprint('hi', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n")
    done = _record(tmp_path / "run", "--", sys.executable, str(script))
    assert done.returncode == 128 + signal.SIGTERM and done.stdout == "hi\n"
    assert "the program was ended by SIGTERM before its first step" in done.stderr


def test_no_steps_seen_names_the_way_out(tmp_path):
    done = _record(tmp_path / "run", "--", sys.executable, str(_script(tmp_path, "print('no loop here')\n")))
    assert done.returncode == 3 and done.stdout == "no loop here\n"
    assert "no steps seen" in done.stderr and "--step-marker MODULE:FUNCTION" in done.stderr


def test_bootstrap_leaves_the_environment_alone(tmp_path):
    """The user's own sitecustomize still runs, sys.path holds no trace of the bootstrap's folder, and the only added
    variable is the recording's settings."""
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    script = _script(tmp_path, """
        import json, os, sys
        print(json.dumps({"site": os.environ.get("USER_SITE_RAN"), "path": sys.path,
                          "boot": "_traceinsight_record_boot" in sys.modules}))
    """)
    done = _record(tmp_path / "run", "--", sys.executable, str(script), env=_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(user)])))
    seen = json.loads(done.stdout)
    assert seen["site"] == "1" and seen["boot"] is True
    assert not any("traceinsight-boot-" in p for p in seen["path"])


def test_step_marker_counts_calls_of_an_importable_function(tmp_path):
    """--step-marker without a framework: each call is a step (nothing to record with, so nothing recorded, and the
    status says how many calls were seen)."""
    (tmp_path / "steplib.py").write_text("def one_step(i):\n    return i * 2\n")
    script = _script(tmp_path, "import steplib\nfor i in range(4):\n    steplib.one_step(i)\n")
    out = tmp_path / "run"
    done = _record(out, "--step-marker", "steplib:one_step", "--", sys.executable, str(script),
                   env=_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)])))
    (status,) = _statuses(out)
    assert status["driver"] == "marker" and status["steps_seen"] == 4 and done.returncode == 3


def test_step_marker_in_the_script_itself(tmp_path):
    """__main__:FUNC: the script's own function, whose calls (not nested ones) are the steps."""
    script = _script(tmp_path, "def one_step(i):\n    return one_step(i - 1) if i % 2 else i\nfor i in range(5):\n    one_step(i)\n")
    out = tmp_path / "run"
    _record(out, "--step-marker", "__main__:one_step", "--", sys.executable, str(script))
    (status,) = _statuses(out)
    assert status["driver"] == "marker" and status["steps_seen"] == 5  # the recursive calls are inside a step


# -- the sweep's comparison (no framework needed) --------------------------------------------------------------------
def test_sweep_substitutes_or_sets_the_variable():
    assert sweep.command_for(["python", "t.py", "--bs={BS}"], "BS", "64", None) == (["python", "t.py", "--bs=64"], {})
    assert sweep.command_for(["python", "t.py"], "BS", "64", "cpu") == (["python", "t.py"], {"BS": "64", "CUDA_VISIBLE_DEVICES": ""})
    assert sweep.command_for(["python", "t.py", "--device", "{device}", "{BS}"], "BS", "8", "gpu") == (["python", "t.py", "--device", "cuda", "8"], {})
    with pytest.raises(sweep.SweepError):
        sweep.parse("BS=8")
    with pytest.raises(sweep.SweepError):
        sweep.parse("1BS=8,16")
    assert sweep.parse("BATCH= 8, 16 ,32") == ("BATCH", ["8", "16", "32"])
    assert sweep.samples_basis("BATCH", None) == "value" and sweep.samples_basis("LR", None) is None


def _report(step_ns: int, category: str, headline: str, busy: float) -> dict:
    return {"kpis": {"steps": 3, "gpu_busy_pct": busy, "mean_step_ns": step_ns}, "trace": {"devices": [{"index": 0}]},
            "workload": {"steps": [{"dur_ns": step_ns, "warmup": False}] * 3},
            "verdict": {"category": category, "headline": headline, "claimed_by": "f1"},
            "findings": [{"fingerprint": "f1", "title": f"lever of {category}"}],
            "efficiency": {"mfu_pct": 12.5}, "memory": {"devices": [{"peak_reserved_bytes": 2**30, "capacity_bytes": 2**33, "headroom_bytes": 7 * 2**30}]}}


def test_sweep_comparison_marks_where_the_bound_changes(tmp_path):
    runs = [
        sweep.Run("16", None, tmp_path / "BS=16", 0, report=_report(4_000_000, "launch_overhead", "Bound by launch overhead", 20.0)),
        sweep.Run("64", None, tmp_path / "BS=64", 0, report=_report(5_000_000, "compute", "Compute-bound", 90.0)),
        sweep.Run("256", None, tmp_path / "BS=256", 1),  # out of memory: the run failed
    ]
    doc = sweep.compare("BS", runs, "value")
    assert [r["sample_ms"] for r in doc["runs"]] == [0.25, pytest.approx(5 / 64), None]
    assert doc["bound_changes"] == [
        {"device": None, "between": ["16", "64"], "from": "Bound by launch overhead", "to": "Compute-bound"},
        {"device": None, "between": ["64", "256"], "from": "Compute-bound", "to": "failed (exit 1)"},
    ]
    assert doc["fastest"] == {"run": "64"} and doc["runs"][0]["lever"] == "lever of launch_overhead"
    paths = sweep.write(doc, tmp_path)
    page = paths[-1].read_text()
    assert page.count('stroke-dasharray="5 4"') == 2 and "bound changes" in page and "✕ failed (exit 1)" in page
    assert "1.00 GiB" in page and "12.5 %" in page and "4.00 ms – 4.00 ms" in page  # the steps' spread
    assert not any("vary more than" in line for line in sweep.summary_lines(doc))
    doc["runs"][0]["step_max_ms"] = 13.0  # one step more than 3x another: say the comparison is noisy
    assert "Step times vary more than 3x within 1 of 3 run(s) (BS=16)" in " ".join(sweep.summary_lines(doc))
    assert "The bound changes between BS=16 and 64: Bound by launch overhead → Compute-bound." in sweep.summary_lines(doc)
    md = paths[1].read_text()
    assert "![time per sample against BS](traceinsight-sweep.svg)" in md and "| 256 | — | — | — | — | — | failed \\(exit 1\\) | — | — | — | — | BS=256 |" in md  # no report to link


def test_cpu_only_step_outlier_is_not_blamed_on_the_gpu():
    """A CPU-only recording has no GPU window, so no ledger bucket grows in a slow step: the steps sentence says the
    extra time is the host's instead of "mostly more compute (+0 ns)"."""
    from traceinsight.render.steps_view import spread_sentence

    steps = {"count": 5, "source": {"marker": "ProfilerStep", "how": "profiler", "why": "the profiler's markers"},
             "spread": {"steps": 5, "median_ns": 1_000_000, "p10_ns": 900_000, "p90_ns": 5_000_000, "min_ns": 900_000, "max_ns": 9_000_000},
             "outlier": {"step": 4, "name": "ProfilerStep#4", "x_median": 9.0, "cause": "compute", "cause_ns": 0}}
    assert spread_sentence(steps).endswith("step 4 (ProfilerStep#4) is 9.0x the median, with no more GPU time than the others (the extra time is on the host).")
    steps["outlier"]["cause_ns"] = 2_000_000
    assert spread_sentence(steps).endswith("is 9.0x the median, mostly more compute (+2.00 ms).")
