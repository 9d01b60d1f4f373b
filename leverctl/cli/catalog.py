"""`leverctl catalog check` and `catalog draft`: a lever catalog against the
engine's own Rust source, and a first catalog drafted from it; `catalog
doc`: a catalog's lever reference as Markdown.

tree-sitter is imported only when one of these commands runs, never by the
commands that read levers.
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from ..levers.files import check_output_path, path_label, read_input_file
from . import common
from .common import CatalogOpt, robust_output, write

catalog_app = typer.Typer(
    name="catalog",
    help="Check a lever catalog against the engine's Rust source, draft one from it, or write its lever reference.",
    no_args_is_help=True,
)

# Rust sources are read whole; a lever file is tens of KiB.
RUST_LIMIT = 4 << 20

SourcesArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="RUST_FILE...",
        help="The engine's model_levers.rs, and any file its resolution lives in "
        "(model_levers_resolve.rs, the file of a helper such as gemv_sw_from).",
    ),
]


EngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        "-e",
        metavar="ENGINE",
        help="The shipped catalog to check: atlas or metrale (default: the one whose prefix the source's variables "
        "carry).",
    ),
]


def _out_option(what: str):
    """``--out FILE``: where a catalog command writes ``what`` (atomically), checked before any work."""
    return Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help=f"Write {what} here (atomically) instead of to stdout.",
            parser=lambda s: check_output_path(s, "--out"),
        ),
    ]


class Format(str, enum.Enum):
    table = "table"
    json = "json"


def _read_sources(paths: list[Path]):
    from ..levers.rust_source import read_levers

    return read_levers([(read_input_file(p, "Rust source file", limit=RUST_LIMIT), path_label(p)) for p in paths])


def _catalog_for(src, engine: str | None, catalog: Path | None):
    """The catalog named, or the shipped one whose prefix the source's variables carry."""
    from ..levers import load_catalog
    from ..levers.catalog import SHIPPED

    common.check_catalog_options(engine, catalog)
    if catalog is not None:
        return load_catalog(path=catalog)
    if engine is not None:
        return load_catalog(engine)
    names = [v.name for fd in src.fields.values() for v in fd.doc_vars]
    if src.rules:
        names += [v for r in src.rules.values() for v in r.vars]
    best, count = None, 0
    for name in SHIPPED:
        cat = load_catalog(name)
        n = sum(var.startswith(cat.prefix) for var in names)
        if n > count:
            best, count = cat, n
    if best is None:
        raise UserError(
            "no variable in the source carries a shipped engine's prefix; name the catalog with "
            "-e ENGINE or --catalog FILE",
            src.struct_file,
        )
    return best


def render_table(report) -> None:
    from rich.text import Text

    from ..tables import Wrapped, fit, new_table

    src = report.source
    common.out.print(Text(f"{src.struct} in {', '.join(src.files)} against {report.catalog_label}", style="bold"))
    if report.findings:
        table = new_table("field", "finding", "source", "catalog", "detail", show_lines=False)
        for f in report.findings:
            style = "bold red" if f.drift else "dim"
            table.add_row(
                Wrapped(f.field or "—"),
                Wrapped(f.what + (" (drift)" if f.drift else ""), style=style),
                Wrapped(f.source or "—"),
                Wrapped(f.catalog or "—"),
                Wrapped(f.message),
            )
        common.out.print(fit(table, common.out.width))
    drift = len(report.drift)
    notes = len(report.findings) - drift
    tail = f"; {notes} note{'s' if notes != 1 else ''} (not drift)" if notes else ""
    if drift:
        common.out.print(
            Text(
                f"{drift} difference{'s' if drift != 1 else ''} between the source and the catalog{tail}",
                style="bold red",
            )
        )
    else:
        common.out.print(
            Text(f"The catalog agrees with the source on all {len(src.fields)} fields{tail}.", style="bold green")
        )


