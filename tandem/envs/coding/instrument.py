"""Split a graded test file's checks: the computation stays in the file, the expectation leaves it.

    assert parse("1.4.2").bump("minor") == "1.5.0"   ->  __tandem_check__(7, (parse("1.4.2").bump("minor")))
    with pytest.raises(CycleError, match="a, b"):    ->  with __tandem_raises__(8):
    self.assertEqual(total(xs), 11)                  ->  __tandem_check__(9, (total(xs)))

Every such check inside a function or method of the file (tests, class methods, fixtures,
helpers, at any depth) becomes a site (tandem.envs.coding.checks.Site) whose operator and expected
value stay on the host. Forms: a single comparison (==, !=, <, <=, >, >=, in, not in, and
is / is not against None, True or False) with a constant on one side; `== pytest.approx(...)`
of constants; a bare truth test (`assert x`, `assert not x`); `pytest.raises` with constant
exception names and an optional constant `match`; unittest's assertEqual family. A
constant is a literal or a pure expression of literals (tandem.envs.coding.checks.constant).

`assert E == R` (or assertEqual(E, R)) with neither side a constant is a *reference* site:
the reference fix's run computes R too (`__tandem_check__(k, (E), (R))`, tandem.envs.coding.grading_plan)
and every graded copy computes only E, so R's text and value never enter a graded run; the
host compares E with R's reference values (tandem.envs.coding.checks.Reference). When R's values are not
plain data the assert stays in the sandbox as written, where it proves nothing against a
forger and tells it what E is (tandem.envs.coding.exposure).

Rewriting keeps every line where it was (pytest's line numbers stay true) and appends one
import of the sandbox-side helpers (grader_plugin/tandem_checks) at the end of the module.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from tandem.envs.coding.checks import Approx, NotConstant, Raises, Reference, Site, constant, parse
from tandem.envs.coding.params import end_of

CHECK, RAISES = "__tandem_check__", "__tandem_raises__"
SITE_IMPORT = f"from tandem_checks import check as {CHECK}, raises as {RAISES}\n"
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "in": "contains",
            "not in": "not contains", "is": "is", "is not": "is not"}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
        ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_UNITTEST = {"assertEqual": "==", "assertEquals": "==", "assertListEqual": "==", "assertTupleEqual": "==",
             "assertDictEqual": "==", "assertSetEqual": "==", "assertSequenceEqual": "==", "assertNotEqual": "!=",
             "assertGreater": ">", "assertGreaterEqual": ">=", "assertLess": "<", "assertLessEqual": "<=",
             "assertIn": "in", "assertNotIn": "not in", "assertIs": "is", "assertIsNot": "is not",
             "assertCountEqual": "counteq", "assertAlmostEqual": "almost"}
_UNITTEST_UNARY = {"assertTrue": "truth", "assertFalse": "falsy", "assertIsNone": "is", "assertIsNotNone": "is not"}
_BUILTINS = frozenset(dir(builtins))
_NESTED_QUANTIFIER = re.compile(r"\)[*+?{]|[*+}]\)?[*+{]")
"""A `match` regex the host would run on text the forger chooses: nested quantifiers could backtrack for ever."""


@dataclass(frozen=True)
class Candidate:
    sites: tuple[Site, ...]
    """One per part of the statement (`assert a == 1 and b == 2` has two); all split or none."""
    start: tuple[int, int]
    """(line, UTF-8 column) where the replaced text starts; end likewise."""
    end: tuple[int, int]
    parts: tuple[tuple[str, str | None], ...]
    """Per site: the source of what it computes, and of R for a reference site (else None)."""
    raises: bool = False

    def replacement(self, with_references: bool, own: AbstractSet[int] = frozenset()) -> str:
        """own: sites whose R the graded copies compute too (tandem.envs.coding.expected_sides)."""
        if self.raises:
            return f"{RAISES}({self.sites[0].k})"
        return "; ".join(_check_call(s.k, e, r, with_references or s.k in own)
                         for s, (e, r) in zip(self.sites, self.parts))


def _check_call(k: int, e: str, r: str | None, with_references: bool) -> str:
    return f"{CHECK}({k}, ({e})" + (f", ({r}))" if r is not None and with_references else ")")


@dataclass(frozen=True)
class _Split:
    actual: ast.expr
    op: str
    expected: object = None
    places: int | None = None
    reference: ast.expr | None = None
    """R of `E == R` when neither side is a constant."""


def find_sites(source: str, rel: str, first_k: int) -> list[Candidate] | None:
    """The checks of `source` that can be split, numbered from first_k in source order (None: unparsable)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    finder = _Finder()
    finder.visit(tree)
    out: list[Candidate] = []
    k = first_k
    for node in sorted(finder.found, key=lambda n: (n.lineno, n.col_offset)):
        made = _candidate(source, rel, k, node)
        if made is not None:
            out.append(made)
            k += len(made.sites)
    return out


