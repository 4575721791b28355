"""One record per input format (``traceinsight.ingest.input_format``): each format declares it in its own folder,
``ingest.FORMATS`` lists it once, and every floor above reading asks the record instead of comparing format names.
A format that is only a record in that list is detected, read, analysed and named in the ``--trace-format`` help."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceinsight
from traceinsight import ingest
from traceinsight.ingest import FORMATS, InputFormat, ReadResult, Rows, input_format
from traceinsight.ingest.input_format import UNKNOWN
from traceinsight.model.timeline import KINDS, TraceMeta
from traceinsight.render import render

REPO = Path(__file__).resolve().parents[1]

#: Names that are formats only (``pytorch`` is a framework too, compared as one by the advice).
FORMAT_ONLY_NAMES = set(FORMATS) - {"pytorch", "tensorflow", "jax"}


def _is_source_format(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "source_format") or (
        isinstance(node, ast.Name) and node.id == "source_format")


def _format_name_tests(tree: ast.AST) -> list[str]:
    """Every comparison of a format name in ``tree``: ``source_format ==``/``in``/``.startswith`` and comparisons
    with a literal that only a format is called."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            literals = [e for o in operands for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])]
            if any(_is_source_format(o) for o in operands) or any(
                    isinstance(e, ast.Constant) and e.value in FORMAT_ONLY_NAMES for e in literals):
                found.append(f"l.{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and _is_source_format(node.func.value)):
            found.append(f"l.{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_floor_above_reading_compares_format_names():
    """Derived data, rules, the assessment, renderers and products ask ``input_format(...)`` (rules:
    ``ctx.input_format``); only the reading floor, where the formats live, names them."""
    offenders = {}
    for path in sorted([*(REPO / "traceinsight").rglob("*.py"), *(REPO / "rules").glob("*.py")]):
        rel = path.relative_to(REPO)
        if rel.parts[:2] == ("traceinsight", "ingest"):
            continue
        found = _format_name_tests(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[str(rel)] = found
    assert offenders == {}


def test_the_scan_finds_a_planted_comparison():
    planted = ast.parse('if meta.source_format == "pytorch":\n    pass\nok = fmt.startswith("x") or name in ("nsys", "y")\n'
                        'also = source_format.startswith("tensorflow")\n')
    assert len(_format_name_tests(planted)) == 3


def test_every_format_declares_its_record_in_its_own_folder():
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        module = fmt.reader.partition(":")[0]
        assert module.startswith("traceinsight.ingest.") and module.count(".") == 3, module  # ingest/<fmt>/<reader>
        assert fmt.sniff.__module__.rsplit(".", 1)[0] == module.rsplit(".", 1)[0]  # the sniffer of the same folder
        assert fmt.label and callable(fmt.read)
    assert input_format("rocprof") is UNKNOWN and not UNKNOWN.shapes and UNKNOWN.record_stacks is None


def test_the_records_answer_what_their_traces_record():
    assert input_format("pytorch").frameworks == ("pytorch",) and input_format("pytorch").shapes
    assert input_format("tensorflow-xplane").op_costs and not input_format("tensorflow-xplane").shapes
    assert input_format("nsys").frameworks == () and "capture-range" in input_format("nsys").record_steady
    assert [n for n, f in FORMATS.items() if f.record_stacks] == ["pytorch"]


# --- a format that exists only as a record in the list ---------------------------------------------------------------

TOY_HEADER = b"kernel,begin_us,length_us,queue\n"


def toy_sniff(path: Path, head: bytes) -> bool:
    return path.is_file() and head.startswith(TOY_HEADER)


def toy_read(path: Path, **options) -> ReadResult:
    frame = pd.read_csv(path)
    n = len(frame)
    kinds = pd.Categorical.from_codes(np.full(n, KINDS.index("kernel"), dtype=np.int8), categories=list(KINDS))
    columns = {"kind": kinds, "name": frame["kernel"].astype(str).to_numpy(),
               "start_ns": (frame["begin_us"].to_numpy(np.float64) * 1e3).astype(np.int64),
               "dur_ns": (frame["length_us"].to_numpy(np.float64) * 1e3).astype(np.int64),
               "stream": frame["queue"].to_numpy(np.int64), "device": np.zeros(n, dtype=np.int64)}
    return ReadResult([Rows(columns)], TraceMeta(source_format="toy-kernels", path=str(path), tool="a kernel table"))


TOY = InputFormat(name="toy-kernels", label="a table of kernels (.csv: kernel,begin_us,length_us,queue)", sniff=toy_sniff,
                  reader=f"{__name__}:toy_read", record_steady="Record steady-state steps: skip the first rows.")


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(FORMATS, TOY.name, TOY)
    return TOY


def _toy_file(tmp_path: Path) -> Path:
    rows = [f"{'gemm' if i % 2 else 'relu'},{i * 100.0},{60.0 if i % 2 else 5.0},7" for i in range(40)]
    path = tmp_path / "kernels.csv"
    path.write_bytes(TOY_HEADER + "\n".join(rows).encode() + b"\n")
    return path


def test_a_format_only_in_the_list_is_sniffed_read_and_analysed(tmp_path, toy_registered):
    path = _toy_file(tmp_path)
    assert ingest.detect(path) == "toy-kernels"
    tl = ingest.load(path)
    assert tl.meta.source_format == "toy-kernels" and len(tl.events) == 40
    assert tl.events["dur_ns"].sum() == 20 * 60_000 + 20 * 5_000
    a = traceinsight.analyze(path)
    doc = json.loads(render(a, "json"))
    assert doc["trace"]["format"] == "toy-kernels" and doc["trace"]["framework"] == "cuda"  # kernels, no framework names
    assert not any("torch" in note for note in doc["efficiency"]["notes"])  # no other format's words
    from traceinsight.derive.steady import record_better

    assert input_format("toy-kernels") is TOY and record_better("toy-kernels", a.framework) == TOY.record_steady


def test_an_unknown_file_lists_every_record(tmp_path, toy_registered):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    with pytest.raises(traceinsight.UnknownFormatError) as err:
        ingest.detect(bad)
    assert all(f.label in str(err.value) for f in FORMATS.values()) and TOY.label in str(err.value)


def test_trace_format_help_lists_every_format():
    from typer.testing import CliRunner

    from traceinsight.cli.app import app

    res = CliRunner().invoke(app, ["analyze", "--help"], terminal_width=400, env={"COLUMNS": "400"})
    line = " ".join(res.output.split())
    assert f"Force the parser: {', '.join(FORMATS)}." in line
