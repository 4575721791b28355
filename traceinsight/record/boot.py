"""The bootstrap ``traceinsight record`` injects into the recorded program's Python processes.

It is copied, as a standalone file, next to a ``sitecustomize.py`` in a temporary folder put first on PYTHONPATH, so
every Python process the command starts (the script, a launcher such as ``torchrun`` and each worker it spawns) runs
it before the user's code. It imports nothing but the standard library and, once the user's code imports them, the
framework it hooks: the recorded program may run in another interpreter than traceinsight, without pandas or even
without traceinsight installed, so nothing here may import the package.

What it does in each process: watch imports (a meta-path finder that runs a callback right after a module's code
has run) and, when the framework arrives, install global hooks that count steps:

- PyTorch: the end of each ``Optimizer.step`` (``register_optimizer_step_post_hook``) is a step boundary; a process
  that creates no optimizer and calls a module's ``forward`` again (inference) counts the end of each outermost
  forward call (global forward hooks) instead; ``--step-marker MODULE:FUNCTION`` makes each call of that function
  a step, for anything else. At step ``skip`` ``torch.profiler`` starts with a schedule (``warmup`` steps, then
  ``active`` recorded steps), shapes and memory on, and the trace is written when the schedule ends.
- Keras: ``Model.fit`` gets one more callback (the user's list is copied, not changed) that starts the TensorFlow
  profiler at the chosen batch and stops it ``active`` batches later, counting batches across epochs and fits.
- JAX (and TensorFlow without Keras): ``jax.profiler`` (``tf.profiler``) runs around the chosen calls of the
  ``--step-marker`` function, each call inside a step annotation.
- ``--nsys``: instead of the framework profiler, ``cudaProfilerStart``/``Stop`` around the same steps, for
  ``nsys profile --capture-range=cudaProfilerApi``, with an NVTX range per step.

Each process that saw a step writes a status file (steps seen, window, trace written, complete or not) for the
command to read afterwards. Processes that only load data are left alone: a forked copy of the process that
installed the hooks (its pid differs) and a DataLoader worker (``get_worker_info()``) never count or record.
Nothing is printed: the program's output stays its own.
"""

from __future__ import annotations

import atexit
import functools
import gzip
import importlib.abc
import importlib.util
import json
import os
import shutil
import socket
import sys
import time

ENV = "TRACEINSIGHT_RECORD"


def install() -> None:
    """Read the configuration from the environment and install the import watch; never raises (a broken bootstrap
    must not break the user's program)."""
    raw = os.environ.get(ENV)
    if not raw:
        return
    try:
        cfg = json.loads(raw)
        rec = Recorder(cfg)
    except Exception:  # noqa: BLE001 - the program runs unrecorded rather than not at all
        return
    watch = _Watch()
    sys.meta_path.insert(0, watch)
    watch.on("torch", rec.torch_imported)
    watch.on("keras", rec.keras_imported)
    if cfg.get("marker"):
        module, _, func = cfg["marker"].partition(":")
        if module == "__main__":
            rec.watch_main(func)
        else:
            watch.on(module, lambda mod: rec.wrap_marker(mod, func))
    atexit.register(rec.at_exit)


class _Watch(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after a watched module's code has run (or at once when it already has)."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list] = {}
        self._finding: set[str] = set()

    def on(self, name: str, callback) -> None:
        if name in sys.modules:
            _quietly(callback, sys.modules[name])
            return
        self._callbacks.setdefault(name, []).append(callback)

    def find_spec(self, name, path=None, target=None):
        if name not in self._callbacks or name in self._finding:
            return None
        self._finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, self._callbacks.pop(name))
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, callbacks) -> None:
        self._inner = inner
        self._callbacks = callbacks

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        for cb in self._callbacks:
            _quietly(cb, module)

    def __getattr__(self, name):  # is_package, get_resource_reader, get_code, ...: the real loader's
        return getattr(self._inner, name)


