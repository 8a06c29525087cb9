"""Issue 46: a parametrize table's call judged with another test's keywords (tandem.envs.coding.keyword_rows).

httpkit's backoff table varies `attempt` only, at the defaults (base 0.5, cap 30), where an exponent clamped at 10
is invisible; test_backoff_custom_base passes base=0.1, cap=100. The table's twin crosses its attempts with those
keywords (cap and attempt varied inside their guard): the clamp fails a row of cap 200 past attempt 10; fixes in
other forms score 1.
"""

from __future__ import annotations

import ast
import random

import pytest

from tandem.envs.coding.call_rows import CALLS_SUFFIX, WANT, same_table
from tandem.envs.coding.keyword_rows import table_twin
from tandem.envs.coding.raising_rows import add_rows
from tests._swe import sandbox_backends
from tests.test_confined import _local_task
from tests.test_call_rows import plan_and_rewards
from tests.test_param_columns import _diff

_, BACKENDS = sandbox_backends()

SOURCE = '''def backoff(attempt, base=0.5, cap=30.0):
    return min(cap, base * 2 ** attempt)
'''
BUGGY = SOURCE.replace("base * 2 ** attempt", "attempt * 2 ** base")
TESTS = '''import pytest

from pkg import backoff


@pytest.mark.parametrize("attempt, expected", [(0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0)])
def test_backoff(attempt, expected):
    assert backoff(attempt) == expected


def test_backoff_custom_base():
    assert backoff(2, base=0.1, cap=100) == pytest.approx(0.4)
'''
REL = "tests/test_pkg.py"
TABLE = f"{REL}::test_backoff"
F2P = [f"{TABLE}[{a}-{e}]" for a, e in ((0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0))] + \
    [f"{REL}::test_backoff_custom_base"]
BACKOFF = "def _backoff(attempt, base=0.5, cap=30.0):\n{}\n\n\nbackoff = _backoff\n"
PROGRAMS = {
    "reference": (BACKOFF.format("    return min(cap, base * 2 ** attempt)"), 1.0),
    "ldexp": (BACKOFF.format("    import math\n\n    return min(cap, math.ldexp(base, attempt))"), 1.0),
    "doubling_in_a_loop": (BACKOFF.format(
        "    delay = base\n    for _ in range(attempt):\n        if delay >= cap:\n            break\n"
        "        delay *= 2\n    return min(delay, cap)"), 1.0),
    "exponent_clamped_at_10": (BACKOFF.format("    return min(cap, base * 2 ** min(attempt, 10))"), 0.0),
}


def _twin(tests: str) -> tuple[str, int] | None:
    tree = ast.parse(tests)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_backoff")
    return table_twin(func, tree, random.Random(0))


def test_the_tables_twin_crosses_its_column_with_the_other_tests_keywords():
    """Host only: the twin's check is the table's call with base=0.1 and cap a column; its rows reach attempts past
    10 with a cap of 200 (where the clamp shows), and stay inside the guard."""
    made = _twin(TESTS)
    assert made is not None
    text, n = made
    assert f"def test_backoff{CALLS_SUFFIX}(tandem_a0, tandem_a1, {WANT}):" in text
    assert f"assert backoff(tandem_a0, base=0.1, cap=tandem_a1) == {WANT}" in text
    mark = next(c for c in ast.walk(ast.parse(text)) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(
        "parametrize"))
    rows = ast.literal_eval(mark.args[1])
    assert len(rows) == n >= 40 and all(r[2] is None and 0 <= r[0] <= 20 and 0 < r[1] <= 200 for r in rows)
    assert any(r[0] > 10 and r[1] > 102.4 for r in rows)
    source, ids = add_rows(TESTS, REL, tuple(F2P), random.Random(0), failing=tuple(F2P[:1]))
    assert f"test_backoff{CALLS_SUFFIX}" in source and ids and all(same_table(i, f"{TABLE}[case0]") for i in ids)
    assert add_rows(TESTS, REL, tuple(F2P), random.Random(0), failing=tuple(F2P[-1:]))[0] == TESTS  # not failing


def test_a_hidden_tables_fresh_and_probe_rows_are_not_the_twins_domain():
    """The graded copy's table (params.hide) also holds fresh and probe rows; a probe reaches past the domain (a
    negative attempt, where a correct doubling loop answers base and the reference halves it): the twin starts from
    the table's own cases only, so no attempt it draws is negative."""
    hidden = TESTS.replace("[(0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0)])",
                           "[(0, None), (1, None), (3, None), (6, None), (10, None), (13, None), (-3, None)], "
                           "ids=['case0', 'case1', 'case2', 'case3', 'case4', 'fresh0', 'probe0'])")
    made = _twin(hidden)
    assert made is not None and "ids=['fresh0'" in made[0]
    mark = next(c for c in ast.walk(ast.parse(made[0])) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(
        "parametrize"))
    assert all(0 <= r[0] <= 20 for r in ast.literal_eval(mark.args[1]))


@pytest.mark.parametrize("tests", [
    TESTS.replace("base=0.1, cap=100", "0.1, 100"),  # no keyword
    TESTS.replace("backoff(2, base=0.1", "other(2, base=0.1"),  # another callee
    TESTS.replace("backoff(attempt)", "backoff(attempt, base=0.5)"),  # a keyword the table's call passes itself
    TESTS.replace("cap=100", "cap=CAP"),  # a keyword that is no constant
    TESTS.replace("assert backoff(attempt) == expected", "assert backoff(attempt) == expected\n    assert True"),
    TESTS.replace("assert backoff(attempt) == expected", "assert backoff(attempt) <= expected"),
    TESTS.replace("def test_backoff(attempt, expected):", "def test_backoff(attempt, expected, tmp_path):"),
])
def test_no_keyword_twin_where_the_table_or_the_keywords_are_not_plain(tests):
    assert _twin(tests) is None


@pytest.mark.e2e  # real sandboxes; the host-only tests above stay unit tests
@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_backoff_is_graded_with_the_other_tests_keywords(tmp_path, backend):
    task = _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), F2P, [],
                       "The first retry should wait `base` seconds and the delay should double each attempt.")
    plan, rewards = plan_and_rewards(tmp_path, backend, task, PROGRAMS)
    assert rewards == {name: want for name, (_, want) in PROGRAMS.items()}, rewards
    assert not plan.refused, plan.refused
    graded = plan.graded_id(F2P[0])
    assert any(CALLS_SUFFIX in r for r in plan.differential[graded])
