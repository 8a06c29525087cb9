"""Issue 46: separating rows and grading by separation (tandem.envs.coding.separating, separating_plan, pool_rows).

Host only. A forger's rule is (selector S, value source V): "where S(x) return V(x, bug(x)), else bug(x)". The family
F and the search are checked by hand on is_leap (the bug drops `year % 400 == 0`; the issue states 1600 and 2000):
learn:odd of tests/_oracle_forgers.py is the rule "not bug where year % 16 == 0", right on every multiple of 400 and
wrong on 2016, 2032...; then on 24 draws of the real table's fresh rows and pool (params.hide), with the reference's
and the bug's values computed here, as the plan's reference runs would."""

from __future__ import annotations

import ast
import calendar
import functools
import random
from unittest import mock

import tandem.envs.coding.fresh_rows as fresh_rows_module
import tandem.envs.coding.params as params
from tandem.envs.coding.blind import Row, blind_chance
from tandem.envs.coding.confined import is_probe
from tandem.envs.coding.params import hide
from tandem.envs.coding.pool_rows import fitted_divisors, pool_rows
from tandem.envs.coding.separating import Item, family, judge_rules, selectors, separate, sources
from tandem.envs.coding.separating_plan import Pool, computed_by, separated, separating_rows
from tandem.envs.coding.wide_pools import in_domain
from tests.test_wide_pools import LEAP, LEAP_TESTS, YEARS


def leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def leap_bug(y: int) -> bool:
    return y % 4 == 0 and y % 100 != 0


def item(row: str, year: int) -> Item:
    return Item(row, (year, None), leap_bug(year), leap(year))


def pool_of(pool: list[Item]) -> Pool:
    return Pool({"is_leap": pool}, {"is_leap": [(y, None) for y in YEARS]},
                {"is_leap": [(1600, None), (2000, None)]}, {"is_leap": [1600, 2000, *YEARS]})


REQUIRED = [item("f0", 2400), item("f1", 2024), item("f2", 2100)]
POOL = [item("p0", 2016), item("p1", 1200), item("p2", 1700), item("p3", 2032)]


def test_the_selectors_fitted_to_the_failing_inputs_hold_the_divisors_of_their_gcd():
    # 1600 and 2000: gcd 400 = 2^4 * 5^2; its divisors > 20 are 25, 40, 50, 80, 100, 200, 400; 2..20 always
    assert {16, 25, 40, 50, 80, 100, 200, 400} <= set(fitted_divisors([1600, 2000]))
    assert set(fitted_divisors([])) == set(range(2, 21))
    chosen = selectors([[1600, 2000, 2016]], [(1600,), (2000,)], [], [True, False])
    assert chosen["x0 % 16 == 0"]((2016,), False) and not chosen["x0 % 16 == 0"]((2020,), True)
    assert chosen["x0 >= 2000"]((2000,), False) and chosen["x0 == 1600"]((1600,), False)
    assert chosen["the bug's value is False"]((1,), False) and chosen["always"]((1,), None)


def test_a_rule_no_required_row_refutes_gets_a_pool_row_that_does():
    fam = family([*REQUIRED, *POOL], selectors([[2400, 2024, 2100, 2016, 1200, 1700, 2032]], [(1600,), (2000,)], [],
                                               [True, False]), sources({"not": lambda v: not v}, 1, []))
    rule = ("x0 % 16 == 0", "the bug's value not")  # learn:odd: right on 2400, 2024 (no multiple of 16), 2100
    verdict = judge_rules(fam, {"f0", "f1", "f2"})
    assert rule in verdict.open
    picked = separate(fam, {"f0", "f1", "f2"}, lambda row: "is_leap")
    assert {"p0", "p3"} & set(picked)  # 2016 or 2032: the bug right, the flip wrong
    after = judge_rules(fam, {"f0", "f1", "f2", *picked})
    assert rule not in after.open and not after.open
    # the fix itself, as rules: equal to the reference on every row, required and pool
    assert "the bug's value not where x0 % 400 == 0" in after.fixes
    assert "the constant True where x0 % 400 == 0" in after.fixes
    assert "the constant True where x0 % 16 == 0" in after.fixes  # a multiple of 16 is leap: a fix too