def rewrite(source: str, candidates: list[Candidate], keep: AbstractSet[int] = frozenset(),
            with_references: bool = False, own: AbstractSet[int] = frozenset()) -> str:
    """`source` with every candidate none of whose sites is in `keep` replaced; unchanged if none is.

    with_references: reference sites compute R as well (the reference fix's run only); own: the reference
    sites whose R every copy computes (tandem.envs.coding.expected_sides)."""
    chosen = [c for c in candidates if not any(s.k in keep for s in c.sites)]
    if not chosen:
        return source
    lines = io.StringIO(source, newline="").readlines()  # the tokenizer's lines: \f or \u2028 do not split
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        line, col = pos
        return starts[line - 1] + len(lines[line - 1].encode()[:col].decode())

    text = source
    for c in sorted(chosen, key=lambda c: c.start, reverse=True):
        a, b = offset(c.start), offset(c.end)
        replacement = c.replacement(with_references, own)
        missing = text[a:b].count("\n") - replacement.count("\n")
        new = replacement[:-1] + "\n" * max(missing, 0) + replacement[-1]  # pad inside the closing paren
        text = text[:a] + new + text[b:]
    text = text + ("" if text.endswith(("\n", "\r")) else "\n") + SITE_IMPORT
    parse(text)  # a rewrite that does not parse is a bug here, never the test's: fail loudly
    return text


class _Finder(ast.NodeVisitor):
    def __init__(self):
        self.in_function = 0
        self.found: list[ast.stmt] = []

    def visit_FunctionDef(self, node) -> None:
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assert(self, node) -> None:
        if self.in_function:
            self.found.append(node)

    def visit_With(self, node) -> None:
        if self.in_function and len(node.items) == 1 and node.items[0].optional_vars is None:
            self.found.append(node)
        self.generic_visit(node)

    def visit_Expr(self, node) -> None:
        call = node.value
        if self.in_function and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and (
                call.func.attr in _UNITTEST or call.func.attr in _UNITTEST_UNARY):
            self.found.append(node)
        self.generic_visit(node)


def _candidate(source: str, rel: str, k: int, node: ast.stmt) -> Candidate | None:
    if isinstance(node, ast.With):
        return _raises_candidate(source, rel, k, node)
    if isinstance(node, ast.Assert):
        # `assert a == 1 and b == 2`: one site per part (each computed, as the assert would when it passes)
        parts = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) \
            else [node.test]
        found = [_split_assert(part) for part in parts]
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        found = [_split_unittest(node.value)]
    else:
        return None
    splits = [s for s in found if s is not None]
    if not found or len(splits) < len(found) or any(not _computable(s.actual) or (
            s.reference is not None and not _computable(s.reference)) for s in splits):
        return None
    segments = _segments(source, splits)
    if segments is None:
        return None
    sites = tuple(Site(k + i, rel, node.lineno, s.op, s.expected, _one_line(e), s.places, computes_of(s.actual))
                  for i, (s, (e, _)) in enumerate(zip(splits, segments)))
    return Candidate(sites, (node.lineno, node.col_offset), end_of(node), tuple(segments))


