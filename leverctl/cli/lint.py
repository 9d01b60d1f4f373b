"""`leverctl lint`: settings that do not do what they look like they do."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer

from . import common
from .common import resolve_setup, robust_output, write

EXIT_CODES = """Exit codes (for CI):
0 no finding at or above the failing severity (error; with --strict, warning);
1 at least one such finding;
2 bad input (an unreadable recipe or env file, a bad --set, an unknown engine)."""


class Format(str, enum.Enum):
    text = "text"
    json = "json"


STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _keep_environment(setup: common.Setup) -> dict:
    """The environment ``setup`` resolves against, as it is read (once: an
    env file may be standard input). The resolution keeps only the engine's
    variables; lint also looks at the rest for lever names that lack the
    prefix or differ in case."""
    kept: dict = {}
    read = setup.environment

    def environment():
        env = read()
        kept.update(env)
        return env

    setup.environment = environment
    return kept


def register(app: typer.Typer) -> None:
    @app.command("lint", epilog=EXIT_CODES.replace("\n", "\n\n"))
    @common.with_setup
    def lint(
        setup: common.Setup,
        strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on warnings as well as errors.")] = False,
        fmt: Annotated[Format, typer.Option("--format", "-f", metavar="FORMAT", help="text or json.")] = Format.text,
    ) -> None:
        """Settings that do not do what they look like: typos, ignored or inverted values, missing dependencies.

        Finds unknown variables (with did-you-mean), values the engine ignores or
        reads against their likely intent, levers set without the lever they
        depend on, diagnostics left on, and the drafter's costly prefill-only policy.

        Lints what the engine would see: the recipe, then the environment (or
        --env-file, or nothing with --no-env), then --set. Each finding has a
        severity: error (ignored, inverted or overridden), warning (no effect,
        costly, or unknown), info.
        """
        from rich.text import Text

        from ..levers.lint import counts, exit_code
        from ..levers.lint import lint as run

        robust_output()
        env = _keep_environment(setup)
        r = resolve_setup(setup, strict=False, quiet=True)
        common.flag_not_utf8(r.res, r.env_where)  # a finding below too; bad input all the same
        findings = run(r.res, r.env_where, env)
        code = exit_code(findings, strict)
        n = counts(findings)
        if fmt is Format.json:
            doc = {
                "engine": r.res.engine,
                "recipe": r.res.recipe,
                "strict": strict,
                "counts": n,
                "exit_code": code,
                "findings": [f.to_json() for f in findings],
            }
            write(json.dumps(doc, indent=2) + "\n")
        else:
            for f in findings:
                t = Text()
                t.append(f"{f.where}: ")
                t.append(f.severity, style=STYLE[f.severity])
                t.append(f": {f.message} [{f.code}]")
                common.out.print(t, soft_wrap=True)
            summary = ", ".join(f"{v} {k}{'s' if v != 1 and k != 'info' else ''}" for k, v in n.items())
            verdict = "fails" if code else "passes"
            common.out.print(
                Text(f"{r.res.catalog.title}: {summary} — lint {verdict}{' (--strict)' if strict else ''}"),
                soft_wrap=True,
            )
        raise typer.Exit(code)
