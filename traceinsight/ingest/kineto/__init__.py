"""PyTorch Profiler (kineto) Chrome-trace JSON: one file, a gzip of one, or a folder of per-rank files.

``decode`` (msgspec) and the native scanner (``_kineto_scan.c``) both give ``columns.EventColumns``; ``reader``
turns those into timeline columns.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.input_format import InputFormat
from traceinsight.ingest.kineto.sniff import sniff

#: The format's record (``ingest.input_format``): torch.profiler writes it, framework ops carry their input shapes
#: when asked (``record_shapes=True``) and Python frames when asked (``with_stack=True``).
FORMAT = InputFormat(
    name="pytorch",
    label="PyTorch Profiler Chrome trace (.json, .json.gz, or a folder of per-rank files)",
    sniff=sniff,
    reader="traceinsight.ingest.kineto.reader:read",
    frameworks=("pytorch",),
    shapes=True,
    no_flops="record with `torch.profiler.profile(..., record_shapes=True)` to get FLOPs, achieved TFLOP/s and MFU",
    record_shapes="record with `torch.profiler.profile(..., record_shapes=True)` outside graph replays",
    record_stacks="record with `torch.profiler.profile(..., with_stack=True)` to see the line of your code",
)

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader', 'rank_files': 'sniff'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['FORMAT', 'rank_files', 'read', 'sniff']
