"""Issue 46: hard rows of an integer predicate (tandem.envs.coding.hard_rows). Host only: the hard numbers against
values worked out by hand and published tables (OEIS A001567, A002997), where they apply, how params appends and
shuffles them, and what they refuse: approximations of is_prime that the fresh rows' band (up to 98) let through,
while every correct primality fix agrees with the reference on every hard row."""

from __future__ import annotations

import math
import random
import re
import textwrap
from types import SimpleNamespace

from tandem.envs.coding.hard_rows import (HARD_BAND, HARD_ROWS, beyond, hard_classes, hard_columns, hard_rows,
                                          hard_values, require_hard_rows)
from tandem.envs.coding.params import hide
from tests._equivalence import band
from tests._fix_corpus_oracle2 import ORACLE2
from tests._fix_corpus_real import REALISTIC

PRIME_TABLE = [(0, False), (1, False), (2, True), (3, True), (4, False), (9, False), (25, False), (29, True),
               (49, False)]  # numkit's test_is_prime
COLUMN = [n for n, _ in PRIME_TABLE]
SOURCE = f'''import pytest

from numkit import is_prime


@pytest.mark.parametrize("n, expected", {PRIME_TABLE!r})
def test_is_prime(n, expected):
    assert is_prime(n) == expected
'''
FAILING = tuple(f"tests/test_bits.py::test_is_prime[{n}-False]" for n in (4, 9, 25, 49))
TESTS = FAILING + tuple(f"tests/test_bits.py::test_is_prime[{n}-{w}]" for n, w in PRIME_TABLE if n not in (4, 9, 25, 49))


