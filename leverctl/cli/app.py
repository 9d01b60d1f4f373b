"""The leverctl application: one module per command group, assembled here.

Every known failure becomes one line on stderr and an exit code (see
ERRORS); a traceback is a bug.
"""
from __future__ import annotations

import importlib
import sys

import typer

try:  # Typer releases up to 0.2x run on Click
    from click import UsageError
except ModuleNotFoundError:  # later ones carry their own copy of it
    from typer._click.exceptions import UsageError

from ..errors import UserError

app = typer.Typer(
    name="leverctl",
    help="Which kernel path is the engine taking, and is the other one faster and still correct?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# Command modules; each exposes register(app). Heavy imports (numba, numpy)
# happen inside the commands that need them, never at registration.
COMMANDS = ("show", "diff", "explain", "lint", "recipe", "kernels", "bench", "sweep", "compare", "report")


def _register() -> None:
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__package__}.{name}":
                continue  # not built yet
            raise
        mod.register(app)


_register()

# Exit codes: 0 success (or "equal" for diff), 1 a finding (a difference, a
# FAIL, a regression, a lint error), 2 bad input, 130 interrupted.
ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (UserError, 2),
    (UsageError, 2),  # BadParameter is a UsageError
    (BrokenPipeError, 0),
    (KeyboardInterrupt, 130),
    (typer.Abort, 130),
)


def _one_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        return e.line()
    if isinstance(e, UsageError):
        cmd = e.ctx.command_path if e.ctx is not None else "leverctl"
        msg = e.format_message()
        return f"{cmd}: {msg}" if msg else ""  # no arguments: the help was the message
    if isinstance(e, (KeyboardInterrupt, typer.Abort)):
        return "interrupted"
    return str(e)


def main(argv: list[str] | None = None) -> None:
    from . import common

    common.BAD_INPUT.clear()
    cmd = typer.main.get_command(app)
    try:
        code = cmd.main(args=argv, prog_name="leverctl", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except BaseException as e:  # noqa: BLE001 - mapped below or re-raised
        for exc_type, exit_code in ERRORS:
            if isinstance(e, exc_type):
                if exc_type is BrokenPipeError:
                    sys.stderr.close()
                    sys.exit(0)
                line = _one_line(e)
                if line:
                    print(f"leverctl: {line}", file=sys.stderr)
                sys.exit(exit_code)
        raise
    code = code if isinstance(code, int) else 0
    if common.BAD_INPUT and code in (0, 1):
        code = 2  # the command finished, but its input was bad (already said on stderr)
    sys.exit(code)
