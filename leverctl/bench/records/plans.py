"""plan.json: a sweep's plan, read and written.

``sweep`` writes it once, atomically, before the first record; resume, merge,
compare, the reports and Slurm read it back. A cluster sweep's merged plan
lists a million items: :func:`read_plan` leaves them as text where a reader
needs the header alone, and :func:`write_plan` writes them a piece at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import msgspec

from ...errors import UserError
from ...levers.files import read_input_file, write_atomically
from . import decode as dec
from .decode import UNSET
from .schema import PLAN_FILE, PLAN_SCHEMA, PLAN_SCHEMAS


def read_plan(directory: Path, items: bool = False) -> dict | None:
    """The sweep plan in ``directory``, None if it has none; a UserError if
    ``plan.json`` is not a complete plan (see :func:`check_plan`). Without
    ``items`` the plan comes without its item list (the header: what resume,
    the reports and Slurm read); with it, ``plan["items"]`` holds
    ``decode.Item``s, each with its place ``n`` in the whole sweep."""
    got = read_plan_counted(directory, items)
    return None if got is None else got[0]


def read_plan_counted(directory: Path, items: bool = False) -> tuple[dict, int | None] | None:
    """:func:`read_plan`, and how many items the plan lists (None where the
    header alone was read and the fast path took it: the readers of the
    header go by ``total`` and ``shard.items``).

    A cluster sweep's merged plan lists a million items. The file is parsed
    by msgspec as an object of raw values: the header's values are decoded,
    and the item list is either left as text (a reader of the header: it is
    a list, and never built) or decoded into ``decode.Item``s, whose fields
    are typed, so that the decoding checks them. What the fast path cannot
    take goes to the standard library and :func:`check_plan`, which decide."""
    path = Path(directory) / PLAN_FILE
    if not path.exists() and not path.is_symlink():
        return None
    where = str(path)
    data = read_input_file(path, "sweep plan")
    fields = dec.plan_fields(data)
    if fields is not None and "items" in fields:
        raw = fields.pop("items")
        listed = dec.plan_items(raw) if items else ([] if memoryview(raw)[:1] == b"[" else None)
        if listed is not None:
            try:
                head = {k: dec.loads(bytes(v)) for k, v in fields.items()}
            except (UnicodeDecodeError, json.JSONDecodeError):
                head = None
            if head is not None:
                plan = check_plan({**head, "items": []}, where)
                if not items:
                    del plan["items"]
                    return plan, None
                plan["items"] = _placed(listed)
                return plan, len(listed)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError("not a leverctl sweep plan (not JSON)", where) from None
    plan = check_plan(doc, where)
    listed = plan.pop("items")
    if items:
        plan["items"] = _placed([dec.item_of(it) for it in listed])
    return plan, len(listed)


def _placed(items: list) -> list:
    """``items`` (``decode.Item``) with their place ``n`` where the plan
    leaves it out (the first schema: the position)."""
    if UNSET in map(_place, items):
        for i, it in enumerate(items):
            if it.n is UNSET:
                it.n = i
    return items


def check_plan(doc: Any, where: str) -> dict:
    """``doc`` if it holds what resume, merge, compare and the reports read
    from a plan, else a UserError at ``where`` naming what it lacks."""
    if not isinstance(doc, dict) or doc.get("schema") not in PLAN_SCHEMAS or not isinstance(doc.get("hash"), str):
        raise UserError(f"not a leverctl sweep plan (schema is not {PLAN_SCHEMA})", where)

    def lacks(what: str) -> UserError:
        return UserError(f"not a complete leverctl sweep plan: {what}", where)

    catalog = doc.get("catalog")
    if not isinstance(catalog, dict) or not isinstance(catalog.get("digest"), str) or not catalog["digest"]:
        raise lacks("no `catalog.digest` (the lever catalog it was swept with)")
    items = doc.get("items")
    if not isinstance(items, list):
        raise lacks("no `items` list")
    for i, it in enumerate(items):  # a million of them at cluster scale: no per-item generator
        if not (
            isinstance(it, dict)
            and isinstance(it.get("kernel"), str)
            and isinstance(it.get("shape"), str)
            and isinstance(it.get("config"), str)
            and ("levers" not in it or isinstance(it["levers"], dict))
            and ("n" not in it or (type(it["n"]) is int and it["n"] >= 0))
        ):
            raise lacks(
                f"items[{i}] is not an object with string kernel, shape and config (and a place n "
                "that is a whole number, where it has one)"
            )
    device = doc.get("device")
    if device is not None and not (isinstance(device, dict) and device.get("kind") in ("gpu", "sim", None)):
        raise lacks("`device` is not an object whose kind is gpu or sim")
    shard = doc.get("shard")
    if shard is not None and not (
        isinstance(shard, dict)
        and all(
            isinstance(shard.get(k), int) and not isinstance(shard.get(k), bool) for k in ("index", "count", "items")
        )
    ):
        raise lacks("`shard` is neither null nor an object with integer index, count and items")
    kernels = doc.get("kernels", [])
    if not (
        isinstance(kernels, list)
        and all(
            isinstance(k, dict)
            and isinstance(k.get("kernel"), str)
            and isinstance(k.get("levers", []), list)
            and isinstance(k.get("recipe_levers") or {}, dict)
            for k in kernels
        )
    ):
        raise lacks("`kernels` is not a list of objects naming their kernel, levers and recipe_levers")
    skipped = doc.get("not_benchmarked", [])
    if not (
        isinstance(skipped, list)
        and all(
            isinstance(x, dict) and isinstance(x.get("lever"), str) and isinstance(x.get("why"), str) for x in skipped
        )
    ):
        raise lacks("`not_benchmarked` is not a list of objects with lever and why")
    return doc


def _place(it: Any) -> int:
    return it.n


def write_plan(path: Path, plan: Mapping[str, Any]) -> None:
    """plan.json, atomically: the header laid out as ``json.dumps(indent=2)``
    lays it out, and the items (dicts or ``decode.Item``) one to a line,
    compact: a cluster sweep's plan lists a million of them."""
    write_atomically(path, plan_json_pieces(plan))


def plan_json_pieces(plan: Mapping[str, Any]) -> Iterable[bytes]:
    """The text :func:`write_plan` writes, in pieces of about a MiB."""
    encode = msgspec.json.Encoder().encode
    head = {k: v for k, v in plan.items() if k != "items"}
    text = json.dumps(head, indent=2)
    items = plan.get("items")
    if items is None:
        yield (text + "\n").encode()
        return
    yield ((text[:-2] + ",\n" if head else "{\n") + '  "items": [').encode()
    sep = b"\n    "
    if hasattr(items, "lines"):  # columns.Items: spelled a batch at a time
        for lines in items.lines():
            yield sep + b",\n    ".join(lines)
            sep = b",\n    "
        yield b"\n  ]\n}\n" if len(items) else b"]\n}\n"
        return
    buf: list[bytes] = []
    size = 0
    for it in items:
        line = encode(it)
        buf.append(sep)
        buf.append(line)
        sep = b",\n    "
        size += len(line)
        if size >= 1 << 20:
            yield b"".join(buf)
            buf, size = [], 0
    buf.append(b"\n  ]\n}\n" if items else b"]\n}\n")
    yield b"".join(buf)
