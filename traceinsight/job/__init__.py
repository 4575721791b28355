"""Whole distributed jobs: each rank is read and analysed where it is stored (map), only compact rank summaries
travel, and cross-rank rules judge the job from them (reduce).

    from traceinsight.job import analyze_job
    ja = analyze_job("s3://bucket/job/", scheduler="tcp://scheduler:8786")
"""

from __future__ import annotations

from traceinsight.vocab.lazy import attributes

#: Public name -> its module, imported on first use: the derived store reads ``summary`` and ``reduce`` for the
#: single-trace path without loading the map/reduce machinery.
_API = {
    "MapSettings": "mapper", "RankFailure": "mapper", "analyze_rank": "mapper",
    "Job": ".derive.ranks.reduce", "reduce_summaries": ".derive.ranks.reduce",
    "SCHEDULER_ENV": "storage", "JobAnalysis": "run", "analyze_job": "run",
    "expand": "storage", "is_job_path": "storage",
    "RankSummary": ".derive.ranks.summary", "summarize_ranks": ".derive.ranks.summary",
}


__getattr__ = attributes(__name__, globals(), _API)


__all__ = [
    "Job",
    "JobAnalysis",
    "MapSettings",
    "RankFailure",
    "RankSummary",
    "SCHEDULER_ENV",
    "analyze_job",
    "analyze_rank",
    "expand",
    "is_job_path",
    "reduce_summaries",
    "summarize_ranks",
]