def _segments(source: str, splits: list[_Split]) -> list[tuple[str, str | None]] | None:
    """Per split, the source of what it computes and of its reference (None without one); None when
    some part has no source segment."""
    out: list[tuple[str, str | None]] = []
    for s in splits:
        actual = ast.get_source_segment(source, s.actual)
        reference = None if s.reference is None else ast.get_source_segment(source, s.reference)
        if actual is None or (s.reference is not None and reference is None):
            return None
        out.append((actual, reference))
    return out


def computes_of(actual: ast.expr) -> str:
    """The name a check's value comes from: its first call's function, else its first attribute or name."""
    nodes = list(ast.walk(actual))
    calls = [node for node in nodes if isinstance(node, ast.Call)]
    attributes = [node for node in nodes if isinstance(node, ast.Attribute)]
    names = [node for node in nodes if isinstance(node, ast.Name)]
    return call_name(calls[0]) if calls else attributes[0].attr if attributes else names[0].id if names else ""


def call_name(node: ast.AST) -> str:
    """`f` of f(...) or x.f(...); '' for anything else."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def is_stored(node: ast.expr) -> bool:
    """A name, or an attribute or item of one: a value the test holds, not one computed in the check."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name)


def _computable(actual: ast.expr) -> bool:
    """An expression the sandbox can evaluate as a call's argument (no yield; no lambda to hide a value in)."""
    return not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Lambda)) for n in ast.walk(actual))


def _split_assert(test: ast.expr) -> _Split | None:
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
        return _split_compare(test.left, _OPS[type(test.ops[0])], test.comparators[0])
    operand = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
    if is_constant(operand) or any(isinstance(n, (ast.Compare, ast.BoolOp)) for n in ast.walk(operand)):
        return None  # a truth test that compares inside (`any(x == 3 ...)`) would carry its expectation along
    return _Split(operand, "falsy" if operand is not test else "truth")


def _split_compare(left: ast.expr, op: str, right: ast.expr) -> _Split | None:
    for actual, other, name in ((left, right, op), (right, left, _FLIPPED[op])):
        if is_constant(actual):
            continue
        approx = _approx(other)
        if approx is not None:
            return _Split(actual, "approx", approx) if op == "==" else None
        try:
            expected = constant(other)
        except Exception:  # NotConstant, or a literal expression that fails to fold
            continue
        if name in ("is", "is not") and not (expected is None or type(expected) is bool):
            return None  # identity of other constants is an implementation detail
        return _Split(actual, name, expected)
    if op != "==" or is_constant(left) or is_constant(right) or _is_approx_call(left) or _is_approx_call(right):
        return None
    # `E == R`: R is the expectation (`assert expected == f(x)` is read the other way round)
    actual, reference = (right, left) if is_stored(left) and not is_stored(right) else (left, right)
    kind = CodeReference if runs_code(reference) else Reference
    return _Split(actual, "==", kind(stored=is_stored(reference)), reference=reference)


@dataclass(frozen=True)
class CodeReference(Reference):
    """A Reference whose R runs the repository's code: a correct fix may change what it computes."""

    own: bool = False
    """The graded copies compute R too, and a run's own `E == R` passes the check (expected_sides)."""


def runs_code(node: ast.expr) -> bool:
    """R names something other than a builtin (a function, a class, a module, a variable): the repository's
    code may compute its value, so a correct fix may change it (tandem.envs.coding.expected_sides)."""
    return any(isinstance(n, ast.Name) and n.id not in _BUILTINS for n in ast.walk(node))


def _is_approx_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "approx"
                                           or getattr(node.func, "attr", None) == "approx")


