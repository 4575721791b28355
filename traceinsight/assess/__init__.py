"""Floor 4, assessment: each finding's one figure (savings), severity, root-cause links, advice and the verdict.
"""
