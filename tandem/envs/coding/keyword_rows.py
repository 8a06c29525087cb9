"""A parametrize table's call judged with the keyword arguments another test passes (issue 46): a twin of the table.

    @pytest.mark.parametrize("attempt, expected", [(0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0)])
    def test_backoff(attempt, expected):
        assert backoff(attempt) == expected

    def test_backoff_custom_base():
        assert backoff(2, base=0.1, cap=100) == pytest.approx(0.4)

The table varies `attempt` only, at the defaults (base 0.5, cap 30): past attempt 6 every row is the cap, so a
fix that clamps the exponent at 10 (`base * 2 ** min(attempt, 10)`) equals the reference on every fresh row of the
table. It shows where the cap is above base * 1024, with the other test's keywords. The table's fresh rows never
pass those: its call has no `base=` or `cap=`.

Here the table gets a twin (tandem.envs.coding.call_rows, whose twins it reuses): its rows written as plain checks
of its call with the keywords of another test's call of the same callee added, each row crossed with each such set
of keywords, then judged on fresh rows as a twin is (the table's columns and the keywords' int and str values
varied inside their domain guard, wide_pools.in_domain: a cap of 50..200, attempts up to 20):

    @pytest.mark.parametrize("tandem_a0, tandem_a1, tandem_want", [(11, 200, None), ...], ids=["fresh0", ...])
    def test_backoff__calls(tandem_a0, tandem_a1, tandem_want):
        assert backoff(tandem_a0, base=0.1, cap=tandem_a1) == tandem_want

Each row's expectation is the reference fix's, held on the host; the twin's rows are the table's (call_rows.
same_table), so every kept one is required (tandem.envs.coding.regression_rows). Safe for a correct fix where a
twin is: each keyword's values and the table's are ones the tests pass, or near them inside the guard, and a row
where the reference raises is dropped. The table's expected values may be floats (the graded copy holds None there, so
the twin never sees them): judged by the table's own exact `==`, as its own fresh rows already are (a plain
assert's float stays out of twins: call_rows).

The twin's rows start from the table's own cases only: a hidden table also holds its fresh and probe rows
(tandem.envs.coding.params), and a probe reaches past the domain on purpose (a negative attempt, where a correct
doubling loop answers base and the reference halves it), which the twin's draw would then take as the domain.

Eligible: a failing test of one parametrize decorator of constant scalar rows and no other parameters, whose body is
one `assert CALL == COLUMN`, CALL's arguments the table's columns or constants; and another test of the module calling
the same callee with constant keywords CALL does not pass.
"""

from __future__ import annotations

import ast
import copy
import random
from typing import Any

from tandem.envs.coding.call_rows import twin

_SCALARS = (int, float, str, bool, type(None))
_UNKNOWN = 0
"""The plain checks' expected side: the graded copy's table holds None there (tandem.envs.coding.params took the
column out), and the twin's rows hold None too, their values the reference's, held on the host."""


def table_twin(func: ast.FunctionDef, tree: ast.Module, rng: random.Random, pytest_name: str = "pytest"
               ) -> tuple[str, int] | None:
    """The keyword twin of the parametrized test `func` of the module `tree` (its text and number of rows), or
    None where it is not eligible (the module's docstring)."""
    table = _table(func)
    if table is None:
        return None
    names, rows, call, expected = table
    keywords = _other_keywords(tree, func, call)
    if not keywords:
        return None
    body: list[ast.stmt] = []
    for row in rows:
        values = dict(zip(names, row))
        for extra in keywords:
            checked = _Filled(values).visit(copy.deepcopy(call))
            checked.keywords += [ast.keyword(k, ast.Constant(v)) for k, v in extra]
            body.append(ast.Assert(ast.Compare(checked, [ast.Eq()], [ast.Constant(_UNKNOWN)])))
    plain = ast.FunctionDef(func.name, ast.arguments([], [], None, [], [], None, []), body, [], None, None)
    return twin(ast.fix_missing_locations(plain), {}, rng, pytest_name)


def _table(func: ast.FunctionDef) -> tuple[list[str], list[tuple], ast.Call, str] | None:
    """(column names, rows, the checked call, the expected column) of an eligible parametrized test."""
    if len(func.decorator_list) != 1 or not isinstance(mark := func.decorator_list[0], ast.Call) \
            or not ast.unparse(mark.func).endswith("mark.parametrize") or len(mark.args) != 2 \
            or any(k.arg != "ids" for k in mark.keywords):  # params.hide names the cases of a hidden table
        return None
    try:
        names_value, rows = ast.literal_eval(mark.args[0]), ast.literal_eval(mark.args[1])
    except (ValueError, SyntaxError, TypeError):
        return None
    if not isinstance(names_value, str) or not isinstance(rows, list):
        return None
    names = [n.strip() for n in names_value.split(",")]
    rows = [r if len(names) > 1 else (r,) for r in rows]
    ids = next((ast.literal_eval(k.value) for k in mark.keywords), None)
    if ids is not None:  # a hidden table (params.hide): its own cases only, never its fresh or probe rows
        if not isinstance(ids, list) or len(ids) != len(rows):
            return None
        rows = [r for r, i in zip(rows, ids) if str(i).startswith("case")]
    if len(rows) < 2 or [a.arg for a in func.args.args] != names or any(
            not isinstance(r, tuple) or len(r) != len(names) or not all(type(v) in _SCALARS for v in r) for r in rows):
        return None
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(check := body[0], ast.Assert) or not isinstance(test := check.test, ast.Compare) \
            or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq) or not isinstance(call := test.left, ast.Call) \
            or not isinstance(want := test.comparators[0], ast.Name) or want.id not in names:
        return None
    arguments = [*call.args, *(k.value for k in call.keywords)]
    if not all(isinstance(a, ast.Constant) or isinstance(a, ast.Name) and a.id in names and a.id != want.id
               for a in arguments) or any(k.arg is None for k in call.keywords):
        return None
    return names, rows, call, want.id


def _other_keywords(tree: ast.Module, func: ast.FunctionDef, call: ast.Call) -> list[tuple[tuple[str, Any], ...]]:
    """Each distinct set of constant keywords that a call of `call`'s callee in another test of the module passes
    and `call` does not (a call passing one of `call`'s own keywords, or a non-constant one, is left out)."""
    callee, own = ast.unparse(call.func), {k.arg for k in call.keywords}
    out: list[tuple[tuple[str, Any], ...]] = []
    for other in tree.body:
        if other is func or not isinstance(other, ast.FunctionDef) or not other.name.startswith("test"):
            continue
        for node in ast.walk(other):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == callee and node.keywords \
                    and all(k.arg and k.arg not in own and isinstance(k.value, ast.Constant)
                            and type(k.value.value) in _SCALARS for k in node.keywords):
                found = tuple(sorted((str(k.arg), k.value.value) for k in node.keywords))  # type: ignore[attr-defined]
                if found not in out:
                    out.append(found)
    return out


class _Filled(ast.NodeTransformer):
    """The table's column names in a call replaced by one row's values."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.Constant(self.values[node.id]) if node.id in self.values else node
