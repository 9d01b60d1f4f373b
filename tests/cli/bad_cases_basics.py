"""Bad-input rows that the earlier tests already covered, restated as rows."""

from bad_input import Case

CASES = [
    Case("set-without-equals", ("show", "--set", "ATLAS_GDN_WY17"), ("needs the form VAR=VALUE",)),
    Case("unknown-engine", ("show", "-e", "atlsa"), ("unknown engine 'atlsa'", "did you mean atlas?")),
    Case("absent-recipe", ("show", "--recipe", "{tmp}/absent.toml"), ("{tmp}/absent.toml", "no such")),
    Case("absent-env-file", ("lint", "--env-file", "{tmp}/absent.env"), ("no such env file",)),
]
