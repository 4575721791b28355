"""TensorFlow's other containers: the Chrome-trace JSON export (``trace_json``) and TensorBoard logdirs
(``logdir``, which reads each host's XSpace or JSON file as a rank). Both classify events with ``xplane.lines``.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.input_format import InputFormat
from traceinsight.ingest.tf.sniff import sniff_json, sniff_logdir

#: The formats' records (``ingest.input_format``). A logdir's timeline keeps the format of the files it read
#: (``tensorflow-xplane`` or ``tensorflow-json``): its record only finds and reads them.
LOGDIR = InputFormat(
    name="tensorflow-logdir",
    label="TensorBoard logdir (plugins/profile/<run>/ with *.xplane.pb or *.trace.json.gz files)",
    sniff=sniff_logdir,
    reader="traceinsight.ingest.tf.logdir:read",
    frameworks=("tensorflow", "jax"),
)
JSON = InputFormat(
    name="tensorflow-json",
    label="TensorFlow profiler Chrome-trace export (*.trace.json.gz)",
    sniff=sniff_json,
    reader="traceinsight.ingest.tf.trace_json:read",
    frameworks=("tensorflow", "jax"),
    no_flops="this TensorFlow trace records no FLOPs per op; pass --model-flops-per-step for MFU",
)

#: The readers, imported when a file of this format is read (detection needs only the sniffers).
_LAZY = {"read_json": ("trace_json", "read"), "read_logdir": ("logdir", "read")}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ["JSON", "LOGDIR", "read_json", "read_logdir", "sniff_json", "sniff_logdir"]
