"""Every kind of bad input, through every command that takes it: one line on
stderr saying what and where, exit code 2, never a traceback."""

from __future__ import annotations

import os

import pytest
from cli_helpers import assert_one_line_error

BAD_RECIPES = {
    # name: (file contents, fragments the one line must carry; {p} is the file)
    "syntax": (b'engine = "atlas"\n[levers\nATLAS_GDN_WY17 = "0"\n', ["{p}:2", "TOML syntax error"]),
    "wrong-type": (b'engine = "atlas"\n[levers]\nATLAS_GDN_WY17 = 0\n', ["{p}:3", "must be a string"]),
    "wrong-serve-type": (b'engine = "atlas"\n[serve]\nmax_batch_size = "8"\n', ["{p}:3", "positive integer"]),
    "unknown-engine": (b'engine = "atlsa"\n', ["{p}:1", "unknown engine 'atlsa'", "did you mean atlas"]),
    "unknown-key": (b'engine = "atlas"\nlevres = {}\n', ["{p}:2", "did you mean `levers`"]),
    "binary": (b"\x00\x01\x02\x03", ["{p}", "binary"]),
    "not-utf8": (b"\xff\xfe\xfd garbage\n", ["{p}", "not UTF-8"]),
    "unknown-variable": (
        b'engine = "atlas"\n[levers]\nATLAS_GDN_WY71 = "0"\n',
        ["{p}:3", "ATLAS_GDN_WY71", "did you mean ATLAS_GDN_WY17?"],
    ),
}

# How each command takes a recipe.
RECIPE_COMMANDS = {
    "show": lambda p: ["show", "--recipe", p],
    "show-json": lambda p: ["show", "--recipe", p, "-f", "json"],
    "freeze": lambda p: ["recipe", "freeze", "--recipe", p],
    "env": lambda p: ["env", p],
    "diff": lambda p: ["diff", p, "defaults"],
    "lint": lambda p: ["lint", "--recipe", p],
}


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
@pytest.mark.parametrize("case", sorted(BAD_RECIPES))
def test_a_bad_recipe_is_one_line_naming_file_and_line(cli, tmp_path, command, case):
    data, fragments = BAD_RECIPES[case]
    p = tmp_path / f"{case}.toml"
    p.write_bytes(data)
    r = cli(*RECIPE_COMMANDS[command](p))
    if case == "unknown-variable" and command == "lint":
        assert r.code == 1 and "did you mean ATLAS_GDN_WY17?" in r.out  # lint reports it as a finding
        return
    assert_one_line_error(r, *(f.format(p=p) for f in fragments))


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
def test_an_extends_cycle_is_one_line_showing_the_cycle(cli, tmp_path, command):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    assert_one_line_error(cli(*RECIPE_COMMANDS[command](tmp_path / "a.toml")), "`extends` cycle", "a.toml -> ")


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
def test_a_missing_parent_names_the_extends_line(cli, tmp_path, command):
    p = tmp_path / "child.toml"
    p.write_text('engine = "atlas"\nextends = "gone.toml"\n')
    assert_one_line_error(cli(*RECIPE_COMMANDS[command](p)), f"{p}:2", "missing parent 'gone.toml'")


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
def test_an_absent_recipe_or_a_directory_is_one_line(cli, tmp_path, command):
    r = cli(*RECIPE_COMMANDS[command](tmp_path / "absent.toml"))
    assert_one_line_error(r, str(tmp_path / "absent.toml"), "no such")
    assert_one_line_error(cli(*RECIPE_COMMANDS[command](tmp_path)), str(tmp_path), "directory")


SETUP_COMMANDS = {
    "show": ["show"],
    "lint": ["lint"],
    "freeze": ["recipe", "freeze"],
}


@pytest.mark.parametrize("command", sorted(SETUP_COMMANDS))
def test_a_set_without_an_equals_sign_is_one_line(cli, command):
    assert_one_line_error(
        cli(*SETUP_COMMANDS[command], "--set", "ATLAS_GDN_WY17"), "--set 'ATLAS_GDN_WY17' needs the form VAR=VALUE"
    )


@pytest.mark.parametrize("command", sorted(SETUP_COMMANDS))
def test_an_unknown_variable_in_set_is_one_line_with_a_suggestion_except_in_lint(cli, command):
    r = cli(*SETUP_COMMANDS[command], "--set", "ATLAS_GDN_WY71=0")
    if command == "lint":
        assert r.code == 1 and "did you mean ATLAS_GDN_WY17?" in r.out
    else:
        assert_one_line_error(r, "ATLAS_GDN_WY71", "did you mean ATLAS_GDN_WY17?")


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "-e", "atlsa"],
        ["lint", "--engine", "atlsa"],
        ["recipe", "freeze", "-e", "atlsa"],
        ["explain", "gdn_wy17", "-e", "atlsa"],
        ["diff", "defaults", "env", "-e", "atlsa"],
    ],
)
def test_an_unknown_engine_is_one_line_with_a_suggestion(cli, argv):
    assert_one_line_error(cli(*argv), "unknown engine 'atlsa'", "did you mean atlas?")


