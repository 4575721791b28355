"""The shipped sample traces keep showing the problem each was made for (see sample_traces/README.md).

Expectations are about the planted problem, not exact numbers: the host side of the samples is a real CPU
recording, so durations move a little when `make_samples.py` is re-run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import traceinsight

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

# sample, rule code, min impact (% of span), max impact (% of span); None = only "present"
EXPECTED = [
    ("lstm_fallback.json.gz", "TI004", None, None),
    ("lstm_fallback.json.gz", "TI003", 40.0, 95.0),
    ("lstm_cudnn.json.gz", "!TI004", None, None),  # the cuDNN twin must NOT be flagged as a fallback
    ("sync_stalls.json.gz", "TI002", 5.0, 60.0),
    ("sync_stalls.json.gz", "TI001", 5.0, 60.0),
    ("tiny_kernels.json.gz", "TI003", 40.0, 95.0),
    ("dataloader_gaps.json.gz", "TI005", 40.0, 95.0),
    ("dataloader_gaps.json.gz", "TI001", 40.0, 95.0),
    ("vecadd_sync.sqlite", "TI002", 1.0, 20.0),
    ("vecadd_sync.sqlite", "TI006", 5.0, 40.0),  # every copy from malloc'd (pageable) host memory
    ("keras_lstm_fallback", "TI004", None, None),  # host-only: judged from the loop body (recurrent_dropout)
]

_cache: dict[str, traceinsight.Analysis] = {}


def _analysis(name: str) -> traceinsight.Analysis:
    if name not in _cache:
        _cache[name] = traceinsight.analyze(SAMPLES / name)
    return _cache[name]


def _id(p) -> str:
    return p.id if hasattr(p, "id") else f"{p[0]}-{p[1]}"


def _sample(p) -> str:
    return p.values[0] if hasattr(p, "values") else p[0]


@pytest.mark.parametrize("sample, code, lo, hi", EXPECTED, ids=[_id(p) for p in EXPECTED])
def test_sample_finding(sample, code, lo, hi):
    a = _analysis(sample)
    negate = code.startswith("!")
    code = code.lstrip("!")
    assert code in a.rules_run, f"rule {code} did not run (lost from the registry?); warnings: {[w for w in a.warnings if code in w]}"
    found = [f for f in a.findings if f.code == code]
    if negate:
        assert not [f for f in found if f.severity.value != "info"], f"{sample}: unexpected {code}: {[f.title for f in found]}"
        return
    assert found, f"{sample}: expected {code}, got {[(f.code, f.title) for f in a.findings]}"
    if lo is not None:
        pct = max(f.impact_pct_span for f in found)
        assert lo <= pct <= hi, f"{sample}: {code} impact {pct:.1f}% of span outside [{lo}, {hi}]"


@pytest.mark.parametrize("sample", sorted({_sample(p) for p in EXPECTED}))
def test_sample_is_small_and_loads(sample):
    p = SAMPLES / sample
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
    assert size <= 2 * 1024 * 1024
    tl = traceinsight.load(p)
    assert len(tl.events) > 0


@pytest.mark.parametrize("sample", [s for s in sorted({_sample(p) for p in EXPECTED}) if s.endswith(".json.gz")])
def test_pytorch_samples_are_gpu_traces(sample):
    tl = _analysis(sample).timeline
    assert tl.meta.devices and tl.meta.devices[0].sm_count in (40, 108)
    kinds = set(tl.events["kind"].astype(str))
    assert {"kernel", "runtime", "cpu_op", "step"} <= kinds
