"""Turning a resolution back into inputs: a recipe, or shell lines.

``freeze`` writes a recipe that, loaded with nothing else set, resolves to
exactly the same values. The one thing TOML cannot hold is a value that is not
valid UTF-8; since the engine itself only distinguishes "unset" from "set" for
such a value, the frozen recipe keeps that behaviour instead of the bytes:
a variable read by presence is written as ``""`` (still set), one read for its
text is left out (the engine reads it as unset). Each such substitution is
reported, so nobody mistakes it for the original bytes.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from .catalog import Catalog
from .intent import reads_presence
from .present import printable
from .recipes import Recipe
from .resolve import Raw, Resolution, show_raw, utf8

SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class Frozen:
    doc: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # warnings for stderr


def _plain(obj: Any) -> Any:
    """Mappings (frozen or not) as dicts, for tomli-w."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def lever_strings(
    catalog: Catalog, variables: Mapping[str, Any], *, keep_bytes: bool = False
) -> tuple[dict[str, str | bytes], list[str]]:
    """The catalog variables that are set, as strings that reproduce what the
    engine sees (catalog order), and a note per value that had to change.
    ``keep_bytes``: a value that is not UTF-8 stays its exact bytes instead
    (for an output that can carry them)."""
    out: dict[str, str | bytes] = {}
    notes: list[str] = []
    for lv in catalog.levers.values():
        for var in lv.vars:
            s = variables.get(var)
            raw: Raw | None = getattr(s, "raw", s)
            if raw is None or var in out:
                continue
            text = utf8(raw)
            if text is not None:
                out[var] = text
            elif keep_bytes:
                out[var] = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
            elif reads_presence(lv, var):
                out[var] = ""
                notes.append(
                    f'{var}={printable(show_raw(raw) or "")} is not valid UTF-8; written as "" '
                    f"(read by presence, so it stays set)"
                )
            else:
                notes.append(
                    f"{var}={printable(show_raw(raw) or '')} is not valid UTF-8; left unset "
                    f"(the engine reads it as unset)"
                )
    return out, notes


def freeze(res: Resolution, recipe: Recipe | None = None, description: str | None = None) -> Frozen:
    """A recipe document reproducing ``res`` exactly when loaded alone."""
    cat = res.catalog
    levers, notes = lever_strings(cat, res.variables)
    for s in res.ignored:
        notes.append(f"{s.var} is not a lever variable of {cat.title}; left out")
    doc: dict[str, Any] = {"engine": cat.engine}
    doc["description"] = description or (
        f"frozen from {res.recipe}" if res.recipe else f"frozen {cat.title} lever settings"
    )
    if levers:
        doc["levers"] = levers
    for lv in cat.levers.values():
        r = res.levers[lv.field]
        if lv.kind == "config" and r.provenance.source in ("flag", "serve"):
            doc["serve"] = {"max_batch_size": r.value}
    if recipe is not None and recipe.build:
        doc["build"] = {k: s.value for k, s in recipe.build.items()}
    if recipe is not None and recipe.model:
        doc["model"] = _plain(recipe.model)
    return Frozen(doc, notes)


def dumps(frozen: Frozen, header: str = "") -> str:
    import tomli_w

    head = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    return head + tomli_w.dumps(frozen.doc)


def ansi_c_quote(data: bytes) -> str:
    """``data`` as bash's $'...' quoting, which reproduces any bytes: printable
    ASCII as itself (``\\`` and ``\'`` escaped), every other byte as \\xHH (always
    two digits, so a following hex digit cannot join the escape)."""
    body = "".join(
        "\\\\" if b == 0x5C else "\\'" if b == 0x27 else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data
    )
    return f"$'{body}'"


def _control(c: str) -> bool:
    """A control character a terminal acts on (C0 but newline, DEL, C1)."""
    return (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F


def _controls(text: Raw) -> bool:
    return isinstance(text, str) and any(map(_control, text))


def shell_quote(text: Raw) -> str:
    """A value for a POSIX shell line: single quotes; a run of control
    characters (which inside quotes would reach the terminal raw) as
    ``"$(printf '\\ooo')"``, octal escapes of its UTF-8 bytes, joined to
    the quoted rest (a newline stays quoted: command substitution would
    drop it at the end). Bytes that are not UTF-8 take bash's $'...'."""
    if isinstance(text, bytes):
        return ansi_c_quote(text)
    if not _controls(text):
        return shlex.quote(text)
    out, run, ctrl = [], "", False
    for c in text + "\x00":  # a sentinel control ends the last run
        if c != "\x00" and _control(c) == ctrl:
            run += c
            continue
        if run:
            if ctrl:
                octal = "".join(f"\\{b:03o}" for b in run.encode("utf-8"))
                out.append(f"\"$(printf '{octal}')\"")
            else:
                out.append(shlex.quote(run))
        run, ctrl = c, c != "\x00" and _control(c)
    return "".join(out)


def shell_lines(
    catalog: Catalog, sets: Mapping[str, Raw | None], *, unset_others: bool = True, comments: list[str] | None = None
) -> tuple[list[str], list[str]]:
    """Shell lines that make an environment hold exactly ``sets`` (var -> raw,
    None to unset) for this catalog's variables: ``export`` for each set
    variable, ``unset`` for the rest. Returns (lines, notes).

    Values are POSIX single-quoted; one that is not UTF-8, or holds a control
    character, keeps its exact bytes in bash's $'\\xHH' quoting (bash, zsh,
    ksh93, POSIX 2024 shells), which is what the engine would see."""
    values, notes = lever_strings(catalog, sets, keep_bytes=True)
    lines = [f"# {c}" for c in (comments or [])]
    if any(isinstance(v, bytes) for v in values.values()):
        lines.append("# values in $'...' hold bytes that are not UTF-8, exactly: eval them in bash, zsh or ksh")
    elif any(_controls(v) for v in values.values()):
        lines.append("# control characters in values are written by printf (octal escapes), never raw")
    for var, text in values.items():
        if not SHELL_NAME.match(var):
            from ..errors import UserError

            raise UserError(f"{var!r} is not a name a POSIX shell can export")
        if "\x00" in text if isinstance(text, str) else b"\x00" in text:
            from ..errors import UserError

            raise UserError(f"{var}: a value with a NUL character cannot be put in an environment")
        lines.append(f"export {var}={shell_quote(text)}")
    explicit = [v for v, raw in sets.items() if raw is None]
    others = [v for v in catalog.variables() if v not in values] if unset_others else []
    for var in dict.fromkeys([*explicit, *others]):
        if SHELL_NAME.match(var) and var not in values:
            lines.append(f"unset {var}")
    return lines, notes
