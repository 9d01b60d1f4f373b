"""Reading the environments a resolution may be asked about.

These read the process or a file; :func:`leverctl.levers.resolve.resolve`
itself never does.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from .files import read_input_file
from .resolve import Raw


def read_process_env() -> dict[str, Raw]:
    """The process environment with values as the engine would see them: the
    text where it is valid UTF-8, else the raw bytes (so value rules treat it
    as unset and presence rules as set, as Rust's std::env does)."""
    out: dict[str, Raw] = {}
    env_b = getattr(os, "environb", None)
    if env_b is None:  # not POSIX: values are already text
        return dict(os.environ)
    for k, v in env_b.items():
        try:
            key = k.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a variable whose *name* is not UTF-8 is no lever of ours
        try:
            out[key] = v.decode("utf-8")
        except UnicodeDecodeError:
            out[key] = v
    return out


def parse_env_text(data: bytes, where: str) -> dict[str, Raw]:
    """KEY=VALUE lines as pasted from a bug report (`env`, `export -p`,
    `docker inspect`): blank lines and `#` comments skipped, an `export ` or
    `declare -x ` prefix dropped, one pair of matching surrounding quotes
    removed. Anything else in the value is kept exactly, whitespace included."""
    out: dict[str, Raw] = {}
    for n, line_b in enumerate(data.split(b"\n"), 1):
        line_b = line_b[:-1] if line_b.endswith(b"\r") else line_b
        if not line_b.strip() or line_b.lstrip().startswith(b"#"):
            continue
        for prefix in (b"export ", b"declare -x "):
            if line_b.startswith(prefix):
                line_b = line_b[len(prefix):]
        if b"=" not in line_b:
            raise UserError(f"expected KEY=VALUE, got {line_b[:60].decode('utf-8', 'backslashreplace')!r}",
                            f"{where}:{n}")
        key_b, val_b = line_b.split(b"=", 1)
        try:
            key = key_b.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError("variable name is not UTF-8 text", f"{where}:{n}") from None
        if not key or any(c.isspace() for c in key):
            raise UserError(f"{key!r} is not a variable name", f"{where}:{n}")
        if len(val_b) >= 2 and val_b[:1] == val_b[-1:] and val_b[:1] in (b'"', b"'"):
            val_b = val_b[1:-1]
        try:
            out[key] = val_b.decode("utf-8")
        except UnicodeDecodeError:
            out[key] = val_b
    return out


def read_env_file(path: str | Path) -> dict[str, Raw]:
    return parse_env_text(read_input_file(path, "env file"), str(path))