def _quietly(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a hook that fails leaves the program unrecorded, never broken
        return None


def _rank_name() -> str:
    rank = os.environ.get("RANK")
    if rank is not None and rank.isdigit():
        return f"rank{int(rank)}"
    return f"{socket.gethostname()}_{os.getpid()}"


class Recorder:
    """One per process: counts step boundaries and runs the window (skip, warm up, record)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.skip = max(int(cfg.get("skip", 5)), 1)
        self.warmup = max(int(cfg.get("warmup", 2)), 0)
        self.active = max(int(cfg.get("active", 5)), 1)
        self.trace_dir = cfg["trace_dir"]
        self.status_dir = cfg["status_dir"]
        self.pid = os.getpid()
        self.boundaries = 0  # steps completed so far
        self.driver: str | None = None  # optimizer, forward, marker, keras
        self.framework: str | None = None
        self.window: tuple[int, int] | None = None  # first and last recorded step, once the window starts
        self.backend = None
        self.trace: str | None = None
        self.recorded = 0
        self.complete = False
        self.finished = False
        self.optimizer_made = False
        self.forward_depth = 0
        self.forwards = 0
        self.gpu: bool | None = None  # whether the framework saw a GPU (known once recording starts)

    # -- who may record -------------------------------------------------------------------------------------------
    def owned(self) -> bool:
        if os.getpid() != self.pid:  # a forked copy (DataLoader worker, multiprocessing fork)
            return False
        data = sys.modules.get("torch.utils.data")
        if data is not None:
            try:
                if data.get_worker_info() is not None:  # a spawned DataLoader worker
                    return False
            except Exception:  # noqa: BLE001
                pass
        return True

    # -- steps ----------------------------------------------------------------------------------------------------
    def boundary(self) -> None:
        """One more step completed: start, advance or end the window."""
        self.boundaries += 1
        n = self.boundaries
        if self.finished:
            return
        if self.backend is None:
            if n >= self.skip:
                self.backend = self._make_backend()
                if self.backend is None:
                    self.finished = True
                    return
                self.window = (n + self.warmup + 1, n + self.warmup + self.active)  # step k ends at boundary k
                self.backend.start()
                self._status()
            return
        self.backend.step(n)
        if self.complete:
            self._end()

    def _make_backend(self):
        if self.cfg.get("nsys"):
            return _Nsys(self)
        if self.framework == "torch":
            return _TorchProfiler(self)
        if self.framework == "jax":
            return _JaxProfiler(self)
        if self.framework == "tensorflow":
            return _TfProfiler(self)
        return None

    def _end(self) -> None:
        self.finished = True
        self.backend = None
        self._status()
        if self.cfg.get("stop_after_window"):
            for stream in (sys.stdout, sys.stderr):
                _quietly(stream.flush)
            os._exit(0)

    def at_exit(self) -> None:
        if not self.owned():
            return
        if self.backend is not None and not self.finished:
            _quietly(self.backend.stop_early)
            self.finished = True
            self.backend = None
        if self.boundaries or self.driver:
            self._status()

    def _status(self) -> None:
        os.makedirs(self.status_dir, exist_ok=True)
        status = {
            "pid": self.pid, "rank": os.environ.get("RANK"), "name": _rank_name(), "framework": self.framework, "driver": self.driver,
            "steps_seen": self.boundaries, "skip": self.skip, "warmup": self.warmup, "active": self.active,
            "window": list(self.window) if self.window else None, "recorded": self.recorded, "complete": self.complete,
            "trace": self.trace, "finished": self.finished, "gpu": self.gpu, "time": time.time(),
        }
        path = os.path.join(self.status_dir, f"{_rank_name()}-{self.pid}.status")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(status, f)
        os.replace(path + ".tmp", path)

    # -- PyTorch --------------------------------------------------------------------------------------------------
    def torch_imported(self, torch) -> None:
        from torch.optim import optimizer as optim_mod

        rec = self
        original_init = optim_mod.Optimizer.__init__

        @functools.wraps(original_init)
        def init(opt, *args, **kwargs):
            rec.optimizer_made = True
            return original_init(opt, *args, **kwargs)

        optim_mod.Optimizer.__init__ = init
        optim_mod.register_optimizer_step_post_hook(self._optimizer_stepped)
        if not self.cfg.get("marker"):
            from torch.nn.modules import module as module_mod

            module_mod.register_module_forward_pre_hook(self._forward_begins)
            try:
                module_mod.register_module_forward_hook(self._forward_ends, always_call=True)
            except TypeError:  # torch before 2.1: no always_call (a forward that raises then ends the counting)
                module_mod.register_module_forward_hook(self._forward_ends)

    def _optimizer_stepped(self, optimizer, args, kwargs) -> None:
        if self.cfg.get("marker") or not self.owned():
            return
        if self.driver is None:
            self.driver, self.framework = "optimizer", "torch"
        if self.driver == "optimizer":
            _quietly(self.boundary)

    def _forward_begins(self, module, args) -> None:
        self.forward_depth += 1

    def _forward_ends(self, module, args, output) -> None:
        self.forward_depth = max(self.forward_depth - 1, 0)
        if self.forward_depth or self.driver not in (None, "forward") or not self.owned():
            return
        self.forwards += 1
        if self.driver is None:
            # inference: a second outermost forward in a process that has made no optimizer (training scripts
            # make theirs before the loop; gradient accumulation then runs several forwards per step)
            if self.forwards < 2 or self.optimizer_made:
                return
            self.driver, self.framework = "forward", "torch"
            self.boundaries = self.forwards - 1
        _quietly(self.boundary)

    # -- Keras ----------------------------------------------------------------------------------------------------
    def keras_imported(self, keras) -> None:
        if self.cfg.get("marker"):
            return
        backend = getattr(getattr(keras, "backend", None), "backend", None)
        if backend is not None and backend() != "tensorflow":
            return  # Keras on JAX or PyTorch: the TensorFlow profiler would see nothing (use --step-marker)
        model_cls = keras.Model
        original_fit = model_cls.fit
        rec = self
        callback = []

        @functools.wraps(original_fit)
        def fit(model, *args, **kwargs):
            if rec.owned() and not rec.finished:
                if not callback:
                    callback.append(_keras_callback(keras, rec))
                if len(args) >= 6:  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
                    args = (*args[:5], [*(args[5] or []), callback[0]], *args[6:])
                else:
                    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), callback[0]]
            return original_fit(model, *args, **kwargs)

        model_cls.fit = fit

    # -- --step-marker --------------------------------------------------------------------------------------------
    def wrap_marker(self, module, qualname: str) -> None:
        owner = module
        *path, last = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, last)
        rec = self

        @functools.wraps(original)
        def marked(*args, **kwargs):
            if not rec.owned():
                return original(*args, **kwargs)
            rec.marker_call_begins()
            try:
                return original(*args, **kwargs)
            finally:
                rec.marker_call_ends()

        setattr(owner, last, marked)

    def watch_main(self, func: str) -> None:
        """``__main__:FUNC``: the script's own function, seen through a profile hook (its calls cannot be wrapped
        before the script defines it). Costs a Python call per function call; an importable module is cheaper."""
        main_file = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None
        rec = self
        depth = [0]

        def hook(frame, event, arg):
            if event not in ("call", "return") or frame.f_code.co_name != func:
                return
            if main_file and os.path.abspath(frame.f_code.co_filename) != main_file:
                return
            if event == "call":
                depth[0] += 1
                if depth[0] == 1 and rec.owned():
                    rec.marker_call_begins()
            else:
                depth[0] -= 1
                if depth[0] == 0 and rec.owned():
                    rec.marker_call_ends()

        sys.setprofile(hook)

    def marker_call_begins(self) -> None:
        if self.driver is None:
            self.driver = "marker"
            self.framework = "torch" if "torch" in sys.modules else "jax" if "jax" in sys.modules else "tensorflow" if "tensorflow" in sys.modules else None
        if self.backend is not None and not self.finished:
            _quietly(self.backend.call_begins, self.boundaries + 1)

    def marker_call_ends(self) -> None:
        _quietly(self.boundary)


def _keras_callback(keras, rec: Recorder):
    """The callback added to every ``fit``: batches are steps, counted across epochs and fits."""
    rec.driver, rec.framework = "keras", "tensorflow"

    class TraceInsightRecord(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if rec.backend is not None and not rec.finished:
                _quietly(rec.backend.call_begins, rec.boundaries + 1)

        def on_train_batch_end(self, batch, logs=None):
            _quietly(rec.boundary)

        def on_train_end(self, logs=None):
            pass  # a later fit continues the count; the program's end closes a window cut short

    return TraceInsightRecord()


class _TorchProfiler:
    """torch.profiler with a schedule: warm-up steps, then the recorded ones; the trace is written, gzipped, when
    the schedule ends (or, cut short, at exit)."""

    def __init__(self, rec: Recorder) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.rec = rec
        activities = [ProfilerActivity.CPU]
        rec.gpu = bool(torch.cuda.is_available())
        if rec.gpu:
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(
            activities=activities, schedule=schedule(wait=0, warmup=rec.warmup, active=rec.active, repeat=1),
            on_trace_ready=self._ready, record_shapes=bool(rec.cfg.get("shapes", True)), profile_memory=bool(rec.cfg.get("memory", True)),
            with_stack=bool(rec.cfg.get("stack", False)),
        )
        self.steps_in = 0

    def start(self) -> None:
        self.prof.start()

    def call_begins(self, step: int) -> None:
        pass

    def step(self, n: int) -> None:
        self.steps_in += 1
        self.prof.step()
        if self.rec.complete:
            self.prof.stop()

    def stop_early(self) -> None:
        self.rec.recorded = max(self.steps_in - self.rec.warmup, 0)
        self.prof.stop()  # in the recording phase this hands over what was recorded

    def _ready(self, prof) -> None:
        rec = self.rec
        os.makedirs(rec.trace_dir, exist_ok=True)
        stem = os.path.join(rec.trace_dir, f"{_rank_name()}.pt.trace.json")
        prof.export_chrome_trace(stem)
        with open(stem, "rb") as src, gzip.open(stem + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(stem)
        rec.trace = os.path.basename(stem + ".gz")
        if self.steps_in >= rec.warmup + rec.active:
            rec.recorded, rec.complete = rec.active, True


class _CallWindow:
    """The window for profilers started and stopped by hand (TensorFlow, JAX, Nsight): recording runs from the
    start of call ``first`` to the end of call ``last``, each call inside a step annotation."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.first, self.last = rec.boundaries + rec.warmup + 1, rec.boundaries + rec.warmup + rec.active
        self.running = False
        self.annotation = None

    def start(self) -> None:
        if self.first == self.rec.boundaries + 1 and not self.calls():
            self.call_begins(self.first)  # no warm-up: the next step is recorded

    def calls(self) -> bool:
        """Whether the driver says when a step begins (a marked call, a Keras batch); otherwise a step begins
        where the last one ended."""
        return self.rec.driver in ("marker", "keras")

    def call_begins(self, step: int) -> None:
        if step == self.first and not self.running:
            self.begin()
            self.running = True
        if self.running:
            self.annotation = self.annotate(step)
            if self.annotation is not None:
                self.annotation.__enter__()

    def step(self, n: int) -> None:
        if not self.running:
            if n == self.first - 1 and not self.calls():
                self.call_begins(self.first)
            return
        self.close_annotation()
        self.rec.recorded += 1
        if n >= self.last:
            self.running = False
            self.end()
            self.rec.complete = True
        elif not self.calls():
            self.call_begins(n + 1)

    def stop_early(self) -> None:
        if self.running:
            self.close_annotation()
            self.running = False
            self.end()

    def close_annotation(self) -> None:
        if self.annotation is not None:
            self.annotation.__exit__(None, None, None)
            self.annotation = None

    def annotate(self, step: int):
        return None

    def logdir(self) -> str:
        path = os.path.join(self.rec.trace_dir, _rank_name())
        os.makedirs(path, exist_ok=True)
        self.rec.trace = os.path.basename(path)
        return path


