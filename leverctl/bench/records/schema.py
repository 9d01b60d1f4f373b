"""The record's schema: its fields, listed once, and the names of its files.

A record (docs/records.md) is one run of one (kernel path, variant, shape,
lever set). :data:`FIELDS` lists its fields in the order the bench writes
them: each with its JSON type, whether every reader requires it, how the
fast decoder takes it for the reports (``read``) and where the columns hold
it (``column``). Everything that spells the fields takes them from here:

* the writer (:func:`record`, which ``bench.run`` fills in);
* the check of a record read (``rules.check_record``);
* the msgspec structure a result line is decoded into (``decode``);
* the columns a report reads (``columns.COLUMNS``, ``columns.Builder``);
* the test that docs/records.md names every field written.

:data:`TIMING` does the same for a timing's figures, which the rules,
the decoder and the columns read.

This module imports nothing but the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ── a record's fields ───────────────────────────────────────────────────────

# How the fast decoder takes a field (Field.read):
TEXT = "text"  # a string, checked as it is decoded
RAW = "raw"  # left as its JSON text, decoded (decode.value) where a report keeps it
VALUE = "value"  # any JSON value
SHAPE = "shape"  # an object whose string ``label`` is the shape's identity
STATUS = "status"  # one of STATUSES
TIMING_FIELD = "timing"  # null, or an object of TIMING figures that the decoding checks

# Where the columns hold a field (Field.column):
NAME = "name"  # numbered in the columns' tables, one int32 column (a shape by its label)
PASSED = "passed"  # the status, as a bool column ``passed``
FLAG = "flag"  # a bool column of the field's name (true where the field is true)
FIGURES = "figures"  # one float64 column per TIMING figure (NaN: none)
EXTRA = "extra"  # kept by record where a report reads it (columns._extras)


@dataclass(frozen=True)
class Field:
    name: str
    json: str  # the JSON type, as docs/records.md describes it
    required: bool = False  # a record without it is refused (rules.check_record)
    read: str | None = None  # how the fast decoder takes it (None: skipped, never built)
    column: str | None = None  # where the columns hold it (None: not held)
    # written in every record (False: speedup_vs_against, in a bench run with --against; profile, with --profile;
    # weights, with --weights)
    always: bool = True


FIELDS: tuple[Field, ...] = (
    Field("kernel", "string", True, TEXT, NAME),
    Field("variant", "string", True, TEXT, NAME),
    Field("levers", "object", True, RAW, NAME),
    Field("config", "string", True, TEXT, NAME),
    Field("shape", "object", True, SHAPE, NAME),
    Field("status", "string", True, STATUS, PASSED),
    Field("note", "string", False, VALUE, EXTRA),
    Field("error", "object or null", False, RAW, EXTRA),
    Field("timing", "object or null", False, TIMING_FIELD, FIGURES),
    Field("traffic", "object or null"),
    Field("roofline", "object or null", False, RAW, EXTRA),
    Field("achieved", "object or null"),
    Field("reference_lib", "object or null"),
    Field("tensor_cores", "string or null", False, VALUE, EXTRA),
    Field("tc_dtype", "string or null", False, VALUE, EXTRA),
    Field("baseline", "boolean", False, VALUE, FLAG),
    Field("batch_invariance", "object or null", False, RAW, EXTRA),
    Field("findings", "object or null"),
    Field("rows_lost", "integer or null"),
    Field("device", "string", False, VALUE, NAME),
    Field("plan", "string", False, VALUE),
    Field("catalog", "string"),
    Field("weights", "object or null", always=False),
    Field("profile", "object or null", False, RAW, EXTRA, always=False),
    Field("speedup_vs_against", "number or null", always=False),
)
NAMES = tuple(f.name for f in FIELDS)
WRITTEN = tuple(f.name for f in FIELDS if f.always)  # every record has these, in this order
REQUIRED = tuple(f.name for f in FIELDS if f.required)
STRINGS = tuple(f.name for f in FIELDS if f.required and f.read == TEXT)  # required, and strings
READ = tuple(f for f in FIELDS if f.read)  # what the fast decoder takes
STATUSES = ("pass", "fail")

# What makes two records the same measurement across runs: the kernel, the
# shape's label and the configuration (rules.identity; the columns' keys).
IDENTITY = ("kernel", "shape", "config")


def record(**values: Any) -> dict[str, Any]:
    """A record with every field always written, in order: ``values`` where
    given, null elsewhere. A name that is no field is refused (KeyError)."""
    unknown = values.keys() - set(WRITTEN)
    if unknown:
        raise KeyError(f"not a record field: {', '.join(sorted(unknown))}")
    return {name: values.get(name) for name in WRITTEN}


# ── a timing's figures ──────────────────────────────────────────────────────


@dataclass(frozen=True)
class Figure:
    """A figure of a record's timing that the reports read. Wherever present
    it is a finite number, at least 0; a required one is in every timing and
    positive (rules.timing_problem)."""

    name: str  # its key in ``timing``
    column: str  # its column
    required: bool = False


TIMING: tuple[Figure, ...] = (
    Figure("median_us", "median", True),
    Figure("p20_us", "p20"),
    Figure("p80_us", "p80"),
    Figure("noise", "noise"),
)
TIMING_FIGURES = tuple(f.name for f in TIMING)

# ── what else the records' readers know ─────────────────────────────────────

# The simulator's device name, as records carry it (bench.device.SIM_NAME;
# not imported from there, so that reading results never loads the device code).
SIM_NAME = "Numba CUDA simulator"

# The kernel paths `report show` ranks arm by arm (leverctl.bench.arms); their
# records keep their errors, tensor cores and roofline (see columns._extras).
ARM_VIEW_KERNELS = ("ffn.prefill",)

# The containers (docs/records.md).
BENCH_SCHEMA = "leverctl.bench/1"
BENCH_SCHEMA_PREFIX = "leverctl.bench/"
PLAN_FILE = "plan.json"
RESULTS_FILE = "results.jsonl"
PLAN_SCHEMA = "leverctl.sweep-plan/2"
# Plans of the first schema list every item of the sweep in every shard's plan, without ``n``; they are
# read alike (an item's place is its position), and merge with plans of this one.
PLAN_SCHEMAS = ("leverctl.sweep-plan/1", PLAN_SCHEMA)
