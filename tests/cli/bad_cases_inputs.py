"""Bad-input rows for what leverctl reads: recipe, catalog and env files that
are not regular files or are too large, malformed catalogs and env files,
recipes that name what is not a lever, conflicting options, and counts
outside the engine's types. A case that several commands share has a row
for each command that takes that input."""

import os
from pathlib import Path

from bad_input import Case

ATLAS_CATALOG = Path(__file__).resolve().parents[2] / "leverctl" / "catalogs" / "atlas.toml"

# ── inputs that are not regular files, or are too large ─────────────────────


def _fifo(name: str):
    return lambda tmp: os.mkfifo(tmp / name)


def _folder(name: str):
    return lambda tmp: (tmp / name).mkdir()


def _loop(name: str):
    return lambda tmp: os.symlink(name, tmp / name)  # a link to itself


def _big(name: str, head: bytes):
    """A file that is valid at its start but 2 MiB long, past the 1 MiB cap."""

    def make(tmp: Path) -> None:
        (tmp / name).write_bytes(head + b"# padding\n" * (2 * 2**20 // 10))

    return make


RECIPE_HEAD = b'engine = "atlas"\n'
ENV_HEAD = b"ATLAS_GDN_WY17=0\n"

# (id, what the file is, files maker or None for /dev/zero, message fragment)
SPECIAL = (
    ("fifo", _fifo, "is a FIFO"),
    ("dev-zero", None, "is a character device"),
    ("folder", _folder, "is a directory"),
    ("symlink-loop", _loop, "is a symlink loop"),
)


def _path(tmp_name: str, maker) -> str:
    return "/dev/zero" if maker is None else "{tmp}/" + tmp_name


def _special_rows(what: str, name: str, head: bytes, commands: dict) -> list[Case]:
    rows = []
    for kind, maker, fragment in SPECIAL:
        path = _path(name, maker)
        for cmd, argv in commands.items():
            # diff reads a side first as "a recipe or JSON file"
            said = "recipe or JSON file" if (what, cmd) == ("recipe-file", "diff") else what.replace("-", " ")
            rows.append(
                Case(f"{what}-{kind}-{cmd}", argv(path), (path, fragment, said), files=maker(name) if maker else None)
            )
    for cmd, argv in commands.items():
        path = "{tmp}/" + name
        rows.append(Case(f"{what}-2mib-{cmd}", argv(path), (path, "is larger than 1 MiB"), files=_big(name, head)))
    return rows


RECIPE_COMMANDS = {
    "show": lambda p: ("show", "--recipe", p),
    "lint": lambda p: ("lint", "--recipe", p),
    "freeze": lambda p: ("recipe", "freeze", "--recipe", p),
    "env": lambda p: ("env", p),
    "diff": lambda p: ("diff", p, "defaults"),
}
CATALOG_COMMANDS = {
    "show": lambda p: ("show", "--catalog", p),
    "lint": lambda p: ("lint", "--catalog", p),
    "freeze": lambda p: ("recipe", "freeze", "--catalog", p),
    "env": lambda p: ("env", "atlas-defaults", "--catalog", p),
    "diff": lambda p: ("diff", "defaults", "defaults", "--catalog", p),
    "explain": lambda p: ("explain", "gdn_wy17", "--catalog", p),
}
ENV_FILE_COMMANDS = {
    "show": lambda p: ("show", "--env-file", p),
    "lint": lambda p: ("lint", "--env-file", p),
    "freeze": lambda p: ("recipe", "freeze", "--env-file", p),
    "diff": lambda p: ("diff", "env:" + p, "defaults"),
}

SPECIAL_CASES = (
    _special_rows("recipe-file", "r.toml", RECIPE_HEAD, RECIPE_COMMANDS)
    + _special_rows("catalog-file", "c.toml", ATLAS_CATALOG.read_bytes(), CATALOG_COMMANDS)
    + _special_rows("env-file", "e.env", ENV_HEAD, ENV_FILE_COMMANDS)
)


# ── malformed catalogs ──────────────────────────────────────────────────────


def _catalog(old: str, new: str):
    """The shipped Atlas catalog with one edit, written as {tmp}/c.toml."""
    text = ATLAS_CATALOG.read_text("utf-8")
    assert old in text, old

    def make(tmp: Path) -> None:
        (tmp / "c.toml").write_text(text.replace(old, new, 1))

    return make


GDN_WY17 = '[levers.gdn_wy17]\nvars = ["ATLAS_GDN_WY17"]\nkind = "opt_out"\ndefault = true\n'
CATALOG_CASES = [
    Case(
        "catalog-unknown-rule",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("{tmp}/c.toml:", "kind 'opt_outt' is not a parsing rule", "did you mean opt_out?"),
        files=_catalog(GDN_WY17, GDN_WY17.replace('"opt_out"', '"opt_outt"')),
    ),
    Case(
        "catalog-missing-kind",
        ("lint", "--catalog", "{tmp}/c.toml"),
        ("[levers.gdn_wy17] lacks `kind`",),
        files=_catalog(GDN_WY17, GDN_WY17.replace('kind = "opt_out"\n', "")),
    ),
    Case(
        "catalog-default-wrong-type",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("[levers.gdn_wy17] default of a opt_out lever must be true or false, not 'yes'",),
        files=_catalog(GDN_WY17, GDN_WY17.replace("default = true", 'default = "yes"')),
    ),
    Case(
        "catalog-missing-default",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("lacks `default`",),
        files=_catalog(GDN_WY17, GDN_WY17.replace("default = true\n", "")),
    ),
    Case(
        "catalog-vars-not-names",
        ("explain", "gdn_wy17", "--catalog", "{tmp}/c.toml"),
        ("vars must be a list of variable names",),
        files=_catalog(GDN_WY17, GDN_WY17.replace('vars = ["ATLAS_GDN_WY17"]', "vars = [17]")),
    ),
    Case(
        "catalog-steers-a-string",
        ("diff", "defaults", "defaults", "--catalog", "{tmp}/c.toml"),
        ("steers must be a list of names",),
        files=_catalog('steers = ["gdn.verify"]', 'steers = "gdn.verify"'),
    ),
    Case(
        "catalog-cap-a-string",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("[levers.shadow_topk] cap must be a count",),
        files=_catalog("cap = 8", 'cap = "8"'),
    ),
    Case(
        "catalog-lever-not-a-table",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("levers.gdn_wy17x must be a table", "not str"),
        files=_catalog("[levers.gdn_regresident]", '[levers]\ngdn_wy17x = "opt_out"\n\n[levers.gdn_regresident]'),
    ),
    Case(
        "catalog-unknown-lever-key",
        ("recipe", "freeze", "--catalog", "{tmp}/c.toml"),
        ("has unknown key `stears`", "did you mean `steers`?"),
        files=_catalog(GDN_WY17, GDN_WY17 + 'stears = ["gdn.verify"]\n'),
    ),
    Case(
        "catalog-group-a-number",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("group 3 is not declared",),
        files=_catalog('group = "gdn"', "group = 3"),
    ),
    Case(
        "catalog-engine-in-capitals",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("engine 'Atlas' must be a lower-case name",),
        files=_catalog('engine = "atlas"', 'engine = "Atlas"'),
    ),
    Case(
        "catalog-prefix-a-number",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("`prefix` must be a non-empty string",),
        files=_catalog('prefix = "ATLAS_"', "prefix = 1"),
    ),
    Case(
        "catalog-group-title-a-table",
        ("show", "--catalog", "{tmp}/c.toml"),
        ("[groups] gdn must be a title",),
        files=_catalog('gdn = "SSM / GDN recurrence"', "gdn = {}"),
    ),
]


# ── recipes that name what is not a lever, engines in the wrong case ────────


def _recipe(text: str, name: str = "r.toml"):
    return lambda tmp: (tmp / name).write_text(text)


BUILD_NOT_A_LEVER = 'engine = "atlas"\n[build]\ngdn_wy17 = true\n'
BUILD_UNKNOWN = 'engine = "metrale"\n[build]\nmoe_tile_sync = true\n'
UNSET_UNKNOWN = 'engine = "atlas"\nunset = ["ATLAS_GDN_WY71"]\n'
ENGINE_CAPS = 'engine = "Atlas"\n'
SERVE_TOO_BIG = 'engine = "atlas"\n[serve]\nmax_batch_size = 4294967296\n'
MODEL_TOO_BIG = 'engine = "atlas"\n[model.gemv]\nrows = 9223372036854775808\n'
BENCH_NOT_POSITIVE = (
    'engine = "atlas"\n[model]\nhidden = 64\n[model.ffn]\nintermediate = 128\n[model.bench]\ngemm_rows = [0, -5]\n'
)
BENCH_UNUSABLE = 'engine = "atlas"\n[model.bench]\ngemm_rows = [3, 7]\n'
BENCH_UNKNOWN_KEY = 'engine = "atlas"\n[model.bench]\ngemm_row = [3]\n'
BENCH_COUNT_NOT_A_COUNT = 'engine = "metrale"\n[model.bench]\ndraft_block = "16"\n'
BENCH_STREAMS_FLAT = 'engine = "metrale"\n[model.bench]\nprefill_streams = [1024, 512]\n'

RECIPE_CASES = []
# [model.bench] shape lists, where the shapes are planned (sweep --dry-run, bench) and where they are not (show)
for cmd, argv in {
    "sweep": lambda p: ("sweep", "--dry-run", "--shapes", "model", "--recipe", p),
    "bench": lambda p: ("bench", "--recipe", p, "-k", "w4a16.gemv"),
    "show": lambda p: ("show", "--recipe", p),
}.items():
    p = "{tmp}/r.toml"
    RECIPE_CASES += [
        Case(
            f"bench-rows-not-positive-{cmd}",
            argv(p),
            ("{tmp}/r.toml:7", "[model.bench] gemm_rows must be a non-empty list of positive integers", "[0, -5]"),
            files=_recipe(BENCH_NOT_POSITIVE),
        ),
        Case(
            f"bench-rows-without-the-model-sizes-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "gemm_rows", "[model] hidden", "[model.ffn] intermediate"),
            files=_recipe(BENCH_UNUSABLE),
        ),
        Case(
            f"bench-unknown-key-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "unknown [model.bench] key `gemm_row`", "did you mean gemm_rows?"),
            files=_recipe(BENCH_UNKNOWN_KEY),
        ),
        Case(
            f"bench-count-not-a-count-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "[model.bench] draft_block must be a positive integer"),
            files=_recipe(BENCH_COUNT_NOT_A_COUNT),
        ),
        Case(
            f"bench-streams-not-lists-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "[model.bench] prefill_streams must be a non-empty list of non-empty lists"),
            files=_recipe(BENCH_STREAMS_FLAT),
        ),
    ]
for cmd, argv in RECIPE_COMMANDS.items():
    p = "{tmp}/r.toml"
    RECIPE_CASES += [
        Case(
            f"build-key-not-a-build-default-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "[build] gdn_wy17 is a lever read from a variable, not a build default"),
            files=_recipe(BUILD_NOT_A_LEVER),
        ),
        Case(
            f"unset-of-an-unknown-variable-{cmd}",
            argv(p),
            ("{tmp}/r.toml:2", "ATLAS_GDN_WY71", "did you mean ATLAS_GDN_WY17?"),
            files=_recipe(UNSET_UNKNOWN),
        ),
        Case(
            f"recipe-engine-in-capitals-{cmd}",
            argv(p),
            ("{tmp}/r.toml:1", "unknown engine 'Atlas'", "did you mean atlas?"),
            files=_recipe(ENGINE_CAPS),
        ),
        Case(
            f"serve-max-batch-beyond-u32-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "max_batch_size", "4294967295", "u32"),
            files=_recipe(SERVE_TOO_BIG),
        ),
        Case(
            f"model-integer-beyond-toml-{cmd}",
            argv(p),
            ("{tmp}/r.toml:3", "outside TOML's integers"),
            files=_recipe(MODEL_TOO_BIG),
        ),
    ]
RECIPE_CASES += [
    Case(
        "build-key-unknown-metrale-show",
        ("show", "--recipe", "{tmp}/r.toml"),
        ("{tmp}/r.toml:3", "[build] moe_tile_sync is not a lever field of Metrale"),
        files=_recipe(BUILD_UNKNOWN),
    ),
    Case(
        "recipe-name-not-utf8-absent-show",
        ("show", "--recipe", "{tmp}/\udcff.toml"),
        ("{tmp}/\\xff.toml", "no such recipe file"),
    ),
    Case(
        "recipe-name-not-utf8-malformed-freeze",
        ("recipe", "freeze", "--recipe", "{tmp}/\udcff.toml"),
        ("{tmp}/\\xff.toml:3", "must be a string"),
        files=_recipe('engine = "atlas"\n[levers]\nATLAS_GDN_WY17 = 0\n', "\udcff.toml"),
    ),
    Case(
        "recipe-name-not-utf8-fifo-freeze",
        ("recipe", "freeze", "--recipe", "{tmp}/\udcff.toml"),
        ("{tmp}/\\xff.toml", "is a FIFO"),
        files=_fifo("\udcff.toml"),
    ),
]


# ── conflicting options and counts outside the engine's types ───────────────

OPTION_CASES = [
    Case("engine-in-capitals-show", ("show", "-e", "ATLAS"), ("unknown engine 'ATLAS'", "did you mean atlas?")),
    Case(
        "engine-in-capitals-explain",
        ("explain", "gdn_wy17", "-e", "Metrale"),
        ("unknown engine 'Metrale'", "did you mean metrale?"),
    ),
    Case("engine-in-capitals-diff", ("diff", "defaults", "defaults", "-e", "Atlas"), ("unknown engine 'Atlas'",)),
    Case(
        "engine-in-capitals-against-a-recipe",
        ("lint", "-e", "ATLAS", "-r", "atlas-defaults"),
        ("unknown engine 'ATLAS'",),
    ),
]
for cmd, argv in {
    "show": ("show",),
    "lint": ("lint",),
    "freeze": ("recipe", "freeze"),
    "bench": ("bench", "-k", "gdn.decode"),
}.items():
    OPTION_CASES += [
        Case(
            f"set-twice-to-different-values-{cmd}",
            (*argv, "--set", "ATLAS_GDN_WY17=0", "--set", "ATLAS_GDN_WY17=1"),
            ("--set ATLAS_GDN_WY17=0 and --set ATLAS_GDN_WY17=1 contradict each other",),
        ),
    ]
for cmd, argv in {"show": ("show",), "lint": ("lint",), "freeze": ("recipe", "freeze")}.items():
    OPTION_CASES += [
        Case(
            f"set-and-unset-one-variable-{cmd}",
            (*argv, "--set", "ATLAS_GDN_WY17=0", "--unset", "ATLAS_GDN_WY17"),
            ("--set ATLAS_GDN_WY17=... and --unset ATLAS_GDN_WY17 contradict each other",),
        ),
        Case(
            f"catalog-with-engine-{cmd}",
            (*argv, "--catalog", str(ATLAS_CATALOG), "-e", "atlas"),
            ("--engine atlas and --catalog", "both choose the lever catalog"),
        ),
        Case(
            f"env-file-with-no-env-{cmd}",
            (*argv, "--env-file", "{tmp}/e.env", "--no-env"),
            ("--env-file already replaces the environment",),
            files=lambda tmp: (tmp / "e.env").write_text(""),
        ),
        Case(f"max-batch-size-zero-{cmd}", (*argv, "--max-batch-size", "0"), ("--max-batch-size must be from 1",)),
        Case(
            f"max-batch-size-beyond-u32-{cmd}",
            (*argv, "--max-batch-size", "4294967296"),
            ("4294967295", "u32", "not 4294967296"),
        ),
    ]
OPTION_CASES += [
    Case(
        "catalog-with-engine-diff",
        ("diff", "defaults", "env", "--catalog", str(ATLAS_CATALOG), "-e", "atlas"),
        ("both choose the lever catalog",),
    ),
    Case(
        "catalog-with-engine-explain",
        ("explain", "gdn_wy17", "--catalog", str(ATLAS_CATALOG), "-e", "atlas"),
        ("both choose the lever catalog",),
    ),
    Case(
        "catalog-of-another-engine-than-a-diff-side",
        ("diff", "qwen3-8b", "defaults", "--catalog", str(ATLAS_CATALOG)),
        ("qwen3-8b.toml", "is for engine 'metrale', but the catalog is 'atlas'"),
    ),
    Case(
        "max-batch-size-beyond-u32-diff",
        ("diff", "defaults", "atlas-defaults", "--max-batch-size", "4294967296"),
        ("4294967295",),
    ),
    Case("diff-both-sides-from-stdin", ("diff", "env:-", "env:-"), ("only one side can do",), stdin=b""),
    Case(
        "diff-json-max-decode-seqs-beyond-u32",
        ("diff", "{tmp}/s.json", "defaults"),
        ("{tmp}/s.json", "levers.max_decode_seqs.value must be a count from 1 to 4294967295"),
        files=lambda tmp: (tmp / "s.json").write_text(
            '{"engine": "atlas", "levers": {"max_decode_seqs": {"value": 4294967296}}}'
        ),
    ),
    Case(
        "diff-json-shadow-topk-beyond-usize",
        ("diff", "{tmp}/s.json", "defaults"),
        ("levers.shadow_topk.value must be a count from 0 to 18446744073709551615",),
        files=lambda tmp: (tmp / "s.json").write_text(
            '{"engine": "atlas", "levers": {"shadow_topk": {"value": 18446744073709551616}}}'
        ),
    ),
]


# ── env files whose lines cannot be read, each named by its number ──────────

ENV_CASES = [
    Case(
        "env-file-line-without-equals-show",
        ("show", "--env-file", "{tmp}/e.env"),
        ("{tmp}/e.env:3", "cannot read", "expected KEY=VALUE"),
        files=lambda tmp: (tmp / "e.env").write_text("# a comment\n\nATLAS_GDN_WY17\n"),
    ),
    Case(
        "env-file-open-quote-lint",
        ("lint", "--env-file", "{tmp}/e.env"),
        ("{tmp}/e.env:2", "a quote opened on this line never closes"),
        files=lambda tmp: (tmp / "e.env").write_text('export A=1\nexport ATLAS_GDN_WY17="0\n'),
    ),
    Case(
        "env-file-expansion-freeze",
        ("recipe", "freeze", "--env-file", "{tmp}/e.env"),
        ("{tmp}/e.env:1", "would need a shell to expand it"),
        files=lambda tmp: (tmp / "e.env").write_text('export ATLAS_GDN_WY17="$WY"\n'),
    ),
    Case(
        "env-file-declare-without-x-diff",
        ("diff", "env:{tmp}/e.env", "defaults"),
        ("{tmp}/e.env:1", "declare without -x does not export"),
        files=lambda tmp: (tmp / "e.env").write_text("declare -- ATLAS_GDN_WY17=0\n"),
    ),
    Case(
        "env-file-from-stdin-bad-line-show",
        ("show", "--env-file", "-"),
        ("stdin:2", "cannot read"),
        stdin=b"ATLAS_GDN_WY17=0\nnot an assignment\n",
    ),
    Case(
        "env-file-from-stdin-bad-line-diff",
        ("diff", "env:-", "defaults"),
        ("stdin:1", "cannot read"),
        stdin=b"export 1A=2\n",
    ),
    Case(
        "env-file-from-stdin-too-large-show",
        ("show", "--env-file", "-"),
        ("stdin", "is larger than 1 MiB"),
        stdin=b"# padding\n" * (2 * 2**20 // 10),
    ),
]

CASES = SPECIAL_CASES + CATALOG_CASES + RECIPE_CASES + OPTION_CASES + ENV_CASES
