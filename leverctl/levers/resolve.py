"""Resolution: catalog + sources -> one frozen value with provenance per field.

This is the only code that knows precedence. Lowest first:

    catalog default < recipe build defaults < recipe (after its extends chain)
    < process environment < --set VAR=VALUE   (and --unset VAR removes a variable)

Layers combine per *variable*, exactly as the engine would see its
environment, and only then does each field's rule read the variables. Like the
engines' ``from_values``, :func:`resolve` takes its lookups as arguments and
reads nothing itself, so two setups resolve side by side in one process.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..errors import UserError
from .catalog import Catalog, Lever
from .kinds import Drafter, Observed, evaluate
from .recipes import U32_MAX, Recipe

Raw = str | bytes  # bytes: a value that is not valid UTF-8

SOURCES = ("default", "build", "recipe", "env", "set", "unset", "serve", "flag")


def utf8(raw: Raw | None) -> str | None:
    """What Rust's ``std::env::var(..).ok()`` yields: the text, or None when
    unset or not valid UTF-8 (a ``str`` with lone surrogates counts as such)."""
    if raw is None or isinstance(raw, bytes):
        if isinstance(raw, bytes):
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return raw


def show_raw(raw: Raw | None) -> str | None:
    """A printable, lossless rendering of a raw value (never raises)."""
    if raw is None:
        return None
    if isinstance(raw, str) and utf8(raw) is not None:
        return raw
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
    return data.decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class VarSetting:
    var: str
    raw: Raw | None  # None: explicitly unset
    source: str  # recipe | env | set | unset
    file: str | None = None


@dataclass(frozen=True)
class Provenance:
    source: str  # one of SOURCES
    var: str | None = None  # the variable that decided, if any
    raw: Raw | None = None  # its raw value as seen (None: unset)
    file: str | None = None  # the recipe file (and line) for recipe/build/serve

    @property
    def valid_utf8(self) -> bool:
        return self.raw is None or utf8(self.raw) is not None

    def describe(self) -> str:
        if self.source in ("recipe", "build", "serve") and self.file:
            return f"{self.source} ({self.file})"
        if self.source == "unset" and self.var:
            return f"--unset {self.var}"
        return self.source


@dataclass(frozen=True)
class Resolved:
    lever: Lever
    value: Any
    provenance: Provenance

    @property
    def field(self) -> str:
        return self.lever.field

    @property
    def changed(self) -> bool:
        return self.value != self.lever.default


def value_json(value: Any) -> Any:
    return value.to_json() if isinstance(value, Drafter) else value


@dataclass(frozen=True)
class Resolution:
    catalog: Catalog
    levers: Mapping[str, Resolved]
    variables: Mapping[str, VarSetting]  # the effective lever variables, set or explicitly unset
    recipe: str | None
    ignored: tuple[VarSetting, ...]  # variables with the prefix that no lever reads

    @property
    def engine(self) -> str:
        return self.catalog.engine

    def values(self) -> dict[str, Any]:
        return {f: r.value for f, r in self.levers.items()}

    def __getitem__(self, field: str) -> Resolved:
        return self.levers[field]

    def to_json(self) -> dict[str, Any]:
        levers = {}
        for f, r in self.levers.items():
            p = r.provenance
            entry = {
                "value": value_json(r.value),
                "default": value_json(r.lever.default),
                "changed": r.changed,
                "source": p.source,
                "var": p.var,
                "raw": show_raw(p.raw),
                "file": p.file,
                "kind": r.lever.kind,
                "group": r.lever.group,
                "steers": list(r.lever.steers),
            }
            if not p.valid_utf8:
                entry["raw_valid_utf8"] = False
            levers[f] = entry
        return {
            "schema": "leverctl.levers/1",
            "engine": self.engine,
            "catalog": {"source": self.catalog.source, "digest": self.catalog.digest},
            "recipe": self.recipe,
            "levers": levers,
        }


def parse_assignment(text: str, where: str = "--set") -> tuple[str, str]:
    """``VAR=VALUE`` -> (VAR, VALUE). The value is kept exactly (``VAR=`` is
    the empty string; ``VAR= 1`` keeps its space)."""
    if "=" not in text:
        raise UserError(f"{where} {text!r} needs the form VAR=VALUE (use --unset VAR to unset)")
    var, value = text.split("=", 1)
    if not var or any(c.isspace() for c in var):
        raise UserError(f"{where} {text!r}: {var!r} is not a variable name")
    return var, value


def effective_variables(
    catalog: Catalog,
    recipe: Recipe | None,
    env: Mapping[str, Raw],
    sets: Sequence[tuple[str, str]],
    unsets: Sequence[str],
) -> dict[str, VarSetting]:
    """Layer the sources per variable. Only variables the catalog knows, or
    that carry its prefix, are kept (the rest of the environment is not ours)."""
    known = set(catalog.variables())

    def ours(var: str) -> bool:
        return var in known or var.startswith(catalog.prefix)

    out: dict[str, VarSetting] = {}
    if recipe is not None:
        for var, s in recipe.unset.items():
            out[var] = VarSetting(var, None, "recipe", s.file)
        for var, s in recipe.vars.items():
            out[var] = VarSetting(var, s.value, "recipe", f"{s.file}:{s.line}" if s.line else s.file)
    for var, raw in env.items():
        if ours(var):
            out[var] = VarSetting(var, raw, "env")
    for var, value in sets:
        out[var] = VarSetting(var, value, "set")
    for var in unsets:
        out[var] = VarSetting(var, None, "unset")
    return out


def resolve(
    catalog: Catalog,
    *,
    recipe: Recipe | None = None,
    env: Mapping[str, Raw] | None = None,
    sets: Sequence[tuple[str, str]] = (),
    unsets: Sequence[str] = (),
    max_batch_size: int | None = None,
) -> Resolution:
    env = env or {}
    if recipe is not None and recipe.engine != catalog.engine:
        raise UserError(f"recipe is for engine {recipe.engine!r}, but the catalog is {catalog.engine!r}", recipe.path)
    if max_batch_size is not None and not 1 <= max_batch_size <= U32_MAX:
        # The engine's max_decode_seqs is a u32, at least 1.
        raise UserError(f"--max-batch-size must be from 1 to {U32_MAX} (the engine's u32), not {max_batch_size}")
    variables = effective_variables(catalog, recipe, env, sets, unsets)

    def raw(var: str) -> Raw | None:
        s = variables.get(var)
        return None if s is None else s.raw

    build = {k: s.value for k, s in recipe.build.items()} if recipe else {}
    config: dict[str, Any] = {}
    config_prov: Provenance
    if max_batch_size is not None:
        config["max_decode_seqs"] = max_batch_size
        config_prov = Provenance("flag", raw=str(max_batch_size))
    elif recipe is not None and "max_batch_size" in recipe.serve:
        s = recipe.serve["max_batch_size"]
        config["max_decode_seqs"] = s.value
        config_prov = Provenance("serve", raw=str(s.value), file=f"{s.file}:{s.line}" if s.line else s.file)
    else:
        config_prov = Provenance("default")

    obs = Observed(
        value=lambda var: utf8(raw(var)),
        present=lambda var: raw(var) is not None,
        build=build,
        config=config,
    )
    out: dict[str, Resolved] = {}
    for field, lv in catalog.levers.items():
        value, decided_by = evaluate(lv.kind, lv.vars, obs, field=field, default=lv.default, cap=lv.cap)
        out[field] = Resolved(lv, value, _provenance(lv, decided_by, variables, recipe, config_prov))
    known = set(catalog.variables())
    ignored = tuple(s for v, s in sorted(variables.items()) if v not in known and s.raw is not None)
    return Resolution(
        catalog=catalog,
        levers=MappingProxyType(out),
        variables=MappingProxyType(variables),
        recipe=recipe.path if recipe else None,
        ignored=ignored,
    )


def _provenance(
    lv: Lever,
    decided_by: str | None,
    variables: Mapping[str, VarSetting],
    recipe: Recipe | None,
    config_prov: Provenance,
) -> Provenance:
    if lv.kind == "config":
        return config_prov
    if decided_by is None:
        if lv.kind == "build_default" and recipe is not None and lv.field in recipe.build:
            s = recipe.build[lv.field]
            return Provenance("build", file=f"{s.file}:{s.line}" if s.line else s.file)
        # Multi-variable rules where no variable decided: name the strongest
        # variable that was set and ignored, so "why is it still on?" has an answer.
        rank = {"recipe": 1, "env": 2, "set": 3, "unset": 4}
        seen = [variables[v] for v in lv.vars if v in variables]
        if seen:
            s = max(seen, key=lambda s: rank[s.source])
            return Provenance(s.source, s.var, s.raw, s.file)
        return Provenance("default")
    s = variables.get(decided_by)
    if s is None:
        return Provenance("default", decided_by)
    return Provenance(s.source, decided_by, s.raw, s.file)
