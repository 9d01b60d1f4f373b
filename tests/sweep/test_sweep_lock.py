"""One sweep per directory: a second sweep (new or --resume) into a
directory another is writing is refused at once, naming the first's pid; a
sweep that dies leaves no stale lock. Real processes, as in production."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leverctl.bench import sweep as sw
from leverctl.bench.records.schema import RESULTS_FILE
from leverctl.errors import UserError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _cli(*args, env_extra=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, str(HERE / "sweep_fakes.py"), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_a_second_sweep_into_a_directory_being_written_exits_2_naming_the_first_and_a_killed_one_leaves_no_lock(
    tmp_path,
):
    out = tmp_path / "sweep"
    args = ["sweep", "-e", "metrale", "--no-env", "--device", "gpu", "--out", str(out), "--format", "json"]
    # Slow enough that the first is still writing while two more processes
    # start, even on a loaded machine.
    env = {"FAKE_DELAY": "1", "FAKE_GPU": "1"}
    first = _cli(*args, env_extra=env)
    results = out / RESULTS_FILE
    try:
        deadline = time.monotonic() + 60
        while _lines(results) < 2 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.01)
        assert first.poll() is None, first.communicate()[1].decode()
        for extra in ([], ["--resume"]):
            before = results.read_bytes()
            second = _cli(*args, *extra, env_extra=env)
            stdout, stderr = second.communicate(timeout=60)
            err = stderr.decode().splitlines()
            assert second.returncode == 2, err
            assert stdout == b"" and len(err) == 1, err
            assert err[0] == (
                f"leverctl: {out}: another sweep (pid {first.pid}) is writing this directory; "
                "wait for it to end, or choose another --out"
            )
            assert results.read_bytes().startswith(before)  # the second wrote nothing
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert (out / sw.LOCK_FILE).exists()  # the file stays; the lock died with its holder
    third = _cli(*args, "--resume", env_extra={"FAKE_GPU": "1"})
    stdout, stderr = third.communicate(timeout=60)
    assert third.returncode == 1, stderr.decode()  # resumed to the end; the fake gemm fails on purpose
    assert "were on disk" in stderr.decode()


def test_the_lock_is_exclusive_until_released_and_then_free(tmp_path):
    a = sw.DirectoryLock(tmp_path / "d")
    a.acquire(make_dir=False)
    a.probe()
    assert not a.held and not (tmp_path / "d").exists()  # nothing made for a directory that is not there
    a.acquire(make_dir=True)
    assert a.held and (tmp_path / "d" / sw.LOCK_FILE).read_text() == f"{os.getpid()}\n"
    b = sw.DirectoryLock(tmp_path / "d")
    for take in (b.probe, lambda: b.acquire(make_dir=False)):
        with pytest.raises(UserError, match=rf"another sweep \(pid {os.getpid()}\) is writing this directory"):
            take()
    a.release()
    assert not (tmp_path / "d" / sw.LOCK_FILE).exists()  # released: the file goes with the lock
    with b:
        b.acquire(make_dir=False)
        assert b.held
    assert not b.held and list((tmp_path / "d").iterdir()) == []


def test_a_finished_sweep_leaves_no_lock_file(tmp_path, capsys, monkeypatch):
    import sweep_fakes as fk

    fk.install(monkeypatch)
    cli = fk.cli
    out = tmp_path / "s"
    code, _, _ = cli(["sweep", "--no-env", "--device", "sim", "--out", str(out), "-k", "fake.gemv"], capsys)
    assert code == 0 and (out / "results.jsonl").is_file() and not (out / sw.LOCK_FILE).exists()


def test_probing_a_directory_without_a_lock_file_creates_nothing(tmp_path):
    lock = sw.DirectoryLock(tmp_path)
    lock.probe()
    assert not lock.held and list(tmp_path.iterdir()) == []
