"""What a person most likely meant by a lever value, against what the engine does.

The engines compare exact strings and never trim, and their rules disagree on
exactly the spellings people reach for: ``true`` does nothing to an exact-``1``
opt-in, ``false`` keeps an opt-out on, ``0`` turns a presence lever on. Both
``lint`` (is this setting a mistake?) and ``explain`` (which spellings are
traps?) need the same judgement, so it lives here, once.

The judgement is deliberately simple: a value that reads as a yes/no word
(``1 true yes on`` / ``0 false no off``, any case, ignoring surrounding
whitespace) is taken to say what the *variable's name* says. ``ATLAS_GDN_WY17=false``
asks for WY17 off; ``METRALE_NO_SSD=false`` asks for the SSD scan to stay on.
Where the engine's rule yields something else, that is a surprise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import Lever
from .kinds import DRAFTER_OFF, DRAFTER_PREFILL_ONLY, USIZE_MAX, Drafter, Observed, evaluate
from .resolve import Raw, show_raw, utf8

ON_WORDS = frozenset({"1", "true", "yes", "on", "y", "t", "enable", "enabled"})
OFF_WORDS = frozenset({"0", "false", "no", "off", "n", "f", "disable", "disabled", ""})

# Rules that look only at whether the variable is set at all.
PRESENCE_KINDS = frozenset({"presence", "presence_kill", "build_default"})
# Rules whose variable name says "disable" (NO_..., DISABLE_...): on-ish means field off.
NEGATIVE_KINDS = frozenset({"kill_switch", "presence_kill", "build_default"})
COUNT_KINDS = frozenset({"count_opt", "count_clamped"})


def reading(text: str) -> str | None:
    """``"on"``, ``"off"`` or None: what a yes/no word most likely means."""
    t = text.strip().lower()
    if t in ON_WORDS:
        return "on"
    if t in OFF_WORDS:
        return "off"
    return None


def reads_presence(lever: Lever, var: str) -> bool:
    """Whether the engine looks at this variable's presence rather than its text."""
    if lever.kind in PRESENCE_KINDS:
        return True
    return lever.kind == "opt_in_vetoed" and var == lever.vars[1]


def negative(lever: Lever, var: str) -> bool:
    """Whether setting this variable "on" asks for the field (or its path) off."""
    if lever.kind in NEGATIVE_KINDS:
        return True
    if lever.kind == "drafter":
        return var == lever.vars[0]
    return lever.kind == "opt_in_vetoed" and var == lever.vars[1]


def single(lever: Lever, var: str | None = None, raw: Raw | None = None) -> Any:
    """The field's value with only ``var`` set to ``raw`` (nothing set when var is None)."""

    def value(v: str) -> str | None:
        return utf8(raw) if v == var else None

    def present(v: str) -> bool:
        return v == var and raw is not None

    obs = Observed(value, present, {}, {})
    got, _ = evaluate(lever.kind, lever.vars, obs, field=lever.field, default=lever.default, cap=lever.cap)
    return got


def state(value: Any) -> str:
    """A field value in words: on/off, unset, a count, or the drafter policy."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "unset"
    if isinstance(value, Drafter):
        return {"both": "prefill and carry", "prefill-only": "prefill only, no carry"}.get(str(value), "off")
    return str(value)


def assignment(var: str, raw: Raw | None) -> str:
    """``VAR=value`` as a person would type it, quoted when the value has
    whitespace or is empty, so the trap is visible."""
    from .present import printable

    if raw is None:
        return f"{var} unset"
    text = utf8(raw)
    if text is None:
        return f"{var}={printable(show_raw(raw) or '')} (not UTF-8)"
    if text == "" or text != text.strip() or any(c.isspace() for c in text):
        return f'{var}="{printable(text)}"'
    return f"{var}={printable(text)}"


def _lenient_count(text: str) -> int | None:
    """The count a person most likely meant (" 4", "4.0", "1_000"), or None.
    Whole numbers stay exact however large (no trip through a float)."""
    t = text.strip().replace("_", "")
    if t.lstrip("+").isascii() and t.lstrip("+").isdigit():
        return int(t)
    try:
        n = float(t)
    except (ValueError, OverflowError):
        return None
    if n != n or n in (float("inf"), float("-inf")) or n < 0 or n != int(n):
        return None
    return int(n)


@dataclass(frozen=True)
class Surprise:
    severity: str  # "error" | "warning" | "info"
    code: str  # a short stable id: ignored, inverted, whitespace, presence, not-utf8 ...
    message: str  # one sentence, naming the variable and the effect
    value: Any  # what the field resolves to with only this variable set


def _engaged(lever: Lever, var: str, value: Any) -> bool:
    """Whether this variable's switch took effect, in isolation."""
    if lever.kind == "drafter":
        return value == (DRAFTER_OFF if var == lever.vars[0] else DRAFTER_PREFILL_ONLY)
    if lever.kind == "opt_in_vetoed" and var == lever.vars[1]:
        return True  # present, so it vetoes
    return value != lever.default


