"""Reading the environments a resolution may be asked about.

These read the process or a file; :func:`leverctl.levers.resolve.resolve`
itself never does.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import UserError
from .files import STDIN, path_label, read_input_file
from .resolve import Raw

NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\Z")


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
        out[key] = _text_or_bytes(v)
    return out


def _text_or_bytes(v: bytes) -> Raw:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return v


# ── shell words ─────────────────────────────────────────────────────────────
#
# `export -p` and `declare -x` print every value in bash's own quoting: "..."
# with \$ \` \" \\ escaped, and $'...' with octal escapes for control
# characters and bytes that are not UTF-8 (bash 5.2). shlex reads POSIX
# quoting but none of these (it keeps the backslash of \$, reads $'\377' as a
# dollar and a literal, and ends a word at `#` inside it, so KEY=a#b is KEY=a),
# so the words of a line are read here, as bash reads an assignment, and what
# would need the shell to run something ($VAR, $(cmd), `cmd`, a pipe) is
# refused rather than guessed at.


class _Open(Exception):
    """A quote (or a trailing backslash) is still open at the end of the text."""


class _Unreadable(Exception):
    """Shell the file cannot stand for without running it; the message says which."""


_ANSI_C = {
    "a": 7,
    "b": 8,
    "e": 27,
    "E": 27,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _ansi_c(text: str, i: int, word: bytearray) -> int:
    """Read the body of $'...' from text[i] into ``word``; the index after it."""
    n = len(text)
    while True:
        if i >= n:
            raise _Open
        c = text[i]
        if c == "'":
            return i + 1
        if c != "\\":
            word += _enc(c)
            i += 1
            continue
        if i + 1 >= n:
            raise _Open
        e = text[i + 1]
        if e in _ANSI_C:
            word.append(_ANSI_C[e])
            i += 2
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", text[i + 1 :])
            word.append(int(m.group(), 8) & 0xFF)
            i += 1 + len(m.group())
        elif e in "xuU" and (m := re.match(r"[0-9A-Fa-f]{1,%d}" % {"x": 2, "u": 4, "U": 8}[e], text[i + 2 :])):
            code = int(m.group(), 16)
            if e == "x":
                word.append(code)
            else:
                word += chr(code).encode("utf-8", "surrogatepass") if code < 0x110000 else b""
            i += 2 + len(m.group())
        elif e == "c" and i + 2 < n:
            word.append(ord(text[i + 2]) & 0x1F)
            i += 3
        else:  # bash keeps an unknown escape as written
            word += _enc(c + e)
            i += 2


def shell_words(text: str) -> list[bytes]:
    """The words of ``text`` (one line of shell, or several when a quote
    spans them) as bash reads them for an assignment: blanks separate words,
    `#` at the start of a word begins a comment, and '...', "...", $'...' and
    backslashes quote. Raises _Open when a quote is left open and
    _Unreadable for what only running a shell could give (an expansion, a
    pipe, a second command)."""
    words: list[bytes] = []
    word: bytearray | None = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            if word is not None:
                words.append(bytes(word))
                word = None
            i += 1
            continue
        if c == "#" and word is None:
            break
        if word is None:
            word = bytearray()
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise _Open
            word += _enc(text[i + 1 : j])
            i = j + 1
        elif text.startswith("$'", i):
            i = _ansi_c(text, i + 2, word)
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise _Open
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                    word += _enc(text[i + 1]) if text[i + 1] != "\n" else b""
                    i += 2
                elif c in "$`":
                    raise _Unreadable(f"{text[i : i + 12]!r} would need a shell to expand it")
                else:
                    word += _enc(c)
                    i += 1
        elif c == "\\":
            if i + 1 >= n:
                raise _Open
            word += _enc(text[i + 1]) if text[i + 1] != "\n" else b""
            i += 2
        elif c in "$`":
            raise _Unreadable(f"{text[i : i + 12]!r} would need a shell to expand it")
        elif c in ";&|<>()":
            raise _Unreadable(f"{c!r} is shell syntax, not part of an assignment")
        else:
            word += _enc(c)
            i += 1
    if word is not None:
        words.append(bytes(word))
    return words


# ── env files ───────────────────────────────────────────────────────────────

_FUNCTION = re.compile(r"\s*BASH_FUNC_[^=\s]+=\(\)")
EXPECTED = "expected KEY=VALUE, export KEY=VALUE or declare -x KEY=VALUE"


def parse_env_text(data: bytes, where: str, lines: dict[str, int] | None = None) -> dict[str, Raw]:
    """The variables an env file sets, as the engine would see them.

    Read are what people paste or redirect: ``env`` output, ``export -p`` and
    ``declare -x`` output (bash's quoting, values spanning lines included),
    ``export VAR=VALUE``, indented lines, blank lines, ``#`` comments (a
    comment after a value is not part of it), '...' "..." and $'...' quoted
    values, and ``unset VAR`` lines. A name exported without a value
    (``declare -x OLDPWD``) is not in the environment, so it is not set.

    A plain ``VAR=...`` line that is not shell (``env`` prints values with
    spaces, quotes or ``$`` unquoted, as in ``SSH_CLIENT=10.0.0.1 5555 22``)
    is read as ``env`` printed it: everything after the first ``=`` is the
    value, byte for byte. Any other line is bad input, reported at its
    number. ``lines``, when given, receives each variable's line number."""
    out: dict[str, Raw] = {}
    rows = data.decode("utf-8", "surrogateescape").split("\n")
    rows = [r[:-1] if r.endswith("\r") else r for r in rows]
    i = 0
    while i < len(rows):
        n, row = i + 1, rows[i]
        i += 1
        if not row.strip() or row.lstrip().startswith("#"):
            continue
        if _FUNCTION.match(row):
            # `env` lists a shell function bash exports (Lmod's `module` on
            # most clusters) as BASH_FUNC_NAME%%=() { ... }, over lines up
            # to a lone "}". It is no variable an engine reads: skip it.
            while i < len(rows) and rows[i - 1].rstrip() != "}":
                i += 1
            continue
        first = row.split(None, 1)[0]
        builtin = first in ("export", "declare", "typeset", "unset")
        try:
            try:
                words = shell_words(row)
            except _Open:
                if not builtin:
                    raise
                # export -p prints a value holding a newline across lines.
                text, j = row, i
                while True:
                    if j >= len(rows):
                        raise _Unreadable("a quote opened on this line never closes") from None
                    text += "\n" + rows[j]
                    j += 1
                    try:
                        words = shell_words(text)
                        break
                    except _Open:
                        continue
                i = j
            pairs = _assignments(words, builtin)
        except (_Open, _Unreadable, ValueError) as e:
            plain = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)=", row)
            if plain and not builtin:  # as `env` prints it
                pairs = [(plain.group(1), _enc(row[plain.end() :]))]
            else:
                why = str(e) if str(e) else "a quote is left open"
                raise UserError(f"cannot read {_show(row)}: {why}; {EXPECTED}", f"{where}:{n}") from None
        for key, value in pairs:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _text_or_bytes(value)
            if lines is not None:
                lines[key] = n
    return out


