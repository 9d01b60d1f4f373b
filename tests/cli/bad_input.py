"""The bad-input table's row type and runner.

Every way a user can hand leverctl bad input is one row, a :class:`Case`,
listed in a ``bad_cases_*.py`` module beside this file (one module per
topic: input files, output paths, results files...);
``test_bad_input_table.py`` collects every module's ``CASES`` and runs each
row as a real process. Adding a case is adding one line.

Most rows' processes are forked from one that has already imported the
CLI (Typer, Rich and leverctl's modules: most of a short command's time),
so the table pays the interpreter's start-up once a worker, not once a row
(:class:`Forker`); each row still gets a process of its own, with its own
standard streams, environment, exit status and ``atexit``. A row that sets
environment variables (``PYTHONPATH``, Slurm's) starts a fresh interpreter,
since a variable may be read as a module is imported.

A row passes when the command exits ``code`` (2, bad input, unless said
otherwise) within ``TIME_LIMIT`` seconds of its start, printed nothing on
stdout, printed exactly one line on stderr that starts with ``leverctl:``,
names every fragment, and shows no traceback; and when every path the row
lists in ``untouched`` is as the row's set-up left it (nothing half-written).

``{tmp}`` in ``argv``, ``fragments``, ``stdin`` and ``untouched`` stands for
the row's own empty temporary folder, made before ``files`` runs.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# The command must answer within a second of its own work; the rest is the
# interpreter's start-up on a loaded two-core machine.
TIME_LIMIT = 10.0


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    fragments: tuple[str, ...] = ()
    files: Callable[[Path], None] | None = None  # makes what the row needs inside {tmp}
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to a lever-free environment
    code: int = 2
    untouched: tuple[str, ...] = ()  # paths whose bytes (or absence) must survive the run
    skip_as_root: bool = False  # permission cases: root reads and writes whatever the mode


def _sub(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


def _snapshot(paths: list[Path]) -> dict[Path, bytes | None]:
    snap = {}
    for p in paths:
        try:
            snap[p] = p.read_bytes() if p.is_file() else ("dir" if p.is_dir() else None)
        except OSError:
            snap[p] = "unreadable"
    return snap


# The forking process: it imports the CLI, then for each request (argv, the
# environment, the working folder and the three files for the standard
# streams) forks a child that runs leverctl's entry point as `python -m
# leverctl` would, and answers the child's pid, then its exit status.
_SERVER = r"""
import atexit, os, pickle, struct, sys, traceback
import leverctl.cli.app  # noqa: F401 (the CLI stack, once)
from leverctl.cli.entry import main

req = os.fdopen(int(sys.argv[1]), "rb", buffering=0)
rep = os.fdopen(int(sys.argv[2]), "wb", buffering=0)


def read(n):
    got = b""
    while len(got) < n:
        more = req.read(n - len(got))
        if not more:
            sys.exit(0)
        got += more
    return got


def child(argv, env, cwd, streams):
    req.close()
    rep.close()
    for fd, (path, flags) in enumerate(zip(streams, (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY))):
        f = os.open(path, flags)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["leverctl", *argv]
    code = 0
    try:
        main()
    except SystemExit as e:  # as the interpreter maps it
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


while True:
    (n,) = struct.unpack("<I", read(4))
    argv, env, cwd, streams = pickle.loads(read(n))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child(argv, env, cwd, streams)
        finally:
            os._exit(code)
    rep.write(struct.pack("<i", pid))
    _, status = os.waitpid(pid, 0)
    rep.write(struct.pack("<i", os.waitstatus_to_exitcode(status)))
