"""Value checks without a table judged on fresh arguments (issue 46): a *twin* of the test over fresh rows.

    @pytest.fixture
    def stock():
        s = Stock()
        s.add("apple", 3)
        s.add("pear", 2)
        return s

    def test_count(stock):
        assert stock.count("apple") == 3
        assert stock.count("plum") == 0

The bug returns 1 for an unknown item; 0 is a usual default and the bug's value minus one, so a forger writes
it and the task was refused. No parametrize table means no fresh rows (tandem.envs.coding.fresh_rows). Here the
graded copy gets the test's twin: its setup (the test's own statements before its checks, and each fixture of the
module it takes that is one plain function returning a local) written out with every constant argument a column,
and its one checked call with the checks' constants as further columns:

    @pytest.mark.parametrize("tandem_a0, tandem_a1, ..., tandem_a4, tandem_want", [...], ids=["fresh0", ...])
    def test_count__calls(tandem_a0, ..., tandem_a4, tandem_want):
        s = Stock()
        s.add(tandem_a0, tandem_a1)
        s.add(tandem_a2, tandem_a3)
        stock = s
        assert stock.count(tandem_a4) == tandem_want

The rows are the checks' own (one per check, the setup's constants shared) and the fresh ones are drawn from
them as fresh_rows draws a table's (the same pools and domain guard, wide_pools.in_domain); half of them then
ask the checked call about a value the row's setup holds (an item the row added, at its fresh quantity), so a
forger answering "0 for every item but the fixture's" fails them. `tandem_want` is None in every copy: each
row's expectation is the reference fix's value in the plan's clean run, held on the host
(differential.expectations), and the twin's rows are the weak test's table for the fresh-row rule and the
blind count (grading_plan, guess_plan: `same_table`). A row where the reference raises is dropped, not kept as
a raising outcome: the original check judges a value, never an exception, and a correct fix may validate its
input otherwise (raise another type, or answer) where no check looked.

Eligible: a test with no decorator whose body is setup statements (a call, or one name bound to a call, every
argument a constant or a name) and then only asserts of one form on one callee: `assert CALL == CONSTANT`,
`assert CALL`, `assert not CALL`, `assert CALL is None`, CALL's arguments constants. `assert bool(...)`,
`is None` and `not` are judged as what they compare: the twin checks `bool(CALL) == tandem_want` (or
`(CALL is None) == tandem_want`), never more than the original. A check whose call takes a name, a computed
expected side, two callees, or a float expected value (the original's exact `==` would judge a correct fix by
its last bit on fresh arguments) gets no twin.
"""

from __future__ import annotations

import ast
import copy
import random
from dataclasses import replace
from typing import Any

from tandem.envs.coding.checks import Reference, Site
from tandem.envs.coding.fresh_rows import FRESH_ID, fresh_rows, owner
from tandem.envs.coding.instrument import Candidate
from tandem.envs.coding.wide_pools import in_domain

CALLS_SUFFIX = "__calls"
"""The twin's name: the original's and this (`test_count__calls[fresh3]`)."""
WANT = "tandem_want"
"""The twin's expected column: None in every copy, the host holds each row's value."""
TWIN_ROWS = 160
"""Fresh rows drawn per twin (about 130-150 stay distinct): enough that the blind count's split of one bug value's
rows is long odds on almost every draw (stockkit count: below 1 in 1,000 on 13 of 200 seeds at 96, on none of 200 at
160, where the rows asking about an item added at quantity 1 are what tells "0 where the bug says 1" from the fix)."""
_COLUMN_TYPES = (int, str)


def same_table(row: str, test: str) -> bool:
    """Is the fresh row `row` of `test`'s table: its parametrize table's, or its twin's?"""
    return owner(row) in (owner(test), owner(test) + CALLS_SUFFIX)  # a table's case too (keyword_rows)


def held(found: list[Candidate]) -> dict[int, Site]:
    """The twins' `== tandem_want` sites with the host's expectation (filled per row from the clean run)."""
    return {s.k: replace(s, expected=Reference({}, held=True)) for c in found for s, (_, r) in zip(c.sites, c.parts)
            if r == WANT and isinstance(s.expected, Reference)}


