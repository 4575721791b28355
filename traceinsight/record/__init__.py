"""``traceinsight record``: run an unmodified training or inference command, record a steady-state window of it
(``boot`` is what runs inside the command's processes, ``run`` starts the command and reads what they wrote), and,
with ``--sweep``, run it once per value of a setting and compare the runs (``sweep``)."""
