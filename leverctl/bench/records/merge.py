"""Merging the shards (or resumed pieces) of one sweep into one result set.

Each part is read as columns, numbered in one ``columns.Tables``, with its
plan's items; :func:`merge` checks that they are one sweep's, keeps one
record per identity (``columns.distinct``: the last part's) in plan order,
and :func:`write_result_dir` writes the merged directory, copying each kept
record's line from its part's file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ...errors import UserError
from ...levers.files import write_atomically
from .columns import Items, Records, distinct, identity_keys
from .plans import write_plan
from .read import ResultSet, Window
from .schema import IDENTITY, PLAN_FILE, PLAN_SCHEMA, RESULTS_FILE
from .write import check_free_result_dir


@dataclass(frozen=True)
class Merged:
    plan: dict  # the merged plan: the parts' items, in plan order (columns.Items)
    records: Records  # in plan order
    missing: int  # planned items no input holds (the items of shards not given included)
    duplicates: int  # records seen in more than one input (the last input wins)
    part: Any  # numpy array: each record's part (its place in the inputs)
    files: list  # per part: (its results file or None, how many of its bytes hold the records read)


def merge(sets: Sequence[ResultSet]) -> Merged:
    """Join shards or resumed pieces of one sweep: each set read as columns
    (``read.load_results(path, True, tables)``, every part numbering its
    names in the same ``columns.Tables``) with its plan's items. Refuses
    inputs that are not sweep results, or that come from different plans,
    catalogs or devices. The merged plan lists the union of the parts' items by their
    place in the sweep (a shard's plan lists its own); a record held by more
    than one part is the last part's. The records stay in the parts' files
    until :func:`write_result_dir` copies their lines."""
    if not sets:
        raise UserError("report merge needs at least one sweep results directory")
    for s in sets:
        if s.plan is None:
            raise UserError(
                f"has no {PLAN_FILE}: merge joins sweep results directories (a bench document is one run already)",
                s.source,
            )
    first = sets[0]
    for s in sets[1:]:
        a, b = first.plan, s.plan
        if a["catalog"]["digest"] != b["catalog"]["digest"]:
            raise UserError(
                f"was swept with a different lever catalog than {first.source} "
                f"({b['catalog']['digest'][:12]} vs {a['catalog']['digest'][:12]}): "
                "results from different catalogs do not merge",
                s.source,
            )
        if a["hash"] != b["hash"]:
            raise UserError(
                f"comes from a different sweep plan than {first.source} "
                f"({b['hash']} vs {a['hash']}): same engine, recipe, levers, kernels and "
                "shapes are needed to merge",
                s.source,
            )
        ka, kb = (a.get("device") or {}).get("kind"), (b.get("device") or {}).get("kind")
        if ka != kb:
            raise UserError(f"ran on {kb}, {first.source} on {ka}: a result set holds one device's runs", s.source)
        na, nb = (a.get("device") or {}).get("name"), (b.get("device") or {}).get("name")
        if ka == "gpu" and na != nb:
            raise UserError(
                f"ran on {nb}, {first.source} on {na}: timings from different GPUs do not make one result set", s.source
            )
    tables = first.records.tables
    plan = {k: v for k, v in first.plan.items() if k != "items"}
    plan["schema"] = PLAN_SCHEMA
    plan["shard"] = None
    plan["merged_from"] = [s.source for s in sets]
    # The items by place; a place listed twice (plans of the first schema list every item in every
    # shard) kept once, as the first part lists it.
    every = Items.concat([s.plan["items"] for s in sets])
    places = every.cols["n"]
    order = np.argsort(places, kind="stable")
    keep = order[np.r_[True, places[order][1:] != places[order][:-1]]] if len(order) else order
    items = every.take(keep)
    del every
    item_ids = {k: items.cols[k] for k in IDENTITY}
    # Every part's records, the last holding an identity kept (in the place its first holder had).
    parts = [s.records for s in sets]
    cols = {k: np.concatenate([r.cols[k] for r in parts]) for k in parts[0].cols}
    part = np.concatenate([np.full(len(r), i, np.int32) for i, r in enumerate(parts)])
    extras = {}
    base = 0
    for r in parts:
        extras.update({base + i: e for i, e in r.extras.items()})
        base += len(r)
    allr = Records(tables, cols, extras)
    # The records' identities and the items' as numbers of one numbering.
    both = identity_keys({k: np.concatenate([cols[k], item_ids[k]]) for k in item_ids})
    keys, item_keys = both[: len(part)], both[len(part) :]
    each = distinct(keys)
    held, held_at = each.keys, each.last  # each identity once, sorted; its last record
    duplicates = len(keys) - len(held)
    found = np.searchsorted(held, item_keys)
    found[found >= len(held)] = 0
    hit = (held[found] == item_keys) if len(held) else np.zeros(len(item_keys), np.bool_)
    take = held_at[found[hit]]
    if len(take) < len(held):  # some record is in no planned item
        planned = np.zeros(len(held), np.bool_)
        planned[found[hit]] = True
        strays = np.sort(each.first[~planned])  # each stray identity's first record
        r = allr.record(int(strays[0]))
        raise UserError(
            f"holds {len(strays)} record(s) outside its plan (first: {r['kernel']} {r['config']} at "
            f"{r['shape']['label']})",
            first.source,
        )
    plan["items"] = items
    total = first.plan.get("total")
    total = total if type(total) is int and total >= len(items) else len(items)
    files = [(s.path, s.read_bytes) for s in sets]
    return Merged(plan, allr.take(take), total - len(take), duplicates, part[take], files)


def shard_gaps(sets: Sequence[ResultSet], missing: int) -> str:
    """What ``missing`` (how many planned items no input holds) is, by
    shard: the indices of the shards not given, and those given with fewer
    records than their plan.json says they hold. Without shard information
    (unsharded pieces, or shards of different counts), the count of records."""
    if not missing:
        return ""
    shards = [(s.plan or {}).get("shard") for s in sets]
    counts = {sh["count"] for sh in shards if sh}
    if len(counts) != 1 or not all(shards):
        return f"{missing} planned record(s) are in none of the parts"
    n = counts.pop()
    given = {sh["index"] for sh in shards}
    parts = []
    absent = [i for i in range(1, n + 1) if i not in given]
    if absent:
        parts.append(f"shard{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))} of {n} not given")
    short = [
        f"shard {sh['index']} has {len(s.records)} of {sh['items']}"
        for s, sh in zip(sets, shards)
        if len(s.records) < sh["items"]
    ]
    parts += short
    return "; ".join(parts) + f" ({missing} record(s) missing)"


def write_result_dir(
    directory: Path, merged: Merged, plan: Mapping[str, Any], written: Callable[[], None] | None = None
) -> None:
    """A complete sweep directory (merge's output): refuses a directory that
    already holds results, writes results.jsonl (the merged records, in plan
    order, their lines copied from the parts' files) and then plan.json,
    each atomically: an interrupted merge leaves no half-written file.
    ``written()`` is called once the records are handed to the system,
    before the waits for the disk."""
    d = Path(directory)
    check_free_result_dir(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the directory: {e.strerror or e}", str(d)) from None
    with _Lines(merged) as lines:
        write_atomically(d / RESULTS_FILE, lines, written=written)
    write_plan(d / PLAN_FILE, plan)


class _Lines:
    """The merged records' lines, in order, read from the parts' files in
    pieces of about a MiB (each part's records come in its file's order, so
    each file is read once, front to back, through a window)."""

    def __init__(self, merged: Merged):
        self.m = merged
        self._open: list = []

    def __enter__(self) -> Iterable[bytes]:
        readers = {}
        for part, (path, end) in enumerate(self.m.files):
            if path is None:
                continue
            f = open(path, "rb")
            self._open.append(f)
            if os.fstat(f.fileno()).st_size < end:
                raise UserError("shrank while being merged; merge again", str(path))
            readers[part] = Window(f.fileno(), path)
        return self._pieces(readers)

    def _pieces(self, readers: dict) -> Iterable[bytes]:
        cols = self.m.records.cols
        parts, offsets, lengths = self.m.part.tolist(), cols["offset"].tolist(), cols["length"].tolist()
        buf: list[bytes] = []
        size = 0
        for part, offset, length in zip(parts, offsets, lengths):
            buf.append(readers[part].read(offset, length))
            size += length
            if size >= 1 << 20:
                yield b"".join(buf)
                buf, size = [], 0
        if buf:
            yield b"".join(buf)

    def __exit__(self, *exc) -> None:
        for f in self._open:
            f.close()
