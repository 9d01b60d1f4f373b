"""Whole files in and out, each failure one line saying what and where.

Every input file (catalog, recipe, env file, a diff side) is read by
:func:`read_input_file` and every output file (recipes, reports, charts,
sweep plans) is written by :func:`write_atomically`, so all commands refuse
and report alike.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Callable

from ..errors import UserError


def _a(what: str) -> str:
    return f"{'an' if what[:1] in 'aeiou' else 'a'} {what}"


def read_input_file(path: str | Path, what: str, *, binary: bool = False) -> bytes:
    """The bytes of ``path``, or a UserError at it: absent, a directory,
    unreadable, or binary (a NUL byte: no text format we read has one).
    ``what`` names the file in the message ("recipe file", "env file").
    ``binary=True`` lets NUL bytes through, for a reader that says itself
    what is wrong with the content (a results file a crash left NUL-padded)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"is a directory, not {_a(what)}", str(p))
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"no such {what}", str(p)) from None
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror or e}", str(p)) from None
    if not binary and b"\x00" in data:
        raise UserError(f"is a binary file, not {_a(what)}", str(p))
    return data


def write_atomically(path: str | Path, data: str | bytes, *, make_folder: bool = False,
                     check: Callable[[Path], None] | None = None) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` so that a reader sees the old
    file or the new one, never half of one, and a failure leaves the old one
    intact: a temporary file in the same folder (a rename across file systems
    would not be atomic), fsynced, then ``os.replace``.

    ``check(tmp)`` runs on the complete temporary file before the rename (a
    recipe verified by loading it, say); whatever it raises propagates and
    nothing is replaced. The folder must exist unless ``make_folder``.
    Failures to write are a UserError naming the path."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise UserError("is a directory, not a file to write", str(path))
    if make_folder:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the folder: {e.strerror or e}", str(folder)) from None
    elif not folder.is_dir():
        raise UserError("no such folder", str(folder))
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        # Opened like any new file, so the umask applies (mkstemp's would be 0600).
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise UserError(f"cannot write: {e.strerror or e}", str(path)) from None
        raise


def check_output_path(path: str | Path, option: str, *, directory: bool = False,
                      make_folder: bool = False) -> Path:
    """``path`` as a Path if a command can write there, else a UserError, so
    that a command refuses a bad output path before any work, not after a
    long run. Made to be a Typer option's ``parser`` (it sees the raw text,
    so ``--out ""`` is caught before it becomes the current directory)::

        parser=lambda s: check_output_path(s, "--out")

    A file (``directory=False``) must not be a directory, and its folder must
    exist (or, with ``make_folder``, be creatable) and be writable: the file
    is written as a temporary file beside it and renamed. A directory must be
    a writable directory or be creatable. Nothing is created here. ``option``
    names the option in the message for an empty name."""
    text = os.fspath(path)
    noun = "directory" if directory else "file"
    if not text:
        raise UserError(f"an empty name is no {noun} to write; name one", option)
    p = Path(text)
    if directory:
        if p.exists() and not p.is_dir():
            raise UserError("exists and is not a directory", text)
        target = p  # the directory itself, or where it will be made
    else:
        if p.is_dir():
            raise UserError("is a directory, not a file to write", text)
        target = p.parent
    # The nearest part of the path that exists decides: it must be a writable
    # directory (a file in the way, or no permission, and nothing can be made).
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"cannot write there: {existing} is a file, not a folder", text)
    if existing != target and not directory and not make_folder:
        raise UserError("no such folder", str(target))
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == target:
            what = "write in this directory" if directory else f"write in its folder {existing}"
        else:
            what = f"create {'it' if directory else 'its folder'} in {existing}"
        raise UserError(f"no permission to {what}", text)
    return p
