"""What a user expects of any command line: --version, -h beside --help on
every command, shell completion, and an application that builds every
command it lists."""

from __future__ import annotations

import re

import pytest

from leverctl import __version__
from leverctl.cli import app as appmod

# Every command and sub-command, as a user types it.
COMMAND_LINES = [
    ["show"],
    ["diff"],
    ["explain"],
    ["lint"],
    ["env"],
    ["kernels"],
    ["profile"],
    ["bench"],
    ["sweep"],
    ["compare"],
    ["recipe"],
    ["recipe", "freeze"],
    ["report"],
    ["report", "show"],
    ["report", "merge"],
    ["report", "plot"],
    ["catalog"],
    ["catalog", "check"],
    ["catalog", "draft"],
    ["catalog", "doc"],
]


def test_version_prints_the_package_version(cli):
    r = cli("--version")
    assert r.code == 0 and r.out.strip() == f"leverctl {__version__}"


@pytest.mark.parametrize("argv", [[]] + COMMAND_LINES, ids=lambda a: " ".join(a) or "leverctl")
def test_dash_h_is_help_on_every_command(cli, argv):
    short, long = cli(*argv, "-h"), cli(*argv, "--help")
    assert short.code == 0 and "Usage: leverctl" in short.out, short
    assert short.out == long.out


def test_shell_completion_is_offered(cli):
    r = cli("--help")
    assert "--install-completion" in r.out and "--show-completion" in r.out


def test_every_command_line_listed_here_is_every_command_the_application_has():
    """So the -h test above covers each one, and the start-up map names each."""
    import typer

    root = typer.main.get_command(appmod.build())
    found = []
    for name, cmd in root.commands.items():
        found.append([name])
        found += [[name, sub] for sub in getattr(cmd, "commands", {})]
    assert sorted(found) == sorted(COMMAND_LINES)
    assert sorted(root.commands) == sorted(appmod.COMMANDS)


@pytest.mark.parametrize("name", sorted(appmod.COMMANDS))
def test_building_only_the_invoked_command_builds_that_command(name):
    import typer

    assert appmod.invoked([name, "--help"]) == name
    assert name in typer.main.get_command(appmod.build(name)).commands


def test_a_misspelt_command_builds_the_whole_application_to_suggest_the_right_one(cli):
    assert appmod.invoked(["shwo"]) is None
    r = cli("shwo")
    assert r.code == 2 and "show" in r.err


def _options():
    """(command line, option) for every option of every command."""
    import typer

    def walk(cmd, path):
        for p in cmd.params:
            yield path, p
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return [
        (" ".join(path), p)
        for path, p in walk(typer.main.get_command(appmod.build()), [])
        if p.param_type_name == "option"
    ]


# A metavar reads as a word (FILE, N, FORMAT, VAR=VALUE) or as the choices
# (auto|gpu|sim), never as a type name such as <str>, <path> or <bool>.
METAVAR = r"[A-Z][A-Z0-9_=,./]*(\.[a-z]+)?(\.\.\.)?|[a-z]+(\|[a-zA-Z]+)+|[A-Z]+(\|[A-Z]+)+"


@pytest.mark.parametrize("where, option", _options(), ids=lambda x: x if isinstance(x, str) else x.opts[0])
def test_every_option_is_a_flag_or_names_its_value_in_words(where, option):
    import re

    if option.is_flag or option.count:
        assert option.metavar is None, f"{where} {option.opts[0]}: a flag with a metavar"
        return
    assert option.metavar and re.fullmatch(METAVAR, option.metavar), (
        f"{where} {option.opts[0]}: metavar {option.metavar!r}; declare metavar= in words"
    )


def test_the_metavar_check_fails_an_option_left_to_its_type_name():
    import re

    assert not re.fullmatch(METAVAR, "<str>") and not re.fullmatch(METAVAR, "<bool>")
    words = ("FILE", "FILE.svg", "VAR=VALUE", "FIELD,...", "I/N", "auto|gpu|sim", "defaults|RECIPE", "GROUP|PATTERN")
    assert all(re.fullmatch(METAVAR, m) for m in words)


def test_no_env_is_a_flag_in_the_help(cli):
    line = next(x for x in cli("show", "--help").out.splitlines() if "--no-env" in x)
    assert "<" not in line and "BOOL" not in line.upper().replace("BOOLEAN", "BOOL").split("--NO-ENV")[0]


# Rich reads [word] in help text as markup and drops it ("needs leverctl."
# for "needs leverctl[gguf]."): brackets meant literally are escaped (\[).
MARKUP_TAG = r"(?<!\\)\[[a-z][a-z0-9 _/#.-]*\]"


@pytest.mark.parametrize("where, option", _options(), ids=lambda x: x if isinstance(x, str) else x.opts[0])
def test_no_help_text_loses_a_bracketed_word_to_markup(where, option):
    import re

    assert not re.search(MARKUP_TAG, option.help or ""), f"{where} {option.opts[0]}: {option.help!r}"


def test_the_bench_help_names_the_extras_with_their_brackets(cli):
    text = " ".join(cli("bench", "--help").out.replace("│", " ").split())
    assert "leverctl[gguf]" in text and "leverctl[profile]" in text
    assert not re.search(MARKUP_TAG, "needs leverctl\\[gguf]") and re.search(MARKUP_TAG, "needs leverctl[gguf]")


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=" ".join)
def test_usage_names_required_arguments_as_typed_without_braces(cli, argv):
    usage = next(x for x in cli(*argv, "--help").out.splitlines() if "Usage:" in x)
    assert "{" not in usage and "}" not in usage, usage


def test_each_command_summary_is_one_sentence_the_table_wraps_not_the_source():
    """Rich's markup mode keeps a docstring's line breaks in the command
    list; the summaries are joined so no sentence breaks where the source did."""
    import typer

    cmd = appmod.summaries_on_one_line(typer.main.get_command(appmod.build()))

    def walk(c):
        for sub in getattr(c, "commands", {}).values():
            yield sub
            yield from walk(sub)

    for sub in walk(cmd):
        assert sub.short_help and "\n" not in sub.short_help, (sub.name, sub.short_help)
    kernels = cmd.commands["kernels"].short_help
    assert "choose them, marking the variant" in kernels  # the source breaks after "them,"
