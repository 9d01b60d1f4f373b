"""Words for resolved levers, shared by show, diff, lint and explain.

Everything here returns plain text that is safe to print whatever the input:
a raw value may be bytes that are not UTF-8, or a ``str`` holding lone
surrogates (how Python hands over undecodable argv and environ bytes), and
neither may crash an output format or smuggle control characters or Rich
markup into a terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .catalog import SHIPPED, Catalog
from .files import path_label
from .resolve import Provenance, Raw, Resolution, show_raw, utf8


def safe(text: str) -> str:
    """``text`` with anything that cannot be encoded as UTF-8, and every
    control character, escaped: fit for one line of a terminal or a log."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return printable(text)


def printable(text: str) -> str:
    """``text`` with control characters (C0, DEL, C1) escaped, so a value
    cannot move a terminal's cursor or change its colours."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c for c in text)


def raw_display(raw: Raw | None) -> str:
    """A raw value exactly as the engine would see it: quoted, with control
    characters escaped, so ``" 1"`` and ``"1"`` look different."""
    if raw is None:
        return "unset"
    text = utf8(raw)
    if text is None:
        return f"<not UTF-8: {printable(show_raw(raw) or '')}>"
    return printable(json.dumps(text, ensure_ascii=False))


def value_text(value: Any) -> str:
    """A resolved value in a table cell: on/off, unset, a count, a drafter policy."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "unset"
    return str(value)


def source_text(p: Provenance, env_label: str = "env") -> str:
    """Where a value came from, in a few words."""
    if p.source == "env":
        return env_label
    if p.source == "set":
        return "--set"
    if p.source == "flag":
        return "--max-batch-size"
    return safe(p.describe())


def raw_text(p: Provenance, vars: tuple[str, ...] = ()) -> str:
    """The variable and its raw string, or what decided instead."""
    if p.source == "flag":
        return f"--max-batch-size {p.raw}"
    if p.source == "serve":
        return f"[serve] max_batch_size = {p.raw}"
    if p.source == "build":
        return "[build] default"
    if p.var is None:
        return ", ".join(vars) + " unset" if vars else "-"
    return f"{p.var}={raw_display(p.raw)}" if p.raw is not None else f"{p.var} unset"


def infer_engine(env: Mapping[str, Raw]) -> str | None:
    """The shipped engine whose prefixed variables this environment sets, when
    exactly one engine's are (a pasted bug report names its own engine). Reads
    only each catalog's ``prefix`` line, so the common case costs nothing."""
    import re
    from importlib import resources

    if not env:
        return None
    hits = []
    for name in SHIPPED:
        text = resources.files("leverctl.catalogs").joinpath(f"{name}.toml").read_text("utf-8")
        m = re.search(r'^prefix\s*=\s*"([^"]+)"', text, re.M)
        if m and any(k.startswith(m.group(1)) for k in env):
            hits.append(name)
    return hits[0] if len(hits) == 1 else None


def env_line_finder(path: Path | str | None, lines: Mapping[str, int] | None = None):
    """A function var -> "FILE:LINE" for an env file, from the line numbers
    its parser recorded (the last assignment wins, as in the parser), or None
    when resolving the process environment."""
    if path is None:
        return None
    name = "stdin" if str(path) == "-" else path_label(path)
    lines = lines or {}
    return lambda var: f"{name}:{lines[var]}" if var in lines else name


def where_of(res: Resolution, var: str, env_where=None) -> str:
    """Where a variable of the resolution was set: recipe file and line, the
    environment (or env file and line), or the command line."""
    s = res.variables.get(var)
    if s is None:
        return "default"
    if s.source == "recipe":
        return s.file or (res.recipe or "recipe")
    if s.source == "env":
        return env_where(var) if env_where else "environment"
    if s.source == "set":
        return "--set"
    if s.source == "unset":
        return "--unset"
    return s.source


def catalog_label(cat: Catalog) -> str:
    return f"{cat.title} ({cat.engine})"
