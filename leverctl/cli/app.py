"""The leverctl application: one module per command group, assembled here.

Every known failure becomes one line on stderr and an exit code (see
ERRORS); a traceback is a bug.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Annotated, NoReturn

import typer

try:  # Typer releases up to 0.2x run on Click
    from click import UsageError
except ModuleNotFoundError:  # later ones carry their own copy of it
    from typer._click.exceptions import UsageError

from ..errors import UserError
from . import common

HELP = "Which kernel path is the engine taking, and is the other one faster and still correct?"

# Command name -> the module (in this package) that declares it; each module
# exposes register(app). Heavy imports (numba, numpy) happen inside the
# commands that need them, never at registration.
COMMANDS: dict[str, str] = {
    "show": "show",
    "diff": "diff",
    "explain": "explain",
    "lint": "lint",
    "recipe": "recipe",
    "env": "recipe",
    "kernels": "kernels",
    "profile": "profile",
    "bench": "bench",
    "sweep": "sweep",
    "compare": "compare",
    "report": "report",
    "catalog": "catalog",
}


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"leverctl {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print leverctl's version and exit."),
    ] = False,
) -> None:
    # The application's own options. A callback also keeps the application a
    # group when build() gives it a single command (Typer would otherwise
    # make that command the whole program, without its name).
    pass


def build(only: str | None = None) -> typer.Typer:
    """The application with every command, or with only the command ``only``
    (the one being run): a start-up builds and imports nothing it will not use,
    so ``leverctl show`` answers in a few times ``python -c pass``."""
    app = typer.Typer(
        name="leverctl",
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(app)
    return app


def invoked(argv: list[str]) -> str | None:
    """The command ``argv`` runs, or None when it runs none of them (no
    arguments, --help, --version, a misspelt command, shell completion): then
    the whole application is built, to list or suggest every command."""
    if os.environ.get("_LEVERCTL_COMPLETE"):
        return None
    first = argv[0] if argv else None
    return first if first in COMMANDS else None


def __getattr__(name: str):
    if name == "app":  # the whole application, for whoever imports it
        return build()
    raise AttributeError(name)


# Exit codes: 0 success (or "equal" for diff), 1 a finding (a difference, a
# FAIL, a regression, a lint error), 2 bad input, 130 interrupted.
INTERRUPTED = 130
ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (UserError, 2),
    (UsageError, 2),  # BadParameter is a UsageError
    (BrokenPipeError, 0),
    (common.Interrupted, INTERRUPTED),
    (KeyboardInterrupt, INTERRUPTED),
    (typer.Abort, INTERRUPTED),  # Click's name for Ctrl-C (Typer releases on Click)
)


def _one_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        return e.line()
    if isinstance(e, UsageError):
        # the subcommand's path after the program's name, which the line's
        # own prefix gives: "leverctl: diff: Missing argument 'B'."
        cmd = e.ctx.command_path.partition(" ")[2] if e.ctx is not None else ""
        msg = e.format_message()
        if not msg:
            return ""  # no arguments: the help was the message
        return f"{cmd}: {msg}" if cmd else msg
    if isinstance(e, common.Interrupted):
        return ""  # the command has said what it left behind
    if isinstance(e, (KeyboardInterrupt, typer.Abort)):
        return "interrupted"
    return str(e)


def _stdout_gone() -> NoReturn:
    """Whoever read stdout has gone (`leverctl show | head -1`). That is no
    error: end quietly with 0, so `set -o pipefail` reports the reader's
    status rather than a failure. Output still buffered would fail again as
    the interpreter exits (and turn the exit status into 120), so stdout
    points at /dev/null from here on."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass
    sys.exit(0)


def _epipe(e: BaseException | None) -> bool:
    """A write to a closed pipe, or Typer's exit for one: it catches EPIPE
    itself and exits 1, which would read as a finding."""
    if isinstance(e, SystemExit):
        e = e.__context__
    return isinstance(e, OSError) and e.errno == errno.EPIPE


def _exit_for(e: BaseException) -> None:
    """Exit as ERRORS says, with the one line; return if ``e`` is not listed."""
    if _epipe(e):
        _stdout_gone()
    for exc_type, exit_code in ERRORS:
        if isinstance(e, exc_type):
            line = _one_line(e)
            if line:
                from ..levers.present import safe  # a path or value may hold bytes that are not UTF-8

                try:
                    print(f"leverctl: {safe(line)}", file=sys.stderr)
                except BrokenPipeError:
                    _stdout_gone()
            sys.exit(exit_code)


def _plain_required_arguments() -> None:
    """Usage lines name a required argument as the user types it (``compare
    BASE NEW``), not in braces (Typer's ``{BASE} {NEW}``); optional ones
    keep their brackets."""
    from typer.core import TyperArgument

    if getattr(TyperArgument.make_metavar, "_plain", False):
        return
    typer_metavar = TyperArgument.make_metavar

    def make_metavar(self, ctx, *, usage: bool = False) -> str:
        got = typer_metavar(self, ctx, usage=usage)
        if usage and self.required and got.startswith("{") and got.endswith("}"):
            return got[1:-1]
        return got

    make_metavar._plain = True
    TyperArgument.make_metavar = make_metavar


def summaries_on_one_line(cmd):
    """Each command's summary in the command list as one sentence that the
    table wraps: Rich's markup mode keeps a docstring's line breaks there,
    which would break a sentence mid-line where the source wrapped it."""
    import inspect

    for sub in getattr(cmd, "commands", {}).values():
        if not sub.short_help and sub.help:
            first = inspect.cleandoc(sub.help).split("\n\n")[0]
            sub.short_help = " ".join(first.split())
        summaries_on_one_line(sub)
    return cmd


def main(argv: list[str] | None = None) -> None:
    common.BAD_INPUT.clear()
    args = sys.argv[1:] if argv is None else list(argv)
    _plain_required_arguments()
    cmd = summaries_on_one_line(typer.main.get_command(build(invoked(args))))
    try:
        code = cmd.main(args=args, prog_name="leverctl", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except BaseException as e:  # noqa: BLE001 - mapped below or re-raised
        _exit_for(e)
        raise
    code = code if isinstance(code, int) else 0
    if code == INTERRUPTED:
        # Typer 0.29 catches Ctrl-C itself and returns a bare 130; say it
        # like any other interruption. (No command exits 130 on purpose: the
        # sweep raises common.Interrupted.)
        _exit_for(KeyboardInterrupt())
    if common.BAD_INPUT and code in (0, 1):
        code = 2  # the command finished, but its input was bad (already said on stderr)
    sys.exit(code)
