"""Split a graded test file's checks: the computation stays in the file, the expectation leaves it.

    assert parse("1.4.2").bump("minor") == "1.5.0"   ->  __tandem_check__(7, (parse("1.4.2").bump("minor")))
    with pytest.raises(CycleError, match="a, b"):    ->  with __tandem_raises__(8):
    self.assertEqual(total(xs), 11)                  ->  __tandem_check__(9, (total(xs)))

Every such check inside a function or method of the file (tests, class methods, fixtures,
helpers, at any depth) becomes a site (tandem.checks.Site) whose operator and expected
value stay on the host. Forms: a single comparison (==, !=, <, <=, >, >=, in, not in, and
is / is not against None, True or False) with a constant on one side; `== pytest.approx(...)`
of constants; a bare truth test (`assert x`, `assert not x`); `pytest.raises` with constant
exception names and an optional constant `match`; unittest's assertEqual family. A
constant is a literal or a pure expression of literals (tandem.checks.constant). Anything
else (an expected value held in a variable, a parametrize argument or a fixture) stays an
ordinary assert in the sandbox, where it proves nothing against a forger.

Rewriting keeps every line where it was (pytest's line numbers stay true) and appends one
import of the sandbox-side helpers (grader_plugin/tandem_checks) at the end of the module.
"""

from __future__ import annotations

import ast
import io
import re
from dataclasses import dataclass

from tandem.envs.coding.checks import Approx, NotConstant, Raises, Site, constant, echoes_of, parse

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
_NESTED_QUANTIFIER = re.compile(r"\)[*+?{]|[*+}]\)?[*+{]")
"""A `match` regex the host would run on text the forger chooses: nested quantifiers could backtrack for ever."""


@dataclass(frozen=True)
class Candidate:
    sites: tuple[Site, ...]
    """One per part of the statement (`assert a == 1 and b == 2` has two); all split or none."""
    start: tuple[int, int]
    """(line, UTF-8 column) where the replaced text starts; end likewise."""
    end: tuple[int, int]
    replacement: str


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


def rewrite(source: str, candidates: list[Candidate], keep: set[int] = frozenset()) -> str:
    """`source` with every candidate none of whose sites is in `keep` replaced; unchanged if none is."""
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
        missing = text[a:b].count("\n") - c.replacement.count("\n")
        new = c.replacement[:-1] + "\n" * max(missing, 0) + c.replacement[-1]  # pad inside the closing paren
        text = text[:a] + new + text[b:]
    text = text + ("" if text.endswith(("\n", "\r")) else "\n") + SITE_IMPORT
    parse(text)  # a rewrite that does not parse is a bug here, never the test's: fail loudly
    return text


class _Finder(ast.NodeVisitor):
    def __init__(self):
        self.in_function = 0
        self.found: list[ast.AST] = []

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


def _candidate(source: str, rel: str, k: int, node: ast.AST) -> Candidate | None:
    if isinstance(node, ast.With):
        return _raises_candidate(source, rel, k, node)
    if isinstance(node, ast.Assert):
        # `assert a == 1 and b == 2`: one site per part (each computed, as the assert would when it passes)
        parts = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) \
            else [node.test]
        splits = [_split_assert(part) for part in parts]
    else:
        splits = [_split_unittest(node.value)]
    if not splits or any(s is None or not _computable(s[0]) for s in splits):
        return None
    segments = [ast.get_source_segment(source, s[0]) for s in splits]
    if None in segments:
        return None
    text = _one_line(ast.get_source_segment(source, node) or "")
    sites = tuple(Site(k + i, rel, node.lineno, op, expected, text, echoes_of(actual), places)
                  for i, (actual, op, expected, places) in enumerate(splits))
    replacement = "; ".join(f"{CHECK}({k + i}, ({seg}))" for i, seg in enumerate(segments))
    return Candidate(sites, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset), replacement)


def _computable(actual: ast.expr) -> bool:
    """An expression the sandbox can evaluate as a call's argument (no yield; no lambda to hide a value in)."""
    return not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Lambda)) for n in ast.walk(actual))


def _split_assert(test: ast.expr):
    """(actual expression, operator, expected value, places) of an assert, or None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
        return _split_compare(test.left, _OPS[type(test.ops[0])], test.comparators[0])
    operand = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
    if _is_constant(operand) or any(isinstance(n, (ast.Compare, ast.BoolOp)) for n in ast.walk(operand)):
        return None  # a truth test that compares inside (`any(x == 3 ...)`) would carry its expectation along
    return operand, "falsy" if operand is not test else "truth", None, None


def _split_compare(left: ast.expr, op: str, right: ast.expr):
    for actual, other, name in ((left, right, op), (right, left, _FLIPPED[op])):
        if _is_constant(actual):
            continue
        approx = _approx(other)
        if approx is not None:
            return (actual, "approx", approx, None) if op == "==" else None
        try:
            expected = constant(other)
        except Exception:  # NotConstant, or a literal expression that fails to fold
            continue
        if name in ("is", "is not") and not (expected is None or type(expected) is bool):
            return None  # identity of other constants is an implementation detail
        return actual, name, expected, None
    return None


def _split_unittest(call: ast.Call):
    name = call.func.attr
    if not isinstance(call.func.value, ast.Name) or call.func.value.id != "self" or not call.args:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if name in _UNITTEST_UNARY:
        actual = call.args[0]
        return None if _is_constant(actual) else (actual, _UNITTEST_UNARY[name], None, None)
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
        return None if split is None or split[1] != "==" else (split[0], "almost", split[2], places)
    if op == "counteq":
        split = _split_compare(call.args[0], "==", call.args[1])
        return None if split is None or split[1] != "==" else (split[0], "counteq", split[2], None)
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
    site = Site(k, rel, node.lineno, "raises", Raises(names, match),
                _one_line(ast.get_source_segment(source, call) or ""))
    return Candidate((site,), (call.lineno, call.col_offset), (call.end_lineno, call.end_col_offset), f"{RAISES}({k})")


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
        return Approx(constant(node.args[0]), tuple(sorted((k.arg, constant(k.value)) for k in node.keywords)))
    except (NotConstant, TypeError):
        return None


def _is_constant(node: ast.expr) -> bool:
    try:
        constant(node)
        return True
    except NotConstant:
        return False
    except Exception:  # folds to an error (1 / 0): certainly nothing of the code under test
        return True


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
