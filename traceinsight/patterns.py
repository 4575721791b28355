"""Name patterns that say what a host range or a GPU row *is* (a data wait, a blocking call, a collective).

They are heuristics about names, kept in one home because both the time ledger (``traceinsight.ledger``) and the
built-in rules (``traceinsight.rules._common`` re-exports them) must agree on them: a gap the ledger books as
"data wait" is the one the input-pipeline rule reports.
"""

from __future__ import annotations

import re

#: Host ranges during which the training loop waits for its next batch. PyTorch's profiler wraps every
#: ``next(iter(loader))`` in ``enumerate(DataLoader)#<Iter>.__next__`` (tb_plugin event_parser.py uses the same
#: prefix, plus ``enumerate(DataPipe)#``); TF's consumer side is ``IteratorGetNext`` (xprof HOST_WAIT_INPUT).
DATA_WAIT_PRIMARY = r"^enumerate\((?:DataLoader|DataPipe)\)#|DataLoader.*__next__|IteratorGetNext"
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
#: Framework ops that force a device-to-host synchronization by their nature.
SYNC_OP = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero|tolist|equal|masked_select|unique|_unique2)$|\.tolist|\.item\(|\.cpu\(")

#: Runtime/driver calls that enqueue a copy or memset (their duration can include waiting for the GPU).
COPY_CALL = re.compile(r"^(cuda|hip|cu)Mem(cpy|set)", re.I)

#: Collective kernels, NCCL or not (symmetric-memory all-reduce, custom all-to-all).
COLLECTIVE = r"nccl|rccl|multimem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"

#: Framework dispatch the host traces as annotations (TraceMe ranges), not as ops: TF eager (``TFE_Py_*``,
#: ``EagerExecute``, ``EagerKernelExecute``, the executor), JAX/PjRt (``PjitFunction``, ``PjRt*``, ``PJRT_*``,
#: argument sharding and buffer set-up). While one of them runs the host is busy issuing work: a GPU gap under it
#: is host/framework overhead, not untraced time.
FRAMEWORK_DISPATCH = (
    r"^(TFE_Py_|Eager(Local|Kernel)?Execute|ExecutorState::Process|FunctionRun|convert_to_tensor|tf\.constant"
    r"|PjitFunction|PjRt|PJRT_|cpp_pjit|shard_args|DevicePut|Build buffer allocations|GpuExecutable::|Thunks::)"
)