def test_the_cap_leaves_rules_open_and_the_function_not_separated():
    assert separating_rows({"is_leap": REQUIRED}, pool_of(POOL)) and separated(
        {"is_leap": [*REQUIRED, *[i for i in POOL if i.row in separating_rows({"is_leap": REQUIRED}, pool_of(POOL))]]},
        pool_of(POOL)) == {"is_leap"}
    fam = family([*REQUIRED, *POOL], selectors([[2400, 2016]], [(1600,), (2000,)], [], []),
                 sources({"not": lambda v: not v}, 1, []))
    assert separate(fam, {"f0", "f1", "f2"}, lambda row: "is_leap", cap=0) == []
    assert separated({"is_leap": REQUIRED}, pool_of(POOL)) == set()  # open rules, nothing picked


def test_a_function_whose_fresh_rows_the_bug_passes_or_only_visible_ones_fail_is_not_separated():
    right = [item("f1", 2024), item("f2", 2100)]
    assert separated({"is_leap": right}, pool_of(POOL)) == set()  # the bug fails no required row
    visible = [item("f0", 2000), *right]  # the bug fails only a visible input: a lookup passes it
    assert separated({"is_leap": visible}, pool_of([])) == set()


@functools.cache
def _draw(seed: int, extras: bool = True) -> tuple[dict[str, int], list[str], list[str]]:
    """is_leap's table drawn as the plan draws it: (id -> year, the fresh rows, the pool rows); without `extras`,
    no edge rows and no hard rows (tandem.envs.coding.edge_rows, hard_rows): the random fresh rows alone."""
    ids = tuple(f"{LEAP}[{y}-{leap(y)}]" for y in YEARS)
    with mock.patch.object(params, "hard_rows", params.hard_rows if extras else lambda *a, **k: []), \
            mock.patch.object(fresh_rows_module, "edge_rows", fresh_rows_module.edge_rows if extras else lambda *a, **k: []):
        hidden = hide(LEAP_TESTS, "tests/test_leap.py", ids, rng=random.Random(seed),
                      failing=(f"{LEAP}[1600-True]", f"{LEAP}[2000-True]"))
    func = next(n for n in ast.parse(hidden.source).body if isinstance(n, ast.FunctionDef))
    mark = func.decorator_list[0]
    names = ast.literal_eval(next(k.value for k in mark.keywords if k.arg == "ids"))
    years = {f"{LEAP}[{i}]": r[0] for i, r in zip(names, ast.literal_eval(mark.args[1])) if i.startswith("fresh")}
    return years, [f for f in years if f not in hidden.pool], list(hidden.pool)


SEEDS = range(24)


def test_learn_odd_on_is_leap_meets_a_separating_row_on_every_draw():
    """The open forgery of the last stop: on every one of 24 draws, the fresh rows and the separating rows picked
    from the pool hold a multiple of 16 the bug gets right (learn:odd fails it), the function is separated, and the
    reference and calendar.isleap answer every required row; without the separating rows (and this stop's edge and hard rows) some draws pay it."""
    paid_without = 0
    for seed in SEEDS:
        years, fresh, pool = _draw(seed)
        required = {"is_leap": [item(f, years[f]) for f in fresh]}
        learnt = pool_of([item(f, years[f]) for f in pool])
        picked = separating_rows(required, learnt)
        assert set(picked) <= set(pool) and len(picked) <= 16, (seed, picked)
        rows = [years[f] for f in fresh + picked]
        learn_odd = [not leap_bug(y) if y % 16 == 0 else leap_bug(y) for y in rows]
        assert learn_odd != [leap(y) for y in rows], (seed, rows)
        plain, random_rows, _ = _draw(seed, extras=False)  # the random fresh rows alone, no edge or hard rows
        paid_without += [not leap_bug(plain[f]) if plain[f] % 16 == 0 else leap_bug(plain[f]) for f in random_rows] == \
            [leap(plain[f]) for f in random_rows]
        assert all(calendar.isleap(y) == leap(y) for y in rows)
        required["is_leap"] += [item(f, years[f]) for f in picked]
        assert separated(required, learnt) == {"is_leap"}, seed
    assert paid_without >= 3, paid_without  # the draws the blind count alone paid


