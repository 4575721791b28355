"""Whole distributed jobs: each rank is read and analysed where it is stored (map), only compact rank summaries
travel, and cross-rank rules judge the job from them (reduce).

    from traceinsight.job import analyze_job
    ja = analyze_job("s3://bucket/job/", scheduler="tcp://scheduler:8786")
"""

from __future__ import annotations

from .mapper import MapSettings, RankFailure, analyze_rank
from .reduce import Job, reduce_summaries
from .run import SCHEDULER_ENV, JobAnalysis, analyze_job
from .storage import expand, is_job_path
from .summary import RankSummary, summarize_ranks

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