def judge(lever: Lever, var: str, raw: Raw | None) -> Surprise | None:
    """Whether ``var=raw`` (alone) does something other than its writer most
    likely meant. None when it does what it says, or when there is no telling."""
    if raw is None:
        return None
    field = lever.field
    got = single(lever, var, raw)
    unset = single(lever)
    text = utf8(raw)
    shown = assignment(var, raw)
    if text is None:
        if reads_presence(lever, var):
            return Surprise(
                "warning",
                "not-utf8",
                f"{shown}: this variable counts by presence, so it is set and {field} is {state(got)}",
                got,
            )
        return Surprise(
            "error",
            "not-utf8",
            f"{shown}: the engine reads a value that is not valid UTF-8 as unset, so {field} stays {state(got)}",
            got,
        )

    if lever.kind in COUNT_KINDS:
        return _judge_count(lever, var, text, got, shown)

    word = reading(text)
    padded = text != text.strip()
    if word is None:
        if reads_presence(lever, var):
            return None  # any value sets it, and nothing suggests otherwise was meant
        if got == unset:
            return Surprise(
                "warning",
                "ignored",
                f"{shown} is not a value this rule knows "
                f"({_accepts(lever, var)}); the engine treats it as unset, "
                f"so {field} stays {state(got)}",
                got,
            )
        return None

    if lever.kind in ("drafter", "opt_in_vetoed"):
        ok = _engaged(lever, var, got) == (word == "on")
    elif lever.kind == "tristate":
        ok = got == (word == "on")
    else:
        ok = got == ((word == "on") != negative(lever, var))
    if ok:
        if padded and not reads_presence(lever, var):
            return Surprise(
                "warning",
                "whitespace",
                f"{shown}: surrounding whitespace is not trimmed; the engine "
                f"ignores this value ({field} is {state(got)} either way)",
                got,
            )
        return None
    if padded and not reads_presence(lever, var):
        return Surprise(
            "error",
            "whitespace",
            f"{shown}: the engine compares the exact string and never trims, so {field} is {state(got)}",
            got,
        )
    if reads_presence(lever, var):
        verb = "still vetoes it" if lever.kind == "opt_in_vetoed" else _verb(got, unset)
        return Surprise(
            "error",
            "presence",
            f"{shown} {verb}: this variable counts by presence, any value "
            f"(0 and '' included); only unsetting it {_undo(lever, var)}",
            got,
        )
    return Surprise(
        "error", "ignored" if got == unset else "inverted", f"{shown} {_verb(got, unset)}: {_accepts(lever, var)}", got
    )


def _verb(got: Any, unset: Any) -> str:
    if got == unset:
        if isinstance(got, bool):
            return f"is ignored and keeps it {state(got)}"
        return f"is ignored and leaves it at {state(got)}"
    if isinstance(got, bool):
        return f"turns it {state(got)}"
    return f"sets it to {state(got)}"


def _undo(lever: Lever, var: str) -> str:
    if lever.kind == "opt_in_vetoed":
        return "lifts the veto"
    return f"turns it {state(single(lever))}"


def _accepts(lever: Lever, var: str) -> str:
    kind = lever.kind
    if kind == "opt_in" or (kind == "opt_in_vetoed" and var == lever.vars[0]):
        return "only the exact string 1 turns it on"
    if kind == "opt_out":
        return "only the exact string 0 turns it off"
    if kind == "kill_switch":
        return "only the exact string 1 turns it off"
    if kind == "truthy_ci":
        return "only 1 or true (any ASCII case) turn it on"
    if kind == "truthy_cs":
        return "only 1 or true, exactly (case-sensitive), turn it on"
    if kind == "tristate":
        return "only 1 (on) and 0 (off) are read; anything else leaves it to the call site"
    if kind == "drafter":
        return "only the exact string 1 takes effect"
    return "the rule reads exact strings"


