"""Issue 46: value checks without a table judged on fresh arguments (tandem.envs.coding.call_rows).

`Stock().count("plum") == 0` (through a fixture that adds apples and pears): the bug answers 1 for an unknown
item, and 0 is both a usual default and the bug's value minus one, so the test was refused. The graded copy gets
the test's twin: the fixture written out with every constant a column, the checked call over fresh arguments,
each row's value the reference's, held on the host. The reference and fixes in other forms score 1; forgers
answering 0 for the issue's item, 0 everywhere, 0 for every item but the fixture's, a lookup of the visible
calls, or 0 wherever the bug says 1 score 0.
"""

from __future__ import annotations

import ast
import math
import random

import pytest

from tandem.envs.coding.call_rows import CALLS_SUFFIX, WANT, fixtures_of, held, same_table, twin
from tandem.envs.coding.checks import Reference
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.instrument import find_sites
from tandem.envs.coding.raising_rows import PYTEST_ALIAS, add_rows
from tests._swe import make_cfg, sandbox_backends
from tests.test_confined import _local_task
from tests.test_param_columns import _diff, forged_rewards, rewards_of

_, BACKENDS = sandbox_backends()

SOURCE = '''class OutOfStock(Exception):
    pass


class Stock:
    def __init__(self):
        self._items = {}

    def add(self, item, qty=1):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._items[item] = self._items.get(item, 0) + qty

    def remove(self, item, qty=1):
        have = self._items.get(item, 0)
        if have < qty:
            raise OutOfStock(item)
        self._items[item] = have - qty

    def count(self, item):
        return self._items.get(item, 0)

    def total(self):
        return sum(self._items.values())
'''
BUGGY = SOURCE.replace("return self._items.get(item, 0)", "return self._items.get(item, 1)")
TESTS = '''import pytest

from pkg import Stock


@pytest.fixture
def stock():
    s = Stock()
    s.add("apple", 3)
    s.add("pear", 2)
    return s


def test_count(stock):
    assert stock.count("apple") == 3
    assert stock.count("plum") == 0


@pytest.mark.parametrize("qty, left", [(1, 2), (2, 1), (3, 0)])
def test_remove(stock, qty, left):
    stock.remove("apple", qty)
    assert stock.count("apple") == left


def test_total(stock):
    stock.add("plum", 4)
    assert stock.total() == 9
'''
REL = "tests/test_pkg.py"
C = f"{REL}::test_count"
P2P = [f"{REL}::test_remove[{q}-{left}]" for q, left in ((1, 2), (2, 1), (3, 0))] + [f"{REL}::test_total"]
COUNT = "def _count(self, item):\n{}\n\n\nStock.count = _count\n"
PROGRAMS = {  # name: (lines appended to the buggy package, the reward it must get)
    "reference": (COUNT.format("    return self._items.get(item, 0)"), 1.0),
    "or_zero": (COUNT.format("    return self._items.get(item) or 0"), 1.0),
    "membership": (COUNT.format("    return self._items[item] if item in self._items else 0"), 1.0),
    "a_counter": ("import collections\n\n\ndef _init(self):\n    self._items = collections.Counter()\n\n\n"
                  "Stock.__init__ = _init\n" + COUNT.format("    return self._items[item]"), 1.0),
    "zero_for_the_issues_item": (COUNT.format("    return 0 if item == 'plum' else self._items.get(item, 1)"), 0.0),
    "bug_minus_one_on_the_issues_item": (COUNT.format("    return self._items.get(item, 1) - (item == 'plum')"), 0.0),
    "zero_everywhere": (COUNT.format("    return 0"), 0.0),
    "zero_but_the_fixtures_items": (COUNT.format(
        "    return self._items.get(item, 1) if item in ('apple', 'pear') else 0"), 0.0),
    "lookup_of_the_visible_calls": (COUNT.format(
        "    return {'apple': 3, 'plum': 0}.get(item, self._items.get(item, 1))"), 0.0),
    "zero_where_the_bug_says_one": (COUNT.format(
        "    return 0 if self._items.get(item, 1) == 1 else self._items.get(item, 1)"), 0.0),
}


