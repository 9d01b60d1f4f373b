"""Bad-input rows of ``leverctl bench``: options and inputs refused before
any kernel runs (and before the simulator is loaded, where it can be)."""

from bad_input import Case

CASES = [
    Case("bench-time-cap-zero", ("bench", "--no-env", "--time-cap", "0"), ("--time-cap must be a positive number",)),
    Case(
        "bench-time-cap-nan",
        ("bench", "--no-env", "--time-cap", "nan"),
        ("--time-cap must be a positive number", "nan"),
    ),
    Case(
        "bench-time-cap-inf",
        ("bench", "--no-env", "--time-cap", "inf"),
        ("--time-cap must be a positive number", "inf"),
    ),
    Case("bench-negative-seed", ("bench", "--no-env", "--seed", "-1"), ("--seed", "-1 is not in the range x>=0")),
    Case("bench-unknown-shapes", ("bench", "--no-env", "--shapes", "huge"), ("--shapes 'huge'", "smoke or model")),
    Case("bench-unknown-device", ("bench", "--no-env", "--device", "tpu"), ("--device 'tpu'", "auto, gpu, sim")),
    Case(
        "bench-model-shapes-in-the-simulator",
        ("bench", "--no-env", "--device", "sim", "--shapes", "model"),
        ("would take hours", "--force"),
    ),
    Case(
        "bench-absent-against-recipe",
        ("bench", "--no-env", "--against", "{tmp}/absent.toml"),
        ("{tmp}/absent.toml", "no such"),
    ),
    Case(
        "bench-unknown-kernel",
        ("bench", "--no-env", "--device", "sim", "--kernel", "gdn.verfy"),
        ("--kernel gdn.verfy: no such kernel path", "did you mean gdn.verify?"),
    ),
]

# --axis: malformed, not an integer, negative, a zero size, given twice, a
# dimension no path of the run has; in bench, sweep and profile alike
# (profile's names and sizes are checked after its compiler tools are found,
# which a machine without them refuses first: its rows are the form's).
for cmd, argv in {
    "bench": ("bench", "--no-env", "-k", "w4a16.gemv", "-o", "{tmp}/r.json"),
    "sweep": ("sweep", "--no-env", "--device", "sim", "-k", "w4a16.gemv", "--out", "{tmp}/s"),
    "profile": ("profile", "--no-env", "-k", "w4a16.gemv", "-o", "{tmp}/p.json"),
}.items():
    rows = [
        Case(f"{cmd}-axis-without-values", (*argv, "--axis", "m"), ("--axis 'm' needs the form NAME=V1,V2",)),
        Case(f"{cmd}-axis-not-an-integer", (*argv, "--axis", "m=1,x"), ("--axis m: 'x' is not an integer",)),
        Case(f"{cmd}-axis-negative", (*argv, "--axis", "k=-64"), ("--axis k: -64 is negative",)),
        Case(f"{cmd}-axis-twice", (*argv, "--axis", "m=1", "--axis", "m=2"), ("--axis m is given twice",)),
    ]
    if cmd != "profile":
        rows += [
            Case(f"{cmd}-axis-zero-size", (*argv, "--axis", "m=0"), ("--axis m: 0 is no size for w4a16.gemv",)),
            Case(
                f"{cmd}-axis-unknown-dimension",
                (*argv, "--axis", "t=5"),
                ("--axis t: no kernel path of this run has that dimension", "theirs: k, m, n"),
            ),
        ]
    CASES += rows
    for c in rows:
        object.__setattr__(c, "untouched", ("{tmp}/r.json", "{tmp}/s", "{tmp}/p.json"))
