"""Rankings, lever effects and the winning recipe: functions of records.

For every kernel path and shape:

* the passing, timed configurations fastest first, each with its speedup over
  the recipe's own configuration (``recipe_us / us``);
* the failing configurations apart, never ranked;
* per lever, its *effect*: the median, over every setting of the path's other
  levers, of the speedup that one value gives over a reference value (for an
  on/off lever: on versus off). A pair counts only when both runs passed.

The winning levers (``sweep --suggest``) are chosen jointly where paths share
a lever: levers that steer a common path form a group, and each group takes
the assignment that minimises the summed log time of all its paths and shapes
(every one of them passing), ties going to the recipe's own values.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from ..levers import present
from ..levers.kinds import Drafter
from .records.made import Made
from .records.rules import median_us, timed

MAX_JOINT = 20_000  # joint assignments tried per lever group before going greedy


def canon(value: Any) -> str:
    """A hashable, stable form of a lever value as records hold it: its JSON
    text, keys sorted. The scalars most levers hold are spelled directly,
    as json.dumps spells them (a sweep's reports call this millions of times)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    return json.dumps(value, sort_keys=True)


def value_text(value: Any) -> str:
    """A lever value as records hold it (JSON, so a drafter policy is an
    object) in the words show uses."""
    if isinstance(value, dict) and set(value) == {"prefill", "carry"}:
        value = Drafter(value["prefill"], value["carry"])
    return present.value_text(value)


def kernel_info(plan: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """Per kernel, what the plan says: swept ``levers``, ``recipe_config``,
    ``recipe_levers``."""
    if not plan:
        return {}
    return {k["kernel"]: k for k in plan.get("kernels", [])}


# ── ranking ─────────────────────────────────────────────────────────────────


class Row(NamedTuple):  # one per ranked record: a million, at cluster scale (a tuple is made fastest)
    record: Mapping[str, Any]
    us: float | None
    speedup: float | None  # over the recipe's configuration


@dataclass(frozen=True)
class Ranking:
    kernel: str
    shape: str
    recipe_config: str | None
    recipe_us: float | None
    recipe_status: str | None
    ranked: list[Row]  # passing, fastest first (timed) or in plan order (untimed)
    failing: list[Mapping[str, Any]]  # baselines that failed too
    timed: bool
    # Passing baseline records (variants no lever selects), shown beside the
    # ranking, never in it.
    baselines: list[Row] = field(default_factory=list)

    @property
    def best(self) -> Row | None:
        return self.ranked[0] if self.ranked else None

    def to_json(self, flat: bool = False) -> dict[str, Any]:
        """The ranking as JSON; ``flat``: the ranked rows as a
        ``jsontext.Table`` (a million of them at cluster scale, spelled
        column by column, without a dict each)."""

        def row(r: Row) -> dict[str, Any]:
            return {
                "config": r.record["config"],
                "variant": r.record["variant"],
                "levers": r.record["levers"],
                "median_us": r.us,
                "speedup": _r(r.speedup),
            }

        if flat:
            from ..jsontext import Table

            ranked: Any = Table(
                _ROW_KEYS,
                _ROW_KINDS,
                self.ranked.json_rows()
                if isinstance(self.ranked, RankedRows)
                else [
                    (rec["config"], rec["variant"], rec["levers"], us, None if sp is None else _r(sp))
                    for rec, us, sp in self.ranked
                ],
            )
        else:
            ranked = [row(r) for r in self.ranked]
        best = self.best
        return {
            "kernel": self.kernel,
            "shape": self.shape,
            "timed": self.timed,
            "recipe": {"config": self.recipe_config, "median_us": self.recipe_us, "status": self.recipe_status},
            "best": row(best) if best and self.timed else None,
            "ranked": ranked,
            "failing": [
                {
                    "config": f["config"],
                    "variant": f["variant"],
                    "levers": f["levers"],
                    "note": f.get("note", ""),
                    "error": f.get("error"),
                }
                for f in self.failing
            ],
            "baselines": [{**row(b), "batch_invariance": b.record.get("batch_invariance")} for b in self.baselines],
        }


_ROW_KEYS = ("config", "variant", "levers", "median_us", "speedup")
_ROW_KINDS = ("str", "str", "levers", "num", "num")


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def rank(records: Sequence[Mapping[str, Any]], plan: Mapping[str, Any] | None = None) -> list[Ranking]:
    """Each kernel path and shape's ranking (see the module notes), on the
    records' columns (``columns.Records``; records given as dicts are made
    columns first): a cluster sweep ranks a million records."""
    import numpy as np

    recs = as_columns(records)
    c = recs.cols
    configs = recs.tables.configs.index
    info = kernel_info(plan)
    out = []
    for kernel, shape, every in groups(recs, baselines=True):
        base = c["baseline"][every]
        recs_at = every[~base]
        recipe_cfg = (info.get(kernel) or {}).get("recipe_config")
        recipe_us = recipe_status = None
        cid = configs.get(recipe_cfg) if isinstance(recipe_cfg, str) else None
        if cid is not None:
            hit = np.flatnonzero(c["config"][recs_at] == cid)
            if len(hit):
                i = recs_at[hit[0]]
                recipe_status = "pass" if c["passed"][i] else "fail"
                m = float(c["median"][i])
                recipe_us = m if recipe_status == "pass" and m == m else None
        passing = recs_at[c["passed"][recs_at]]
        us = c["median"][passing]
        is_timed = bool(len(passing)) and not np.isnan(us).any()
        if is_timed:
            order = np.argsort(us, kind="stable")
            passing, us = passing[order], us[order]
        failing = [recs.record(i) for i in every[~c["passed"][every]].tolist()]
        shown = every[base & c["passed"][every]]
        brows = RankedRows(recs, shown, c["median"][shown], recipe_us)
        out.append(
            Ranking(
                kernel,
                shape,
                recipe_cfg,
                recipe_us,
                recipe_status,
                RankedRows(recs, passing, us, recipe_us),
                failing,
                is_timed,
                brows,
            )
        )
    return out


def as_columns(records: Sequence[Mapping[str, Any]]) -> Any:
    """``records`` as ``columns.Records`` (made from dicts where they are dicts)."""
    from .records.columns import Records, of_dicts  # numpy: loaded where records are ranked

    return records if isinstance(records, Records) else of_dicts(records)


def groups(recs: Any, baselines: bool = False) -> list[tuple[str, str, Any]]:
    """The records (``columns.Records``) by (kernel, shape), in the order
    each pair is first seen: (kernel, shape, their places in record order).
    Baselines only when asked: no lever setting reaches a baseline variant,
    so it is no configuration to rank or to take a lever's effect from."""
    import numpy as np

    c = recs.cols
    idx = np.arange(len(recs)) if baselines else np.flatnonzero(~c["baseline"])
    if not len(idx):
        return []
    key = (c["kernel"][idx].astype(np.int64) << 32) | c["shape"][idx].astype(np.int64)
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    members = idx[np.argsort(inv, kind="stable")]
    ends = np.cumsum(np.bincount(inv, minlength=len(uniq)))
    kernels, shapes = recs.tables.kernels.values, recs.tables.shapes.values
    out = []
    for g in np.argsort(first, kind="stable").tolist():
        k = int(uniq[g])
        out.append((kernels[k >> 32], shapes[k & 0xFFFFFFFF], members[(ends[g - 1] if g else 0) : ends[g]]))
    return out


class RankedRows(Made):
    """A ranking's rows (:class:`Row`), made as they are asked for from the
    records' columns: ``places`` in the records, their medians ``us`` (NaN:
    none), the speedups over ``recipe_us``."""

    def __init__(self, recs: Any, places: Any, us: Any, recipe_us: float | None):
        self.recs = recs
        self.places = places
        self.us = us
        self.recipe_us = recipe_us

    def __len__(self) -> int:
        return len(self.places)

    def made(self, i: int) -> Row:
        us = float(self.us[i])
        us = us if us == us else None
        return Row(
            self.recs.record(int(self.places[i]), cores=True),  # the report's cores column
            us,
            self.recipe_us / us if self.recipe_us and us is not None else None,
        )

    def json_rows(self) -> "_JsonRows":
        """The rows as ``jsontext.Table`` rows (config, variant, levers, median_us, speedup)."""
        return _JsonRows(self)


class _JsonRows:
    """:meth:`RankedRows.json_rows`: tuples made a slice at a time, column by column."""

    def __init__(self, rows: RankedRows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: slice) -> list[tuple]:
        rows = self.rows
        at = rows.places[i]
        us = [None if x != x else x for x in rows.us[i].tolist()]
        r = rows.recipe_us
        sp = [None if not r or u is None else _r(r / u) for u in us]
        return list(
            zip(rows.recs.texts("config", at), rows.recs.texts("variant", at), rows.recs.texts("levers", at), us, sp)
        )


def _first(pair: tuple) -> Any:
    return pair[0]


# ── lever effects ───────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Effect:
    kernel: str
    shape: str
    lever: str
    value: Any  # the value whose effect this is
    reference: Any  # ... against this one
    speedup: float  # median of t(reference) / t(value) over matched pairs
    pairs: int

    @property
    def label(self) -> str:
        if isinstance(self.value, bool) and self.reference is False:
            return f"{self.lever} on"
        return f"{self.lever}={value_text(self.value)} vs {value_text(self.reference)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "shape": self.shape,
            "lever": self.lever,
            "value": self.value,
            "reference": self.reference,
            "speedup": _r(self.speedup),
            "pairs": self.pairs,
        }


def _reference(values: list[Any], recipe_value: Any, has_recipe: bool) -> Any:
    if all(isinstance(v, bool) or v is None for v in values) and False in values:
        return False  # on/off (and a tri-state's unset) against off
    if has_recipe and canon(recipe_value) in {canon(v) for v in values}:
        return recipe_value
    return values[0]


def lever_effects(records: Sequence[Mapping[str, Any]], plan: Mapping[str, Any] | None = None) -> list[Effect]:
    """Each lever's effect per kernel path and shape (see the module notes).

    A cluster sweep has a million records, so the pairing is done on arrays:
    every distinct lever set gets a row of *digits*, one per field (0: the
    set lacks the field; else the field's value, numbered as first seen).
    For a lever, the records that agree on every other field share a
    *setting*: the row with the lever's column zeroed, as one integer (a
    mixed-radix number, or ``numpy.unique``'s label where that would
    overflow). A value's effect is the median, over the settings holding both
    it and the reference, of t(reference) / t(value); where a setting holds a
    value twice, the later record counts."""
    import numpy as np

    info = kernel_info(plan)
    out: list[Effect] = []
    table = _DigitTable()
    recs = as_columns(records)
    c = recs.cols
    lever_sets = recs.tables.levers
    for kernel, shape, every in groups(recs):
        good = every[c["passed"][every] & (c["median"][every] == c["median"][every])]
        if not len(good):
            continue
        k = info.get(kernel) or {}
        ids = c["levers"][good]
        distinct, first = np.unique(ids, return_index=True)
        levers = list(
            k.get("levers")
            or _varying([{"levers": lever_sets[i]} for i in distinct[np.argsort(first, kind="stable")].tolist()])
        )
        recipe_levers = k.get("recipe_levers") or {}
        row_of = np.array([table.row(lever_sets[i]) for i in distinct.tolist()], dtype=np.int64)
        digits = table.matrix()[row_of[np.searchsorted(distinct, ids)]]  # one row per record
        us = c["median"][good]
        code, radix = _codes(digits)
        for lever in levers:
            col = table.column(lever)
            if col is None or col >= digits.shape[1]:
                continue
            d = digits[:, col]
            have = np.flatnonzero(d)
            if len(have) == 0:
                continue
            # The lever's values in the order the records first show them.
            seen, first = np.unique(d[have], return_index=True)
            order = [int(x) for x in seen[np.argsort(first, kind="stable")]]
            if len(order) < 2:
                continue
            values = [table.value(col, x) for x in order]
            ref = _reference(values, recipe_levers.get(lever), lever in recipe_levers)
            rdigit = order[[canon(v) for v in values].index(canon(ref))]
            if radix is not None:
                setting = code - d * radix[col]
            else:
                zeroed = digits.copy()
                zeroed[:, col] = 0
                setting = np.unique(zeroed, axis=0, return_inverse=True)[1].reshape(-1)
            rk, rus = _last_per_setting(setting, us, d == rdigit)
            for x, v in zip(order, values):
                if x == rdigit:
                    continue
                vk, vus = _last_per_setting(setting, us, d == x)
                _, ia, ib = np.intersect1d(rk, vk, assume_unique=True, return_indices=True)
                if len(ia):
                    ratios = rus[ia] / vus[ib]
                    out.append(Effect(kernel, shape, lever, v, ref, float(np.median(ratios)), len(ia)))
    return out


class _DigitTable:
    """Lever sets as rows of digits (see :func:`lever_effects`), one row per
    distinct lever set (held by identity: the records of a sweep share them),
    columns added as fields appear."""

    def __init__(self) -> None:
        self._rows: list[list[int]] = []
        self._by_id: dict[int, tuple[Any, int]] = {}
        self._cols: dict[str, int] = {}
        self._codes: list[dict[str, int]] = []  # per column: canon(value) -> digit
        self._values: list[list[Any]] = []  # per column: digit - 1 -> the value first seen
        self._matrix = None

    def row(self, levers: Mapping[str, Any]) -> int:
        hit = self._by_id.get(id(levers))
        if hit is not None and hit[0] is levers:
            return hit[1]
        row = [0] * len(self._cols)
        for f, v in levers.items():
            c = self._cols.get(f)
            if c is None:
                c = self._cols[f] = len(self._cols)
                self._codes.append({})
                self._values.append([])
                row.append(0)
            cv = canon(v)
            x = self._codes[c].get(cv)
            if x is None:
                self._values[c].append(v)
                x = self._codes[c][cv] = len(self._values[c])
            row[c] = x
        self._rows.append(row)
        self._by_id[id(levers)] = (levers, len(self._rows) - 1)
        self._matrix = None
        return len(self._rows) - 1

    def matrix(self):
        import numpy as np

        if self._matrix is None:
            width = len(self._cols)
            m = np.zeros((len(self._rows), max(width, 1)), dtype=np.int64)
            for i, row in enumerate(self._rows):
                m[i, : len(row)] = row
            self._matrix = m
        return self._matrix

    def column(self, field: str) -> int | None:
        return self._cols.get(field)

    def value(self, col: int, digit: int) -> Any:
        return self._values[col][digit - 1]


def _codes(digits):
    """Each row of ``digits`` as one mixed-radix integer, and each column's
    place value; (None, None) where the number could overflow 63 bits."""
    import numpy as np

    radix = []
    place = 1
    for top in digits.max(axis=0) if len(digits) else []:
        radix.append(place)
        place *= int(top) + 1
        if place >= 1 << 62:
            return None, None
    radix = np.array(radix, dtype=np.int64)
    return digits @ radix, radix


def _last_per_setting(setting, us, mask):
    """The settings among the records of ``mask``, each once (sorted), with
    the time of the last such record in record order."""
    import numpy as np

    idx = np.flatnonzero(mask)
    keys = setting[idx]
    # The last of a repeated setting wins: unique over the reversed order keeps the first seen there.
    k, at = np.unique(keys[::-1], return_index=True)
    return k, us[idx[::-1][at]]


def _varying(recs: Sequence[Mapping[str, Any]]) -> list[str]:
    fields: list[str] = []
    for r in recs:
        for f in r["levers"]:
            if f not in fields:
                fields.append(f)
    return [f for f in fields if len({canon(r["levers"].get(f)) for r in recs}) > 1]


# ── the winning levers ──────────────────────────────────────────────────────


@dataclass
class Winners:
    values: dict[str, Any]  # field -> winning value (JSON form), every swept lever
    recipe: dict[str, Any]  # field -> the recipe's value (JSON form)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, Any]:
        return {f: v for f, v in self.values.items() if canon(v) != canon(self.recipe.get(f))}


def winners(records: Sequence[Mapping[str, Any]], plan: Mapping[str, Any]) -> Winners:
    """The lever values that make the swept paths fastest together, every run
    of them passing. Needs the plan (which levers were swept, and the recipe's
    values) and timed records."""
    kernels = [k for k in plan.get("kernels", []) if k.get("levers")]
    # index: (kernel, shape, canon(levers restricted to swept)) -> record
    index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    shapes: dict[str, list[str]] = {}
    for r in records:
        k = next((k for k in kernels if k["kernel"] == r["kernel"]), None)
        if k is None or r.get("baseline"):
            continue
        key = canon({f: r["levers"].get(f) for f in k["levers"]})
        index[(r["kernel"], r["shape"]["label"], key)] = r
        if r["shape"]["label"] not in shapes.setdefault(r["kernel"], []):
            shapes[r["kernel"]].append(r["shape"]["label"])
    recipe: dict[str, Any] = {}
    values: dict[str, list[Any]] = {}
    for k in kernels:
        for f in k["levers"]:
            recipe.setdefault(f, (k.get("recipe_levers") or {}).get(f))
            vals = values.setdefault(f, [])
            for it in plan.get("items", []):
                if it["kernel"] == k["kernel"] and f in it.get("levers", {}):
                    if canon(it["levers"][f]) not in {canon(v) for v in vals}:
                        vals.append(it["levers"][f])
    out = Winners(dict(recipe), dict(recipe))
    for group_fields, group_kernels in _lever_groups(kernels):
        _choose(group_fields, group_kernels, values, recipe, index, shapes, out)
    return out


def _lever_groups(kernels: Sequence[Mapping[str, Any]]) -> list[tuple[list[str], list[Mapping[str, Any]]]]:
    """Connected groups of levers: two levers are joined when one path has both."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for k in kernels:
        fs = list(k["levers"])
        for f in fs:
            find(f)
        for a, b in zip(fs, fs[1:]):
            parent[find(a)] = find(b)
    groups: dict[str, tuple[list[str], list]] = {}
    for k in kernels:
        root = find(k["levers"][0])
        fields, ks = groups.setdefault(root, ([], []))
        for f in k["levers"]:
            if f not in fields:
                fields.append(f)
        ks.append(k)
    return list(groups.values())


def _choose(fields, kernels, values, recipe, index, shapes, out: Winners) -> None:
    def score(assign: Mapping[str, Any]) -> float | None:
        total = 0.0
        for k in kernels:
            key = canon({f: assign[f] for f in k["levers"]})
            for s in shapes.get(k["kernel"], []):
                r = index.get((k["kernel"], s, key))
                if r is None or r["status"] != "pass" or not timed(r):
                    return None
                total += math.log(median_us(r))
        return total

    def changes(assign: Mapping[str, Any]) -> int:
        return sum(canon(assign[f]) != canon(recipe.get(f)) for f in fields)

    n = math.prod(len(values[f]) for f in fields)
    best: tuple[float, int] | None = None
    best_assign: dict[str, Any] | None = None
    if n <= MAX_JOINT:
        candidates = (dict(zip(fields, combo)) for combo in itertools.product(*(values[f] for f in fields)))
        for assign in candidates:
            s = score(assign)
            if s is None:
                continue
            key = (round(s, 12), changes(assign))
            if best is None or key < best:
                best, best_assign = key, assign
    else:  # coordinate descent from the recipe's values
        assign = {f: recipe.get(f) for f in fields}
        cur = score(assign)
        improved = cur is not None
        while improved:
            improved = False
            for f in fields:
                for v in values[f]:
                    trial = {**assign, f: v}
                    s = score(trial)
                    if s is not None and s < cur - 1e-12:
                        assign, cur, improved = trial, s, True
        best_assign = assign if cur is not None else None
        out.notes.append(f"levers {', '.join(fields)}: {n} joint settings, chosen one lever at a time")
    if best_assign is None:
        out.notes.append(
            f"levers {', '.join(fields)}: no setting passed on every path and shape "
            "with timings; kept the recipe's values"
        )
        return
    out.values.update(best_assign)


# ── writing the winners as a recipe ─────────────────────────────────────────


def from_json(kind: str, value: Any) -> Any:
    if kind == "drafter" and isinstance(value, dict):
        from ..levers.kinds import Drafter

        return Drafter(bool(value["prefill"]), bool(value["carry"]))
    return value


def variable_settings(
    lever, value: Any, build_default: bool = True
) -> tuple[dict[str, str], list[str], dict[str, Any], dict[str, Any]]:
    """What a recipe writes to make ``lever`` take ``value`` under its rule:
    (variables to set, variables to unset, [build] entries, [serve] entries).
    A variable dropped gives the rule's default."""
    from ..levers.kinds import Drafter

    k, vars_ = lever.kind, lever.vars
    sets: dict[str, str] = {}
    unsets: list[str] = []
    build: dict[str, Any] = {}
    serve: dict[str, Any] = {}

    def on_off(on_string: str | None, off_string: str | None, on: bool) -> None:
        s = on_string if on else off_string
        if s is None:
            unsets.append(vars_[0])
        else:
            sets[vars_[0]] = s

    if k in ("opt_in", "truthy_ci", "truthy_cs", "presence"):
        on_off("1", None, bool(value))
    elif k == "opt_out":
        on_off(None, "0", bool(value))
    elif k in ("kill_switch", "presence_kill"):
        on_off(None, "1", bool(value))
    elif k == "tristate":
        if value is None:
            unsets.append(vars_[0])
        else:
            sets[vars_[0]] = "1" if value else "0"
    elif k in ("count_opt", "count_clamped"):
        if value in (None, 0):
            unsets.append(vars_[0])
        else:
            sets[vars_[0]] = str(int(value))
    elif k == "drafter":
        d = value if isinstance(value, Drafter) else from_json("drafter", value)
        off_var, prefill_var = vars_
        if not d.prefill:
            sets[off_var] = "1"
            unsets.append(prefill_var)
        elif not d.carry:
            unsets.append(off_var)
            sets[prefill_var] = "1"
        else:
            unsets.extend([off_var, prefill_var])
    elif k == "build_default":
        if value:
            unsets.append(vars_[0])
            if not build_default:
                build[lever.field] = True
        else:
            sets[vars_[0]] = "1"
    elif k == "opt_in_vetoed":
        on_var, veto_var = vars_
        if value:
            sets[on_var] = "1"
            unsets.append(veto_var)
        else:
            unsets.append(on_var)
    elif k == "config":
        if lever.field == "max_decode_seqs":
            serve["max_batch_size"] = int(value)
        else:  # pragma: no cover - the only config lever the catalogs have
            raise ValueError(f"no recipe setting reproduces config lever {lever.field}")
    else:  # pragma: no cover - KINDS is closed
        raise ValueError(f"unknown lever kind {k!r}")
    return sets, unsets, build, serve


def suggested_recipe(
    catalog, parent_path: str | None, out_path: Path, wanted: Mapping[str, Any], description: str
) -> dict[str, Any]:
    """The recipe document that extends ``parent_path`` (or stands alone) and
    resolves, with nothing else set, to ``wanted`` (field -> JSON value)."""
    import os

    from ..levers import load_recipe, resolve

    parent = load_recipe(parent_path) if parent_path else None
    base = resolve(catalog, recipe=parent, env={})
    build_defaults = {k: s.value for k, s in parent.build.items()} if parent else {}
    doc: dict[str, Any] = {"engine": catalog.engine}
    if parent_path:
        rel = os.path.relpath(Path(parent_path).resolve(), Path(out_path).resolve().parent)
        doc["extends"] = Path(rel).as_posix()
    doc["description"] = description
    sets: dict[str, str] = {}
    unsets: list[str] = []
    build: dict[str, Any] = {}
    serve: dict[str, Any] = {}
    for f, v in wanted.items():
        lever = catalog.lever(f)
        value = from_json(lever.kind, v)
        if base.values()[f] == value:
            continue
        s, u, b, sv = variable_settings(lever, value, bool(build_defaults.get(f, lever.default)))
        sets.update(s)
        unsets.extend(x for x in u if x not in unsets and parent is not None and x in parent.vars)
        build.update(b)
        serve.update(sv)
    if unsets:
        doc["unset"] = unsets
    if sets:
        doc["levers"] = dict(sets)
    if serve:
        doc["serve"] = serve
    if build:
        doc["build"] = build
    return doc