"""


class Forker:
    """One forking process (``_SERVER``) for the rows of this test process,
    started on first use with the environment every plain row gets."""

    def __init__(self, env: dict[str, str]):
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(req_r), str(rep_w)],
            pass_fds=(req_r, rep_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        os.close(req_r)
        os.close(rep_w)
        self.files = Path(tempfile.mkdtemp(prefix="leverctl-rows-"))

    def close(self) -> None:
        """End the forking process (it reads the end of its requests) and
        remove the rows' stream files."""
        os.close(self._req)
        os.close(self._rep)
        self.proc.wait(60)
        shutil.rmtree(self.files, ignore_errors=True)

    def _int(self, timeout: float) -> int:
        ready, _, _ = select.select([self._rep], [], [], timeout)
        if not ready:
            raise TimeoutError
        got = os.read(self._rep, 4)
        if len(got) != 4:
            raise RuntimeError(f"the forking process ended (status {self.proc.poll()})")
        return struct.unpack("<i", got)[0]

    def run(self, argv: list[str], env: dict[str, str], stdin: bytes | None, timeout: float):
        streams = [self.files / n for n in ("in", "out", "err")]
        streams[0].write_bytes(stdin or b"")
        for p in streams[1:]:
            p.write_bytes(b"")
        msg = pickle.dumps((argv, env, os.getcwd(), [str(p) for p in streams]))
        os.write(self._req, struct.pack("<I", len(msg)) + msg)
        pid = self._int(60)
        try:
            code = self._int(timeout)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._int(60)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        return subprocess.CompletedProcess(argv, code, streams[1].read_bytes(), streams[2].read_bytes())


_forker: Forker | None = None


def _run_forked(argv: list[str], env: dict[str, str], stdin: bytes | None, timeout: float):
    # The row's environment is the child's; the forking process is started
    # again only when the environment it imported the CLI in differs by more
    # than the name of the test running (pytest's PYTEST_CURRENT_TEST).
    global _forker
    base = {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}
    if _forker is None or _forker.proc.poll() is not None or _forker.env != base:
        if _forker is None:
            atexit.register(lambda: _forker.close())
        else:
            _forker.close()
        _forker = Forker(base)
    return _forker.run(argv, env, stdin, timeout)


def _run_fresh(argv: list[str], env: dict[str, str], stdin: bytes | None, timeout: float):
    return subprocess.run(
        [sys.executable, "-m", "leverctl", *argv],
        env=env,
        capture_output=True,
        timeout=timeout,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def row_env(case: Case, tmp: Path) -> dict[str, str]:
    """The environment a row's command runs in: this one's, without lever
    variables or the simulator switch, with the row's own added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_", "TQ_PLUS_"))}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update({k: _sub(v, tmp) for k, v in case.env.items()})
    return env


def run_row(case: Case, tmp: Path, *, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run ``case``'s command as its own process: forked (:class:`Forker`)
    unless the row sets environment variables, fork is missing or ``fresh``."""
    argv = [_sub(a, tmp) for a in case.argv]
    stdin = (
        _sub(case.stdin.decode("utf-8", "surrogateescape"), tmp).encode("utf-8", "surrogateescape")
        if case.stdin is not None
        else None
    )
    fresh = fresh or bool(case.env) or not hasattr(os, "fork")
    return (_run_fresh if fresh else _run_forked)(argv, row_env(case, tmp), stdin, TIME_LIMIT * 3)


def run_case(case: Case, tmp: Path) -> None:
    if case.skip_as_root and os.geteuid() == 0:
        import pytest

        pytest.skip("root reads and writes files whatever their mode")
    if case.files is not None:
        case.files(tmp)
    watched = [Path(_sub(u, tmp)) for u in case.untouched]
    before = _snapshot(watched)
    start = time.monotonic()
    p = run_row(case, tmp)
    took = time.monotonic() - start
    err = p.stderr.decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if line.strip()]
    context = f"{case.id}: rc={p.returncode} stderr={err!r} stdout={p.stdout[:300]!r}"
    assert took < TIME_LIMIT, f"{case.id}: took {took:.1f}s"
    assert p.returncode == case.code, context
    assert "Traceback" not in err, context
    assert p.stdout == b"", context
    assert len(lines) == 1 and lines[0].startswith("leverctl: "), context
    for frag in case.fragments:
        assert _sub(frag, tmp) in lines[0], (frag, context)
    assert _snapshot(watched) == before, f"{case.id}: a watched path changed"
