"""TensorFlow's other containers: the Chrome-trace JSON export (``trace_json``) and TensorBoard logdirs
(``logdir``, which reads each host's XSpace or JSON file as a rank). Both classify events with ``xplane.lines``.
"""

from traceinsight.vocab.lazy import attributes
from traceinsight.ingest.tf.sniff import sniff_json, sniff_logdir

#: The readers, imported when a file of this format is read (detection needs only the sniffers).
_LAZY = {"read_json": ("trace_json", "read"), "read_logdir": ("logdir", "read")}


__getattr__ = attributes(__name__, globals(), _LAZY)


__all__ = ["read_json", "read_logdir", "sniff_json", "sniff_logdir"]
