"""Raising checks judged on fresh inputs (issue 46): differential rows for a `pytest.raises` test.

    def test_days_in_month_rejects_bad_month():
        with pytest.raises(ValueError):
            days_in_month(2023, 13)

The bug drops the month check. The check's expectation is a type name the graded process writes, and
the call stack shows a forger the `pytest.raises` around the call, so a forger raising ValueError under
every pytest.raises passed it and the task was refused. Here the graded copy gets one more test, the
same block called on **fresh inputs** around the failing one (each constant argument varied alone: the
ints between 0 and it, its neighbours, x2, //2, negated, x10; tandem.envs.coding.confined draws them):

    @pytest.mark.parametrize("tandem_args", [(2023, 14), (2023, 0), (2023, 5), ...], ids=["fresh0", ...])
    def test_days_in_month_rejects_bad_month__rows(tandem_args):
        with pytest.raises(ValueError):
            days_in_month(*tandem_args)

Every row runs the same host-written line under the same `pytest.raises`, so neither the stack nor the
source tells a forger which rows should raise. Each row's **outcome** is the reference fix's, from the
plan's clean run, held on the host (checks.Outcomes): raised one of the original's exception types (the
original's `match=` too, where the reference's message meets it), or raised nothing. A row where the
reference raises a type the original does not name is dropped. A forger raising whenever it sees a
pytest.raises fails the rows that must not raise; one raising for 13 alone fails 14, 0 and -1; only code
deciding as the reference decides on every row passes: the fix, on that sample.

The original test is graded by its rows (GradingPlan.differential) when they hold at least MIN_EACH rows
that raise and MIN_EACH that do not, and the bug fails one of them. What is not judged: the value a
row that does not raise returns (other tests judge values), and the message beyond the original's match.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from tandem.envs.coding.call_rows import CALLS_SUFFIX, fixtures_of, twin
from tandem.envs.coding.checks import Raises, Site, _raised
from tandem.envs.coding.confined import _around
from tandem.envs.coding.fresh_rows import FRESH_ID, owner
from tandem.envs.coding.instrument import Candidate
from tandem.envs.coding.keyword_rows import table_twin
from tandem.envs.coding.verdict import Stream, lookup

ROWS_SUFFIX = "__rows"
"""The generated test's name: the original's and this (`test_x__rows[fresh3]`)."""
MAX_ROWS = 60
MIN_EACH = 3
"""Rows expected to raise, and rows expected not to, that a raising check's fresh rows must hold."""
PYTEST_ALIAS = "__tandem_pytest__"
"""pytest's name in a graded copy whose module has no `import pytest` (plain-assert tests seldom import it) and
gets a twin: an alias, so no name of the module changes (a `pytest` of its own stays what it was)."""
GENERATED = 1_000_000
"""Site numbers of the generated tests start here: the task's own sites keep the numbers a split without
them gives (tandem.envs.coding.grading_plan analyses the task's own checks on the files without them)."""


@dataclass(frozen=True)
class Outcomes:
    """The expectation of a generated raises site: per row, the Raises the block must meet (the original's types
    the reference raised, its match where the reference's message meets it), or None: the block must raise
    nothing. Held on the host from the reference's clean run; checks.Site judges by it."""

    original: Raises
    rows: dict[str, Raises | None] = field(default_factory=dict)

    def judge(self, outcome: Any, test: str | None) -> bool:
        if test not in self.rows:
            return False
        want = self.rows[test]
        if want is None:
            return isinstance(outcome, dict) and outcome.get("raised", 0) is None
        return _raised(outcome, want)


def add_rows(source: str, rel: str, tests: tuple[str, ...], rng: random.Random, failing: tuple[str, ...] = ()
             ) -> tuple[str, list[str]]:
    """`source` with a rows test appended for each hidden test of `tests` that is one `pytest.raises`
    block around one call of constant arguments, a twin over fresh arguments for each test of `failing` whose
    checks are values of one call of constants (tandem.envs.coding.call_rows), and the generated rows' node ids. A
    module without `import pytest` gets twins (under PYTEST_ALIAS), never a rows test."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source, []
    imported = any(isinstance(n, ast.Import) and any(a.name == "pytest" and a.asname is None for a in n.names)
                   for n in tree.body)
    tails, ids = [], []
    fixtures = fixtures_of(tree)
    for func in tree.body:
        if isinstance(func, ast.FunctionDef) and func.decorator_list and any(
                t.startswith(f"{rel}::{func.name}[") for t in failing):  # a failing table: its keyword twin
            keyed = table_twin(func, tree, random.Random(f"{rng.getstate()!r}:{rel}::{func.name}:keywords"),
                               "pytest" if imported else PYTEST_ALIAS)  # its own draw: later tables' stay as they were
            tails += [keyed[0]] if keyed else []
            ids += [f"{rel}::{func.name}{CALLS_SUFFIX}[{FRESH_ID}{n}]" for n in range(keyed[1] if keyed else 0)]
        if not isinstance(func, ast.FunctionDef) or f"{rel}::{func.name}" not in tests or func.decorator_list:
            continue
        block = _raising_call(func)
        made = twin(func, fixtures, rng, "pytest" if imported else PYTEST_ALIAS) \
            if block is None and f"{rel}::{func.name}" in failing else None
        if made is not None:
            tails.append(made[0])
            ids += [f"{rel}::{func.name}{CALLS_SUFFIX}[{FRESH_ID}{n}]" for n in range(made[1])]
        if block is None or not imported:  # the rows test runs the block's own `pytest.raises`: the module's pytest
            continue
        with_item, call = block
        rows = _inputs(call, rng)
        if not rows:
            continue
        name = func.name + ROWS_SUFFIX
        params = [a.arg for a in func.args.args] + ["tandem_args"]
        tails.append(f"\n\n@pytest.mark.parametrize(\"tandem_args\", {rows!r}, "
                     f"ids={[f'{FRESH_ID}{n}' for n in range(len(rows))]!r})\n"
                     f"def {name}({', '.join(params)}):\n"
                     f"    with {ast.unparse(with_item)}:\n"
                     f"        {ast.unparse(call.func)}(*tandem_args)\n")
        ids += [f"{rel}::{name}[{FRESH_ID}{n}]" for n in range(len(rows))]
    if tails and not imported:
        tails.insert(0, f"\n\nimport pytest as {PYTEST_ALIAS}\n")
    return (source.rstrip("\n") + "\n" + "".join(tails), ids) if tails else (source, [])


def _raising_call(func: ast.FunctionDef) -> tuple[ast.expr, ast.Call] | None:
    """(the pytest.raises(...) item, the call) of a test whose body is that one block around one call."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.With) or len(body[0].items) != 1 or len(body[0].body) != 1:
        return None
    item, statement = body[0].items[0], body[0].body[0]
    raises = item.context_expr
    if item.optional_vars is not None or not (isinstance(raises, ast.Call) and isinstance(raises.func, ast.Attribute)
                                              and raises.func.attr == "raises"
                                              and isinstance(raises.func.value, ast.Name)
                                              and raises.func.value.id == "pytest"):
        return None
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return None
    call = statement.value
    if call.keywords or not call.args or not all(isinstance(a, ast.Constant) for a in call.args):
        return None
    return raises, call


