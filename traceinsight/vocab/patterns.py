"""Name patterns that say what a host range or a GPU row *is* (a data wait, a blocking call, a collective).

They are heuristics about names, kept in one home (floor 0) because the time ledger (``traceinsight.derive.ledger``), the
what-if model, the whole-job summary (``traceinsight.derive.ranks.summary``) and the rules (``traceinsight.rulelib``) must
agree on them: a gap the ledger books as "data wait" is the one the input-pipeline rule reports and the job
report's data-wait figure measures. A new runtime (HIP, XPU, Gaudi) is one edit here.
"""

from __future__ import annotations

import re

#: Host ranges during which the training loop waits for its next batch. PyTorch's profiler wraps every
#: ``next(iter(loader))`` in ``enumerate(DataLoader)#<Iter>.__next__`` (tb_plugin event_parser.py uses the same
#: prefix, plus ``enumerate(DataPipe)#``); TF's consumer side is ``IteratorGetNext`` (xprof HOST_WAIT_INPUT).
DATA_WAIT_PRIMARY = r"^enumerate\((?:DataLoader|DataPipe)\)#|DataLoader.*__next__|IteratorGetNext"
#: The host row kinds a data wait is read from (a runtime call inside a wait is the wait's own work, not another).
DATA_WAIT_KINDS = ("cpu_op", "annotation", "other")
#: tf.data's own ``Iterator::...`` TraceMe ranges; only waits when seen on a consumer thread.
DATA_WAIT_TFDATA = r"^Iterator::"