def _judge_count(lever: Lever, var: str, text: str, got: Any, shown: str) -> Surprise | None:
    meant = _lenient_count(text)
    if meant is None:
        return Surprise("error", "ignored", f"{shown} is not a count; the engine reads it as {state(got)}", got)
    if lever.kind == "count_opt":
        expect = None if meant == 0 else meant
    else:
        cap = lever.cap
        expect = meant if cap is None else min(meant, cap)
    digits = text[1:] if text.startswith("+") else text
    if got != expect and meant > USIZE_MAX and digits.isascii() and digits.isdigit():
        # The kind's own parse (Rust's usize::from_str) failed on a number too
        # large for 64 bits; the rule then reads it as if unparseable.
        if lever.kind == "count_clamped":
            cap_text = f", not clamped to {lever.cap}: write {lever.cap} for the most" if lever.cap is not None else ""
            effect = f"{lever.field} is {state(got)} (off){cap_text}"
        else:
            effect = f"{lever.field} is {state(got)}, as if it were not set"
        return Surprise(
            "error",
            "overflow",
            f"{shown} is too large for the engine's count (usize, at most {USIZE_MAX}), "
            f"so its parse fails and {effect}",
            got,
        )
    if got != expect:
        why = "whitespace is not trimmed" if text != text.strip() else "only plain decimal digits parse"
        return Surprise(
            "error",
            "whitespace" if text != text.strip() else "ignored",
            f"{shown}: {why}, so the engine reads it as {state(got)}, not {meant}",
            got,
        )
    if lever.kind == "count_clamped" and lever.cap is not None and meant > lever.cap:
        return Surprise("warning", "clamped", f"{shown} is clamped to {lever.cap}", got)
    if lever.kind == "count_opt" and meant == 0:
        return Surprise("info", "zero-is-unset", f"{shown}: 0 means unset here, the same as not setting it", got)
    return None


# Spellings worth trying against each rule when listing traps, most telling first.
TRAP_CANDIDATES: dict[str, tuple[str, ...]] = {
    "opt_in": ("true", "yes", " 1", "TRUE"),
    "opt_out": ("false", "no", "", "off"),
    "kill_switch": ("true", "yes", " 1"),
    "truthy_ci": ("yes", "on", " true"),
    "truthy_cs": ("True", "TRUE", "yes"),
    "presence": ("0", "false", ""),
    "presence_kill": ("0", "false", ""),
    "build_default": ("0", "false"),
    "tristate": ("true", "false", "yes"),
    "count_opt": (" 4", "4.0", "-1", str(USIZE_MAX + 1)),
    "count_clamped": (" 4", "4.0", "abc", str(USIZE_MAX + 1)),
    "drafter": ("true", "yes"),
    "opt_in_vetoed": ("true", "0"),
}


def traps(lever: Lever) -> list[tuple[str, Surprise]]:
    """(variable, surprise) for the spellings of each variable that do
    something other than they seem to, error-level only."""
    out: list[tuple[str, Surprise]] = []
    for var in lever.vars:
        for cand in TRAP_CANDIDATES.get(lever.kind, ()):
            s = judge(lever, var, cand)
            if s is not None and s.severity == "error":
                out.append((var, s))
    return out


def examples(lever: Lever) -> list[tuple[str, Any]]:
    """(assignment, resulting value) for the plain spellings and the traps,
    one variable at a time, so a reader sees the rule at work."""
    rows: list[tuple[str, Any]] = []
    if not lever.vars:
        return rows
    rows.append(("nothing set", single(lever)))
    base = {
        "count_opt": ("4", "0", "+4"),
        "count_clamped": ("3", "20", "0"),
    }.get(lever.kind, ("1", "0"))
    for var in lever.vars:
        seen: set[str] = set()
        for cand in (*base, *TRAP_CANDIDATES.get(lever.kind, ())):
            if cand in seen:
                continue
            seen.add(cand)
            rows.append((assignment(var, cand), single(lever, var, cand)))
    if lever.kind in ("drafter", "opt_in_vetoed"):
        a, b = lever.vars
        both = Observed(lambda v: "1", lambda v: True, {}, {})
        got, _ = evaluate(lever.kind, lever.vars, both, field=lever.field, default=lever.default, cap=lever.cap)
        rows.append((f"{a}=1 and {b}=1", got))
    return rows


def is_drafter_prefill_only(value: Any) -> bool:
    return isinstance(value, Drafter) and value == DRAFTER_PREFILL_ONLY
