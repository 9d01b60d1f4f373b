"""Lever catalogs: one TOML file per engine, shipped as package data.

A catalog lists every field of the engine's lever struct: its variable(s),
its kind (parsing rule), its default, the subsystem group it belongs to, a
one-line summary, and the kernel paths it steers. A third engine is described
by writing a catalog file (``--catalog FILE``), not Python.
"""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import UserError
from .files import read_input_file
from .suggest import did_you_mean
from .kinds import DRAFTER_BOTH, KINDS, Drafter, Observed, evaluate

SHIPPED = ("atlas", "metrale")


@dataclass(frozen=True)
class Lever:
    field: str
    vars: tuple[str, ...]
    kind: str
    default: Any
    group: str
    summary: str
    steers: tuple[str, ...] = ()
    diagnostic: bool = False
    # Fields that must be on for this one to have any effect (lint).
    requires: tuple[str, ...] = ()
    # Longer notes for `explain`: costs, call-site conditions, history.
    notes: str = ""
    cap: int | None = None

    @property
    def var(self) -> str | None:
        return self.vars[0] if self.vars else None


@dataclass(frozen=True)
class Catalog:
    engine: str
    title: str
    prefix: str
    groups: Mapping[str, str]  # group id -> title, in display order
    levers: Mapping[str, Lever]  # field -> lever, in catalog order
    source: str  # where it was loaded from
    digest: str  # sha256 of the file's bytes

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.levers)

    def lever(self, field: str) -> Lever:
        return self.levers[field]

    def by_var(self) -> dict[str, Lever]:
        return {var: lv for lv in self.levers.values() for var in lv.vars}

    def variables(self) -> tuple[str, ...]:
        return tuple(var for lv in self.levers.values() for var in lv.vars)


def _fail(msg: str, where: str) -> UserError:
    return UserError(msg, where)


def _lever(field: str, raw: Mapping[str, Any], groups: Mapping[str, str], where: str) -> Lever:
    at = f"{where}: [levers.{field}]"
    known = {"vars", "var", "kind", "default", "group", "summary", "steers", "diagnostic",
             "requires", "notes", "cap"}
    extra = set(raw) - known
    if extra:
        raise _fail(f"unknown key(s) {sorted(extra)} in [levers.{field}]", where)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise _fail(f"[levers.{field}] kind {kind!r} is not one of {sorted(KINDS)}", where)
    vars_ = raw.get("vars", [raw["var"]] if "var" in raw else [])
    if not isinstance(vars_, list) or not all(isinstance(v, str) and v for v in vars_):
        raise _fail(f"[levers.{field}] vars must be a list of variable names", where)
    if len(vars_) != KINDS[kind].nvars:
        raise _fail(f"[levers.{field}] kind {kind} reads {KINDS[kind].nvars} variable(s), "
                    f"{len(vars_)} given", where)
    group = raw.get("group", "")
    if group not in groups:
        raise _fail(f"[levers.{field}] group {group!r} is not declared in [groups]", where)
    default = raw.get("default")
    if kind == "drafter":
        default = DRAFTER_BOTH if default is None else Drafter(**default)
    elif kind in ("tristate", "count_opt") and default == "unset":
        default = None
    for key in ("summary",):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(f"[levers.{field}] needs a {key}", at)
    return Lever(
        field=field,
        vars=tuple(vars_),
        kind=kind,
        default=default,
        group=group,
        summary=raw["summary"],
        steers=tuple(raw.get("steers", ())),
        diagnostic=bool(raw.get("diagnostic", False)),
        requires=tuple(raw.get("requires", ())),
        notes=raw.get("notes", ""),
        cap=raw.get("cap"),
    )


def parse_catalog(data: bytes, source: str) -> Catalog:
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _fail("not a text file (invalid UTF-8)", source) from None
    except tomllib.TOMLDecodeError as e:
        raise _fail(f"TOML syntax error: {e}", source) from None
    for key in ("engine", "prefix", "groups", "levers"):
        if key not in doc:
            raise _fail(f"catalog lacks `{key}`", source)
    groups = doc["groups"]
    if not isinstance(groups, dict) or not isinstance(doc["levers"], dict):
        raise _fail("`groups` and `levers` must be tables", source)
    levers = {f: _lever(f, raw, groups, source) for f, raw in doc["levers"].items()}
    seen: dict[str, str] = {}
    for lv in levers.values():
        for var in lv.vars:
            if var in seen and lv.kind != "opt_in_vetoed":
                raise _fail(f"variable {var} is claimed by both {seen[var]} and {lv.field}", source)
            seen.setdefault(var, lv.field)
        for req in lv.requires:
            if req not in levers:
                raise _fail(f"[levers.{lv.field}] requires unknown field {req!r}", source)
    # A catalog default must be what the rule yields with nothing set, or
    # `show` would disagree with the engine about an empty environment.
    empty = Observed(lambda _v: None, lambda _v: False, {}, {})
    for lv in levers.values():
        got, _ = evaluate(lv.kind, lv.vars, empty, field=lv.field, default=lv.default, cap=lv.cap)
        if got != lv.default:
            raise _fail(f"[levers.{lv.field}] default {lv.default!r} is not what kind "
                        f"{lv.kind} gives with nothing set ({got!r})", source)
    return Catalog(
        engine=str(doc["engine"]),
        title=str(doc.get("title", doc["engine"])),
        prefix=str(doc["prefix"]),
        groups=MappingProxyType(dict(groups)),
        levers=MappingProxyType(levers),
        source=source,
        digest=hashlib.sha256(data).hexdigest(),
    )


def load_catalog(engine: str | None = "atlas", path: str | Path | None = None) -> Catalog:
    """A shipped catalog by engine name, or a catalog file."""
    if path is not None:
        return parse_catalog(read_input_file(path, "catalog file"), str(path))
    name = (engine or "atlas").lower()
    if name not in SHIPPED:
        raise UserError(f"unknown engine {engine!r}{did_you_mean(name, SHIPPED)}; "
                        f"shipped engines: {', '.join(SHIPPED)}")
    ref = resources.files("leverctl.catalogs").joinpath(f"{name}.toml")
    return parse_catalog(ref.read_bytes(), f"<shipped {name} catalog>")