class _TfProfiler(_CallWindow):
    def begin(self) -> None:
        import tensorflow as tf

        self.rec.gpu = bool(tf.config.list_physical_devices("GPU"))
        tf.profiler.experimental.start(self.logdir())

    def annotate(self, step: int):
        import tensorflow as tf

        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def end(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()


class _JaxProfiler(_CallWindow):
    def begin(self) -> None:
        import jax

        self.rec.gpu = any(d.platform == "gpu" for d in jax.devices())
        jax.profiler.start_trace(self.logdir())

    def annotate(self, step: int):
        import jax

        return jax.profiler.StepTraceAnnotation("train", step_num=step)

    def end(self) -> None:
        import jax

        jax.profiler.stop_trace()


class _Nsys(_CallWindow):
    """cudaProfilerStart/Stop around the window, for ``nsys profile --capture-range=cudaProfilerApi``."""

    def begin(self) -> None:
        self._cuda().start()

    def annotate(self, step: int):
        if "torch" in sys.modules:
            import torch

            return torch.cuda.nvtx.range(f"ProfilerStep#{step}")
        return None

    def end(self) -> None:
        self._cuda().stop()
        self.rec.trace = "nsys"

    def _cuda(self):
        if "torch" in sys.modules:
            import torch.cuda.profiler as p

            return p
        import ctypes

        lib = ctypes.CDLL("libcudart.so")

        class _C:
            start = staticmethod(lambda: lib.cudaProfilerStart())
            stop = staticmethod(lambda: lib.cudaProfilerStop())

        return _C
