"""Floor 2, derived data: everything computed from one timeline, once (views, the time ledger, steady state,
the what-if replay, memory, efficiency and FLOPs, per-rank summaries) and ``Derived``, the one store over them.
"""
