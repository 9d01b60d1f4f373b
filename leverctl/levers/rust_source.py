"""What an engine's lever source says, read with tree-sitter's Rust grammar.

The engine's ``model_levers.rs`` is the authority a catalog is checked
against (``leverctl catalog check``) and drafted from (``catalog draft``).
This module turns one or more Rust files into a :class:`LeverSource`: the
lever struct's fields (name, type, doc comment, the variables the doc names),
the rule ``from_values`` applies to each field where the file holds it, and
the values of the ``defaults()`` constructor.

Rules are read by running the Rust, not by matching its text: the initializer
of each field in ``from_values`` is evaluated by a small interpreter of the
expression forms resolvers use (``value("X").as_deref()``, ``present("X")``,
comparisons with ``Some("1")``, ``is_some_and`` with a closure, calls to local
helpers such as ``opt_in``, whose own bodies are evaluated the same way) over
a probe set of values, and the truth table is matched against leverctl's
kinds. A form outside that subset is reported as not verifiable, never
guessed. Only doc-comment prose is scanned as text, for the variable names it
sets in inline code.

tree-sitter is imported here and nowhere else; the commands that read levers
(show, diff, explain, lint) never import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product
from typing import Any

from ..errors import UserError

# ── the parsed source ────────────────────────────────────────────────────────


@dataclass(frozen=True)
class DocVar:
    """A variable a field's doc comment names in inline code."""

    name: str
    line: int
    own: bool  # the field's own variable, or only mentioned in passing
    why: str = ""  # why a mention is one


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # the type as written, whitespace removed
    line: int  # the line of the field's declaration
    file: str
    doc: tuple[str, ...]  # the doc comment's lines, markers stripped
    doc_vars: tuple[DocVar, ...]
    group: str = ""  # the section comment (`// ── FFN / MoE ──`) above it, if any

    @property
    def own_vars(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.name for v in self.doc_vars if v.own))

    @property
    def mentions(self) -> tuple[DocVar, ...]:
        return tuple(v for v in self.doc_vars if not v.own)

    @property
    def type_name(self) -> str:
        """The type with any path dropped: ``DrafterContext`` for
        ``crate::model::drafter_context::DrafterContext``."""
        return _last_segment(self.type)


@dataclass(frozen=True)
class Rule:
    """How ``from_values`` sets one field."""

    field: str
    line: int
    file: str
    kinds: tuple[str, ...] = ()  # the leverctl kinds whose behaviour the code has (empty: none)
    vars: tuple[str, ...] = ()  # the variables it reads, in the order it reads them
    cap: int | None = None  # for a clamped count
    constant: Any = None  # a literal, when the field is not from the environment
    is_constant: bool = False
    unverifiable: str = ""  # why the rule could not be read (empty when it was)
    no_kind: bool = False  # read, but its behaviour is none of leverctl's kinds

    @property
    def kind(self) -> str | None:
        return self.kinds[0] if self.kinds else None


@dataclass(frozen=True)
class Default:
    field: str
    value: Any
    line: int
    file: str
    unknown: str = ""  # why the value could not be read


@dataclass
class LeverSource:
    files: tuple[str, ...]
    struct: str
    struct_file: str
    struct_line: int
    fields: dict[str, Field]
    rules: dict[str, Rule] | None  # None: from_values is not in the files given
    rules_where: str = ""  # file:line of from_values
    defaults: dict[str, Default] | None = None  # None: defaults() is not in the files given
    defaults_where: str = ""
    # Where the struct's module says its resolution lives (`#[path = "..."] mod resolve;`).
    resolve_module: str = ""
    notes: list[str] = field(default_factory=list)


# ── parsing ──────────────────────────────────────────────────────────────────


@lru_cache(maxsize=1)
def _parser():
    try:
        import tree_sitter_rust
        from tree_sitter import Language, Parser
    except ImportError as e:  # pragma: no cover - a broken install
        raise UserError(f"reading Rust needs tree-sitter and tree-sitter-rust ({e}); reinstall leverctl") from None
    return Parser(Language(tree_sitter_rust.language()))


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _line(node) -> int:
    return node.start_point[0] + 1