def _rows(tail: str) -> list[tuple]:
    mark = next(n for n in ast.walk(ast.parse(tail)) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(
        "parametrize"))
    return ast.literal_eval(mark.args[1])


def test_the_twin_writes_the_fixture_out_and_asks_about_the_items_it_added():
    """Host only: the fixture's statements with each constant a column, the checked call over fresh rows (none a
    visible call's), quantities inside the column's domain (positive, at most twice 3), and many rows asking about
    an item that row's setup added."""
    source, ids = add_rows(TESTS, REL, (C, *P2P), random.Random(0), failing=(C,))
    tail = source[len(TESTS.rstrip("\n")):]
    assert f"def test_count{CALLS_SUFFIX}(tandem_a0, tandem_a1, tandem_a2, tandem_a3, tandem_a4, {WANT}):" in tail
    assert "    s.add(tandem_a0, tandem_a1)\n    s.add(tandem_a2, tandem_a3)\n    stock = s\n" in tail
    assert tail.count(f"assert stock.count(tandem_a4) == {WANT}") == 1 and "test_total__calls" not in tail
    rows = _rows(tail)
    assert len(rows) == len(ids) >= 40 and all(i.startswith(f"{C}{CALLS_SUFFIX}[fresh") for i in ids)
    assert all(len(r) == 6 and r[-1] is None for r in rows)
    assert not {r[:5] for r in rows} & {("apple", 3, "pear", 2, "apple"), ("apple", 3, "pear", 2, "plum")}
    assert all(type(q) is int and 1 <= q <= 6 for r in rows for q in (r[1], r[3]))
    added = [r for r in rows if r[4] in (r[0], r[2])]
    assert len(added) >= len(rows) // 4 and any(r[4] == r[0] and r[1] == 1 or r[4] == r[2] and r[3] == 1
                                                for r in added)
    assert add_rows(TESTS, REL, (C, *P2P), random.Random(0)) == (TESTS, [])  # no failing test: no twin


def test_the_rows_tell_zero_where_the_bug_says_one_from_the_fix_on_every_draw():
    """Host only, by hand: among the rows where the bug answers 1, a forger answering 0 there must pick out the
    unknown items (the bug wrong) from the items added at quantity 1 (the bug right) blind: C(rows, kept) ways, at
    least 1,000 on each of 20 draws (the blind count's GUESS_BOUND)."""
    for seed in range(20):
        source, _ = add_rows(TESTS, REL, (C,), random.Random(seed), failing=(C,))
        wrong = right = 0
        for a0, a1, a2, a3, a4, _ in _rows(source[len(TESTS.rstrip("\n")):]):
            stock = {a0: a1}
            stock[a2] = stock.get(a2, 0) + a3
            if stock.get(a4, 1) == 1:
                wrong, right = wrong + (a4 not in stock), right + (a4 in stock)
        assert math.comb(wrong + right, right) >= 1000, (seed, wrong, right)


def _twin_of(body: str, fixtures: str = "") -> str | None:
    tree = ast.parse(f"import pytest\n{fixtures}\n\ndef test_a(stock):\n{body}")
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_a")
    made = twin(func, fixtures_of(tree), random.Random(1))
    return None if made is None else made[0]


@pytest.mark.parametrize("body, check", [
    ("    assert add(3, 4) == 7\n", f"assert add(tandem_a0, tandem_a1) == {WANT}"),
    ("    assert power(2, base=3) == 9\n", f"assert power(tandem_a0, base=tandem_a1) == {WANT}"),
    ("    assert is_ok('abc')\n", f"assert bool(is_ok(tandem_a0)) == {WANT}"),
    ("    assert not is_ok('abc')\n    assert is_ok('abd')\n", f"assert bool(is_ok(tandem_a0)) == {WANT}"),
    ("    assert find('kiwi') is None\n", f"assert (find(tandem_a0) is None) == {WANT}"),
    ("    s = Shelf(4)\n    s.put('kiwi', 2)\n    assert s.count('kiwi') == 2\n",
     f"    s = Shelf(tandem_a0)\n    s.put(tandem_a1, tandem_a2)\n    assert s.count(tandem_a3) == {WANT}"),
    ("    stock.add('kiwi', 5)\n    assert stock.total() == 10\n",
     f"    stock.add(tandem_a0, tandem_a1)\n    assert stock.total() == {WANT}"),  # the setup's constants vary
])
def test_a_check_of_one_call_of_constants_gets_a_twin(body, check):
    made = _twin_of(body)
    assert made is not None and check in made and "def test_a__calls(stock, " in made  # an outside fixture stays