def _split_unittest(call: ast.Call) -> _Split | None:
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name) or func.value.id != "self" \
            or not call.args:
        return None
    name = func.attr
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if name in _UNITTEST_UNARY:
        actual = call.args[0]
        return None if is_constant(actual) else _Split(actual, _UNITTEST_UNARY[name])
    if len(call.args) < 2:
        return None
    op = _UNITTEST[name]
    keywords = {k.arg: k.value for k in call.keywords}
    if op == "almost":
        if "delta" in keywords or len(call.args) > 3:
            return None
        places_node = keywords.get("places", call.args[2] if len(call.args) == 3 else None)
        try:
            places = None if places_node is None else int(constant(places_node))
        except (NotConstant, TypeError, ValueError):
            return None
        split = _split_compare(call.args[0], "==", call.args[1])
        return None if split is None or split.op != "==" or split.reference is not None else _Split(
            split.actual, "almost", split.expected, places)
    if op == "counteq":
        split = _split_compare(call.args[0], "==", call.args[1])
        return None if split is None or split.op != "==" or split.reference is not None else _Split(
            split.actual, "counteq", split.expected)
    return _split_compare(call.args[0], op, call.args[1])


def _raises_candidate(source: str, rel: str, k: int, node: ast.With) -> Candidate | None:
    call = node.items[0].context_expr
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and _is_raises(call.func)):
        return None
    names = _exception_names(call.args[0])
    keywords = {kw.arg: kw.value for kw in call.keywords}
    if names is None or set(keywords) - {"match"}:
        return None
    match = None
    if "match" in keywords:
        try:
            match = constant(keywords["match"])
        except NotConstant:
            return None
        if not isinstance(match, str) or _NESTED_QUANTIFIER.search(match):
            return None
    site = Site(k, rel, node.lineno, "raises", Raises(names, match), "the block under pytest.raises",
                computes=_block_computes(node))
    return Candidate((site,), (call.lineno, call.col_offset), end_of(call), (), raises=True)


def _block_computes(node: ast.With) -> str:
    for statement in node.body:
        for sub in ast.walk(statement):
            if isinstance(sub, ast.Call) and call_name(sub):
                return call_name(sub)
    return ""


def _is_raises(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "raises" and isinstance(func.value, ast.Name)
            and func.value.id == "pytest") or (isinstance(func, ast.Name) and func.id == "raises")


def _exception_names(node: ast.expr) -> tuple[str, ...] | None:
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    names = []
    for part in parts:
        if isinstance(part, ast.Name):
            names.append(part.id)
        elif isinstance(part, ast.Attribute):
            names.append(part.attr)
        else:
            return None
    return tuple(names) if names else None


def _approx(node: ast.expr) -> Approx | None:
    if not (isinstance(node, ast.Call) and ((isinstance(node.func, ast.Name) and node.func.id == "approx") or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "approx"))):
        return None
    if len(node.args) != 1 or any(k.arg not in ("rel", "abs", "nan_ok") for k in node.keywords):
        return None
    try:
        return Approx(constant(node.args[0]), tuple(sorted((k.arg, constant(k.value)) for k in node.keywords
                                                           if k.arg is not None)))
    except (NotConstant, TypeError):
        return None


def is_constant(node: ast.expr) -> bool:
    try:
        constant(node)
        return True
    except NotConstant:
        return False
    except Exception:  # folds to an error (1 / 0): certainly nothing of the code under test
        return True


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def whole_statements(kept: dict[int, str], candidates: dict[str, list[Candidate]]) -> dict[int, str]:
    """`kept` (site -> why it stays in the sandbox) with every other site of a statement it splits: a statement
    is split whole or not at all (tandem.envs.coding.grading_plan)."""
    for found in candidates.values():
        for c in found:
            if any(s.k in kept for s in c.sites):
                kept.update({s.k: kept.get(s.k, "split with a check the host cannot judge") for s in c.sites})
    return kept
