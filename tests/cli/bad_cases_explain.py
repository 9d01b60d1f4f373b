"""Bad-input rows for explain, lint and kernels: names that match no lever,
values a name cannot take, options out of range."""

from bad_input import Case

CASES = [
    Case(
        "explain-near-miss",
        ("explain", "ATLAS_GDN_WY71"),
        ("ATLAS_GDN_WY71:", "no Atlas or Metrale lever", "did you mean ATLAS_GDN_WY17?"),
    ),
    Case(
        "explain-near-miss-lower-case",
        ("explain", "atlas_gdn_wy71"),
        ("atlas_gdn_wy71:", "did you mean ATLAS_GDN_WY17?"),
    ),
    Case(
        "explain-near-miss-field-one-engine",
        ("explain", "gdn_wy71", "-e", "metrale"),
        ("gdn_wy71:", "no Metrale lever", "did you mean gdn_wy17?"),
    ),
    Case(
        "explain-other-engines-variable",
        ("explain", "METRALE_GDN_WY17", "-e", "atlas"),
        ("METRALE_GDN_WY17:", "no Atlas lever", "did you mean ATLAS_GDN_WY17?"),
    ),
    Case("explain-no-name", ("explain", "=1"), ("explain needs a lever field or variable name",)),
    Case(
        "explain-value-for-config",
        ("explain", "max_decode_seqs=4"),
        ("max_decode_seqs=4:", "reads no variable", "cannot be given a value"),
    ),
    Case("explain-bad-format", ("explain", "gdn_wy17", "-f", "yaml"), ("'yaml'",)),
    Case("kernels-bad-format", ("kernels", "--format", "yaml"), ("--format 'yaml'", "table, json")),
    Case("lint-bad-format", ("lint", "--no-env", "--format", "yaml"), ("'yaml'",)),
    Case("lint-batch-size-zero", ("lint", "--no-env", "--max-batch-size", "0"), ("--max-batch-size", "not 0")),
    Case(
        "bench-metrale-gdn-decode",
        ("bench", "-e", "metrale", "--no-env", "--kernel", "gdn.decode"),
        ("--kernel gdn.decode: metrale has no such path", "a path of atlas only"),
    ),
]
