"""What a record must be to be read: its check, and whether its timing can be used."""

from __future__ import annotations

import re

import pytest

from leverctl.bench.records import rules, schema
from leverctl.errors import UserError


def _gpu(us=5.0, status="pass", device="Fake GPU"):
    return {
        "kernel": "k",
        "variant": "v",
        "levers": {},
        "config": "c",
        "shape": {"label": "s"},
        "status": status,
        "device": device,
        "timing": None if us is None else {"median_us": us, "p20_us": us * 0.9, "p80_us": us * 1.1},
    }


@pytest.mark.parametrize(
    "record, kind",
    [
        (_gpu(), "gpu"),
        (_gpu(None, status="fail"), "gpu"),  # a failing record may lack a timing
        (_gpu(None, device="Numba CUDA simulator"), None),
        (_gpu(None, device="fake simulator"), "sim"),
        (_gpu(None), None),  # a results.jsonl without its plan: untimed is taken for the simulator
    ],
)
def test_records_whose_timing_is_usable_or_rightly_absent_are_read(record, kind):
    assert rules.check_record(record, "here", kind) is record


@pytest.mark.parametrize(
    "record, kind, why",
    [
        (_gpu(None), "gpu", "passed on a GPU (Fake GPU) but has no timing"),
        (_gpu(float("nan")), "gpu", "median_us is NaN"),
        (_gpu(float("nan"), status="fail"), "gpu", "median_us is NaN"),  # wherever a timing is, it is sound
        (_gpu(float("-inf")), None, "median_us is infinite"),
        (_gpu(-2.0), "gpu", "median_us is negative (-2)"),
        (_gpu(0.0), "gpu", "median_us is 0"),
        ({**_gpu(), "timing": {"p20_us": 1.0}}, "gpu", "timing has no median_us"),
        ({**_gpu(), "timing": [5.0]}, "gpu", "`timing` is a JSON list"),
        ({**_gpu(), "timing": {"median_us": 5.0, "noise": -0.1}}, "gpu", "noise is negative"),
        (_gpu(5.0, device="Numba CUDA simulator"), "gpu", "a simulator record with a timing"),
        (_gpu(5.0), "sim", "a simulator record with a timing"),
    ],
)
def test_records_with_unusable_timings_are_refused_where_they_are(record, kind, why):
    with pytest.raises(UserError, match="unusable record: .*" + re.escape(why)) as e:
        rules.check_record(record, "f.jsonl:7", kind)
    assert e.value.where == "f.jsonl:7"


@pytest.mark.parametrize(
    "record, why",
    [
        ([1], "a JSON list, not an object"),
        ({"kernel": "k", "config": "c"}, "no variant, levers, shape, status"),
        ({**_gpu(), "shape": {"m": 1}}, "`shape` has no label"),
        ({**_gpu(), "levers": [1]}, "`levers` is not an object"),
        ({**_gpu(), "status": "skip"}, "record status 'skip' is neither pass nor fail"),
        ({**_gpu(), "variant": 3}, "`variant` is not a string"),
        ({**_gpu(), "config": None}, "`config` is not a string"),
    ],
)
def test_a_record_lacking_what_every_report_reads_is_refused(record, why):
    with pytest.raises(UserError) as e:
        rules.check_record(record, "here", "gpu")
    assert why in e.value.message


def test_the_simulators_name_is_the_devices():
    from leverctl.bench.device import SIM_NAME

    assert schema.SIM_NAME == SIM_NAME


@pytest.mark.parametrize(
    "device, timing, kind, on_gpu",
    [
        ("H200", None, "gpu", True),
        ("H200", None, "sim", False),
        ("H200", None, None, False),
        ("H200", {"median_us": 1.0}, None, True),
        (schema.SIM_NAME, {"median_us": 1.0}, "gpu", False),
        (None, {"median_us": 1.0}, "sim", False),
        (None, None, "gpu", True),
    ],
)
def test_where_a_record_ran(device, timing, kind, on_gpu):
    assert rules.ran_on_gpu({"device": device, "timing": timing}, kind) is on_gpu


def test_a_decoded_records_timing_is_fine_where_the_rule_finds_nothing_wrong():
    """``rules.timing_fine`` (of a record msgspec took) never says fine where
    ``rules.timing_problem`` (of the record read whole) finds a problem, and
    says fine wherever it finds none."""
    import itertools
    import json

    from leverctl.bench.records import decode

    for status, device, timing, kind in itertools.product(
        ("pass", "fail"),
        ("H200", schema.SIM_NAME, None, "absent"),
        (None, "absent", {"median_us": 2.0, "p20_us": 1.0}),
        ("gpu", "sim", None),
    ):
        rec = {"kernel": "k", "variant": "v", "levers": {}, "config": "c", "shape": {"label": "s"}, "status": status}
        if device != "absent":
            rec["device"] = device
        if timing != "absent":
            rec["timing"] = timing
        decoded = decode.record(json.dumps(rec).encode())
        assert decoded is not None
        assert rules.timing_fine(decoded, kind) is (rules.timing_problem(rec, kind) is None), (rec, kind)
