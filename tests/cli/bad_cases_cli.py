"""Bad-input rows of the everyday command line: formats, output names, options."""

from bad_input import Case

CASES = [
    Case(
        "bench-out-suffix-names-no-format",
        ("bench", "--no-env", "-o", "{tmp}/results.xlsx"),
        ("--out {tmp}/results.xlsx", "no format is known for a .xlsx file", ".csv (csv)", "--format"),
        untouched=("{tmp}/results.xlsx",),
    ),
    Case(
        "bench-out-suffix-of-another-format",
        ("bench", "--no-env", "-o", "{tmp}/results.csv.bak"),
        ("no format is known for a .bak file",),
        untouched=("{tmp}/results.csv.bak",),
    ),
    Case(
        "bench-unknown-format",
        ("bench", "--no-env", "-f", "yaml", "-o", "{tmp}/r.json"),
        ("--format 'yaml'", "csv"),
        untouched=("{tmp}/r.json",),
    ),
    Case(
        "report-show-unknown-format",
        ("report", "show", "{tmp}/absent.json", "-f", "xml"),
        ("--format 'xml'", "table, json, markdown, csv"),
    ),
    Case(
        "compare-has-no-csv",
        ("compare", "{tmp}/a.json", "{tmp}/b.json", "-f", "csv"),
        ("--format 'csv'", "table, json, markdown"),
    ),
    Case("version-takes-no-value", ("--version=1",), ("--version",)),
    Case(
        "compare-by-unknown",
        ("compare", "{tmp}/a.json", "{tmp}/b.json", "--by", "kernel"),
        ("--by must be one of auto, path, variant, not 'kernel'",),
    ),
    Case("show-only-matching-nothing", ("show", "--no-env", "--only", "zzz"), ("--only 'zzz'", "groups: gdn")),
    Case(
        "catalog-doc-other-format", ("catalog", "doc", "-f", "html"), ("--format 'html'", "catalog doc writes markdown")
    ),
]
CASES += [
    Case("kernels-has-no-csv", ("kernels", "--no-env", "-f", "csv"), ("--format 'csv'", "table, json")),
    Case(
        "bench-format-the-bench-lacks",
        ("bench", "--no-env", "-o", "{tmp}/r.csv", "-f", "toml"),
        ("--format 'toml'",),
        untouched=("{tmp}/r.csv",),
    ),
    Case("dash-h-is-not-a-value", ("show", "-f", "-h"), ("-f",)),
]