def _assignments(words: list[bytes], builtin: bool) -> list[tuple[str, bytes | None]]:
    """(name, value) for each assignment of a line's words; value None for
    ``unset NAME``. Raises ValueError saying what is wrong."""
    cmd = words[0].decode("utf-8", "replace") if builtin else None
    rest = words[1:] if builtin else words
    flags = ""
    while rest and rest[0].startswith(b"-"):
        flags += rest[0].decode("utf-8", "replace").lstrip("-")
        rest = rest[1:]
    if cmd in ("declare", "typeset") and "x" not in flags:
        raise ValueError(f"{cmd} without -x does not export, so the engine would not see it")
    if cmd == "export" and "n" in flags:
        raise ValueError("export -n removes the export; leave the line out instead")
    out: list[tuple[str, bytes | None]] = []
    for w in rest:
        name, eq, value = w.partition(b"=")
        if not NAME.match(name):
            raise ValueError(f"{w[:40].decode('utf-8', 'backslashreplace')!r} is not VAR=VALUE")
        if cmd == "unset":
            if eq:
                raise ValueError(f"unset takes names, not {w[:40].decode('utf-8', 'backslashreplace')!r}")
            out.append((name.decode(), None))
        elif eq:
            out.append((name.decode(), value))
        elif not builtin:
            raise ValueError(f"{name.decode()!r} is not VAR=VALUE")
        # export NAME / declare -x NAME with no value: exported, but not set
    if not rest and cmd != "unset":
        raise ValueError(f"{cmd or 'the line'} sets nothing")
    return out


def _show(row: str) -> str:
    return repr(_enc(row[:60]).decode("utf-8", "backslashreplace"))


def read_env_file(path: str | Path, lines: dict[str, int] | None = None) -> dict[str, Raw]:
    """An env file's variables (see :func:`parse_env_text`); ``-`` is
    standard input."""
    where = "stdin" if str(path) == STDIN else path_label(path)
    return parse_env_text(read_input_file(path, "env file", stdin=True), where, lines)
