"""Floor 5, orchestration: configuration, rule discovery and the guard around rule code, the baseline, and the
engine (the one path from a trace to an ``Analysis``).
"""
