"""Decoding result lines and plan items quickly, with msgspec.

A cluster sweep's result set is a million JSON lines of about a kilobyte
each, and a report needs a dozen fields of each. msgspec decodes a line
straight into a typed structure in C: it checks what ``rules.check_record``
checks of a record's shape (string kernel, variant and config, a shape
object with a string label, a pass/fail status) while it parses, skips the
fields no report reads (traffic, roofline figures, achieved rates...) without
building them, and is about twice as fast as parsing the whole line into
dicts (measured: 2.1 µs against 4.5 µs for orjson and more for the standard
library, on a synthetic GPU record). The structure is made from the schema
(``schema.READ``, ``schema.TIMING``): the fields and figures are listed there.

The rule that keeps this exact: the fast path only ever *accepts*. A line it
cannot take (not JSON to msgspec, NaN or an out-of-range number, a field of a
type it does not expect, a duplicated key...) goes to the standard library
and ``rules.check_record``, which decide as they always have, with their own
one-line errors. So every accepted record has the values the standard parse
would give, and every refusal its words.

This module imports neither numba nor numpy.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from . import schema

DecodeError = msgspec.DecodeError  # the base of msgspec's parse and validation errors (msgspec.ValidationError too)


def loads(line: bytes) -> Any:
    """One JSON text parsed, as ``json.loads`` parses it: msgspec where it
    accepts the text, and whatever it refuses (NaN, numbers out of a double's
    range, lone surrogates, bad UTF-8, not JSON) goes to the standard
    library, which decides: the same values, the same errors."""
    try:
        return msgspec.json.decode(line)
    except msgspec.DecodeError:
        return json.loads(line.decode("utf-8"))


# ── records ─────────────────────────────────────────────────────────────────


class _Shape(Struct, gc=False):
    label: str


# A timing whose figures are usable (``rules.figure_problem`` finds nothing
# wrong with them): each required figure present and positive, the others
# absent, null or not negative, each a number (msgspec refuses one out of a
# double's range). A timing that is not (no median, a figure of another
# type, NaN...) fails the decoding, and its line goes to the standard path,
# whose words say what is wrong.
_Timing = msgspec.defstruct(
    "_Timing",
    [
        (f.name, Annotated[float, Meta(gt=0.0)])
        if f.required
        else (f.name, Union[Annotated[float, Meta(ge=0.0)], None], None)
        for f in schema.TIMING
    ],
    gc=False,
)

_OPTIONAL = {  # how a field the reports read is typed, where a record may lack it
    schema.RAW: (Union[Raw, UnsetType], UNSET),
    schema.VALUE: (Any, UNSET),
    schema.TIMING_FIELD: (Union[_Timing, None, UnsetType], UNSET),
}
_REQUIRED = {schema.TEXT: str, schema.RAW: Raw, schema.SHAPE: _Shape, schema.STATUS: Literal[schema.STATUSES]}

# A record as the reports read it: what :func:`record` and :func:`batch_records`
# decode of a line (``levers`` kept as its text, shared: a lever set repeats at every shape).
_Record = msgspec.defstruct(
    "_Record",
    [(f.name, _REQUIRED[f.read]) if f.required else (f.name, *_OPTIONAL[f.read]) for f in schema.READ],
    kw_only=True,
    gc=False,
)

_record = msgspec.json.Decoder(_Record).decode


def record(line: bytes) -> Any:
    """A result line decoded into the fields the reports read (``levers``,
    ``error``, ``roofline`` and ``batch_invariance`` left as their JSON text,
    which :func:`value` decodes where a report keeps them); None where the
    line is not for the fast path (see the module notes)."""
    try:
        r = _record(line)
    except msgspec.DecodeError:
        return None
    return r if levers_object(r) else None


def levers_object(r: Any) -> bool:
    """Whether the decoded ``levers`` is an object (else check_record says what it is)."""
    return memoryview(r.levers)[:1] == b"{"


_record_lines = msgspec.json.Decoder(_Record).decode_lines


def batch_records(chunk: bytes, lines: list[bytes]) -> list | None:
    """``chunk``'s ``lines`` (its text split at each newline) decoded at
    once, where each line is one record object: it starts with ``{`` and
    ends with ``}``, and msgspec finds as many records as there are lines.
    Else None, and the lines go one by one. (msgspec reads the text as a
    stream of values: a value over two lines, or two on one, would count
    alike. Lines that all start with ``{`` and end with ``}`` can hold
    neither.)"""
    for line in lines:
        if line[:1] != b"{" or line[-1:] != b"}":
            return None
    try:
        got = _record_lines(chunk)
    except msgspec.DecodeError:
        return None
    return got if len(got) == len(lines) else None


def value(x: Any) -> Any:
    """A field's value: decoded where :func:`record` left it as JSON text
    (by :func:`loads`: a number beyond a double's range is infinite, as the
    standard library reads it)."""
    return loads(bytes(x)) if type(x) is Raw else x


# ── plan items ──────────────────────────────────────────────────────────────


class Item(Struct, kw_only=True, gc=False, omit_defaults=True):
    """One planned run as plan.json lists it: ``n`` is its place in the
    whole sweep's list (a shard's plan lists its own items only). A plan of
    the first schema has no ``n``: there every plan lists every item, and
    the place is the position."""

    n: Union[int, UnsetType] = UNSET
    kernel: str
    variant: Any = UNSET
    config: str
    shape: str
    levers: Union[Raw, UnsetType] = UNSET


_item_list = msgspec.json.Decoder(list[Item])
_fields = msgspec.json.Decoder(dict[str, Raw])


def plan_fields(data: bytes) -> dict[str, Raw] | None:
    """A plan.json text as its top-level fields, each value unparsed; None
    where it is not a JSON object to msgspec."""
    try:
        return _fields.decode(data)
    except msgspec.DecodeError:
        return None


def plan_items(raw: Raw) -> list[Item] | None:
    """A plan's item list decoded; None where the fast path does not take it
    (an item of another shape, lever sets that are not objects, ...)."""
    try:
        items = _item_list.decode(raw)
    except msgspec.DecodeError:
        return None
    for it in items:
        lv = it.levers
        if lv is not UNSET and memoryview(lv)[:1] != b"{":
            return None
    return items


def item_of(it: dict) -> Item:
    """A plan item checked by ``plans.check_plan``, as an Item."""
    return Item(
        n=it["n"] if "n" in it else UNSET,
        kernel=it["kernel"],
        variant=it.get("variant", UNSET),
        config=it["config"],
        shape=it["shape"],
        levers=Raw(json.dumps(it["levers"], separators=(",", ":")).encode()) if "levers" in it else UNSET,
    )
