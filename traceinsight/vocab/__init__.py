"""Floor 0, vocabularies and primitives: every fact that more than one stage reads, once (bucket table, what
names mean, thresholds, intervals, units, GPU facts and peaks, errors). Imports nothing above itself.
"""