@pytest.mark.parametrize("command", sorted(SETUP_COMMANDS))
def test_an_unreadable_env_file_is_one_line(cli, tmp_path, command):
    base = SETUP_COMMANDS[command]
    assert_one_line_error(cli(*base, "--env-file", tmp_path / "absent.env"), "no such env file")
    assert_one_line_error(cli(*base, "--env-file", tmp_path), "is a directory")
    binary = tmp_path / "core.env"
    binary.write_bytes(b"ATLAS_X=1\n\x00\x00\x7fELF")
    assert_one_line_error(cli(*base, "--env-file", binary), str(binary), "binary")
    garbage = tmp_path / "garbage.env"
    garbage.write_bytes(b"ATLAS_GDN_WY17=0\n\xff\xfe\x81\x92 no equals sign\n")
    assert_one_line_error(cli(*base, "--env-file", garbage), f"{garbage}:2", "expected KEY=VALUE")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_env_file_without_read_permission_is_one_line(cli, tmp_path):
    f = tmp_path / "locked.env"
    f.write_text("ATLAS_GDN_WY17=0\n")
    f.chmod(0)
    try:
        assert_one_line_error(cli("show", "--env-file", f), str(f), "cannot read env file")
    finally:
        f.chmod(0o600)


def test_an_env_file_value_of_garbage_bytes_is_read_as_the_engine_would(cli, tmp_path):
    f = tmp_path / "bug.env"
    f.write_bytes(b"ATLAS_GDN_WY17=0\xff\xfe\nATLAS_BF16_TC_PROJ=\x81\n")
    r = cli("show", "--env-file", f, "-f", "json")
    assert r.code == 2, "bad input: the command still shows how the engine reads it, then exits 2"
    lv = __import__("json").loads(r.out)["levers"]
    assert lv["gdn_wy17"]["value"] is True and lv["bf16_tc_proj"]["value"] is True
    warnings = [line for line in r.err_lines if "not valid UTF-8" in line]
    assert len(warnings) == 2
    assert any(f"{f}:1: ATLAS_GDN_WY17=<not UTF-8: 0\\xff\\xfe>" in w for w in warnings)


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "--max-batch-size", "0"],
        ["show", "--max-batch-size", "many"],
        ["show", "-f", "yaml"],
        ["diff", "defaults"],
        ["explain"],
        ["show", "--no-such-option"],
        ["env"],
    ],
)
def test_usage_errors_are_one_line_and_exit_two(cli, argv):
    r = cli(*argv)
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err_lines and r.err_lines[-1].startswith("leverctl")
    assert not r.err_lines[-1].startswith("leverctl: leverctl"), r.err_lines[-1]


@pytest.mark.parametrize(
    "argv,line",
    [
        (["bogus"], "leverctl: No such command 'bogus'."),
        (["diff"], "leverctl: diff: Missing argument 'A'."),
        (["recipe", "freeze", "--nope"], "leverctl: recipe freeze: No such option: --nope"),
    ],
)
def test_a_usage_error_names_the_program_once_and_then_the_subcommand(cli, argv, line):
    r = cli(*argv)
    assert r.code == 2 and r.err_lines[-1].startswith(line), r.err_lines


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],
        ["show", "-f", "json"],
        ["show", "-f", "toml"],
        ["show", "-f", "env"],
        ["lint"],
        ["diff", "env", "defaults"],
        ["explain", "ATLAS_GDN_WY17"],
        ["recipe", "freeze"],
    ],
)
def test_garbage_bytes_in_the_process_environment_never_crash_a_command(cli, monkeypatch, argv):
    monkeypatch.setitem(os.environb, b"ATLAS_GDN_WY17", b"\xc3\x28\x00"[:2])
    monkeypatch.setitem(os.environb, b"ATLAS_BF16_TC_PROJ", b"\xed\xa0\x80")  # an encoded surrogate
    monkeypatch.setitem(os.environb, b"ATLAS_GDN_WY71", b"\xff\x1b[31m")
    monkeypatch.setitem(os.environb, b"ATLAS_K4_DIAG", b"1\x1b[31m\xc2\x9b2J")
    monkeypatch.setitem(os.environb, b"\xffATLAS_ODD_NAME", b"1")
    r = cli(*argv)
    # explain only describes the current value; shell lines carry the exact
    # bytes; every other command that resolves the environment finishes its
    # output and then reports the bad input.
    assert r.code == (0 if argv[0] == "explain" or argv[-1] == "env" else 2), r.err
    assert "Traceback" not in r.err
    shown = r.err if argv[-1] == "env" else r.out + r.err  # export lines keep the exact value, for eval
    assert "\x1b[31m" not in shown, "control bytes from the environment are escaped"
