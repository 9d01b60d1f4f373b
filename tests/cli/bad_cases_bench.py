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