def _inputs(call: ast.Call, rng: random.Random) -> list[tuple]:
    """Fresh argument tuples: each constant argument varied alone (module docstring), none the call's own."""
    args = tuple(a.value for a in call.args)  # type: ignore[attr-defined]
    out: list[tuple] = []
    for p, value in enumerate(args):
        near, far = _around(value, [value])
        if type(value) is int and abs(value) <= 64:
            near = [*range(min(0, value), max(0, value) + 1), *near]
        for v in [*near, *far]:
            row = (*args[:p], v, *args[p + 1:])
            if row != args and row not in out:
                out.append(row)
    rng.shuffle(out)
    return out[:MAX_ROWS]


def renumber(found: list[Candidate], source: str, taken: list[Candidate]) -> list[Candidate]:
    """The candidates of a file whose text is `source` and the rows tests add_rows appended to it, those tests'
    numbered on from the generated sites `taken` already holds (see GENERATED)."""
    first_line = source.rstrip("\n").count("\n") + 2
    out, k = [], GENERATED + sum(len(c.sites) for c in taken if c.sites[0].k >= GENERATED)
    for c in found:
        if c.sites[0].line >= first_line:
            c = replace(c, sites=tuple(replace(s, k=k + n) for n, s in enumerate(c.sites)))
            k += len(c.sites)
        out.append(c)
    return out


def task_own(candidates: dict[str, list[Candidate]]) -> dict[str, list[Candidate]]:
    """The candidates less the generated tests' (what a split without them finds)."""
    return {rel: [c for c in found if c.sites[0].k < GENERATED] for rel, found in candidates.items()}


def outcomes(clean: Stream, rows: list[str], sites: dict[int, Site]) -> tuple[dict[int, Site], list[str]]:
    """The generated raises sites with each row's outcome in the clean run (checks.Outcomes), and the rows
    kept: the reference reached the site once, raising nothing or a type the original names (the original's
    match kept where the reference's message meets it)."""
    updated: dict[int, Site] = {}
    kept = []
    for row in rows:
        events = [(k, v) for k, v in lookup(clean.checks, row, []) if k >= GENERATED and k in sites]
        if len(events) != 1 or lookup(clean.status, row) != "PASSED" or sites[events[0][0]].op != "raises":
            continue
        k, value = events[0]
        site = updated.get(k, sites[k])
        table = site.expected if isinstance(site.expected, Outcomes) else Outcomes(site.expected)
        raised = value.get("raised") if isinstance(value, dict) else 0
        if raised is None:
            want = None
        else:
            names = tuple(n for n in table.original.names if isinstance(raised, list) and n in raised)
            if not names:
                continue  # a type the original does not name: no outcome to judge
            match = table.original.match
            want = Raises(names, match if _raised(value, Raises(names, match)) else None)
        updated[k] = replace(site, expected=replace(table, rows={**table.rows, row: want}))
        kept.append(row)
    return updated, kept


def graded_by_rows(weak: list[str], kept: list[str], sites: dict[int, Site], bug_fails: Callable[[str], bool]
                   ) -> dict[str, list[str]]:
    """Weak hidden tests -> their kept rows, where those hold MIN_EACH rows expected to raise and MIN_EACH
    expected not to, and the bug fails one of them (`bug_fails(row)`)."""
    wants = {r: s.expected.rows[r] for s in sites.values() if isinstance(s.expected, Outcomes) for r in s.expected.rows}
    out = {}
    for t in weak:
        rows = [r for r in kept if owner(r) == t + ROWS_SUFFIX and r in wants]
        raising = sum(wants[r] is not None for r in rows)
        if min(raising, len(rows) - raising) >= MIN_EACH and any(bug_fails(r) for r in rows):
            out[t] = rows
    return out