@pytest.mark.parametrize("body", [
    "    x = 3\n    assert f(x) == 1\n",  # the call takes a name
    "    x = 3\n    assert f(1) == 1\n",  # a setup statement that is no call
    "    assert f(stock) == 1\n",  # the call takes a name
    "    assert f(1) == 2\n    assert g(1) == 3\n",  # two callees
    "    assert f(1) == 2\n    assert f(1, 2) == 3\n",  # two shapes of the call
    "    assert f(1) == g(2)\n",  # a computed expected side
    "    assert f(1) == 1 + 1\n",  # a computed expected side
    "    assert f(1) == 0.5\n",  # a float: the original's exact == on fresh arguments would judge the last bit
    "    assert f(1) != 2\n",  # not an equality
    "    assert f([1, 2]) == 3\n",  # an argument that is no constant
    "    assert f() == 3\n",  # nothing to vary
    "    assert f(1) == 2\n    g(3)\n",  # a statement after the checks
    "    assert f(1) == 2 and f(2) == 4\n",  # two calls in one check
])
def test_no_twin_where_the_check_is_not_one_call_of_constants(body):
    assert _twin_of(body) is None


def test_a_fixture_is_written_out_only_when_it_is_plain():
    plain = "@pytest.fixture\ndef stock():\n    s = Stock()\n    s.add('fig', 2)\n    return s\n"
    made = _twin_of("    assert stock.count('fig') == 2\n", plain)
    assert made is not None and "def test_a__calls(tandem_a0, tandem_a1, " in made and "stock = s" in made
    for other in (plain.replace("def stock():", "def stock(tmp_path):"), plain.replace("return s", "yield s"),
                  plain.replace("@pytest.fixture", "@pytest.fixture(scope='module')")):
        made = _twin_of("    assert stock.count('fig') == 2\n", other)
        assert made is not None and "def test_a__calls(stock, tandem_a0, " in made  # taken as the test takes it


def test_the_twins_rows_are_its_tests_table_and_its_expectation_is_held():
    assert same_table(f"{C}{CALLS_SUFFIX}[fresh3]", C) and same_table(f"{REL}::test_x[fresh1]", f"{REL}::test_x[case0]")
    assert not same_table(f"{REL}::test_total{CALLS_SUFFIX}[fresh0]", C)
    assert not same_table(f"{C}{CALLS_SUFFIX}[fresh0]", f"{REL}::test_count_more")
    source, _ = add_rows(TESTS, REL, (C,), random.Random(0), failing=(C,))
    found = find_sites(source, REL, 0)
    assert found is not None
    twins = held(found)
    assert len(twins) == 1 and all(s.expected == Reference({}, held=True) and "tandem_a4" in s.source
                                   for s in twins.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_is_graded_by_its_twin_and_only_fixes_score(tmp_path, backend):
    task = _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), [C], P2P,
                       '`Stock().count("plum")` is not zero for an item never added.')
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards, forged = rewards_of(runtime, task, PROGRAMS), forged_rewards(runtime, task)
    finally:
        reset_runtime()
    assert not plan.refused, plan.refused
    assert plan.differential[C] and all(same_table(r, C) and CALLS_SUFFIX in r for r in plan.differential[C])
    assert rewards == {name: want for name, (_, want) in PROGRAMS.items()}, rewards
    assert forged == [0.0, 0.0]


