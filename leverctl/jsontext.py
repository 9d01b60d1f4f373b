"""``json.dumps(obj, indent=2)``, the same text, faster and in pieces.

A report of a million records is a JSON document of a million rows. The
standard library indents in Python (its C encoder does not indent before
Python 3.14), at some 20 µs a row, and returns the whole text at once. Here
each value is spelled as the standard encoder spells it (strings through its
own C escaper, floats by ``float.__repr__``), objects and lists are laid out
as ``indent=2`` lays them out, and the text comes in pieces (one per element
of the outer lists) that a caller writes as they come. Anything other than
plain dicts with string keys, lists, tuples, strings, ints, floats, bools
and None is handed to ``json.dumps`` itself, so the text is always its text
(tests/test_jsontext.py holds the two to each other).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Iterator

_enc = json.encoder.encode_basestring_ascii  # the C escaper json.dumps uses (ensure_ascii)
_PAD = ["\n" + "  " * i for i in range(64)]
MAX_LEVEL = 60  # deeper than any report: json.dumps lays it out
STREAM_DEPTH = 2  # containers this shallow are laid out element by element; deeper ones as one string each
PIECE = 1 << 16  # characters gathered before a piece is handed on
_KEYS: dict = {}  # a key -> its text and the colon after it


class Rows:
    """A list made as it is written: ``n`` elements that ``make()`` yields,
    laid out as a list of them (a report's million rows, never all built at
    once). Only this module writes it; json.dumps does not know it."""

    __slots__ = ("n", "make")

    def __init__(self, n: int, make: Callable[[], Iterable[Any]]):
        self.n = n
        self.make = make

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        return iter(self.make())


class Table:
    """A list of objects that all have ``keys``, given as rows of values in
    that order (``rows``: a list of tuples, or any sequence whose slices
    are), each column of one kind: ``"str"`` (strings), ``"str?"`` (a
    string, or None: then the key is left out), ``"num"`` (floats, ints or
    None) or ``"levers"`` (a lever set, spelled once per set): a ranking's
    or a comparison's million rows, spelled exactly as ``json.dumps``
    spells :meth:`as_list`, column by column and then one format string a
    row. A batch holding a value of another kind than its column's (NaN, a
    bool, a subclass...) goes the general way."""

    __slots__ = ("keys", "kinds", "rows")

    def __init__(self, keys: tuple[str, ...], kinds: tuple[str, ...], rows: list[tuple]):
        self.keys = keys
        self.kinds = kinds
        self.rows = rows

    def as_list(self) -> list[dict]:
        """The rows as dicts; a column of kind ``"str?"`` is left out of a row where it is None."""
        opt = [k for k, kind in zip(self.keys, self.kinds) if kind == "str?"]
        return [{k: v for k, v in zip(self.keys, row) if not (v is None and k in opt)} for row in self.rows[:]]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Table) and self.as_list() == other.as_list()

    __hash__ = None  # type: ignore[assignment]


def _table(o: Table, level: int, allow_nan: bool, memo: dict) -> str:
    return "".join(_table_parts(o, level, allow_nan, memo))


TABLE_BATCH = 8192  # rows spelled at a time (a piece of a streamed document)


def _table_parts(o: Table, level: int, allow_nan: bool, memo: dict) -> Iterator[str]:
    """A Table spelled column by column (each column's values at once, by
    ``map``), then row by row with one format string, in batches of rows."""
    keys, kinds, rows = o.keys, o.kinds, o.rows
    if not len(rows):
        yield "[]"
        return
    if (
        not keys
        or len(set(keys)) != len(keys)
        or not all(type(k) is str for k in keys)
        or not set(kinds) <= {"str", "str?", "num", "levers"}
        or len(kinds) != len(keys)
        or level + 2 >= MAX_LEVEL
    ):
        yield _text(o.as_list(), level, allow_nan, memo)
        return
    if kinds[0] == "str?":  # an optional key first: its comma would lead the object
        yield _text(o.as_list(), level, allow_nan, memo)
        return
    inner, row_in = _PAD[level + 2], _PAD[level + 1]
    # One format string for every row; an optional column's value is spelled with its own comma and key.
    fmt = (
        "{"
        + "".join(
            "%s" if kind == "str?" else ("," if i else "") + inner + _enc(k).replace("%", "%%") + ": %s"
            for i, (k, kind) in enumerate(zip(keys, kinds))
        )
        + _PAD[level + 1]
        + "}"
    )
    heads = {k: "," + inner + _enc(k) + ": " for k, kind in zip(keys, kinds) if kind == "str?"}
    sep = "[" + row_in
    for start in range(0, len(rows), TABLE_BATCH):
        batch = list(rows[start : start + TABLE_BATCH])
        spelled = (
            _columns(batch, keys, kinds, heads, level, allow_nan, memo)
            if all(type(r) is tuple and len(r) == len(keys) for r in batch)
            else None
        )
        if spelled is None:  # a value of another kind than its column's: these rows as dicts
            texts = [_text(d, level + 1, allow_nan, memo) for d in Table(keys, kinds, batch).as_list()]
        else:
            texts = map(fmt.__mod__, zip(*spelled))
        yield sep + ("," + row_in).join(texts)
        sep = "," + row_in
    yield _PAD[level] + "]"


def _columns(
    rows: list[tuple], keys: tuple, kinds: tuple, heads: dict, level: int, allow_nan: bool, memo: dict
) -> list | None:
    spelled: list = []
    for key, kind, col in zip(keys, kinds, zip(*rows)):
        types = set(map(type, col))
        if kind == "str" and types == {str}:
            spelled.append(map(_enc, col))
        elif kind == "str?" and types <= {str, type(None)}:
            head = heads[key]
            spelled.append(["" if v is None else head + _enc(v) for v in col])
        elif kind == "num" and types == {float} and not any(map(math.isinf, col)) and not any(map(math.isnan, col)):
            spelled.append(map(float.__repr__, col))
        elif kind == "num" and types <= {float, int, type(None)}:
            spelled.append([_text(v, level + 2, allow_nan, memo) for v in col])
        elif kind == "levers" and types == {dict}:
            # The column's objects are all alive, so an id names one lever set here.
            ids = list(map(id, col))
            text = {i: _levers(v, level + 2, allow_nan, memo) for i, v in dict(zip(ids, col)).items()}
            spelled.append(map(text.__getitem__, ids))
        else:
            return None
    return spelled


def pieces(obj: Any, *, allow_nan: bool = True) -> Iterator[str]:
    """The text of ``json.dumps(obj, indent=2, allow_nan=allow_nan)``, in
    pieces of about PIECE characters whose concatenation is exactly that text."""
    buf: list[str] = []
    size = 0
    for text in _pieces(obj, 0, allow_nan, {}):
        buf.append(text)
        size += len(text)
        if size >= PIECE:
            yield "".join(buf)
            buf, size = [], 0
    if buf:
        yield "".join(buf)


def dumps(obj: Any, *, allow_nan: bool = True) -> str:
    return "".join(pieces(obj, allow_nan=allow_nan))


def _pieces(o: Any, level: int, allow_nan: bool, memo: dict) -> Iterator[str]:
    t = type(o)
    if t is Table and level < MAX_LEVEL:
        yield from _table_parts(o, level, allow_nan, memo)
        return
    if level >= STREAM_DEPTH or not (
        (t is dict and o and all(type(k) is str for k in o)) or ((t is list or t is tuple or t is Rows) and len(o))
    ):
        yield _text(o, level, allow_nan, memo)
        return
    inner, outer = _PAD[level + 1], _PAD[level]
    if t is dict:
        sep = "{" + inner
        for k, v in o.items():
            yield sep + _enc(k) + ": "
            sep = "," + inner
            if k == "levers":
                yield _levers(v, level + 1, allow_nan, memo)
            else:
                yield from _pieces(v, level + 1, allow_nan, memo)
        yield outer + "}"
    else:
        sep = "[" + inner
        for v in o:
            yield sep
            sep = "," + inner
            yield from _pieces(v, level + 1, allow_nan, memo)
        yield outer + "]"


def _levers(v: Any, level: int, allow_nan: bool, memo: dict) -> str:
    """A lever set: the records of one sweep share a few thousand, each
    spelled once (kept by identity; the document holds them all meanwhile)."""
    key = (id(v), level)
    hit = memo.get(key)
    if hit is not None and hit[0] is v:
        return hit[1]
    text = _text(v, level, allow_nan, memo)
    memo[key] = (v, text)
    return text


def _text(o: Any, level: int, allow_nan: bool, memo: dict) -> str:
    t = type(o)
    if level >= MAX_LEVEL:
        t = None  # json.dumps below
    if t is str:
        return _enc(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if t is int:
        return int.__repr__(o)
    if t is float:
        if math.isfinite(o):
            return float.__repr__(o)
        return json.dumps(o, indent=2, allow_nan=allow_nan)  # NaN and infinities: its spelling, or its error
    if t is Table:
        return _table(o, level, allow_nan, memo)
    if t is dict:
        if not o:
            return "{}"
        # A report's rows are mostly strings and finite floats under a few
        # keys: those are spelled here, without a call each, and each key's
        # text is made once (a million rows, at cluster scale).
        parts = []
        for k, v in o.items():
            kt = _KEYS.get(k)
            if kt is None:
                if type(k) is not str:
                    break  # json.dumps below decides
                kt = _enc(k) + ": "
                if len(_KEYS) < 4096:
                    _KEYS[k] = kt
            tv = type(v)
            if tv is str:
                parts.append(kt + _enc(v))
            elif tv is float and v - v == 0.0:  # finite
                parts.append(kt + float.__repr__(v))
            elif v is None:
                parts.append(kt + "null")
            elif k == "levers":
                parts.append(kt + _levers(v, level + 1, allow_nan, memo))
            else:
                parts.append(kt + _text(v, level + 1, allow_nan, memo))
        else:
            inner = _PAD[level + 1]
            return "{" + inner + ("," + inner).join(parts) + _PAD[level] + "}"
    elif t is list or t is tuple or t is Rows:
        if not len(o):
            return "[]"
        inner = _PAD[level + 1]
        return "[" + inner + ("," + inner).join(_text(v, level + 1, allow_nan, memo) for v in o) + _PAD[level] + "]"
    # Anything else (keys that are not strings, subclasses, unknown types): json.dumps decides.
    text = json.dumps(o.as_list() if type(o) is Table else o, indent=2, allow_nan=allow_nan)
    return text.replace("\n", _PAD[level]) if level else text
