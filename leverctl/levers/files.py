"""Whole files in and out, each failure one line saying what and where.

Every input file (catalog, recipe, env file, a diff side) is read by
:func:`read_input_file` and every output file (recipes, reports, charts,
sweep plans) is written by :func:`write_atomically`, so all commands refuse
and report alike.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import uuid
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from ..errors import UserError


def _a(what: str) -> str:
    return f"{'an' if what[:1] in 'aeiou' else 'a'} {what}"


def path_label(path: str | Path) -> str:
    """A path as printable text, for messages, provenance and the files
    leverctl writes: bytes of the name that are not UTF-8 (Python hands them
    over as lone surrogates, which no UTF-8 output can hold) as ``\\xff``, and
    control characters escaped, so the label is one line of valid UTF-8. Open
    files by the path itself, never by its label."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c for c in text)


MiB = 1 << 20
# The largest input of each kind leverctl reads; anything bigger is not what
# the user meant to pass (a log, a dataset, /dev/zero behind a symlink) and is
# refused before it is read into memory. Shipped catalogs are ~22 KiB and
# recipes ~1 KiB, so the caps are far above any real one.
CAPS = {"recipe file": MiB, "catalog file": MiB, "env file": MiB}

# What a path that is not a regular file is, in words (by S_IFMT).
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

STDIN = "-"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


def read_input_file(
    path: str | Path, what: str, *, binary: bool = False, limit: int | None = None, stdin: bool = False
) -> bytes:
    """The bytes of ``path``, or a UserError at it: absent, unreadable, not a
    regular file (a directory, a FIFO, a device such as /dev/zero, a socket),
    a symlink loop, larger than ``limit`` (default: ``CAPS[what]``, else no
    cap), or binary (a NUL byte: no text format we read has one).

    Never blocks: the file is opened non-blocking, so a FIFO with no writer
    is refused at once rather than waited on, and only ``limit`` + 1 bytes are
    ever read. ``stdin=True`` lets ``-`` mean standard input (read to its end,
    under the same cap). ``what`` names the file in the message ("recipe
    file", "env file"). ``binary=True`` lets NUL bytes through, for a reader
    that says itself what is wrong with the content (a results file a crash
    left NUL-padded)."""
    limit = CAPS.get(what) if limit is None else limit
    if stdin and str(path) == STDIN:
        where = "stdin"
        try:
            data = _read_capped(sys.stdin.buffer, limit)
        except OSError as e:
            raise UserError(f"cannot read {what}: {e.strerror or e}", where) from None
    else:
        where = path_label(path)
        fd = _open_regular(path, what, where, stdin)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = _read_capped(f, limit)
        except OSError as e:
            raise UserError(f"cannot read {what}: {e.strerror or e}", where) from None
        finally:
            os.close(fd)
    if data is None:
        raise UserError(f"is larger than {_size(limit)}, the most leverctl reads as {_a(what)}", where)
    if not binary and b"\x00" in data:
        raise UserError(f"is a binary file, not {_a(what)}", where)
    return data


def open_input_file(path: str | Path, what: str) -> BinaryIO:
    """``path`` opened for reading in binary, refused as
    :func:`read_input_file` refuses it (absent, unreadable, not a regular
    file), for a reader that streams a file too large to hold (a results file
    of a million records) rather than reading it whole."""
    fd = _open_regular(path, what, path_label(path), False)
    return os.fdopen(fd, "rb")


def _open_regular(path: str | Path, what: str, where: str, stdin: bool) -> int:
    """A blocking descriptor of the regular file ``path``, or a UserError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"no such {what}", where) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"is a symlink loop, not {_a(what)}", where) from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO O_NONBLOCK cannot open
            raise UserError(f"is a socket or a FIFO, not {_a(what)}", where) from None
        raise UserError(f"cannot read {what}: {e.strerror or e}", where) from None
    try:
        mode = os.fstat(fd).st_mode
        for test, words in _NOT_REGULAR:
            if test(mode):
                # <(cmd) is a pipe too; standard input reads one without the risk of a FIFO no one writes.
                hint = (
                    "; to read a pipe, give - and redirect it to standard input"
                    if stdin and stat.S_ISFIFO(mode)
                    else ""
                )
                raise UserError(f"is {words}, not {_a(what)}{hint}", where)
        if not stat.S_ISREG(mode):
            raise UserError(f"is not a regular file, not {_a(what)}", where)
        os.set_blocking(fd, True)
    except OSError as e:
        os.close(fd)
        raise UserError(f"cannot read {what}: {e.strerror or e}", where) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_capped(f: BinaryIO, limit: int | None) -> bytes | None:
    """All of ``f``, or None when it holds more than ``limit`` bytes."""
    if limit is None:
        return f.read()
    data = f.read(limit + 1)
    return None if len(data) > limit else data


def write_atomically(
    path: str | Path,
    data: str | bytes | Iterable[str | bytes],
    *,
    make_folder: bool = False,
    check: Callable[[Path], None] | None = None,
    written: Callable[[], None] | None = None,
) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` so that a reader sees the old
    file or the new one, never half of one, and a failure leaves the old one
    intact: a temporary file in the same folder (a rename across file systems
    would not be atomic), fsynced, then ``os.replace``.

    ``check(tmp)`` runs on the complete temporary file before the rename (a
    recipe verified by loading it, say); whatever it raises propagates and
    nothing is replaced. The folder must exist unless ``make_folder``.
    ``data`` may be an iterable of pieces, written as they come (a file too
    large to hold at once). ``written()`` is called once every byte is
    handed to the system, before the wait for the disk (fsync). Failures to
    write are a UserError naming the path."""
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
    pieces = (data,) if isinstance(data, bytes) else data
    tmp = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        # Opened like any new file, so the umask applies (mkstemp's would be 0600).
        with open(tmp, "xb", buffering=1 << 20) as f:
            for piece in pieces:
                f.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
            f.flush()
            if written is not None:
                written()
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


def check_output_path(path: str | Path, option: str, *, directory: bool = False, make_folder: bool = False) -> Path:
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
    _probe(existing, make_dir=existing != target, text=text)
    return p


def _probe(folder: Path, *, make_dir: bool, text: str) -> None:
    """Make and remove a temporary folder (or file) in ``folder``: what the
    permission bits cannot tell (a pseudo or read-only file system, such as
    ``/proc``, refuses it even to root) is found before any work."""
    import tempfile

    try:
        if make_dir:
            os.rmdir(tempfile.mkdtemp(prefix=".leverctl-probe-", dir=folder))
        else:
            fd, name = tempfile.mkstemp(prefix=".leverctl-probe-", dir=folder)
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        what = "create a folder" if make_dir else "write a file"
        raise UserError(f"cannot {what} in {folder}: {e.strerror or e}", text) from None
