"""Lever catalogs: one TOML file per engine, shipped as package data.

A catalog lists every field of the engine's lever struct: its variable(s),
its kind (parsing rule), its default, the subsystem group it belongs to, a
one-line summary, and the kernel paths it steers. A third engine is described
by writing a catalog file (``--catalog FILE``), not Python.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import UserError
from .files import path_label, read_input_file
from .kinds import DRAFTER_BOTH, KINDS, USIZE_MAX, Drafter, Observed, evaluate
from .suggest import did_you_mean

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
    data: bytes = field(repr=False, compare=False)  # the file's bytes

    @cached_property
    def digest(self) -> str:
        """sha256 of the file's bytes: what sweep plans and merges compare.
        Worked out when first asked for, since show and lint never ask."""
        import hashlib

        return hashlib.sha256(self.data).hexdigest()

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


def _header_lines(text: str) -> dict[str, int]:
    """The line of each ``[levers.FIELD]`` header (bare or quoted), for
    messages: one pass over the file, since every entry is checked on load."""
    import re

    pat = re.compile(r'^\s*\[\s*levers\s*\.\s*("?)([^"\]\s]+)\1\s*\]')
    lines: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = pat.match(line)
        if m:
            lines.setdefault(m.group(2), n)
    return lines


LEVER_KEYS = ("vars", "var", "kind", "default", "group", "summary", "steers", "diagnostic", "requires", "notes", "cap")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x for x in v)


def _check_default(field: str, kind: str, default: Any, at: str) -> Any:
    """The entry's default as the value its kind yields, or a UserError: a
    catalog whose default has the wrong type would crash or mislead later."""
    if kind == "drafter":
        if default is None:
            return DRAFTER_BOTH
        if (
            isinstance(default, dict)
            and set(default) == {"prefill", "carry"}
            and all(isinstance(v, bool) for v in default.values())
        ):
            return Drafter(**default)
        raise _fail(
            f"[levers.{field}] default must be {{prefill = true|false, carry = true|false}}, not {default!r}", at
        )
    if kind in ("tristate", "count_opt") and default == "unset":
        return None
    if kind == "config" or kind.startswith("count"):
        if not (_is_int(default) and 0 <= default <= USIZE_MAX) and not (kind == "count_opt" and default is None):
            raise _fail(
                f"[levers.{field}] default of a {kind} lever must be a count (an integer from 0), not {default!r}", at
            )
        return default
    if kind == "tristate" and default is None:
        return None
    if not isinstance(default, bool):
        raise _fail(f"[levers.{field}] default of a {kind} lever must be true or false, not {default!r}", at)
    return default


def _lever(field: str, raw: Any, groups: Mapping[str, str], where: str, headers: Mapping[str, int]) -> Lever:
    line = headers.get(field)
    at = f"{where}:{line}" if line else where
    if not isinstance(raw, dict):
        raise _fail(f"levers.{field} must be a table ([levers.{field}]), not {type(raw).__name__}", at)
    extra = sorted(set(raw) - set(LEVER_KEYS))
    if extra:
        raise _fail(
            f"[levers.{field}] has unknown key `{extra[0]}`{did_you_mean(extra[0], LEVER_KEYS, '`')}; "
            f"known: {', '.join(LEVER_KEYS)}",
            at,
        )
    kind = raw.get("kind")
    if kind is None:
        raise _fail(f"[levers.{field}] lacks `kind` (its parsing rule: one of {', '.join(KINDS)})", at)
    if not isinstance(kind, str) or kind not in KINDS:
        hint = did_you_mean(kind, KINDS) if isinstance(kind, str) else ""
        raise _fail(
            f"[levers.{field}] kind {kind!r} is not a parsing rule leverctl knows{hint}; known: {', '.join(KINDS)}", at
        )
    if "var" in raw and "vars" in raw:
        raise _fail(f"[levers.{field}] has both `var` and `vars`; give one", at)
    vars_ = raw.get("vars", [raw["var"]] if "var" in raw else [])
    if not _is_names(vars_):
        raise _fail(f"[levers.{field}] vars must be a list of variable names, not {vars_!r}", at)
    if len(vars_) != KINDS[kind].nvars:
        raise _fail(f"[levers.{field}] kind {kind} reads {KINDS[kind].nvars} variable(s), {len(vars_)} given", at)
    group = raw.get("group")
    if group is None:
        raise _fail(f"[levers.{field}] lacks `group` (one of {', '.join(groups)})", at)
    if not isinstance(group, str) or group not in groups:
        raise _fail(
            f"[levers.{field}] group {group!r} is not declared in [groups]"
            f"{did_you_mean(group, groups) if isinstance(group, str) else ''}",
            at,
        )
    if "default" not in raw and kind not in ("drafter", "count_opt", "tristate"):
        raise _fail(f"[levers.{field}] lacks `default` (the value with nothing set)", at)
    default = _check_default(field, kind, raw.get("default"), at)
    if not isinstance(raw.get("summary"), str) or not raw["summary"]:
        raise _fail(f"[levers.{field}] needs a `summary` (a non-empty string)", at)
    for key in ("steers", "requires"):
        if key in raw and not _is_names(raw[key]):
            raise _fail(f"[levers.{field}] {key} must be a list of names, not {raw[key]!r}", at)
    if "notes" in raw and not isinstance(raw["notes"], str):
        raise _fail(f"[levers.{field}] notes must be a string, not {raw['notes']!r}", at)
    if "diagnostic" in raw and not isinstance(raw["diagnostic"], bool):
        raise _fail(f"[levers.{field}] diagnostic must be true or false, not {raw['diagnostic']!r}", at)
    cap = raw.get("cap")
    if cap is not None and (kind != "count_clamped" or not _is_int(cap) or not 0 <= cap <= USIZE_MAX):
        raise _fail(
            f"[levers.{field}] cap must be a count (an integer from 0) on a count_clamped lever, "
            f"not {cap!r} on a {kind} lever",
            at,
        )
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
        cap=cap,
    )


TOP_KEYS = ("engine", "title", "prefix", "groups", "levers")

# The mark `leverctl catalog draft` leaves on an entry whose rule the engine's
# source does not state; a catalog holding one is refused until a person has
# filled the entry in and removed the mark.
FILL_IN = "fill_in"


def parse_catalog(data: bytes, source: str) -> Catalog:
    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError:
        raise _fail("not a text file (invalid UTF-8)", source) from None
    except tomllib.TOMLDecodeError as e:
        raise _fail(f"TOML syntax error: {e}", source) from None
    for key in ("engine", "prefix", "groups", "levers"):
        if key not in doc:
            raise _fail(f"catalog lacks `{key}`", source)
    extra = sorted(set(doc) - set(TOP_KEYS))
    if extra:
        raise _fail(
            f"unknown key `{extra[0]}`{did_you_mean(extra[0], TOP_KEYS, '`')}; a catalog has {', '.join(TOP_KEYS)}",
            source,
        )
    for key in ("engine", "title", "prefix"):
        if key in doc and (not isinstance(doc[key], str) or not doc[key]):
            raise _fail(f"`{key}` must be a non-empty string, not {doc[key]!r}", source)
    if doc["engine"] != doc["engine"].lower() or not doc["engine"].isidentifier():
        raise _fail(
            f"engine {doc['engine']!r} must be a lower-case name (it is what --engine and a recipe's `engine` say)",
            source,
        )
    groups = doc["groups"]
    if not isinstance(groups, dict) or not isinstance(doc["levers"], dict):
        raise _fail("`groups` and `levers` must be tables", source)
    for gid, gtitle in groups.items():
        if not isinstance(gtitle, str):
            raise _fail(f"[groups] {gid} must be a title (a string), not {gtitle!r}", source)
    marked = [f for f, raw in doc["levers"].items() if isinstance(raw, dict) and FILL_IN in raw]
    if marked:
        raise _fail(
            f"a draft: {len(marked)} {'entry' if len(marked) == 1 else 'entries'} still marked "
            f"`{FILL_IN}` for a person to complete ({', '.join(marked)}); fill each in and remove the "
            "mark",
            source,
        )
    headers = _header_lines(text)
    levers = {f: _lever(f, raw, groups, source, headers) for f, raw in doc["levers"].items()}
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
            raise _fail(
                f"[levers.{lv.field}] default {lv.default!r} is not what kind "
                f"{lv.kind} gives with nothing set ({got!r})",
                source,
            )
    return Catalog(
        engine=str(doc["engine"]),
        title=str(doc.get("title", doc["engine"])),
        prefix=str(doc["prefix"]),
        groups=MappingProxyType(dict(groups)),
        levers=MappingProxyType(levers),
        source=source,
        data=data,
    )


def load_catalog(engine: str | None = "atlas", path: str | Path | None = None) -> Catalog:
    """A shipped catalog by engine name, or a catalog file."""
    if path is not None:
        return parse_catalog(read_input_file(path, "catalog file"), path_label(path))
    name = engine or "atlas"
    if name not in SHIPPED:
        if name.lower() in SHIPPED:
            raise UserError(f"unknown engine {engine!r}: engine names are lower case (did you mean {name.lower()}?)")
        raise UserError(
            f"unknown engine {engine!r}{did_you_mean(name, SHIPPED)}; shipped engines: {', '.join(SHIPPED)}"
        )
    ref = resources.files("leverctl.catalogs").joinpath(f"{name}.toml")
    return parse_catalog(ref.read_bytes(), f"<shipped {name} catalog>")