def reference(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def test_the_hard_numbers_match_the_published_tables():
    c = hard_classes(10_000)
    assert c["fermat2"][:10] == (341, 561, 645, 1105, 1387, 1729, 1905, 2047, 2465, 2701)  # A001567
    assert c["carmichael"] == (561, 1105, 1729, 2465, 2821, 6601, 8911)  # A002997 below 10^4
    assert c["fermat3"][:4] == (91, 121, 286, 671) and c["fermat5"][:4] == (4, 124, 217, 561)
    assert len(hard_classes(100_000)["fermat2"]) == 78 and len(hard_classes(100_000)["carmichael"]) == 16
    small = hard_classes(490)
    assert small["prime_power"] == (4, 8, 9, 16, 25, 27, 32, 49, 64, 81, 121, 125, 128, 169, 243, 256, 289, 343, 361)
    assert small["two_primes"][:8] == (49, 77, 91, 119, 121, 133, 143, 161) and 341 in small["two_primes"]
    assert small["past_bound"] == (67, 101, 131, 257, 467, 479, 487)  # after 64, 100, 128, 256; the 3 largest
    assert small["two_power"][-3:] == (255, 256, 257)  # 511 > 490
    assert small["perfect_factorial"] == (1, 2, 6, 24, 28, 120)
    assert all(0 <= v <= 490 for values in small.values() for v in values)


def test_every_non_negative_int_column_of_a_predicate_qualifies():
    assert hard_columns(PRIME_TABLE, [1]) == [0]
    assert hard_columns([(1600, True), (1900, False), (2000, True)], [1]) == [0]  # a year column: fitted multiples
    assert hard_columns([(0, 1, True), (2, "a", False)], [2]) == [0]  # the int column of two
    assert hard_columns([(0, 1, True), (2, 3, False)], [2]) == [0, 1]
    assert hard_columns([(-1, False), (2, True), (9, False)], [1]) == []  # a negative value
    assert hard_columns([(0, 0), (1, 1), (10, 55)], [1]) == []  # a value function (fibonacci): no predicate
    assert hard_columns([(True, False), (False, True)], [1]) == []  # bools are no ints here
    assert hard_columns([(0.0, False), (2.0, True)], [1]) == []  # floats
    assert hard_columns([((1, 2), False), ((2, 3), True)], [1]) == []  # a record


def test_a_year_column_gets_the_fitted_multiples_beyond_the_guard_and_no_number_class():
    years = [2024, 2023, 1900, 2000, 2100, 1600, 1996]  # datekit's is_leap; 2000 and 1600 fail the bug
    for seed in range(10):
        values = hard_values(years, random.Random(seed), failing=[2000, 1600])
        assert len(values) == HARD_ROWS and all(4200 < v <= 21000 for v in values), sorted(values)
        assert {4400, 4800, 20800, 20000} <= set(values), sorted(values)  # 400's, 1600's first past 4200, tops
    assert not hard_values(years, random.Random(0))  # no failing values: no fitted class, no number class


def test_the_band_is_the_oracles_domain_and_no_visible_row_returns():
    rows = [(n,) for n in COLUMN]
    assert band((HARD_BAND * 49,), rows) == "domain" and band((HARD_BAND * 49 + 1,), rows) == "outside"
    for seed in range(20):
        values = hard_values(COLUMN, random.Random(seed))
        assert values == hard_values(COLUMN, random.Random(seed), failing=None)
        assert len(values) == len(set(values)) == HARD_ROWS
        assert all(0 <= v <= HARD_BAND * 49 and v not in COLUMN for v in values), values
        assert all(band((v,), rows) != "outside" for v in values)
        assert 341 in values and any(p * p in values for p in (11, 13, 17, 19)), sorted(values)
        assert {91, 121, 124, 217, 67, 101, 8, 16, 77} <= set(values), sorted(values)  # each class's two smallest
    every = hard_values(COLUMN, random.Random(0), n=1000)  # no cap: every hard number of the band
    union = {v for values in hard_classes(490).values() for v in values} - set(COLUMN)
    assert sorted(every) == sorted(union)
    assert hard_values(COLUMN, random.Random(1)) != hard_values(COLUMN, random.Random(2))  # beyond the first: drawn


def test_a_wider_table_meets_561_and_645_beyond_the_first_pseudoprime():
    column = [0, 1, 2, 3, 10, 50, 100]  # band up to 1000
    for seed in range(10):
        values = set(hard_values(column, random.Random(seed)))
        assert {341, 561} <= values and values & {645, 1105, 1387, 1729, 1905} - {561}, sorted(values)


def test_hard_rows_ride_in_the_fresh_rows_under_fresh_ids_in_one_shuffle():
    ends = set()
    for seed in range(6):
        hidden = hide(SOURCE, "tests/test_bits.py", TESTS, rng=random.Random(seed), failing=FAILING)
        assert len(hidden.hard) == HARD_ROWS and set(hidden.hard) <= set(hidden.fresh), hidden.hard
        rows_ = _rows_of(hidden.source)
        assert all(beyond_ == (rows_[i.rsplit("[", 1)[1][:-1]] > 98) for i, beyond_ in hidden.hard.items())
        assert not set(hidden.hard) & set(hidden.pool)
        rows = _rows_of(hidden.source)
        hard = {rows[i.rsplit("[", 1)[1][:-1]] for i in hidden.hard}
        assert 341 in hard and hard == {r[0] for r, _ in hard_rows(PRIME_TABLE, [1], _hard_rng(seed), [4, 5, 6, 8])}
        fresh = [rows[i.rsplit("[", 1)[1][:-1]] for i in hidden.fresh if "[fresh" in i]
        assert len(fresh) == len(set(fresh)) and not set(fresh) & set(COLUMN)  # no row twice, none visible
        order = [i for i in hidden.fresh if "[fresh" in i]
        places = sorted(order.index(h) for h in hidden.hard)
        assert places != list(range(places[0], places[0] + len(places))), places  # no block of their own
        ends.add(tuple(places[-3:]))
    assert len(ends) > 1
    plain = hide(SOURCE, "tests/test_bits.py", TESTS, rng=random.Random(0), failing=())  # no failing row: none
    assert not plain.hard


def _hard_rng(seed: int) -> random.Random:
    from tandem.envs.coding.hard_rows import hard_rng
    return hard_rng(_after_sample(seed), "tests/test_bits.py::test_is_prime")


def _after_sample(seed: int) -> random.Random:
    """The plan's generator as params has it when it draws the hard rows (after the fresh and probe rows)."""
    from tandem.envs.coding.confined import sample
    rng = random.Random(seed)
    sample(PRIME_TABLE, [1], rng, [4, 5, 6, 8])
    return rng


def _rows_of(source: str) -> dict[str, int]:
    """pytest id -> n of the graded copy's table."""
    values = re.search(r"parametrize\(\"n, expected\", (\[.*?\]), ids=(\[.*?\])\)", source, re.S)
    rows, ids = eval(values.group(1)), eval(values.group(2))
    return {i: r[0] for i, r in zip(ids, rows)}


APPROXIMATIONS = {
    "fermat": lambda n: n > 1 and (n == 2 or pow(2, n - 1, n) == 1),
    "trial7": lambda n: n in (2, 3, 5, 7) or n > 1 and all(n % p for p in (2, 3, 5, 7)),
    "range10": lambda n: n > 1 and all(n % d for d in range(2, min(n, 10))),
    "sieve100": lambda n: 1 < n < 100 and all(n % d for d in range(2, n)),
    "half": lambda n: n > 1 and all(n % d for d in range(2, n // 2)),  # wrong at 4 only: a visible row
}


def _corpus_fixes() -> dict:
    """The corpus's is_prime fixes that rewrite the function alone (tests/_fix_corpus_real.py, _fix_corpus_oracle2.py),
    defined here: no sandbox, no module beside them."""
    out = {}
    for fx in (*REALISTIC, *ORACLE2):
        ops = [op for op in fx.ops if op.get("function") == "is_prime"]
        if fx.task.endswith("is_prime") and len(ops) == len(fx.ops) == 1 and fx.form != "cache":
            space: dict = {}
            exec(textwrap.dedent(ops[0]["source"]), space)
            out[fx.name] = space["is_prime"]
    return out


def test_approximations_fail_a_hard_row_and_correct_fixes_none():
    assert len(_corpus_fixes()) >= 4  # 6k±1, Miller-Rabin, a sieve sized from n, isqrt with all()
    for seed in range(20):
        values = hard_values(COLUMN, random.Random(seed))
        for name, approx in APPROXIMATIONS.items():
            wrong = [v for v in values if approx(v) != reference(v)]
            visible = [n for n in COLUMN if approx(n) != reference(n)]
            assert wrong or visible, (name, seed)
        assert [v for v in values if APPROXIMATIONS["fermat"](v) != reference(v)] == [341]
        for name, fix in _corpus_fixes().items():
            assert all(fix(v) == reference(v) for v in [*values, *COLUMN]), name


def test_fermat_with_341_patched_fails_where_the_band_reaches_561():
    patched = lambda n: APPROXIMATIONS["fermat"](n) and n != 341  # noqa: E731
    assert all(patched(v) == reference(v) for v in range(491))  # is_prime's band: a fix there (the oracle agrees)
    for seed in range(10):
        values = hard_values([0, 1, 2, 3, 10, 50, 100], random.Random(seed))
        assert any(patched(v) != reference(v) for v in values), seed


def test_each_graded_failing_test_requires_its_tables_kept_hard_rows():
    table = "t.py::test_is_prime"
    plan = SimpleNamespace(refused="", differential={f"{table}[case4]": [f"{table}[fresh1]"]})
    hard = {f"{table}[fresh3]": True, f"{table}[fresh1]": False, f"{table}[fresh9]": True, "t.py::test_other[fresh2]": True}
    kept = [f"{table}[fresh1]", f"{table}[fresh3]", "t.py::test_other[fresh2]"]  # fresh9: the reference raised
    require_hard_rows(plan, (f"{table}[case4]", f"{table}[case5]", "t.py::test_third[case0]"), kept, hard)
    assert plan.differential == {f"{table}[case4]": [f"{table}[fresh1]", f"{table}[fresh3]"],
                                 f"{table}[case5]": [f"{table}[fresh3]", f"{table}[fresh1]"]}
    assert plan.narrower == [f"{table}[fresh3]", "t.py::test_other[fresh2]"]  # beyond the guard, kept
    assert beyond(hard, ["x", f"{table}[fresh1]", f"{table}[fresh3]"]) == (["x", f"{table}[fresh1]"], [f"{table}[fresh3]"])
    refused = SimpleNamespace(refused="no", differential={})
    require_hard_rows(refused, (f"{table}[case4]",), kept, hard)
    assert refused.differential == {}


def test_no_table_of_the_wrong_shape_gets_hard_rows():
    for rows in ([(-1, True), (1900, False)], [(0, 0), (1, 1), (10, 55), (2, 1)]):
        assert hard_rows(rows, [1], random.Random(0)) == []
    found = hard_rows(PRIME_TABLE, [1], random.Random(0))
    assert found and all(r[1] is None and type(r[0]) is int and beyond_ == (r[0] > 98) for r, beyond_ in found)
    two = hard_rows([(0, 0, True), (10, 10, True), (11, 10, False), (3, 5, True)], [2], random.Random(0), [0, 1])
    assert len(two) == HARD_ROWS and all(r[2] is None and (r[0], r[1]) not in ((0, 0), (10, 10), (11, 10), (3, 5))
                                         and (r[0] == r[1] or r[0] in (0, 10) or r[1] in (0, 10)) for r, _ in two)


def test_beyond_the_guard_a_row_whose_body_raised_passes_and_a_wrong_value_does_not():
    from tandem.envs.coding.checks import Reference, Site
    from tandem.envs.coding.verdict import Stream, judge

    rows = [f"t.py::test_is_leap[fresh{i}]" for i in range(4)]
    site = Site(0, "t.py", 6, "==", Reference({t: (True,) for t in rows}, held=True), "is_leap(year)")
    stream = Stream(started=True, exitstatus=1,
                    status={rows[0]: "FAILED", rows[1]: "FAILED", rows[2]: "PASSED", rows[3]: "FAILED"},
                    raised={rows[0]: True, rows[1]: True, rows[2]: False, rows[3]: False},
                    checks={rows[1]: [(0, False)], rows[2]: [(0, False)]})
    required = {t: {0} for t in rows}
    narrow = judge(rows, stream, 1, "", {0: site}, required, narrower=set(rows)).tests
    assert narrow == {rows[0]: "PASSED", rows[1]: "FAILED", rows[2]: "FAILED", rows[3]: "FAILED"}
    # raised before its check: passes; a value written then raised, a wrong value, a failure without raising: not
    assert judge(rows, stream, 1, "", {0: site}, required).tests[rows[0]] == "FAILED"  # inside the guard: equal only
