"""Writing records: a sweep's results.jsonl, a record at a time.

A record is written with a single ``write`` of one line, then flushed and
fsynced (:class:`Appender`), so a killed sweep leaves every earlier record
intact and at most a partial last line, which resume cuts off
(:func:`cut_partial_tail`) before appending.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from ...errors import UserError
from ...levers.files import write_atomically
from .schema import PLAN_FILE, RESULTS_FILE


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomically(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def record_line(rec: Mapping[str, Any]) -> bytes:
    # allow_nan=False: a NaN would make the line unreadable by strict JSON parsers.
    return (json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


class Appender:
    """Appends records to a JSONL file, each durable before ``append`` returns:
    one ``write`` of the whole line, then flush and fsync. A process killed at
    any instant leaves every earlier record intact and at most a partial last
    line."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = open(self.path, "ab", buffering=0)

    def append(self, rec: Mapping[str, Any]) -> None:
        self._f.write(record_line(rec))
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "Appender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cut_partial_tail(path: Path, good_bytes: int) -> None:
    """Drop a partial last line so that the next append starts a fresh line."""
    with open(path, "r+b") as f:
        f.truncate(good_bytes)
        f.flush()
        os.fsync(f.fileno())


def check_free_result_dir(directory: Path) -> None:
    """A UserError unless ``directory`` can take a new result set: absent, or
    a directory holding neither a plan nor results."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise UserError("exists and is not a directory", str(d))
    for name in (PLAN_FILE, RESULTS_FILE):
        if (d / name).exists():
            raise UserError(f"already holds {name}; choose an empty --out directory", str(d))
