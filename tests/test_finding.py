"""The plain-data side of a finding by value: the severity names and their order, a fix's snippet as it must be
pasted, an instance's normal form, and the fingerprint that matches a finding across runs."""

from __future__ import annotations

import hashlib

import pytest

from traceinsight.finding import Finding, Fix, Instance, Location, Severity


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
