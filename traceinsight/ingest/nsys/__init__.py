"""Nsight Systems: the SQLite export (``nsys export --type sqlite``), and ``.nsys-rep`` reports where nsys is
installed. ``sql`` fetches columns, ``tables`` holds one reader per table, ``schema`` the table and enum facts,
``reader`` assembles them and reads the metadata.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.input_format import InputFormat
from traceinsight.ingest.nsys.sniff import sniff

#: The format's record (``ingest.input_format``): a CUDA-level capture of any program (the framework is told by the
#: names it left), no tensor shapes; the profiler has its own way to record a window of steps.
FORMAT = InputFormat(
    name="nsys",
    label="Nsight Systems (nsys export --type sqlite .sqlite; .nsys-rep when nsys is installed)",
    sniff=sniff,
    reader="traceinsight.ingest.nsys.reader:read",
    record_steady=("Record steady-state steps: nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop and call "
                   "cudaProfilerStart()/cudaProfilerStop() (torch.cuda.cudart().cudaProfilerStart()) around steps after warm-up, or "
                   "--capture-range=nvtx --nvtx-capture=RANGE with an NVTX range around those steps; mark each step with an NVTX range."),
    no_flops=("Nsight Systems records no tensor shapes, so FLOPs per kernel cannot be known from the trace; pass "
              "--model-flops-per-step for MFU"),
)

#: The reader, imported when a file of this format is read (detection needs only ``sniff``).
_LAZY = {'read': 'reader'}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ['FORMAT', 'read', 'sniff']
