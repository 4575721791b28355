"""The plain-data side of a finding by value: the severity names and their order, a fix's snippet as it must be
pasted, an instance's normal form, and the fingerprint that matches a finding across runs."""

from __future__ import annotations

import hashlib
from collections import namedtuple

import numpy as np
import pandas as pd
import pytest

from traceinsight.model.finding import Finding, Fix, Instance, Instances, Location, Severity, as_instances, instance_columns


def test_severity_order_and_parsing():
    assert [s.rank for s in (Severity.INFO, Severity.WARNING, Severity.ERROR)] == [1, 2, 3]
    assert Severity.parse("WARNING") is Severity.WARNING and Severity.parse(Severity.ERROR) is Severity.ERROR
    assert Severity.parse("info") is Severity.INFO
    with pytest.raises(ValueError) as e:
        Severity.parse("fatal")
    assert str(e.value) == "unknown severity 'fatal'; use info, warning or error"


def test_fix_code_is_stored_as_it_must_be_pasted():
    f = Fix("pin it", """
        loader = DataLoader(ds, pin_memory=True)
        for x in loader:
            x = x.cuda(non_blocking=True)   

    """)
    assert f.code == "loader = DataLoader(ds, pin_memory=True)\nfor x in loader:\n    x = x.cuda(non_blocking=True)"
    assert Fix("text only").code == ""


def test_instance_normal_form():
    i = Instance(10.9, 20, rank=1.0, device=True, label=7)
    assert (i.start_ns, i.end_ns, i.rank, i.device, i.label, i.dur_ns) == (10, 20, 1, 1, "7", 10)
    assert type(i.rank) is int and type(i.device) is int
    assert Instance(5, 5).dur_ns == 0 and Instance(5, 5).rank is None and Instance(5, 5).device is None
    with pytest.raises(ValueError) as e:
        Instance(6, 5)
    assert str(e.value) == "instance ends before it starts: 6 > 5"


def test_fingerprint_is_the_place_not_the_numbers():
    f = Finding("TI001", "t", Severity.INFO, "m", key="k", location=Location(rank=2, device=1, stream=7), impact_ns=5)
    assert f.fingerprint == hashlib.sha1(b"TI001|k|2|1|7").hexdigest()[:16]
    g = Finding("TI001", "other title", Severity.ERROR, "", key="k", location=Location(rank=2, device=1, stream=7, start_ns=9))
    assert g.fingerprint == f.fingerprint
    assert Finding("TI001", "t", Severity.INFO, "m", key="k").fingerprint == hashlib.sha1(b"TI001|k|None|None|None").hexdigest()[:16]


def test_fix_keeps_the_first_lines_own_indent_and_its_letters():
    assert Fix("", "\n        X = batch.to('cuda', non_blocking=True)\n        Y = X @ W\n").code == (
        "X = batch.to('cuda', non_blocking=True)\nY = X @ W")
    # a continuation snippet whose first line is indented deeper than the rest keeps that indent
    assert Fix("", "\n            .pin_memory()\n        loader = DataLoader(ds)\n").code == "    .pin_memory()\nloader = DataLoader(ds)"


def test_instance_times_become_integers():
    i = Instance(1, 20.7)
    assert i.end_ns == 20 and type(i.end_ns) is int


# --- instances as columns ------------------------------------------------------------------------------------


def test_columns_of_any_instance_like_objects():
    Span = namedtuple("Span", "start_ns end_ns")  # no rank, device or label: unknown and empty
    c = instance_columns(Span(s, s + 5) for s in (10, 20))  # a generator is read once
    assert c.start_ns.tolist() == [10, 20] and c.end_ns.tolist() == [15, 25]
    assert np.isnan(c.rank).all() and np.isnan(c.device).all() and c.labels == [""] and c.label_code.tolist() == [0, 0]
    c = instance_columns([Instance(1, 2, label=""), Instance(3, 4, rank=2, label="copy"), Instance(5, 6, label="")])
    assert c.labels == ["", "copy"] and c.label_code.tolist() == [0, 1, 0] and c.rank[1] == 2.0
    assert [c.label(i) for i in range(3)] == ["", "copy", ""]


def test_empty_columns_keep_their_types():
    for c in (instance_columns([]), instance_columns(None), Instances().columns()):
        assert (c.start_ns.dtype, c.end_ns.dtype, c.label_code.dtype, c.rank.dtype) == (np.int64, np.int64, np.int64, np.float64)
        assert len(c.start_ns) == 0 and c.labels == []


def test_instances_made_from_objects():
    items = [Instance(1, 2, rank=0, label="a"), Instance(3, 5, device=1)]
    got = as_instances(items)
    assert isinstance(got, Instances) and len(got) == 2 and list(got) == items and got[1] == items[1]
    c = got.columns()
    assert c.start_ns.tolist() == [1, 3] and c.end_ns.tolist() == [2, 5] and c.labels == ["a", ""]
    assert as_instances(None) == [] and len(Instances()) == 0
    with pytest.raises(TypeError) as e:
        as_instances([Instance(1, 2), (3, 4)])
    assert str(e.value) == "instances must be Instance objects or a DataFrame, got tuple"


def test_instances_compare_by_value_whatever_backs_them():
    df = pd.DataFrame({"start_ns": [1, 3], "end_ns": [2, 5], "rank": [0, None], "label": ["a", "b"]})
    cols, objs = as_instances(df), Instances([Instance(1, 2, rank=0, label="a"), Instance(3, 5, label="b")])
    assert cols == objs and objs == cols and cols == list(objs) and not (cols != objs)
    other = Instances([Instance(1, 2, rank=0, label="a"), Instance(3, 6, label="b")])
    assert cols != other and not (cols == other)
    assert (cols == 3) is False


def test_instances_from_a_frame_normalise_every_column():
    df = pd.DataFrame({
        "start_ns": [1.9, 5.0, 7.0, 9.0],
        "end_ns": [3.2, 5.0, 8.0, 9.5],  # a zero-length instance is an instance
        "rank": pd.array([0, None, 2, -1], dtype="Int64"),  # nullable integers: missing and negative are unknown
        "device": ["1", "x", None, "3.7"],  # text: read as numbers where it is one
        "label": ["gap", None, "gap", float("nan")],
    })
    got = as_instances(df)
    c = got.columns()
    assert c.start_ns.dtype == np.int64 and c.end_ns.dtype == np.int64
    assert c.start_ns.tolist() == [1, 5, 7, 9] and c.end_ns.tolist() == [3, 5, 8, 9]
    assert [(i.rank, i.device) for i in got] == [(0, 1), (None, None), (2, None), (None, 3)]
    assert [i.label for i in got] == ["gap", "nan", "gap", "nan"] and c.labels == ["gap", "nan"]
    assert c.label_code.tolist() == [0, 1, 0, 1]


def test_bad_frames_are_refused_with_their_reason():
    with pytest.raises(ValueError) as e:
        as_instances(pd.DataFrame({"rank": [0]}))
    assert str(e.value) == "instances DataFrame lacks column(s) end_ns, start_ns"
    with pytest.raises(OverflowError) as e:
        as_instances(pd.DataFrame({"start_ns": [1], "end_ns": [2], "device": [float("inf")]}))
    assert str(e.value) == "cannot convert float infinity to integer"
    with pytest.raises(ValueError) as e:
        as_instances(pd.DataFrame({"start_ns": [1, 10], "end_ns": [1, 9]}))
    assert str(e.value) == "instance ends before it starts: 10 > 9"
