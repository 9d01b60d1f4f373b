"""One schema: the writer, the fast decoder, the check and the columns take
the record's fields and timing figures from ``records.schema``."""

from __future__ import annotations

import json

import pytest
from bench_fakes import SHAPES, saxpy_path

from leverctl.bench.device import SIM_NAME, Device
from leverctl.bench.plan import PlanItem, items_for
from leverctl.bench.records import columns, decode, rules, schema
from leverctl.bench.run import empty_record, run_item, speedups


def test_the_writer_writes_every_field_of_the_schema_in_its_order():
    item = items_for(saxpy_path(), {"gemv_sw": True}, [SHAPES[0]], catalog="c" * 16)[0]
    rec = empty_record(item, Device("sim", SIM_NAME))
    assert tuple(rec) == schema.WRITTEN
    failed = run_item(
        PlanItem(saxpy_path(), "", {}, SHAPES[0], "select() raised KeyError", failed=True), Device("sim", SIM_NAME)
    )
    assert tuple(failed) == schema.WRITTEN
    speedups([rec], [])
    assert tuple(rec) == (*schema.WRITTEN, "speedup_vs_against")  # last, in a run with --against
    # bench --weights --profile --against
    assert schema.NAMES == (*schema.WRITTEN, "weights", "profile", "speedup_vs_against")


def test_a_record_with_a_name_outside_the_schema_is_refused():
    with pytest.raises(KeyError, match="not a record field: elapsed_s"):
        schema.record(kernel="k", elapsed_s=1.0)
    assert schema.record(kernel="k") == {**dict.fromkeys(schema.WRITTEN), "kernel": "k"}


def test_the_fast_decoder_takes_the_fields_the_schema_says_the_reports_read():
    assert decode._Record.__struct_fields__ == tuple(f.name for f in schema.READ)
    assert decode._Timing.__struct_fields__ == schema.TIMING_FIGURES
    import msgspec

    assert {f.name for f in msgspec.structs.fields(decode._Record) if f.required} == set(schema.REQUIRED)
    assert [f.required for f in msgspec.structs.fields(decode._Timing)] == [f.required for f in schema.TIMING]
    line = json.dumps(
        {
            **schema.record(kernel="k", variant="v", levers={}, config="c", shape={"label": "s"}, status="pass"),
            "traffic": {"bytes": 1},
        }
    ).encode()
    got = decode.record(line)
    assert got is not None and {f: getattr(got, f) for f in ("kernel", "variant", "config")} == {
        "kernel": "k",
        "variant": "v",
        "config": "c",
    }
    for f in schema.REQUIRED:  # a record without a required field is the standard path's to refuse
        assert decode.record(json.dumps({k: v for k, v in json.loads(line).items() if k != f}).encode()) is None


def test_the_check_requires_the_fields_the_schema_requires():
    from leverctl.errors import UserError

    with pytest.raises(UserError) as e:
        rules.check_record({}, "here")
    assert e.value.message == f"not a leverctl record (no {', '.join(schema.REQUIRED)})"


def test_the_columns_hold_the_fields_the_schema_places_in_them():
    held = {f.name for f in schema.FIELDS if f.column in (schema.NAME, schema.FLAG)}
    figures = {f.column for f in schema.TIMING}
    assert set(columns.COLUMNS) == held | figures | {"passed", "line", "offset", "length"}
    rec = {
        "kernel": "ffn.prefill",
        "variant": "v",
        "levers": {"x": 1},
        "config": "x=1",
        "shape": {"label": "s"},
        "status": "fail",
        "note": "broke",
        "error": {"rel": 1.0},
        "timing": {"median_us": 2.0, "noise": 0.1},
        "tensor_cores": "wgmma",
        "tc_dtype": "f16",
        "baseline": True,
        "batch_invariance": {"identical": True},
        "roofline": {"pct_of_floor": 50.0, "bound": "memory"},
        "device": "H200",
        "traffic": {"bytes": 1},
    }
    made = columns.of_dicts([rec])[0]
    kept = {f.name for f in schema.FIELDS if f.column}  # every field the columns hold comes back
    assert set(made) == kept & set(rec)
    assert made["timing"] == {"median_us": 2.0, "noise": 0.1} and made["roofline"] == {"pct_of_floor": 50.0}