def _last_segment(path: str) -> str:
    depth = 0
    cut = 0
    for i, c in enumerate(path):  # the last `::` outside generic arguments
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == ":" and depth == 0 and path[i - 1 : i] == ":":
            cut = i + 1
    return path[cut:]


@dataclass
class _File:
    label: str
    root: Any


def parse_file(data: bytes, label: str) -> _File:
    """One Rust file's syntax tree; bad input when it is not Rust."""
    if not data.strip():
        raise UserError("is empty: no Rust source to read", label)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError("is not a text file (invalid UTF-8), so not Rust source", label) from None
    tree = _parser().parse(data)
    root = tree.root_node
    if root.has_error:
        bad = _first_error(root)
        line = _line(bad) if bad is not None else 1
        raise UserError(
            "is not Rust source that parses: a syntax error (tree-sitter's Rust grammar)", f"{label}:{line}"
        )
    return _File(label, root)


def _first_error(node):
    """The first ERROR or MISSING node, in source order."""
    for n in _walk(node):
        if n.type == "ERROR" or n.is_missing:
            return n
    return None


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _in_test_module(node) -> bool:
    p = node.parent
    while p is not None:
        if p.type == "mod_item":
            name = p.child_by_field_name("name")
            if name is not None and _text(name) == "tests":
                return True
        p = p.parent
    return False


def _find_struct(files: list[_File]):
    """The lever struct: the struct whose name ends in ``Levers``
    (``ModelLevers`` first, where there are several)."""
    found = []
    for f in files:
        for n in _walk(f.root):
            if n.type == "struct_item" and not _in_test_module(n):
                name = n.child_by_field_name("name")
                body = n.child_by_field_name("body")
                if (
                    name is not None
                    and _text(name).endswith("Levers")
                    and body is not None
                    and body.type == "field_declaration_list"
                ):
                    found.append((f, n, _text(name)))
    if not found:
        return None
    found.sort(key=lambda t: t[2] != "ModelLevers")
    return found[0]


def _doc_line(comment) -> str | None:
    """The text of an outer doc comment (``/// text``), else None."""
    if comment.type != "line_comment":
        return None
    if comment.child_by_field_name("outer") is None:
        return None
    doc = comment.child_by_field_name("doc")
    text = (_text(doc) if doc is not None else "").rstrip("\r\n")
    return text[1:] if text.startswith(" ") else text


def _section_title(comment) -> str | None:
    """A plain comment drawn as a section rule, ``// ── FFN / MoE ──``."""
    if (
        comment.type != "line_comment"
        or comment.child_by_field_name("outer") is not None
        or comment.child_by_field_name("inner") is not None
    ):
        return None
    body = _text(comment)[2:].strip()
    if not body.startswith("─"):
        return None
    title = body.strip("─ ").strip()
    if title.endswith("(cont.)"):
        title = title[: -len("(cont.)")].strip()
    return title or None


def _code_spans(line: str) -> list[str]:
    parts = line.split("`")
    return [parts[i] for i in range(1, len(parts), 2)]


def _variable_in(span: str) -> str | None:
    """The environment variable an inline-code span names (`X`, `X=1`,
    `X=k`), or None: upper-case ASCII letters, digits and underscores, with
    at least one underscore, starting with a letter."""
    name = span.split("=", 1)[0].strip()
    if len(name) < 3 or "_" not in name or not ("A" <= name[0] <= "Z"):
        return None
    if all("A" <= c <= "Z" or "0" <= c <= "9" or c == "_" for c in name):
        return name
    return None