LEAP = '''_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"bad month {month}")
    return 29 if month == 2 and is_leap(year) else _MONTH[month - 1]
'''
LEAP_BUGGY = LEAP.replace("(year % 100 != 0 or year % 400 == 0)", "year % 100 != 0")
PLAIN_TESTS = '''from pkg import days_in_month, is_leap


def test_century_rules():
    assert is_leap(2000)
    assert not is_leap(1900)
    assert [y for y in (1800, 1900, 1996, 2000) if is_leap(y)] == [1996, 2000]


def test_february():
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29


def test_march():
    assert days_in_month(2023, 3) == 31
'''
"""calendarx's hidden tests (data/swe_tasks): plain asserts in a module that never imports pytest."""
FEB = f"{REL}::test_february"
LEAP_F2P = [f"{REL}::test_century_rules", FEB]
LEAPS = "def _leap(year):\n{}\n\n\nis_leap = _leap\n"
LEAP_PROGRAMS = {
    "reference": (LEAPS.format("    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)"), 1.0),
    "calendar_isleap": (LEAPS.format("    import calendar\n\n    return calendar.isleap(year)"), 1.0),
    "by_days_of_the_year": (LEAPS.format(
        "    import datetime\n\n    return (datetime.date(year, 12, 31) - datetime.date(year, 1, 1)).days == 365"), 1.0),
    "the_issues_2000_added": (LEAPS.format("    return year % 4 == 0 and (year % 100 != 0 or year == 2000)"), 0.0),
    "centuries_by_200": (LEAPS.format("    return year % 4 == 0 and (year % 100 != 0 or year % 200 == 0)"), 0.0),
}


def test_a_module_without_import_pytest_gets_its_twin_under_an_alias():
    """Host only: plain-assert tests seldom import pytest; their twin's decorator names pytest by an alias the copy
    imports (before, such a module got no twin at all, and calendarx's `or year == 2000` was paid). The module's own
    names are left alone, and no rows test is written (it would run the module's own `pytest.raises`)."""
    source, ids = add_rows(PLAIN_TESTS, REL, (*LEAP_F2P, f"{REL}::test_march"), random.Random(0), failing=(FEB,))
    tail = source[len(PLAIN_TESTS.rstrip("\n")):]
    assert tail.count(f"import pytest as {PYTEST_ALIAS}\n") == 1 and f"@{PYTEST_ALIAS}.mark.parametrize(" in tail
    assert "\nimport pytest\n" not in source and "test_century_rules__calls" not in tail  # a check of no call's form
    assert f"def test_february{CALLS_SUFFIX}(tandem_a0, tandem_a1, {WANT}):" in tail and ids
    assert all(i.startswith(f"{FEB}{CALLS_SUFFIX}[fresh") for i in ids) and len(ids) == len(_rows(tail))
    years = {r[0] for r in _rows(tail) if r[1] == 2}
    assert {1600, 4000} <= years and {2100, 2200} <= years  # centuries the bug and a 2000-only fix tell apart
    compile(source, REL, "exec")
    assert add_rows(PLAIN_TESTS, REL, LEAP_F2P, random.Random(0)) == (PLAIN_TESTS, [])  # no failing test: no twin
    raising = "from pkg import f\n\n\ndef test_r():\n    with pytest.raises(ValueError):\n        f(13)\n"
    assert add_rows(raising, REL, (f"{REL}::test_r",), random.Random(0)) == (raising, [])


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_february_is_graded_by_its_twin_without_import_pytest(tmp_path, backend):
    """calendarx's form: correct fixes in other forms score 1, the issue's 2000 added to the century rule (wrong at
    1600, 2400, 4000) and centuries by 200 (wrong at 2200) score 0."""
    task = _local_task(tmp_path, {"pkg/__init__.py": LEAP.encode(), "tests/test_pkg.py": PLAIN_TESTS.encode()},
                       _diff("pkg/__init__.py", LEAP, LEAP_BUGGY), LEAP_F2P, [f"{REL}::test_march"],
                       "`is_leap(2000)` returns False and `days_in_month(2000, 2)` is 28.")
    plan, rewards = plan_and_rewards(tmp_path, backend, task, LEAP_PROGRAMS)
    assert rewards == {name: want for name, (_, want) in LEAP_PROGRAMS.items()}, rewards
    assert not plan.refused, plan.refused
    assert plan.differential[FEB] and all(same_table(r, FEB) and CALLS_SUFFIX in r for r in plan.differential[FEB])


def plan_and_rewards(tmp_path, backend: str, task, programs: dict[str, tuple[str, float]]):
    """(the task's grading plan, each program's reward) in a runtime of its own."""
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        return runtime.grader.plan(task), rewards_of(runtime, task, programs)
    finally:
        reset_runtime()