@catalog_app.command("check")
def check(
    sources: SourcesArg,
    engine: EngineOpt = None,
    catalog: CatalogOpt = None,
    fmt: Annotated[
        Format, typer.Option("--format", "-f", metavar="FORMAT", help="table, or json (every finding with its lines).")
    ] = Format.table,
) -> None:
    """Compare a catalog with the engine's lever source: exit 0 when they agree, 1 on drift.

    Reports fields added to or removed from the struct, a Rust type that does
    not fit the entry's kind, variables the field's doc names that the entry
    lacks (and entry variables the source no longer names), from_values rules
    and defaults() values that differ from the entry. What the files given
    cannot show (a helper in another file, rules stated only in prose, a
    defaults() kept elsewhere) is listed as a note, not guessed.

    Without -e or --catalog, the shipped catalog whose prefix the source's
    variables carry is used.
    """
    from ..levers.catalog_check import check as run_check

    robust_output()
    src = _read_sources(sources)
    cat = _catalog_for(src, engine, catalog)
    report = run_check(src, cat)
    if fmt is Format.json:
        write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        render_table(report)
    if not report.agrees:
        raise typer.Exit(1)


@catalog_app.command("draft")
def draft(
    sources: SourcesArg,
    prefix: Annotated[
        str, typer.Option("--prefix", metavar="PREFIX", help="The engine's variable prefix, such as ATLAS_.")
    ],
    out: _out_option("the catalog") = None,
    name: Annotated[
        Optional[str],
        typer.Option(
            "--name", metavar="ENGINE", help="The engine's name in the catalog (default: the prefix, lower case)."
        ),
    ] = None,
) -> None:
    """Draft a catalog for a new engine from its lever source.

    One entry per field of the lever struct, with its variables, the rule
    where from_values states it, its default, and its doc comment's first
    sentence. Entries whose rule the source does not state carry a `fill_in`
    mark; every command refuses the catalog until a person has completed them
    and removed the marks.
    """
    from ..levers.catalog_draft import draft as build
    from ..levers.catalog_draft import dumps

    robust_output()
    if not prefix.strip() or any(c.isspace() for c in prefix):
        raise UserError(f"--prefix {prefix!r}: give the variables' prefix, such as ATLAS_")
    engine = name if name is not None else prefix.lower().strip("_")
    if not engine.isidentifier() or engine != engine.lower():
        raise UserError(f"engine name {engine!r} must be a lower-case name; choose one with --name")
    src = _read_sources(sources)
    doc, marked = build(src, prefix, engine)
    text = dumps(doc, src, marked)
    if out is None:
        write(text)
    else:
        from ..levers.files import write_atomically

        write_atomically(out, text)
    left = f"; {len(marked)} marked for a person to fill in: {', '.join(marked)}" if marked else ""
    where = f"wrote {path_label(out)}" if out is not None else "drafted"
    print(f"leverctl: {where}: {len(doc['levers'])} entries{left}", file=sys.stderr)


@catalog_app.command("doc")
def doc(
    engine: Annotated[
        Optional[str],
        typer.Option(
            "--engine",
            "-e",
            metavar="ENGINE",
            help="The shipped catalog: atlas (default) or metrale.",
            autocompletion=common.complete.engines,
        ),
    ] = None,
    catalog: CatalogOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="markdown.")] = "markdown",
    out: _out_option("the reference") = None,
) -> None:
    """Every lever of a catalog as a Markdown reference: its variable, parse
    rule, default, what each value does, its traps and the kernel paths it
    steers with what each value selects there (docs/levers-ENGINE.md)."""
    from ..levers import load_catalog
    from ..levers.reference import markdown

    robust_output()
    if fmt != "markdown":
        raise UserError(f"--format {fmt!r}: catalog doc writes markdown")
    common.check_catalog_options(engine, catalog)
    cat = load_catalog(path=catalog) if catalog is not None else load_catalog(engine or "atlas")
    text = markdown(cat)
    if out is None:
        write(text)
    else:
        from ..levers.files import write_atomically

        write_atomically(out, text)
        print(f"leverctl: wrote {path_label(out)}: {len(cat.levers)} levers", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
