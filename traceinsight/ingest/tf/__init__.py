"""TensorFlow's other containers: the Chrome-trace JSON export (``trace_json``) and TensorBoard logdirs
(``logdir``, which reads each host's XSpace or JSON file as a rank). Both classify events with ``xplane.lines``.
"""

from .logdir import read as read_logdir
from .logdir import sniff as sniff_logdir
from .trace_json import read as read_json
from .trace_json import sniff as sniff_json

__all__ = ["read_json", "read_logdir", "sniff_json", "sniff_logdir"]