#: Runtime/driver calls that block the calling host thread until GPU work finishes.
SYNC_CALL = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|ThreadSynchronize|CtxSynchronize)"
    r"|^cu(Ctx|Stream|Event)Synchronize"
    r"|^(cuda|hip)Memcpy(?!.*Async)(2D|3D|ToSymbol|FromSymbol|Peer|DtoH|HtoD|DtoD|WithStream)?(_v\d+|_ptds)?$"
    r"|^cuMemcpy(DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$"
    r"|^(cuda|hip)Memset(?!.*Async)(2D|3D|D8|D16|D32)?(_v\d+|_ptds)?$"
)
#: Calls that synchronise the device as a side effect (CUDA documents an implicit device synchronisation for
#: ``cudaFree``): their length is mostly the wait for queued GPU work. TI031 reports them; the what-if replay lets
#: them return when the GPU catches up. (Not in ``SYNC_CALL``: TI002 would report the same calls twice.)
IMPLICIT_SYNC_CALL = re.compile(r"^(cuda|hip)Free(Host)?(_v\d+)?$|^cuMemFree(Host)?(_v\d+)?$")
#: Framework ops that force a device-to-host synchronization by their nature.
SYNC_OP = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero|tolist|equal|masked_select|unique|_unique2)$|\.tolist|\.item\(|\.cpu\(")

#: Framework ranges (TraceMe annotations, no runtime call inside) in which the host waits for a device value: JAX
#: converting an array for the host (``float(loss)``, ``np.asarray(x)``, ``.item()``) waits until it is computed.
SYNC_RANGE = re.compile(r"^np\.asarray\(jax\.Array\)$")

#: Runtime/driver calls that enqueue a copy or memset (their duration can include waiting for the GPU).
COPY_CALL = re.compile(r"^(cuda|hip|cu)Mem(cpy|set)", re.I)

#: Framework dispatch the host traces as annotations (TraceMe ranges), not as ops: TF eager (``TFE_Py_*``,
#: ``EagerExecute``, ``EagerKernelExecute``, the executor), JAX/PjRt (``PjitFunction``, ``PjRt*``, ``PJRT_*``,
#: argument sharding and buffer set-up). While one of them runs the host is busy issuing work: a GPU gap under it
#: is host/framework overhead, not untraced time.
FRAMEWORK_DISPATCH = (
    r"^(TFE_Py_|Eager(Local|Kernel)?Execute|ExecutorState::Process|FunctionRun|convert_to_tensor|tf\.constant"
    r"|PjitFunction|PjRt|PJRT_|cpp_pjit|shard_args|DevicePut|Build buffer allocations|GpuExecutable::|Thunks::)"
)

#: Ranges a runtime traces of its own plumbing, never a user's step or a region a user marked: the PJRT/XLA runtime
#: (``BufferSequencingEvent::Execute``, ``ThenExecuteCallback``, ``MakeOutputBuffers``, the thunk executor, TFRT
#: executables, ``PjRt*``), TensorFlow's executor and eager plumbing (``ExecutorState::Process`` runs once per batch of
#: graph nodes on the inter-op thread pool, ``EagerKernelExecute`` once per op), StreamExecutor, thread-pool
#: listeners, allocators, and the CUDA/HIP API calls themselves. They repeat and can span most of a window (a
#: micro-benchmark's first ``Execute`` holds its whole compilation), so repetition and coverage alone would take one
#: for the step or for a diff's sample unit: the step picker (``model.steps``) and the repeated regions of a diff
#: (``derive.workload.repeats``) leave them out. Matched with case, on the whole name.
RUNTIME_INTERNAL = (
    r"^(?:BufferSequencingEvent::|ThenExecuteCallback|MakeOutputBuffers|RecordUsage|ParseArguments|ComputeSemaphoreAcquire"
    r"|Resolve constant globals|Wait for (?:donation|usage) holds|PythonRefManager::|DeviceMemAllocator::|LocalExecutable::"
    r"|ThunkExecutor|Thunks?::|GpuExecutable::|TfrtCpu|TfrtGpu|PjRt|PJRT_|Build buffer allocations"
    r"|ExecutorState::|ExecutorPropagateOutputs|ExecutorDoneCallback|ExecutorImpl::|ThreadpoolListener::|ThreadPool"
    r"|Eager(?:Local|Kernel|Remote)?Execute|EagerOperation|TFE_|KernelAndDevice|(?:Process)?FunctionLibraryRuntime"
    r"|StreamExecutor|stream_executor::|se::"
    r"|cuda[A-Z]|cu[A-Z]|hip[A-Z]|hsa_)"
)

#: Compiled code's host-side wrappers, traced as ranges around what they run: torch.compile's
#: ``Torch-Compiled Region``, ``CompiledFunction`` (autograd), inductor's ``## Call CompiledFxGraph <hash> ##`` around
#: the generated ``call``, and Dynamo's guard check (``TorchDynamo Cache Lookup``). While one runs, the host is busy in
#: the compiled program's Python (argument handling, guards, the launcher of each kernel), not in something the trace
#: cannot see: a GPU gap under it is host overhead, whose lever is CUDA graphs or more work per launch.
COMPILED_WRAPPER = r"^Torch-Compiled Region|^CompiledFunction|CompiledFxGraph|^TorchDynamo Cache Lookup"

#: Collective kernels, NCCL or not (symmetric-memory all-reduce, custom all-to-all).
COLLECTIVE = r"nccl|rccl|multimem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"

#: Calls that record a CUDA/HIP event, and calls that make a stream wait for one.
EVENT_RECORD = r"^(cuda|hip)EventRecord|^cuEventRecord"
STREAM_WAIT = r"^(cuda|hip)StreamWaitEvent|^cuStreamWaitEvent"

#: Optimizer updates (PyTorch ``Optimizer.step#SGD.step``, fused/foreach kernels' host ops, Keras apply_gradients).
OPTIMIZER = re.compile(r"Optimizer\.step|optimizer|zero_grad|ResourceApply|apply_gradients|_foreach_", re.I)

#: Library namespaces whose names contain "gemm" but whose kernels are not GEMMs (FBGEMM's sparse/permute ops).
NOT_GEMM = r"fbgemm_gpu::"

#: Tensor-core kernel names: tb_plugin tensor_core.py TC_Allowlist and xprof kernel_stats_utils.cc, extended with
#: CUTLASS ``tensorop``, Hopper ``wgmma``/``gmma``/``nvjet``, cuBLASLt ``sm80_``/``sm90_`` and explicit tf32/bf16/f16 tags.
TENSOR_CORE = (
    r"h884|s884|h1688|s1688|c1688|hmma|i8816|16816|i16832|xmma|tensorop|wgmma|gmma|nvjet|\bsm[89]\d_|"
    r"tf32|bf16|bfloat16|f16f16|_fp16|_f16_|imma|e4m3|e5m2|e2m1|fp8|conv1x1|conv2d_c1_k1|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel"
)

#: Names that mean CUDA cores even when a TC substring also matches (e.g. ``cutlass_80_simt_sgemm``, cuBLAS's
#: ``sm80_xmma_gemm_f32f32_..._ffma_...``: an xmma-named kernel doing fused multiply-adds on CUDA cores).
NOT_TENSOR_CORE = r"simt|sgemm|ffma|gemv|scudnn|cgemm|wgrad_alg0|dgrad_engine|gemmSN|gemmk1"

#: Kernel names a library or framework writes (cuBLAS/cuBLASLt, cuDNN, CUTLASS, CK, rocBLAS/Tensile, hipBLASLt,
#: MIOpen, MAGMA, Triton's generated kernels, ATen's own): a GEMM-class kernel none of these names is the program's
#: own (``matmul_k``, ``my_mm_kernel``), and the frameworks' precision switches do not reach its arithmetic.
LIBRARY_KERNEL = (
    r"gemm|gemv|cutlass|nvjet|wgmma|cublas|\bCijk_|triton|magma|xmma|hmma|h884|s884|h1688|s1688|i8816|16816|16832|"
    r"hipblaslt|rocblas|miopen|xdlops|ck::|\bsm_?[6789]\d_|volta_|turing_|ampere_|hopper_|blackwell_|cudnn|at::|"
    r"aten::|cutensor|tensorrt|trt_|xla|fusion|cub::|thrust::"
)

#: Unified-memory migrations as the readers name them (Nsight Systems' UVM copy kinds): the driver moves managed
#: pages because something touched them (a page fault), a prefetch asked, or the driver guessed; no launch call
#: enqueues them.
UNIFIED_MEMORY = r"^Unified Memory "

#: FP64 math is not helped by AMP or TF32; left out of the share entirely.
FP64 = r"dgemm|zgemm|\bd_?gemm|double"

NCCL = r"nccl|rccl"

#: NVIDIA GPUs before Volta (compute capability < 7): no tensor cores.
PRE_VOLTA = r"\b(?:[KMP]\d{1,3}\b|GP100|GP10\d|GTX\s*(?:9|10)\d\d|TITAN\s*X|Tesla\s*[KMP]|Quadro\s*[KMP]\d)"

#: NVIDIA GPUs with tensor cores, by marketing name (used only when compute capability is absent).
TENSOR_CORE_GPU = (
    r"V100|TITAN\s*V|T4\b|RTX|A\d{2,4}\b|A100|A800|H100|H200|H800|GH200|B100|B200|GB200|GB300|B300|L4\b|L40|"
    r"Quadro\s*(?:RTX|GV100)|GV100|Jetson\s*(?:AGX\s*)?(?:Xavier|Orin)"
)

NON_NVIDIA = r"AMD|Radeon|Instinct|\bMI\d{3}|Intel|Gaudi|TPU"

#: Kernel names that exist only for Volta or newer NVIDIA architectures (cuBLAS/cuDNN/CUTLASS arch tags): a
#: trace without device properties that runs them ran on a GPU with tensor cores.
VOLTA_PLUS_KERNEL = r"\b(volta|turing|ampere|hopper|blackwell)_|\bsm_?(7[05]|8\d|9\d|1[0-2]\d)_|cutlass_(7[05]|8\d|9\d)_|xmma|nvjet"

# --- one-time work (the steady-state model, ``traceinsight.derive.steady``, books it as warm-up) ----------------
#: Host calls and ranges that do one-off set-up wherever they sit: context and module loading, library handles,
#: autotuning, JIT compilation, graph capture and instantiation. Names that also run every step are left out
#: (``cudnnGet*Algorithm`` heuristics run on every convolution without benchmark mode; ``Torch-Compiled Region``
#: and ``CompiledFunction`` are compiled code running, hence the ``compil(e(?!d)|ation)``).
_ONE_TIME = (
    r"^cu(Init|ModuleLoad|LibraryLoad|DevicePrimaryCtxRetain|CtxCreate|LinkCreate|LinkComplete)"
    r"|^(cuda|hip)(GetDeviceProperties|DeviceGetStreamPriorityRange|SetDevice$|StreamBeginCapture|StreamEndCapture"
    r"|GraphInstantiate|GraphUpload|DeviceSetLimit)"
    r"|^hip(ModuleLoad|ModuleGetFunction)|^cu(StreamBeginCapture|StreamEndCapture|GraphInstantiate|GraphUpload)"
    r"|cudnn(Create|Find)|cublas(Lt)?Create|miopen(Create|Find)|rocblas_create|hipblas(Lt)?Create"
    r"|autotun|nvrtc|compil(e(?!d)|ation)|KernelExecutor::compile"
)
ONE_TIME_CALL = re.compile(_ONE_TIME, re.IGNORECASE)
#: Ops of the JIT fusers that compile inside the op the first time it runs with a new profile (TorchScript's
#: profiling executor compiles on its second call: ``prim::FusionGroup`` (NNC/legacy fuser), ``prim::CudaFusionGroup``
#: (nvFuser), ``prim::TensorExprGroup``, the ``prim::DifferentiableGraph`` around them, and nvFuser's own ranges). A
#: later call runs the compiled kernel in micro- to milliseconds; the compiling call is an outlier no steady step
#: repeats (``steady.one_time_regions`` reads these as one-time when they are).
JIT_FUSION_OP = re.compile(
    r"^prim::(Cuda)?FusionGroup|^prim::TensorExpr(Dynamic)?Group|^prim::DifferentiableGraph|^prim::FallbackGraph"
    r"|^prim::profile|fuser|nvfuser|^FusionExecutorCache|^FusionKernelRuntime",
    re.IGNORECASE,
)
#: Compilation and autotuning: one-time at the start, but when a range of these runs again after the rank's
#: second step began, the program is recompiling (or re-tuning) in the steady state (new input shapes, a guard
#: that fails, a graph break), which costs every time it happens: that is no warm-up, TI015 reports it.
RECOMPILE_CALL = re.compile(r"autotun|nvrtc|compil(e(?!d)|ation)|KernelExecutor::compile|cudnnFind|miopenFind", re.IGNORECASE)
#: Graph capture: from a begin-capture call to the end-capture call after it on the same thread, the launches
#: are recorded, not executed.
CAPTURE_BEGIN = re.compile(r"^(cuda|hip|cu)StreamBeginCapture", re.IGNORECASE)
CAPTURE_END = re.compile(r"^(cuda|hip|cu)StreamEndCapture", re.IGNORECASE)
#: Calls that begin a graph capture or instantiate a graph, anywhere in the name (matched with case): a trace
#: that holds them with little GPU work recorded a capture, not a run (TI012).
GRAPH_CAPTURE_CALL = r"StreamBeginCapture|BeginCapture|GraphInstantiate"
#: Host calls that launch one kernel each, captured launches included (they are recorded, not executed); matched
#: with case (TI012 counts them against the GPU work).
LAUNCH_CALL = r"^(cudaLaunch|cuLaunch|hipLaunch|hipExtModuleLaunch|hipModuleLaunch|cudaGraphLaunch|hipGraphLaunch)"
#: Host calls that only a program using a GPU makes: the CUDA/HIP runtime and driver APIs, HSA (matched with case).
GPU_API = r"^(cuda|hip|cu[A-Z]|hsa_)"
#: Asynchronous host<->device copy calls (case-insensitive): a pageable copy through one of them runs
#: synchronously, which TI006 reports.
ASYNC_COPY_CALL = r"Memcpy.*Async|MemcpyAsync|cuMemcpy.*Async"
#: Device-memory allocations of a growing caching allocator (stream-ordered ``*MallocAsync`` is a steady-state
#: allocator's call and is left out).
ALLOC_CALL = re.compile(r"^(cuda|hip)Malloc(Host|Managed|Pitch|3D)?(_v\d+)?$|^cuMem(Alloc|Create)(?!.*Async)|^hipExtMallocWithFlags")

#: Calls that do start-up work at the head of a run but may also run later (``cudaFree``, stream creation,
#: attribute queries), besides the one-time calls and allocations above: TI013 names them in a head gap the ledger
#: did not book, and says their time stays in the idle figures.
START_UP_CALL = re.compile(
    _ONE_TIME + r"|^(cuda|hip)(Malloc|Free|StreamCreate|FuncGetAttributes)\b|^cuMemAlloc|jit", re.IGNORECASE
)

#: Start-up calls TI013 names in a head gap (``traceinsight.rulelib.warmup``): the steady-state model's vocabulary.
INIT_CALL = START_UP_CALL


#: Host ops that exist only when a backward pass runs: their absence makes a rank an inference run.
#: Top-level ops a change of precision adds or removes without changing the model: dtype casts (``aten::to``,
#: ``aten::_to_copy`` and their backward) and mixed precision's loss-scaling bookkeeping (``aten::_amp_*``). A diff
#: of fp32 against AMP sets them aside when it asks whether two traces run the same workload, as it sets the batch
#: dimension aside for shapes: a small fp32 model and its AMP run differed by 15 of 70 ops per step in these alone.
PRECISION_OP = r"^aten::(?:to|_to_copy|_amp_\w+)$|^autograd::engine::evaluate_function: ToCopyBackward\d*$"
TRAINING_OP = r"backward|Backward|autograd::engine|Optimizer\.step|optimizer\.step|apply_gradients|ResourceApply|gradient_tape|SGD|Adam"
#: Kernels that run only in a backward pass or an optimizer step, for a rank whose trace records no framework ops
#: (an Nsight capture): gradient kernels by name, cuDNN's weight/data-gradient kernels, optimizer functors.
TRAINING_KERNEL = r"backward|Backward|wgrad|dgrad|[Ss]gd|SGD|Adam|adam|Lamb|LAMB|Adagrad|RMSprop"
