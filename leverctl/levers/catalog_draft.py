"""A first catalog for an engine leverctl has never seen, drafted from its
lever source (``leverctl catalog draft``).

One entry per field of the lever struct: its variables, the rule where
``from_values`` states it, the default, its section as the group, and its doc
comment's first sentence as the summary. Where the source does not state the
rule (a helper in another file, a value the caller passes in, a constant the
engine overwrites later), the entry carries a ``fill_in`` mark saying what is
missing, and the catalog is refused by every command until a person has
filled it in and removed the mark.
"""

from __future__ import annotations

from typing import Any

from .catalog import FILL_IN
from .kinds import KINDS, Drafter, Observed, evaluate
from .rust_source import Field, LeverSource, Rule

SUMMARY_MAX = 160
DEFAULT_GROUP = ("levers", "Levers")


def _slug(title: str) -> str:
    out, gap = [], False
    for c in title.lower():
        if c.isascii() and c.isalnum():
            if gap and out:
                out.append("_")
            out.append(c)
            gap = False
        else:
            gap = True
    return "".join(out) or DEFAULT_GROUP[0]


def _is_date(word: str) -> bool:
    return (
        len(word) == 11
        and word.endswith(":")
        and word[4] == "-"
        and word[7] == "-"
        and word[:4].isdigit()
        and word[5:7].isdigit()
        and word[8:10].isdigit()
    )


def summary(fd: Field) -> str:
    """The doc's first sentence, on one line (a leading ``YYYY-MM-DD:`` stamp dropped)."""
    words = " ".join(fd.doc).split()
    if words and _is_date(words[0]):
        words = words[1:]
    text = " ".join(words)
    for i, c in enumerate(text):
        if c == "." and (i + 1 == len(text) or text[i + 1] == " ") and i > 0 and text[i - 1] != "e":
            text = text[: i + 1]
            break
    if len(text) > SUMMARY_MAX:
        text = text[:SUMMARY_MAX].rsplit(" ", 1)[0] + " …"
    return text or f"The {fd.name.replace('_', ' ')} lever (no doc comment)"


def _empty_value(kind: str, vars_: tuple[str, ...], field: str, cap: int | None) -> Any:
    empty = Observed(lambda _v: None, lambda _v: False, {}, {})
    return evaluate(kind, vars_, empty, field=field, default=None, cap=cap)[0]


def _toml_default(value: Any) -> Any:
    if isinstance(value, Drafter):
        return value.to_json()
    return "unset" if value is None else value


def _type_kind(fd: Field) -> str:
    """The kind a field's type allows, where it allows only one."""
    if fd.type == "Option<bool>":
        return "tristate"
    if fd.type.startswith("Option<") and fd.type[7:-1] in ("usize", "u32", "u64"):
        return "count_opt"
    if fd.type_name == "DrafterContext":
        return "drafter"
    return ""


def _entry(fd: Field, rule: Rule | None, src: LeverSource, group: str) -> dict[str, Any]:
    d = (src.defaults or {}).get(fd.name)
    said = d.value if d is not None and not d.unknown else None
    fill = ""
    entry: dict[str, Any] = {}
    if rule is not None and not rule.unverifiable and not rule.is_constant and rule.kind:
        kind, vars_ = rule.kind, rule.vars
        default = _empty_value(kind, vars_, fd.name, rule.cap)
        if d is not None and not d.unknown and said != default:
            fill = (
                f"defaults() gives {said!r}, but the rule {kind} gives {default!r} with nothing set; "
                "check which the engine means"
            )
    else:
        vars_ = fd.own_vars
        kind = _type_kind(fd)
        default = said
        if rule is None:
            why = "from_values is not in the files given: state the rule (kind) the engine applies"
        elif rule.is_constant:
            kind = "config"
            default = rule.constant
            vars_ = ()
            why = (
                f"from_values sets the constant {rule.constant!r}: say where the engine really sets it "
                "(kind config for a serve setting) and check the default"
            )
        else:
            why = f"{rule.unverifiable}: state the rule (kind) it applies"
        fill = why
        if default is None and kind in ("", "drafter") and d is None:
            default = False if fd.type == "bool" else None
    entry["vars"] = list(vars_)
    entry["kind"] = kind
    if rule is not None and rule.cap is not None and kind == "count_clamped":
        entry["cap"] = rule.cap
    if default is not None or kind in ("tristate", "count_opt"):
        entry["default"] = _toml_default(default)
    entry["group"] = group
    entry["summary"] = summary(fd)
    mentions = [v.name for v in fd.mentions]
    if mentions:
        entry["notes"] = f"The source also mentions {', '.join(dict.fromkeys(mentions))}, not as this field's own."
    if fill:
        entry[FILL_IN] = fill
    return entry


def draft(src: LeverSource, prefix: str, engine: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The catalog as a TOML-ready dict, and the fields marked for a person."""
    name = engine or _slug(prefix)
    groups: dict[str, str] = {}
    levers: dict[str, Any] = {}
    marked = []
    for fd in src.fields.values():
        gid, gtitle = (_slug(fd.group), fd.group) if fd.group else DEFAULT_GROUP
        groups.setdefault(gid, gtitle)
        rule = src.rules.get(fd.name) if src.rules is not None else None
        entry = _entry(fd, rule, src, gid)
        levers[fd.name] = entry
        if FILL_IN in entry:
            marked.append(fd.name)
    doc = {"engine": name, "title": name.capitalize(), "prefix": prefix, "groups": groups, "levers": levers}
    return doc, marked


def dumps(doc: dict[str, Any], src: LeverSource, marked: list[str]) -> str:
    import tomli_w

    head = [
        f"# A draft catalog of {src.struct}, written by `leverctl catalog draft` from",
        f"# {', '.join(src.files)}.",
        "# Kinds and variables come from from_values where it states them; summaries are the",
        "# doc comments' first sentences. Review every entry before use.",
    ]
    if marked:
        head.append(f"# {len(marked)} entries carry `{FILL_IN}`: leverctl refuses this catalog until a person")
        head.append(f"# has filled each in and removed the mark ({', '.join(marked)}).")
    known = ", ".join(k for k in KINDS)
    head.append(f"# Kinds leverctl knows: {known}.")
    return "\n".join(head) + "\n\n" + tomli_w.dumps(doc)
