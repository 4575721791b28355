"""Floor 2, derived data across ranks: per-rank summaries, their clock alignment and the reduce that every
whole-job product reads.
"""