def _clauses(text: str) -> list[str]:
    """Doc prose split into clauses at sentence ends and semicolons."""
    out, cur = [], []
    for i, c in enumerate(text):
        cur.append(c)
        nxt = text[i + 1 : i + 2]
        if c in ".;" and (nxt in (" ", "")):
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _doc_vars(doc: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """(variable, line, clause) for every variable the doc names, in order."""
    joined: list[tuple[str, int]] = []  # (line text, line number)
    found = []
    text = " ".join(t for t, _ in doc)
    clauses = _clauses(text)
    for t, n in doc:
        joined.append((t, n))
        for span in _code_spans(t):
            var = _variable_in(span)
            if var:
                clause = next((c for c in clauses if f"`{span}`" in c), "")
                found.append((var, n, clause))
    return found


def _fields(f: _File, struct) -> list[Field]:
    body = struct.child_by_field_name("body")
    out: list[Field] = []
    pending: list[tuple[str, int]] = []
    group = ""
    for c in body.named_children:
        if c.type == "line_comment":
            doc = _doc_line(c)
            if doc is not None:
                pending.append((doc, _line(c)))
            else:
                title = _section_title(c)
                if title:
                    group = title
            continue
        if c.type != "field_declaration":
            continue  # attributes and the like
        name = _text(c.child_by_field_name("name"))
        type_ = "".join(_text(c.child_by_field_name("type")).split())
        vars_ = _doc_vars(pending)
        out.append(
            Field(
                name,
                type_,
                _line(c),
                f.label,
                tuple(t for t, _ in pending),
                tuple(DocVar(v, n, True, clause) for v, n, clause in vars_),
                group,
            )
        )
        pending = []
    # Classify: a field's first variable is its own; a later one is only
    # mentioned when it is another field's first variable (named to tell the
    # two apart) or its clause says the variable *also* does something.
    firsts = {fd.doc_vars[0].name: fd.name for fd in out if fd.doc_vars}
    classified = []
    for fd in out:
        dvs = []
        for i, dv in enumerate(fd.doc_vars):
            own, why = True, ""
            other = firsts.get(dv.name)
            if i > 0 and dv.name != fd.doc_vars[0].name:
                if other is not None and other != fd.name:
                    own, why = False, f"the variable of field {other}"
                elif " also " in f" {dv.why} ":
                    own, why = False, "named as something else that also acts on this"
            dvs.append(DocVar(dv.name, dv.line, own, why))
        classified.append(Field(fd.name, fd.type, fd.line, fd.file, fd.doc, tuple(dvs), fd.group))
    return classified


def _functions(files: list[_File]) -> dict[str, tuple[_File, Any]]:
    """Every function outside test modules, by name (the first of a name wins)."""
    out: dict[str, tuple[_File, Any]] = {}
    for f in files:
        for n in _walk(f.root):
            if n.type == "function_item" and not _in_test_module(n):
                name = _text(n.child_by_field_name("name"))
                out.setdefault(name, (f, n))
    return out


def _struct_literal(fn, struct: str):
    """The last ``Struct { .. }`` / ``Self { .. }`` expression in a function's body."""
    found = None
    for n in _walk(fn.child_by_field_name("body")):
        if n.type == "struct_expression":
            name = n.child_by_field_name("name")
            if name is not None and _text(name) in (struct, "Self"):
                found = n
    return found


def _initializers(lit) -> list[tuple[str, Any, Any]]:
    """(field, value node or None for shorthand, the initializer node); the
    struct base ``..X`` as ('..', node, node)."""
    out = []
    for c in lit.child_by_field_name("body").named_children:
        if c.type == "field_initializer":
            out.append((_text(c.child_by_field_name("field")), c.child_by_field_name("value"), c))
        elif c.type == "shorthand_field_initializer":
            out.append((_text(c.named_children[0]), None, c))
        elif c.type == "base_field_initializer":
            out.append(("..", c.named_children[0] if c.named_children else None, c))
    return out


def read_levers(sources: list[tuple[bytes, str]]) -> LeverSource:
    """The lever source of these files (bytes, label); the first file that
    declares a ``...Levers`` struct is the one checked. Bad input when a file
    is not Rust or none declares such a struct."""
    files = [parse_file(data, label) for data, label in sources]
    hit = _find_struct(files)
    if hit is None:
        where = sources[0][1] if len(sources) == 1 else ", ".join(label for _, label in sources)
        raise UserError("no lever struct: Rust source, but no `struct ...Levers { .. }` with named fields", where)
    f, struct, name = hit
    fields = {fd.name: fd for fd in _fields(f, struct)}
    src = LeverSource(
        files=tuple(x.label for x in files),
        struct=name,
        struct_file=f.label,
        struct_line=_line(struct),
        fields=fields,
        rules=None,
    )
    fns = _functions(files)
    src.resolve_module = _resolve_module(f)
    if "from_values" in fns:
        ff, fn = fns["from_values"]
        lit = _struct_literal(fn, name)
        if lit is not None:
            src.rules = _rules(ff, fn, lit, fns, files)
            src.rules_where = f"{ff.label}:{_line(fn)}"
    for fname in ("defaults",):
        if fname in fns:
            ff, fn = fns[fname]
            lit = _struct_literal(fn, name)
            if lit is not None:
                src.defaults = _defaults(ff, lit, fields)
                src.defaults_where = f"{ff.label}:{_line(fn)}"
    return src


def _resolve_module(f: _File) -> str:
    """The file a ``#[path = "..."] mod resolve;`` points at, if the struct's
    file declares one (where Metrale keeps from_values and defaults())."""
    prev = None
    for c in f.root.children:
        if c.type == "mod_item" and prev is not None and prev.type == "attribute_item":
            name = _text(c.child_by_field_name("name"))
            attr = _text(prev)
            if name == "resolve" and "path" in attr and '"' in attr:
                return attr.split('"')[1]
        if c.type != "line_comment":
            prev = c
    return ""


# ── defaults() ───────────────────────────────────────────────────────────────

INT_SUFFIXES = ("usize", "isize", "u128", "i128", "u64", "i64", "u32", "i32", "u16", "i16", "u8", "i8")
DRAFTER_CONSTANTS = {"BOTH": (True, True), "PREFILL_ONLY": (True, False), "OFF": (False, False)}


def _derived_default(type_name: str, type_: str) -> tuple[Any, str]:
    if type_name == "bool":
        return False, ""
    if type_name in ("u8", "u16", "u32", "u64", "usize", "i32", "i64", "isize"):
        return 0, ""
    if type_.startswith("Option<"):
        return None, ""
    return None, f"the derived Default of {type_name}, which the files given do not define"


def _literal(node) -> tuple[Any, str]:
    t = node.type
    if t == "boolean_literal":
        return _text(node) == "true", ""
    if t == "integer_literal":
        text = _text(node).replace("_", "")
        for suffix in INT_SUFFIXES:  # 1u32, 0usize
            if text.endswith(suffix) and not text.startswith(("0x", "0X")):
                text = text[: -len(suffix)]
                break
        try:
            return int(text, 0), ""
        except ValueError:
            return None, f"the literal {_text(node)}"
    if t == "identifier" and _text(node) == "None":
        return None, ""
    if t == "scoped_identifier":
        last = _text(node.child_by_field_name("name"))
        if last in DRAFTER_CONSTANTS:
            from .kinds import Drafter

            return Drafter(*DRAFTER_CONSTANTS[last]), ""
    if t == "call_expression" and _text(node.child_by_field_name("function")) == "Some":
        args = node.child_by_field_name("arguments").named_children
        if len(args) == 1:
            return _literal(args[0])
    return None, f"`{_text(node)}` is not a literal leverctl reads"


def _defaults(f: _File, lit, fields: dict[str, Field]) -> dict[str, Default]:
    out: dict[str, Default] = {}
    base = None
    for name, value, node in _initializers(lit):
        if name == "..":
            base = (value, node)
            continue
        if value is None:
            out[name] = Default(name, None, _line(node), f.label, f"`{name}` is passed in, not a literal")
            continue
        v, why = _literal(value)
        out[name] = Default(name, v, _line(node), f.label, why)
    for name, fd in fields.items():
        if name in out:
            continue
        if base is None:
            out[name] = Default(name, None, _line(lit), f.label, "not set in the constructor")
            continue
        bnode, binit = base
        derived = ("Self::default()", "Default::default()", f"{_text(lit.child_by_field_name('name'))}::default()")
        if bnode is not None and "".join(_text(bnode).split()) in derived:
            v, why = _derived_default(fd.type_name, fd.type)
            out[name] = Default(name, v, _line(binit), f.label, why)
        else:
            out[name] = Default(name, None, _line(binit), f.label, f"taken from `{_text(bnode)}`")
    return out


# ── from_values: a small interpreter and the probes that classify a rule ─────


class Unsupported(Exception):
    """A form the interpreter does not evaluate; the rule is not verifiable."""


NOT_UTF8 = object()  # a value that is set but not valid UTF-8: value() gives None, present() True

PROBES_1 = (
    None,
    "1",
    "0",
    "",
    "true",
    "TRUE",
    "True",
    "tRuE",
    "false",
    "2",
    "8",
    "9",
    "+3",
    " 1",
    "1 ",
    "01",
    "100",
    "18446744073709551616",
    "18446744073709551615",
    "yes",
    NOT_UTF8,
)
PROBES_2 = (None, "1", "0", "", "true", NOT_UTF8)


@dataclass
class _OsValue:
    """``std::env::var_os(X)``: all that is observable is whether it is set."""

    present: bool


@dataclass
class _Closure:
    params: list[str]
    body: Any
    scope: dict[str, Any]


@dataclass
class _Reader:
    """One of from_values' closure parameters: reads a variable's value
    (``Option<String>``) or its presence (``bool``)."""

    presence: bool


class _Interp:
    MAX_CALLS = 32  # helper calls deep: a recursive helper is no resolver leverctl reads

    def __init__(self, env: dict[str, Any], fns: dict[str, tuple[_File, Any]], reads: list[str]):
        self.env = env
        self.fns = fns
        self.reads = reads
        self.depth = 0

    # what the engine observes
    def value(self, var: str):
        self.reads.append(var)
        v = self.env.get(var)
        return None if v is None or v is NOT_UTF8 else v

    def present(self, var: str) -> bool:
        self.reads.append(var)
        return var in self.env

    def eval(self, node, scope: dict[str, Any]):
        t = node.type
        if t == "parenthesized_expression":
            return self.eval(node.named_children[0], scope)
        if t == "string_literal":
            return _string(node)
        if t == "boolean_literal":
            return _text(node) == "true"
        if t == "integer_literal":
            v, why = _literal(node)
            if why:
                raise Unsupported(why)
            return v
        if t == "identifier":
            name = _text(node)
            if name in scope:
                return scope[name]
            if name == "None":
                return None
            raise Unsupported(f"`{name}` is not a value the rule can see")
        if t == "block":
            kids = [c for c in node.named_children if c.type not in ("line_comment", "block_comment")]
            if len(kids) != 1:
                raise Unsupported("a block with statements")
            return self.eval(kids[0], scope)
        if t == "expression_statement":
            raise Unsupported("a statement")
        if t == "unary_expression":
            op = _text(node.children[0])
            v = self.eval(node.named_children[0], scope)
            if op == "!" and isinstance(v, bool):
                return not v
            raise Unsupported(f"unary `{op}`")
        if t == "binary_expression":
            return self.binary(node, scope)
        if t == "if_expression":
            cond = self.eval(node.child_by_field_name("condition"), scope)
            if not isinstance(cond, bool):
                raise Unsupported("an `if` whose condition is not a bool")
            if cond:
                return self.eval(node.child_by_field_name("consequence"), scope)
            alt = node.child_by_field_name("alternative")
            if alt is None:
                raise Unsupported("an `if` without `else`")
            return self.eval(alt.named_children[0], scope)
        if t == "closure_expression":
            params = [_text(p) for p in node.child_by_field_name("parameters").named_children]
            params = [p.lstrip("&") for p in params]
            return _Closure(params, node.child_by_field_name("body"), dict(scope))
        if t == "call_expression":
            return self.call(node, scope)
        raise Unsupported(f"the form `{t}`")

    def binary(self, node, scope):
        op = _text(node.child_by_field_name("operator"))
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        if op in ("&&", "||"):
            a = self.eval(left, scope)
            if not isinstance(a, bool):
                raise Unsupported(f"`{op}` on a non-bool")
            if (op == "&&" and not a) or (op == "||" and a):
                return a
            b = self.eval(right, scope)
            if not isinstance(b, bool):
                raise Unsupported(f"`{op}` on a non-bool")
            return b
        a = self.eval(left, scope)
        b = self.eval(right, scope)
        if isinstance(a, _OsValue) or isinstance(b, _OsValue):
            raise Unsupported("comparing an OsString")
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        if op in ("<", "<=", ">", ">=") and isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        raise Unsupported(f"the operator `{op}`")

    def call(self, node, scope):
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments").named_children
        if fn.type == "field_expression":
            return self.method(_text(fn.child_by_field_name("field")), fn.child_by_field_name("value"), args, scope)
        if fn.type == "generic_function":  # x.parse::<usize>()
            inner = fn.child_by_field_name("function")
            if inner.type == "field_expression":
                targs = "".join(_text(fn.child_by_field_name("type_arguments")).split()).lstrip(":")
                return self.method(
                    _text(inner.child_by_field_name("field")), inner.child_by_field_name("value"), args, scope, targs
                )
            raise Unsupported(f"the call `{_text(fn)}`")
        vals = [self.eval(a, scope) for a in args]
        if fn.type == "identifier":
            name = _text(fn)
            if name == "Some" and len(vals) == 1:
                return vals[0]
            target = scope.get(name)
            if isinstance(target, _Reader):
                if len(vals) != 1 or not isinstance(vals[0], str):
                    raise Unsupported(f"`{name}` called without a variable name")
                return self.present(vals[0]) if target.presence else self.value(vals[0])
            if isinstance(target, _Closure):
                return self.apply(target, vals)
            return self.helper(name, vals)
        if fn.type == "scoped_identifier":
            path = "".join(_text(fn).split())
            if path in ("std::env::var", "env::var") and len(vals) == 1:
                return self.value(vals[0])
            if path in ("std::env::var_os", "env::var_os") and len(vals) == 1:
                return _OsValue(self.present(vals[0]))
            return self.helper(_text(fn.child_by_field_name("name")), vals, path)
        raise Unsupported(f"the call `{_text(fn)}`")

    def helper(self, name: str, vals: list, path: str | None = None):
        if name not in self.fns:
            raise _Missing(path or name)
        _, fn = self.fns[name]
        params = [p for p in fn.child_by_field_name("parameters").named_children if p.type == "parameter"]
        if len(params) != len(vals):
            raise Unsupported(f"`{name}` called with {len(vals)} argument(s)")
        scope = {_text(p.child_by_field_name("pattern")): v for p, v in zip(params, vals)}
        if self.depth >= self.MAX_CALLS:
            raise Unsupported(f"`{name}` calls itself")
        self.depth += 1
        try:
            return self.eval(fn.child_by_field_name("body"), scope)
        finally:
            self.depth -= 1

    def apply(self, closure: _Closure, vals: list):
        if len(closure.params) != len(vals):
            raise Unsupported("a closure called with the wrong number of arguments")
        return self.eval(closure.body, {**closure.scope, **dict(zip(closure.params, vals))})

    def method(self, name: str, recv_node, args, scope, targs: str = ""):
        recv = self.eval(recv_node, scope)
        vals = [self.eval(a, scope) for a in args]
        if isinstance(recv, _OsValue):
            if name == "is_some" and not vals:
                return recv.present
            if name == "is_none" and not vals:
                return not recv.present
            raise Unsupported(f"`.{name}()` on an OsString")
        # An Option<&str>/Option<String>/Result is None or its value here.
        if name in ("as_deref", "ok", "as_str", "as_ref", "to_owned", "to_string", "cloned", "copied") and not vals:
            return recv
        if name == "is_some" and not vals:
            return recv is not None
        if name == "is_none" and not vals:
            return recv is None
        if name in ("is_some_and", "map", "and_then", "filter", "map_or", "unwrap_or", "unwrap_or_default"):
            return self.option_method(name, recv, vals)
        if name == "eq_ignore_ascii_case" and len(vals) == 1 and isinstance(recv, str) and isinstance(vals[0], str):
            return _ascii_lower(recv) == _ascii_lower(vals[0])
        if name == "parse" and not vals and isinstance(recv, str):
            if targs in ("<usize>", "<u64>", "<u32>"):
                from .kinds import parse_usize

                n = parse_usize(recv)
                if n is not None and targs == "<u32>" and n >= 2**32:
                    return None
                return n
            raise Unsupported("`.parse()` without a stated integer type")
        if name in ("min", "max") and len(vals) == 1 and isinstance(recv, int) and isinstance(vals[0], int):
            return min(recv, vals[0]) if name == "min" else max(recv, vals[0])
        raise Unsupported(f"the method `.{name}()`")

    def option_method(self, name, recv, vals):
        if name == "unwrap_or":
            return vals[0] if recv is None else recv
        if name == "unwrap_or_default":
            raise Unsupported("`.unwrap_or_default()` (the type decides the default)")
        if name == "map_or":
            if len(vals) != 2 or not isinstance(vals[1], _Closure):
                raise Unsupported("`.map_or()` without a closure")
            return vals[0] if recv is None else self.apply(vals[1], [recv])
        if len(vals) != 1 or not isinstance(vals[0], _Closure):
            raise Unsupported(f"`.{name}()` without a closure")
        f = vals[0]
        if name == "is_some_and":
            return recv is not None and self.apply(f, [recv]) is True
        if recv is None:
            return None
        got = self.apply(f, [recv])
        if name == "filter":
            return recv if got is True else None
        return got  # map, and_then: an Option is its value or None here


class _Missing(Unsupported):
    """A helper defined in none of the files given."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _ascii_lower(s: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in s)


def _string(node) -> str:
    """A Rust string literal's value (the escapes leverctl's rules meet)."""
    if node.type != "string_literal":
        raise Unsupported("a raw string")
    out = []
    for c in node.named_children:
        if c.type == "string_content":
            out.append(_text(c))
        elif c.type == "escape_sequence":
            esc = _text(c)
            simple = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\", '\\"': '"', "\\'": "'", "\\0": "\0"}
            if esc not in simple:
                raise Unsupported(f"the escape {esc}")
            out.append(simple[esc])
    return "".join(out)


def _param_name(param) -> str:
    """A parameter's name (``mut`` is a separate node, not part of the pattern)."""
    name = _text(param.child_by_field_name("pattern"))
    return name[4:].strip() if name.startswith("mut ") else name


