"""leverctl run in-process, and what the CLI and catalog tests check of a run."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def use_paths(monkeypatch, paths) -> None:
    """The CLI's kernel paths replaced by ``paths`` (a function giving them,
    or a list): their declarations, and the tables' view of them that
    ``--kernel`` is checked against before the kernels load."""
    from leverctl.cli import common

    get = paths if callable(paths) else (lambda: list(paths))
    monkeypatch.setattr(common, "registered_paths", get)
    monkeypatch.setattr(common, "table_paths", lambda: [common.TablePath.of(p) for p in get()])


def run_cli(capsys, *args) -> Result:
    """``leverctl args...`` in this process: (exit code, stdout, stderr)."""
    from leverctl.cli.app import main

    capsys.readouterr()
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    else:  # main always exits; reaching here is a bug
        raise AssertionError("leverctl main() returned without exiting")
    cap = capsys.readouterr()
    return Result(code, cap.out, cap.err)


def assert_one_line_error(r: Result, *fragments: str) -> None:
    """Bad input: exit 2, one line on stderr, no traceback."""
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    assert len(r.err_lines) == 1, r.err
    line = r.err_lines[0]
    assert line.startswith("leverctl: ")
    for frag in fragments:
        assert frag in line, (frag, line)


def run_ok_with_cache(cache_home, *args) -> None:
    """``leverctl args...`` in this process with ``XDG_CACHE_HOME`` set to
    ``cache_home`` for the run alone (module-scoped fixtures cannot use
    monkeypatch), asserting exit 0."""
    from leverctl.cli.app import main

    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache_home)
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        assert e.code in (0, None), f"leverctl {' '.join(map(str, args))}: exit {e.code}"
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old