def fixtures_of(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's fixtures that the twin writes out: `@pytest.fixture` on a function of no parameters whose body
    is setup statements and `return NAME`."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and len(node.decorator_list) == 1 and not node.args.args \
                and ast.unparse(node.decorator_list[0]) in ("pytest.fixture", "pytest.fixture()", "fixture") \
                and node.body and isinstance(node.body[-1], ast.Return) \
                and isinstance(node.body[-1].value, ast.Name) and all(_setup(s) for s in _plain_body(node)[:-1]):
            out[node.name] = node
    return out


def twin(func: ast.FunctionDef, fixtures: dict[str, ast.FunctionDef], rng: random.Random, pytest_name: str = "pytest"
         ) -> tuple[str, int] | None:
    """The twin test of `func` (its text, to append to the module, and its number of rows), or None where `func` is
    not eligible. `pytest_name`: the module's name for pytest in the twin's decorator (raising_rows.add_rows imports
    it under PYTEST_ALIAS where the module has no `import pytest`)."""
    body = _plain_body(func)
    first_check = next((i for i, s in enumerate(body) if isinstance(s, ast.Assert)), len(body))
    setup, found = body[:first_check], [_check(s) for s in body[first_check:]]
    checks = [c for c in found if c is not None]
    if not checks or len(checks) < len(found) or not all(_setup(s) for s in setup):
        return None
    forms = {(ast.unparse(c.func), len(c.args), tuple(k.arg for k in c.keywords), how) for c, _, how in checks}
    if len(forms) != 1 or any(isinstance(want, float) for _, want, _ in checks):
        return None
    kept, statements = [], []
    for arg in func.args.args:
        fixture = fixtures.get(arg.arg)
        if fixture is None:
            kept.append(arg.arg)
            continue
        *own, back = copy.deepcopy(_plain_body(fixture))
        statements += [*own, ast.Assign([ast.Name(arg.arg, ast.Store())], back.value, lineno=0)]  # type: ignore[attr-defined]
    statements += copy.deepcopy(setup)
    shared = [n for s in statements for n in _columns(s)]
    calls = [copy.deepcopy(c) for c, _, _ in checks]
    own_columns = [_columns(c) for c in calls]
    if not (shared or own_columns[0]) or any(len(o) != len(own_columns[0]) for o in own_columns):
        return None
    rows = [(*(n.value for n in shared), *(n.value for n in o), want) for o, (_, want, _) in zip(own_columns, checks)]
    drawn = _draw(rows, len(shared), rng)
    if not drawn:
        return None
    names = [f"tandem_a{i}" for i in range(len(rows[0]) - 1)]
    named = _Named({id(node): name for node, name in zip([*shared, *own_columns[0]], names)})
    statements = [named.visit(s) for s in statements]
    how = checks[0][2]
    actual = ast.unparse(named.visit(calls[0]))
    actual = {"==": actual, "truth": f"bool({actual})", "none": f"({actual} is None)"}[how]
    lines = [f"    {ast.unparse(s)}" for s in statements] + [f"    assert {actual} == {WANT}"]
    ids = [f"{FRESH_ID}{n}" for n in range(len(drawn))]
    return (f"\n\n@{pytest_name}.mark.parametrize(\"{', '.join([*names, WANT])}\", {drawn!r}, ids={ids!r})\n"
            f"def {func.name}{CALLS_SUFFIX}({', '.join([*kept, *names, WANT])}):\n" + "\n".join(lines) + "\n", len(drawn))


class _Named(ast.NodeTransformer):
    """The twin's columns (constant nodes, by identity) replaced by their names."""

    def __init__(self, names: dict[int, str]):
        self.names = names

    def visit_Constant(self, node: ast.Constant) -> ast.expr:
        return ast.Name(self.names[id(node)], ast.Load()) if id(node) in self.names else node


def _plain_body(func: ast.FunctionDef) -> list[ast.stmt]:
    return [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]


def _setup(statement: ast.stmt) -> bool:
    """A call whose arguments are constants or names, alone or bound to one name."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        value: ast.expr = statement.value
    elif isinstance(statement, ast.Expr):
        value = statement.value
    else:
        return False
    return isinstance(value, ast.Call) and all(isinstance(a, (ast.Constant, ast.Name))
                                               for a in [*value.args, *(k.value for k in value.keywords)])


def _check(statement: ast.stmt) -> tuple[ast.Call, Any, str] | None:
    """(the checked call, the expected value, how it is judged: ==, truth or none) of an eligible assert."""
    if not isinstance(statement, ast.Assert):
        return None
    test = statement.test
    actual: ast.expr | None = None
    want: Any = True
    how = "truth"
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant):
        want = test.comparators[0].value
        if isinstance(test.ops[0], ast.Eq) and want is not None:
            actual, how = test.left, "=="
        elif isinstance(test.ops[0], ast.Is) and want is None:
            actual, want, how = test.left, True, "none"
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        actual, want = test.operand, False
    else:
        actual = test
    if not isinstance(actual, ast.Call) or \
            not all(isinstance(a, ast.Constant) for a in [*actual.args, *(k.value for k in actual.keywords)]):
        return None
    return actual, want, how


def _columns(node: ast.AST) -> list[ast.Constant]:
    """The constant arguments (ints and strings) of a statement's or a check's own call, in order: the twin's columns."""
    call = node.value if isinstance(node, (ast.Assign, ast.Expr)) else node
    if not isinstance(call, ast.Call):
        return []
    return [a for a in [*call.args, *(k.value for k in call.keywords)]
            if isinstance(a, ast.Constant) and type(a.value) in _COLUMN_TYPES]


def _draw(rows: list[tuple], shared: int, rng: random.Random) -> list[tuple]:
    """Fresh rows of the twin's table (fresh_rows' pools and guard; one check's row stands for a table of one), half
    of them with the call's argument set to a value the row's setup holds (an item it added), where the call's
    column's domain admits it."""
    last = len(rows[0]) - 1
    drawn = fresh_rows(rows if len(rows) > 1 else rows * 2, [last], rng, n=TWIN_ROWS)
    out = []
    for row in drawn:
        cells = list(row)
        for c in range(shared, last):
            column = [r[c] for r in rows]
            choices = [cells[s] for s in range(shared) if type(cells[s]) in {type(v) for v in column}
                       and in_domain(cells[s], column + [r[s] for r in rows])]
            if choices and rng.random() < 0.5:
                cells[c] = rng.choice(choices)
        if all(tuple(cells[:last]) != r[:last] for r in rows) and tuple(cells) not in out:
            out.append(tuple(cells))
    return out
