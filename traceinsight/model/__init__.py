"""Floor 1, the model: plain data (the one events frame and its metadata, findings, the analysis, steps) and
the plausibility checks every reader applies to it. Knows nothing of how any of it is computed.
"""
