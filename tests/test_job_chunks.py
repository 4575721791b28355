"""Many small ranks go to workers in chunks (local processes and Dask): each rank still gets exactly the result it
gets alone, in order, and a rank that fails inside a chunk costs only itself."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.job import analyze_job
from traceinsight.job.mapper import MapSettings, RankFailure
from traceinsight.job.report import render
from traceinsight.job.run import MAX_CHUNK, _map_dask, _map_local, chunk_size


def _rank(r: int, n: int, path: Path) -> None:
    """A small rank whose shape depends on its number: 1-4 GEMMs, a collective on most ranks, a longer step on
    rank 3, so ranks differ in their findings and figures."""
    t = KinetoTrace(rank=r, world_size=n)
    t.step(1, 0.0, 2000.0 + (1500.0 if r == 3 else 0.0))
    for i in range(1 + r % 4):
        t.kernel("gemm" if r % 2 else "volta_sgemm_128x64_nn", 100.0 + i * 300, 150.0 + 20 * r)
    if r % 5:
        t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500.0, 300.0)
    t.write(path)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("tiny")
    n = 10
    for r in range(n):
        _rank(r, n, out / f"rank{r:02d}.json")
    return [str(p) for p in sorted(out.iterdir())]


@pytest.fixture(scope="module")
def alone(ranks) -> list:
    """Each rank analysed on its own, in this process."""
    return _map_local(ranks, MapSettings(), workers=1)


def _same(a, b) -> None:
    """Two results of ``analyze_rank`` are equal: failures by message, summaries field by field."""
    if isinstance(a, RankFailure) or isinstance(b, RankFailure):
        assert a == b
        return
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name, value in vars(x).items():
            other = getattr(y, name)
            if isinstance(value, pd.DataFrame):
                pd.testing.assert_frame_equal(value, other, check_exact=True)
            else:
                assert value == other, name


def test_chunk_size_amortises_hand_off_and_stays_capped():
    assert chunk_size(10, 2) == 1  # few ranks: one per task, the load stays balanced
    assert chunk_size(300, 2) == 9
    assert chunk_size(2000, 2) == MAX_CHUNK
    assert chunk_size(5, 0) == 1


def test_chunked_local_map_gives_each_rank_its_own_result(ranks, alone):
    chunked = _map_local(ranks, MapSettings(), workers=2, chunk=4)
    assert len(chunked) == len(ranks)
    assert len({f["code"] for s in alone for f in s[0].findings}) >= 3  # the ranks do differ
    for a, b in zip(alone, chunked):
        _same(a, b)
    assert [s[0].rank for s in chunked] == list(range(len(ranks)))


def test_failed_rank_inside_a_chunk_costs_only_itself(ranks, alone, tmp_path):
    bad = tmp_path / "rank05.json"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    urls = ranks[:5] + [str(bad)] + ranks[6:]
    chunked = _map_local(urls, MapSettings(), workers=2, chunk=4)  # rank 5 is the second of chunk [4, 5, 6, 7]
    assert isinstance(chunked[5], RankFailure) and chunked[5].source == str(bad)
    for i in (0, 1, 2, 3, 4, 6, 7, 8, 9):
        _same(alone[i], chunked[i])
    ja = analyze_job(urls, workers=2)
    assert ja.job.rank_count == 9 and len(ja.missing) == 1 and "rank05" in ja.missing[0]


def test_dask_map_in_chunks_equals_local(ranks, alone, tmp_path):
    distributed = pytest.importorskip("distributed")
    bad = tmp_path / "rank07.json"
    bad.write_bytes(b"{ not json")
    urls = ranks[:7] + [str(bad)] + ranks[8:]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster, set_as_default=False) as client:
            got = _map_dask(urls, MapSettings(), client, chunk=3)
    assert len(got) == len(urls)
    assert isinstance(got[7], RankFailure) and got[7].source == str(bad)
    for i in (0, 1, 2, 3, 4, 5, 6, 8, 9):
        _same(alone[i], got[i])


def test_job_report_same_whatever_the_chunks(ranks):
    one = render(analyze_job(ranks, workers=1), "json")
    assert render(analyze_job(ranks, workers=2), "json") == one
