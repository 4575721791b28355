"""Good/bad example pairs (pylint style): the same workload written badly (the rule must fire) and fixed the way the
rule's own fix text says (the rule must stay silent), both as real kineto JSON through the PyTorch parser.

Only rules whose existing tests lack a *same workload, fixed* pair are here; the others are listed in
``COVERED_ELSEWHERE`` with the tests that already do exactly this, and ``test_every_rule_has_a_pair`` fails when a new
built-in rule has neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

import traceinsight
from tests.helpers.kineto_writer import KinetoTrace
from traceinsight.plugins import discover

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM = "ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"  # tensor-core GEMM: keeps TI007 out of the way
GRID = (216, 1, 1)  # fills 108 SMs: keeps TI008 out of the way


@dataclass(frozen=True)
class Example:
    code: str
    bad: str  # what the bad trace does
    good: str  # the same workload, fixed
    build: Callable[[KinetoTrace, bool], None]  # build(trace, fixed)


# --- TI001 gpu-idle-gaps: DataLoader in the main process vs workers + prefetch ---------------------------------


# --- TI002 host-sync-stalls: loss.item() every step vs accumulate on the GPU, read once --------------------------


# --- TI003 tiny-kernels: 300 eager elementwise ops vs the same math fused ---------------------------------------


EXAMPLES = {
}

#: Rules whose existing tests already build the same workload badly and fixed; not duplicated here.
COVERED_ELSEWHERE = {
    "TI004": "test_rules_core.py: test_ti004_lstm_cell_fallback (LSTMCell loop) / test_ti004_negative_cudnn (cuDNN LSTM)",
    "TI005": "test_rules_extra.py: test_ti005_positive (3 ms data wait) / test_ti005_negative_below_threshold (200 µs)",
    "TI006": "test_rules_extra.py: test_ti006_positive (pageable) / test_ti006_negative_pinned (same copies, pinned)",
    "TI007": "test_rules_extra.py: test_ti007_positive_fp32_sgemm / test_ti007_negative_tensor_core_kernels",
    "TI008": "test_rules_extra.py: test_ti008_positive (32 blocks) / test_ti008_negative_full_grids (128 blocks)",
    "TI009": "test_rules_extra.py: test_ti009_positive (straggler) / test_ti009_negative_balanced",
    "TI010": "test_rules_extra.py: test_ti010_positive (1 ms every 5 ms) / test_ti010_negative_busy (back to back)",
    "TI011": "test_rules_quality.py: test_ti011_runtime_calls_without_gpu_activity / test_ti011_negative_gpu_trace",
    "TI012": "test_rules_quality.py: test_ti012_two_kernels / test_ti012_graph_capture / test_ti012_negative_steady_steps",
    "TI013": "test_rules_quality.py: test_ti013_first_step_init, test_ti013_start_up_calls_the_ledger_cannot_measure / test_ti013_negative_steady_steps",
    "TI014": "test_rules_quality.py: test_ti014_truncated_json / test_ti014_negative_complete_file",
    "TI020": "test_job_rules.py: test_stragglers_positive_planted_delay / test_stragglers_negative_balanced",
    "TI021": "test_job_rules.py: test_exposed_communication_positive / test_exposed_communication_negative_overlapped",
}


def _analyze(tmp_path, ex: Example, fixed: bool):
    t = KinetoTrace()
    ex.build(t, fixed)
    a = traceinsight.analyze(t.write(tmp_path / f"{ex.code}_{'good' if fixed else 'bad'}.json"))
    assert not a.warnings, a.warnings
    return a


def _codes(a) -> set[str]:
    return {f.code for f in a.findings}


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_bad_fires(tmp_path, code):
    a = _analyze(tmp_path, EXAMPLES[code], fixed=False)
    (f,) = [f for f in a.findings if f.code == code]
    assert f.impact_ns > 0


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_good_is_silent(tmp_path, code):
    a = _analyze(tmp_path, EXAMPLES[code], fixed=True)
    assert code not in _codes(a), [(f.code, f.title) for f in a.findings]


def test_every_rule_has_a_pair():
    builtin = {c for c, cls in discover().rules.items() if cls.__module__.startswith("traceinsight.rules.")}
    assert set(EXAMPLES) | set(COVERED_ELSEWHERE) == builtin
    assert not set(EXAMPLES) & set(COVERED_ELSEWHERE)


def test_covered_elsewhere_names_real_tests():
    """Each pair named in COVERED_ELSEWHERE must exist, or the 'covered' claim is a promise nobody checks."""
    import re
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for code, where in COVERED_ELSEWHERE.items():
        module, tests = where.split(":", 1)
        names = re.findall(r"\btest_\w+", tests)
        assert len(names) >= 2, f"{code}: name at least a positive and a negative test: {where!r}"
        source = (here / module.strip()).read_text(encoding="utf-8")
        for name in names:
            assert re.search(rf"^def {name}\(", source, flags=re.M), f"{code}: {module.strip()} has no {name}"


# --- the pairs are the same workload, and the fix is the one the finding says ----------------------------------


