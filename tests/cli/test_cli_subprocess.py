"""leverctl as a real process: bytes in the environment, exit codes, and that the
lever commands never import numba or numpy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import RECIPES


def _env(**extra: bytes) -> dict[bytes, bytes]:
    env = {k: v for k, v in os.environb.items() if not k.startswith((b"ATLAS_", b"METRALE_", b"TQ_PLUS_"))}
    env.pop(b"NUMBA_ENABLE_CUDASIM", None)
    env.update({k.encode(): v for k, v in extra.items()})
    return env


def test_a_real_non_utf8_environment_value_is_unset_to_value_rules_and_set_to_presence_rules(leverctl_exe):
    env = _env(METRALE_GDN_WY17=b"0\xff", METRALE_FFN_MMQ=b"\xfe\xff", METRALE_NO_SSD=b"\x80")
    p = subprocess.run([leverctl_exe, "show", "-f", "json"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 2, p.stderr  # bad input, reported after the output
    lv = json.loads(p.stdout)["levers"]
    assert json.loads(p.stdout)["engine"] == "metrale"
    assert lv["gdn_wy17"]["value"] is True
    assert lv["ffn_mmq"]["value"] is True
    assert lv["ssd"]["value"] is False
    assert lv["gdn_wy17"]["raw"] == "0\\xff" and lv["gdn_wy17"]["raw_valid_utf8"] is False
    assert p.stderr.count(b"not valid UTF-8") == 3
    assert b"Traceback" not in p.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],
        ["show", "-f", "toml"],
        ["show", "-f", "env"],
        ["lint"],
        ["recipe", "freeze"],
        ["diff", "env", "defaults"],
        ["explain", "ATLAS_BF16_TC_PROJ"],
    ],
)
def test_every_command_survives_a_real_non_utf8_value_in_an_ascii_locale(leverctl_exe, argv):
    env = _env(ATLAS_BF16_TC_PROJ=b"\xff", ATLAS_GDN_WY17=b"\xc3(", LC_ALL=b"C", LANG=b"C", PYTHONIOENCODING=b"ascii")
    p = subprocess.run([leverctl_exe, *argv], env=env, capture_output=True, timeout=60)
    assert p.returncode == (0 if argv[0] == "explain" or argv[-1] == "env" else 2), p.stderr
    assert b"Traceback" not in p.stderr


def test_exit_codes_as_a_shell_sees_them(leverctl_exe):
    env = _env()

    def run(*a):
        return subprocess.run([leverctl_exe, *map(str, a)], env=env, capture_output=True, timeout=60)

    assert run("diff", RECIPES / "atlas-defaults.toml", RECIPES / "atlas-defaults.toml").returncode == 0
    assert run("diff", RECIPES / "atlas-defaults.toml", RECIPES / "qwen3-next-80b-a3b.toml").returncode == 1
    assert run("lint", "--set", "ATLAS_K4_DIAG=true").returncode == 1
    bad = run("show", "--set", "ATLAS_K4_DIAG")
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().count("\n") == 0 and b"Traceback" not in bad.stderr


def _default_sigint() -> None:
    """In the child: Ctrl-C as a terminal delivers it, even where the test
    runner was started with SIGINT ignored (a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _in_read(pid: int, deadline: float) -> None:
    """Wait until process ``pid`` sleeps in read() on a pipe. A SIGINT that
    lands between its open() returning and its read() starting is lost until
    the read returns (Python handles signals between bytecodes, and that read
    never returns): Ctrl-C must come while it reads. Linux says where a
    process sleeps in /proc/PID/wchan; elsewhere, a moment's pause does."""
    wchan = Path(f"/proc/{pid}/wchan")
    if not wchan.exists():
        time.sleep(0.5)
        return
    while "pipe" not in wchan.read_text():  # pipe_read, anon_pipe_read, pipe_wait
        assert time.monotonic() < deadline, wchan.read_text()
        time.sleep(0.01)


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(leverctl_exe):
    # `--env-file -` holds the command inside its work: it reads standard
    # input to its end, and nothing ever writes to that pipe or closes it.
    p = subprocess.Popen(
        [leverctl_exe, "show", "--env-file", "-"],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    try:
        _in_read(p.pid, time.monotonic() + 60)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert out == b"" and err.decode().splitlines() == ["leverctl: interrupted"]


def test_a_fifo_given_as_an_env_file_is_refused_at_once_not_waited_on(leverctl_exe, tmp_path):
    os.mkfifo(tmp_path / "env")
    start = time.monotonic()
    p = subprocess.run(
        [leverctl_exe, "show", "--env-file", str(tmp_path / "env")], env=_env(), capture_output=True, timeout=60
    )
    assert p.returncode == 2 and b"is a FIFO" in p.stderr, p.stderr
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "-e", "metrale"],
        ["show", "-f", "json"],
        ["show", "-f", "env"],
        ["lint", "--set", "ATLAS_K4_DIAG=true"],
        ["explain", "gdn_wy17"],
        ["diff", "defaults", str(RECIPES / "qwen3-next-80b-a3b.toml")],
    ],
)
def test_output_to_a_pipe_its_reader_has_closed_ends_quietly_with_exit_0(leverctl_exe, argv):
    # The reader is gone before the first write, so every write fails with
    # EPIPE: the case `leverctl show | head -1` meets once head has exited.
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([leverctl_exe, *argv], env=_env(), stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 0, p.stderr
    assert p.stderr == b""


def test_a_closed_pipe_under_pipefail_is_not_an_error(leverctl_exe):
    # head reads a few bytes and exits; whether leverctl had written all it
    # had by then or not, pipefail must not see a failure from it.
    script = f'set -o pipefail; "{leverctl_exe}" show -e metrale | head -c 1 >/dev/null; echo "${{PIPESTATUS[0]}}"'
    p = subprocess.run(["bash", "-c", script], env=_env(), capture_output=True, timeout=60)
    assert p.stdout.strip() in (b"0", b"141"), p
    assert b"Traceback" not in p.stderr and b"BrokenPipe" not in p.stderr


def test_eval_of_show_env_reproduces_a_value_that_is_not_utf8_byte_for_byte(leverctl_exe):
    value = b'\xff\x80 a\'b\\ $x `y` "z"\n\t\xc3('
    p = subprocess.run(
        [leverctl_exe, "show", "-f", "env"], env=_env(ATLAS_BF16_TC_PROJ=value), capture_output=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert b"not valid UTF-8" in p.stderr  # said once, as a warning
    # A fresh bash without the variable evals the lines and prints what it got.
    got = subprocess.run(
        ["bash", "-c", 'eval "$1" && printf %s "$ATLAS_BF16_TC_PROJ"', "bash", p.stdout],
        env=_env(),
        capture_output=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == value


CHECK_IMPORTS = """
import sys
from leverctl.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'numpy', 'llvmlite', 'numba_cuda'))
sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "--no-env"],
        ["show", "-f", "json", "-r", str(RECIPES / "qwen3-8b.toml")],
        ["diff", str(RECIPES / "atlas-defaults.toml"), str(RECIPES / "qwen3-next-80b-a3b.toml")],
        ["explain", "ATLAS_GDN_WY17"],
        ["lint", "--strict"],
        ["env", str(RECIPES / "qwen3-8b.toml")],
        ["recipe", "freeze", "--no-env"],
    ],
)
def test_the_lever_commands_never_import_numba_or_numpy(argv):
    p = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS, *argv], env=_env(), capture_output=True, text=True, timeout=60
    )
    heavy = [line for line in p.stderr.splitlines() if line.startswith("HEAVY=")]
    assert heavy == ["HEAVY="], p.stderr[-2000:]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["bench", "--no-env", "--device", "sim", "--kernel", "gdn.verfy"], "did you mean gdn.verify?"),
        (["bench", "-e", "metrale", "--no-env", "--kernel", "gdn.decode"], "metrale has no such path"),
        (["bench", "--no-env", "--device", "sim", "--axis", "m=1,x"], "'x' is not an integer"),
        (["sweep", "--no-env", "--device", "sim", "--kernel", "w4a16.gemw", "--dry-run"], "no such kernel path"),
        (["sweep", "--no-env", "--device", "sim", "--axis", "m", "--dry-run"], "needs the form NAME=V1,V2"),
        (["bench", "--no-env", "--device", "sim", "--weights", "{tmp}/absent.gguf", "--layer", "0"], "no such file"),
    ],
)
def test_a_bad_kernel_axis_or_weights_file_is_told_before_the_kernels_load(argv, said, tmp_path):
    """``--kernel`` from the decision tables, ``--axis``'s form and the
    ``--weights`` file itself are checked before the device is chosen: the
    one line comes in a fraction of a second, without numba."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    p = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS, *argv], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert said in p.stderr, p.stderr[-2000:]
    heavy = [line for line in p.stderr.splitlines() if line.startswith("HEAVY=")]
    assert len(heavy) == 1 and not [m for m in heavy[0][6:].split(",") if m and not m.startswith("numpy")], heavy


CHECK_MODULES = """
import sys
from leverctl.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
cli = sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('leverctl.cli.'))
costly = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core'))
sys.stderr.write('CLI=' + ','.join(cli) + '\\n' + 'COSTLY=' + ','.join(costly) + '\\n')
"""


@pytest.mark.parametrize(
    "argv, own",
    [
        (["show", "--no-env"], {"show"}),
        (["diff", "defaults", "defaults"], {"diff"}),
        (["explain", "ATLAS_GDN_WY17"], {"explain"}),
        (["lint", "--no-env"], {"lint"}),
    ],
)
def test_a_lever_command_starts_without_pydantic_or_any_other_commands_module(argv, own):
    """Start-up (see README): the command line builds only the command it runs,
    and the CLI stack must not build parameter adapters with pydantic (Typer
    0.29 does, which alone makes a start-up five times ``python -c pass``)."""
    p = subprocess.run(
        [sys.executable, "-c", CHECK_MODULES, *argv], env=_env(), capture_output=True, text=True, timeout=60
    )
    lines = dict(line.split("=", 1) for line in p.stderr.splitlines() if line.startswith(("CLI=", "COSTLY=")))
    assert lines.get("COSTLY") == "", p.stderr[-2000:]
    assert set(lines["CLI"].split(",")) == {"app", "common", *own}, p.stderr[-2000:]


def test_the_start_up_check_fails_when_a_command_drags_in_every_other_command():
    p = subprocess.run(
        [sys.executable, "-c", CHECK_MODULES, "--help"], env=_env(), capture_output=True, text=True, timeout=60
    )
    cli = next(line for line in p.stderr.splitlines() if line.startswith("CLI="))
    assert {"bench", "sweep", "report"} <= set(cli[4:].split(","))  # --help lists them all


def test_shell_completion_completes_commands_and_options(leverctl_exe):
    def complete(words: str, cword: int) -> list[str]:
        env = {
            **{k.decode(): v.decode() for k, v in _env().items()},
            "_LEVERCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(cword),
        }
        p = subprocess.run([leverctl_exe], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        return p.stdout.split()

    assert "show" in complete("leverctl sh", 1)
    assert complete("leverctl show --only-ch", 2) == ["--only-changed"]
    script = subprocess.run(
        [leverctl_exe, "--show-completion", "bash"], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0 and "_LEVERCTL_COMPLETE" in script.stdout


def test_ctrl_c_while_the_cli_stack_is_still_importing_is_one_line_and_exit_130(leverctl_exe, tmp_path):
    """Start-up is mostly importing Typer and Rich; an interrupt there is
    stood in for by a typer module that raises it on import."""
    (tmp_path / "typer.py").write_text("raise KeyboardInterrupt\n")
    env = _env(PYTHONPATH=str(tmp_path).encode())
    for argv in ([leverctl_exe, "show"], [sys.executable, "-m", "leverctl", "show"]):
        p = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        assert p.returncode == 130, p.stderr
        assert p.stdout == b"" and p.stderr.decode().splitlines() == ["leverctl: interrupted"]