def _readers(fn) -> dict[str, _Reader]:
    """from_values' closure parameters: one returning ``Option<String>``
    reads values, one returning ``bool`` reads presence."""
    out = {}
    for p in fn.child_by_field_name("parameters").named_children:
        if p.type != "parameter":
            continue
        type_ = "".join(_text(p.child_by_field_name("type")).split())
        name = _param_name(p)
        if "Fn" in type_ and "->" in type_:
            ret = type_.split("->")[-1]
            if ret.startswith("Option<String>"):
                out[name] = _Reader(presence=False)
            elif ret == "bool":
                out[name] = _Reader(presence=True)
    return out


def _params(fn) -> list[str]:
    names = []
    for p in fn.child_by_field_name("parameters").named_children:
        if p.type == "parameter":
            names.append(_param_name(p))
    return names


def _caller_argument(files: list[_File], fn_name: str, index: int) -> str:
    """What the first non-test call of ``fn_name`` passes at ``index``."""
    for f in files:
        for n in _walk(f.root):
            if n.type == "call_expression" and not _in_test_module(n):
                callee = n.child_by_field_name("function")
                if callee is not None and _text(callee).split("::")[-1] == fn_name:
                    args = n.child_by_field_name("arguments").named_children
                    if index < len(args):
                        return "".join(_text(args[index]).split())
    return ""


