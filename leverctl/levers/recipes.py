"""TOML recipes: what a model's deployment sets.

A recipe names its ``engine``, may ``extends`` a parent (a path relative to
the recipe), sets lever variables as the exact strings the engine would see
(``[levers]``), may ``unset`` variables an ancestor set, and carries serve
settings (``[serve] max_batch_size``), build defaults (``[build]``) and the
model's shapes for the bench (``[model]``)::

    engine = "atlas"
    extends = "atlas-defaults.toml"
    unset = ["ATLAS_GDN_BATCHED_FLA"]
    [levers]
    ATLAS_GDN_WY17 = "0"
    [serve]
    max_batch_size = 16

Loading flattens the ``extends`` chain (child wins) and remembers which file
set every value, so provenance can name it. Loading reads files; resolving
does not.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import UserError
from .files import path_label, read_input_file
from .suggest import did_you_mean

# The engine's max_decode_seqs is a u32 set from max_batch_size, at least 1.
U32_MAX = 2**32 - 1
# TOML integers are signed 64-bit; tomllib reads bigger ones anyway, and a
# recipe written back (freeze) must stay a file every TOML reader accepts.
I64 = (-(2**63), 2**63 - 1)

TOP_KEYS = ("engine", "extends", "description", "unset", "levers", "serve", "build", "model")
SERVE_KEYS = ("max_batch_size",)


@dataclass(frozen=True)
class Setting:
    value: Any
    file: str
    line: int | None = None


@dataclass(frozen=True)
class Recipe:
    path: str
    engine: str
    description: str
    chain: tuple[str, ...]  # root ancestor first, this recipe last
    vars: Mapping[str, Setting]  # variables set after the chain is flattened
    unset: Mapping[str, Setting]  # variables a recipe in the chain unset (value None)
    serve: Mapping[str, Setting]
    build: Mapping[str, Setting]
    model: Mapping[str, Any] = field(default_factory=dict)

    def where(self, var: str) -> str:
        s = self.vars.get(var) or self.unset.get(var)
        if s is None:
            return self.path
        return f"{s.file}:{s.line}" if s.line else s.file


def line_of(text: str, key: str) -> int | None:
    """The first line that assigns ``key`` (bare or quoted), for messages."""
    pat = re.compile(r'^\s*("?)' + re.escape(key) + r"\1\s*=")
    for n, line in enumerate(text.splitlines(), 1):
        if pat.match(line):
            return n
    return None


def _read(path: Path) -> tuple[dict, str]:
    where = path_label(path)
    data = read_input_file(path, "recipe file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"is not UTF-8 text (byte {e.start}), not a TOML recipe", where) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends "(at line L, column C)"; lift the line into
        # the location so editors can jump to it.
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        if m:
            raise UserError(f"TOML syntax error: {msg} (column {m.group(2)})", f"{where}:{m.group(1)}") from None
        raise UserError(f"TOML syntax error: {msg}", where) from None


def _type_error(text: str, where: str, key: str, want: str, got: Any) -> UserError:
    line = line_of(text, key)
    loc = f"{where}:{line}" if line else where
    return UserError(f"`{key}` must be {want}, not {type(got).__name__} {got!r}", loc)


def _merge_model(base: dict, child: Mapping) -> dict:
    out = dict(base)
    for k, v in child.items():
        out[k] = _merge_model(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def load_recipe(path: str | Path, _seen: tuple[str, ...] = ()) -> Recipe:
    p = Path(path)
    doc, text = _read(p)  # first: it refuses a symlink loop, which resolve() would raise on
    key = str(p.resolve())
    if key in _seen:
        cycle = " -> ".join([*_seen[_seen.index(key) :], key])
        raise UserError(f"`extends` cycle: {path_label(cycle)}", path_label(p))
    where = path_label(p)  # the recipe's name in messages and provenance; `chain` keeps the paths

    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        k = unknown[0]
        hint = did_you_mean(k, TOP_KEYS, quote="`")
        line = line_of(text, k)
        raise UserError(
            f"unknown key `{k}`{hint}; a recipe has {', '.join(TOP_KEYS)}", f"{where}:{line}" if line else where
        )
    for k, want in (("engine", str), ("extends", str), ("description", str)):
        if k in doc and not isinstance(doc[k], want):
            raise _type_error(text, where, k, "a string", doc[k])
    for k in ("levers", "serve", "build", "model"):
        if k in doc and not isinstance(doc[k], dict):
            raise _type_error(text, where, k, "a table", doc[k])
    if "unset" in doc and not (isinstance(doc["unset"], list) and all(isinstance(v, str) for v in doc["unset"])):
        raise _type_error(text, where, "unset", "a list of variable names", doc["unset"])

    if "extends" in doc:
        parent_path = p.parent / doc["extends"]
        try:
            parent = load_recipe(parent_path, (*_seen, key))
        except UserError as e:
            if e.message == "no such recipe file" and e.where == path_label(parent_path):
                line = line_of(text, "extends")
                raise UserError(
                    f"`extends` names a missing parent {doc['extends']!r} ({parent_path})",
                    f"{where}:{line}" if line else where,
                ) from None
            raise
        if "engine" in doc and doc["engine"] != parent.engine:
            raise UserError(f"engine {doc['engine']!r} differs from its parent's {parent.engine!r}", where)
        vars_, unset = dict(parent.vars), dict(parent.unset)
        serve, build = dict(parent.serve), dict(parent.build)
        model, chain, engine = dict(parent.model), parent.chain, parent.engine
    else:
        if "engine" not in doc:
            raise UserError("recipe lacks `engine` (and extends nothing)", where)
        vars_, unset, serve, build, model, chain, engine = {}, {}, {}, {}, {}, (), None
    engine = doc.get("engine", engine)

    for var in doc.get("unset", []):
        vars_.pop(var, None)
        unset[var] = Setting(None, where, line_of(text, "unset"))
    for var, value in doc.get("levers", {}).items():
        if not isinstance(value, str):
            # The engine sees strings; a TOML 1 or true would hide what string
            # was meant ("1"? "true"?), and the rules differ on exactly that.
            line = line_of(text, var)
            raise UserError(
                f"lever {var} must be a string as the engine sees it "
                f'(write {var} = "{_suggest_str(value)}"), not {type(value).__name__}',
                f"{where}:{line}" if line else where,
            )
        unset.pop(var, None)
        vars_[var] = Setting(value, where, line_of(text, var))
    for k, value in doc.get("serve", {}).items():
        if k not in SERVE_KEYS:
            raise UserError(
                f"unknown [serve] key `{k}`; known: {', '.join(SERVE_KEYS)}",
                f"{where}:{line_of(text, k)}" if line_of(text, k) else where,
            )
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= U32_MAX:
            raise _type_error(text, where, k, f"a positive integer up to {U32_MAX} (the engine's u32)", value)
        serve[k] = Setting(value, where, line_of(text, k))
    for k, value in doc.get("build", {}).items():
        if not isinstance(value, bool):
            raise _type_error(text, where, k, "true or false", value)
        build[k] = Setting(value, where, line_of(text, k))
    _check_integers(doc.get("model", {}), text, where, "model")
    _check_bench(doc.get("model", {}), text, where)
    model = _merge_model(model, doc.get("model", {}))
    _check_bench_usable(model, doc.get("model", {}), text, where)

    return Recipe(
        path=where,
        engine=engine,
        description=doc.get("description", ""),
        chain=(*chain, str(p)),
        vars=MappingProxyType(vars_),
        unset=MappingProxyType(unset),
        serve=MappingProxyType(serve),
        build=MappingProxyType(build),
        model=MappingProxyType(model),
    )


# [model.bench]: the model-shape lists the bench plans from (each a list of
# positive integers), the one count (the DFlash draft block), and the lists
# of lists: prefill_streams, each inner list the token counts of prompts
# prefilled together (gdn.prefill_multi_stream), one shape each.
BENCH_LISTS = ("gemm_rows", "decode_batches", "decode_contexts", "prefill_tokens", "verify_tokens")
BENCH_COUNTS = ("draft_block",)
BENCH_LIST_LISTS = ("prefill_streams",)


def _at(text: str, where: str, key: str) -> str:
    line = line_of(text, key)
    return f"{where}:{line}" if line else where


def _check_bench(model: Any, text: str, where: str) -> None:
    """``[model.bench]`` holds known keys, each a list of positive integers
    (or, for a count, one; for ``prefill_streams``, a list of such lists): a
    zero, a negative or a word would plan shapes no kernel can have."""
    bench = model.get("bench") if isinstance(model, Mapping) else None
    if bench is None:
        return
    if not isinstance(bench, Mapping):
        raise UserError("[model] bench must be a table of shape lists", _at(text, where, "bench"))
    known = BENCH_LISTS + BENCH_COUNTS + BENCH_LIST_LISTS

    def positive(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 1

    def positives(x: Any) -> bool:
        return isinstance(x, list) and bool(x) and all(map(positive, x))

    for key, value in bench.items():
        if key not in known:
            raise UserError(
                f"unknown [model.bench] key `{key}`{did_you_mean(key, known)}; known: {', '.join(known)}",
                _at(text, where, key),
            )
        if key in BENCH_COUNTS:
            if not positive(value):
                raise UserError(f"[model.bench] {key} must be a positive integer, not {value!r}", _at(text, where, key))
        elif key in BENCH_LIST_LISTS:
            if not isinstance(value, list) or not value or not all(map(positives, value)):
                raise UserError(
                    f"[model.bench] {key} must be a non-empty list of non-empty lists of positive integers "
                    f"(each the token counts of one batch of streams), not {value!r}",
                    _at(text, where, key),
                )
        elif not isinstance(value, list) or not value or not all(map(positive, value)):
            raise UserError(
                f"[model.bench] {key} must be a non-empty list of positive integers, not {value!r}",
                _at(text, where, key),
            )


def _check_bench_usable(model: Mapping[str, Any], own: Any, text: str, where: str) -> None:
    """A shape list no path can use is an error naming what it lacks: the
    GEMM rows shape the FFN projections, which need the model's width and
    FFN size (without them the bench plans a default model's, ignoring
    the list)."""
    bench = model.get("bench") or {}
    if "gemm_rows" not in bench:
        return
    ffn, moe = model.get("ffn") or {}, model.get("moe") or {}
    if model.get("hidden") and (
        ffn.get("intermediate") or moe.get("expert_intermediate") or moe.get("shared_intermediate")
    ):
        return
    missing = [] if model.get("hidden") else ["[model] hidden"]
    if not (ffn.get("intermediate") or moe.get("expert_intermediate") or moe.get("shared_intermediate")):
        missing.append("[model.ffn] intermediate (or [model.moe] expert_intermediate)")
    raise UserError(
        "[model.bench] gemm_rows shapes the FFN projections, which need the model's "
        f"{' and '.join(missing)}: without them the bench would plan a default model and ignore it",
        _at(text, where, "gemm_rows"),
    )


def _check_integers(value: Any, text: str, where: str, path: str) -> None:
    """Every integer in ``value`` fits TOML's signed 64 bits."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_integers(v, text, where, f"{path}.{k}")
    elif isinstance(value, list):
        for v in value:
            _check_integers(v, text, where, path)
    elif isinstance(value, int) and not isinstance(value, bool) and not I64[0] <= value <= I64[1]:
        key = path.rsplit(".", 1)[-1]
        line = line_of(text, key)
        raise UserError(
            f"[{path.rsplit('.', 1)[0]}] {key} = {value} is outside TOML's integers (signed 64-bit)",
            f"{where}:{line}" if line else where,
        )


def _suggest_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