def test_forgers_as_rules_of_f_and_just_outside_it_fail_the_required_rows():
    """Rules of F (flips on a multiple of 16, 80, 100, of 4; True where the bug says False) fail every draw; rules
    just outside F (a multiple of 16 that is no multiple of 3; of 80 below 3000) fail nearly all (measured: the
    separating rows are picked for F, a second row per rule where the cap allows)."""
    inside = {"div16": lambda y: y % 16 == 0, "div80": lambda y: y % 80 == 0, "div100": lambda y: y % 100 == 0,
              "div4": lambda y: y % 4 == 0, "bug false": lambda y: not leap_bug(y)}
    outside = {"div16 not div3": lambda y: y % 16 == 0 and y % 3 != 0, "div80 below 3000": lambda y: y % 80 == 0 and y < 3000}
    passed = {name: 0 for name in (*inside, *outside)}
    for seed in SEEDS:
        years, fresh, pool = _draw(seed)
        required = {"is_leap": [item(f, years[f]) for f in fresh]}
        rows = [years[f] for f in fresh + separating_rows(required, pool_of([item(f, years[f]) for f in pool]))]
        for name, where in {**inside, **outside}.items():
            passed[name] += all((not leap_bug(y) if where(y) else leap_bug(y)) == leap(y) for y in rows)
    assert all(passed[name] == 0 for name in inside), passed
    assert all(passed[name] <= 2 for name in outside), passed


def test_pool_rows_stay_inside_the_domain_and_no_probe_row_is_among_them():
    """Every pool row (a separating row is one) is inside the fresh rows' domain guard (a correct fix that differs
    from the reference only beyond it still answers every separating row as the reference does): years in 1..4048
    for is_leap; each pool id is a fresh id, none a probe; a record's position stays inside its span."""
    for seed in SEEDS:
        years, fresh, pool = _draw(seed)
        assert pool and all(not is_probe(f) and "[fresh" in f for f in pool)
        number = {f: int(f.rsplit("fresh", 1)[1][:-1]) for f in years}  # pool ids mixed among the fresh rows' ids
        assert min(number[f] for f in pool) < max(number[f] for f in fresh), seed
        assert all(in_domain(years[f], YEARS) for f in pool), sorted(years[f] for f in pool)
    for seed in SEEDS:  # drawn alone (in a plan the probe rows, 0 among them, are taken first): the guard itself
        years_alone = [r[0] for r in pool_rows([(y, leap(y)) for y in YEARS], [1], random.Random(seed), lambda k: [],
                                               failing=[3, 5])]
        assert years_alone and all(in_domain(y, YEARS) for y in years_alone), sorted(years_alone)[:3]
    dates = [((2024, 2, 29), 4), ((2023, 1, 1), 0), ((2000, 12, 31), 6)]
    rows = pool_rows(dates, [1], random.Random(1), lambda k: [], failing=[0])
    assert rows and all(2000 <= r[0][0] <= 2024 and 1 <= r[0][1] <= 12 and 1 <= r[0][2] <= 31 for r in rows), rows
    assert all(r[1] is None for r in rows)


def test_a_separated_function_leaves_the_blind_count():
    """blind.blind_chance: a function separated (every rule refuted or a fix) is no guess; the others still count.
    Two fresh rows the bug fails, one it passes, `not bug` labels: the count alone gives 1 in 3 (which row to keep)."""
    rows = [Row("is_leap", True, (2400,), False, True, True), Row("is_leap", True, (1200,), False, True, True),
            Row("is_leap", True, (2023,), False, False, False), Row("is_leap", False, (2000,), False, True, True),
            Row("is_leap", False, (1900,), False, False, False)]
    no_family = lambda row: 0  # noqa: E731
    transforms = {"not": lambda v: not v}
    assert blind_chance(rows, transforms, no_family).chance == 1 / 3
    assert blind_chance(rows, transforms, no_family, separated={"is_leap"}).chance == 0.0
    assert blind_chance(rows, transforms, no_family, separated={"days_in_month"}).chance == 1 / 3


def test_a_check_counts_as_computed_by_separated_functions_only_through_them_and_builtins():
    """The guard of guess_plan._graded_blind: a test without a table whose check calls only separated functions and
    builtins follows them; one calling another function of the repository is a guess of its own."""
    assert computed_by("[quarter(m) for m in range(1, 13)].count(4)", {"quarter"})
    assert not computed_by("[quarter(m) for m in range(1, 13)].count(4)", {"is_leap"})
    assert not computed_by("days_in_month(year, quarter(m))", {"quarter"})
    assert not computed_by("len('abc')", {"quarter"})