def _rules(f: _File, fn, lit, fns, files) -> dict[str, Rule]:
    readers = _readers(fn)
    params = _params(fn)
    # Helpers nested in from_values's body are in scope there.
    local = dict(fns)
    for n in fn.child_by_field_name("body").named_children:
        if n.type == "function_item":
            local[_text(n.child_by_field_name("name"))] = (f, n)
    out: dict[str, Rule] = {}
    for name, value, node in _initializers(lit):
        if name == "..":
            continue
        line = _line(node)
        if value is None or (value.type == "identifier" and _text(value) in params and _text(value) not in readers):
            arg = _text(value) if value is not None else name
            idx = params.index(arg) if arg in params else -1
            passed = _caller_argument(files, "from_values", idx) if idx >= 0 else ""
            why = (
                "from_values takes it as an argument"
                + (f"; its caller passes `{passed}`" if passed else "")
                + ", resolved in code the files given do not hold"
            )
            out[name] = Rule(name, line, f.label, unverifiable=why)
            continue
        out[name] = _classify(name, value, line, f.label, readers, local)
    return out


def _run(value, readers, fns, env) -> tuple[Any, list[str]]:
    reads: list[str] = []
    got = _Interp(env, fns, reads).eval(value, dict(readers))
    return got, reads


def _classify(name: str, value, line: int, label: str, readers, fns) -> Rule:
    from .kinds import KINDS, Observed, evaluate

    try:
        got, reads = _run(value, readers, fns, {})
        if not reads:
            if isinstance(got, (bool, int)) or got is None:
                return Rule(name, line, label, constant=got, is_constant=True)
            raise Unsupported("a value that is neither read from the environment nor a literal")
        # Every variable named in the expression, in the order written, then
        # any a helper reads: `&&` and `||` skip reads on some values.
        variables = list(dict.fromkeys([*_static_reads(value, readers), *reads]))
        if len(variables) > 2:
            raise Unsupported(f"reads {len(variables)} variables")
        # Probe every combination of values and collect what the code yields.
        probes = PROBES_1 if len(variables) == 1 else PROBES_2
        table = []
        for combo in product(probes, repeat=len(variables)):
            env = {v: x for v, x in zip(variables, combo) if x is not None}
            got, more = _run(value, readers, fns, env)
            if any(v not in variables for v in more):
                raise Unsupported("the variables it reads depend on their values")
            table.append((env, got))
    except _Missing as e:
        return Rule(
            name,
            line,
            label,
            vars=tuple(dict.fromkeys(_static_reads(value, readers))),
            unverifiable=f"`{e.name}` is defined in a file not given; pass that file too to check its rule",
        )
    except Unsupported as e:
        return Rule(
            name,
            line,
            label,
            vars=tuple(dict.fromkeys(_static_reads(value, readers))),
            unverifiable=f"from_values sets it with a form leverctl does not evaluate ({e})",
        )
    except RecursionError:
        return Rule(
            name, line, label, unverifiable="from_values sets it with an expression nested too deep to evaluate"
        )

    def observed(env):
        return Observed(lambda v: None if env.get(v) in (None, NOT_UTF8) else env[v], lambda v: v in env, {}, {})

    big = next((g for e, g in table if e.get(variables[0]) == "100" and len(e) == 1), None)
    cap = big if isinstance(big, int) and not isinstance(big, bool) and big < 100 else None
    kinds = []
    for kind in KINDS.values():
        if kind.nvars != len(variables) or not kind.reads_env or kind.name == "build_default":
            continue
        for order in [variables] if len(variables) == 1 else [variables, variables[::-1]]:
            ok = all(
                _same(
                    evaluate(
                        kind.name,
                        order,
                        observed(env),
                        field=name,
                        default=None,
                        cap=cap if kind.name == "count_clamped" else None,
                    )[0],
                    got,
                )
                for env, got in table
            )
            if ok:
                kinds.append((kind.name, tuple(order)))
                break
    if not kinds:
        return Rule(
            name,
            line,
            label,
            vars=tuple(variables),
            no_kind=True,
            unverifiable="from_values's rule behaves as none of leverctl's kinds",
        )
    return Rule(
        name,
        line,
        label,
        kinds=tuple(k for k, _ in kinds),
        vars=kinds[0][1],
        cap=cap if kinds[0][0] == "count_clamped" else None,
    )


def _same(a, b) -> bool:
    """Equal and of one type: True is not 1, and None is not False."""
    return type(a) is type(b) and a == b


def _static_reads(value, readers) -> list[str]:
    """The string literals passed to the reader closures or std::env, without evaluating."""
    out = []
    for n in _walk(value):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            callee = "".join(_text(fn).split()) if fn is not None else ""
            if callee in readers or callee in ("std::env::var", "std::env::var_os", "env::var", "env::var_os"):
                for a in n.child_by_field_name("arguments").named_children:
                    if a.type == "string_literal":
                        try:
                            out.append(_string(a))
                        except Unsupported:
                            pass
    return out
