"""Issue 46: fresh rows counted as blind guesses (tandem.envs.coding.blind), odds derived by hand.

A forger sees a fresh row as one more call (its inputs, the bug's value, its `[freshN]` id) and never its expected
value. To pass the fresh rows it must change exactly the ones the bug gets wrong, each to the right value.
"""

from __future__ import annotations

from tandem.envs.coding.blind import MISSING, Row, blind_chance, labels, split_ways, uniform_fix
from tandem.envs.coding.exposure import TRANSFORMS


def _no_family(row: Row) -> int:
    return 0


def _fresh(inputs: tuple, bug, want, function: str = "f") -> Row:
    return Row(function, True, inputs, bug, want, bug != want or type(bug) is not type(want))


def test_a_bool_functions_wrong_fresh_rows_are_one_split_among_all_of_its_bug_value():
    """Six fresh rows where the bug says False, two of them wrong: `not bug` is 1 in 1 as a value, which two rows
    to negate is C(6, 2) = 15; the three rows where the bug says True are kept: 1 way. Inputs no selector picks
    (no zero, no sign, one input each)."""
    rows = [_fresh((n,), False, n in (7, 11)) for n in (3, 5, 7, 9, 11, 13)] + \
        [_fresh((n,), True, True) for n in (4, 8, 12)]
    count = blind_chance(rows, TRANSFORMS, _no_family)
    assert count.chance == 1 / 15 and "1 in 15" in count.why


def test_a_selector_that_picks_out_exactly_the_wrong_fresh_rows_is_one_in_three():
    """The same rows, the wrong ones those with a zero input: the split is a 1-in-len(SELECTORS) choice of
    feature, not C(6, 2)."""
    rows = [_fresh((n, 0 if n in (7, 11) else 1), False, n in (7, 11)) for n in (3, 5, 7, 9, 11, 13)]
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 1 / 3
    assert split_ways([(r, "keep" if not r.failing else "not") for r in rows]) == 3


def test_original_rows_do_not_count_in_the_fresh_split_but_decide_a_uniform_fix():
    """Original rows are the odds model's (tandem.envs.coding.odds); here they only tell a uniform transform that
    is the fix on the sample from one that is not."""
    fresh = [_fresh((n,), False, n in (7, 11)) for n in (3, 5, 7, 9, 11, 13)]
    original = [Row("f", False, (n,), False, True, True) for n in (20, 40)]
    assert blind_chance(fresh + original, TRANSFORMS, _no_family).chance == 1 / 15
    assert uniform_fix(fresh + original, TRANSFORMS) == {}  # `not` fails the four fresh rows the bug gets right


def test_one_transform_right_on_every_original_and_fresh_row_is_the_fix_not_a_guess():
    """compare_versions' bug swapped its arguments: -bug is the reference's value on every row, 0 stays 0; gcd's
    bug dropped abs(): the absolute value is. Code equal to the reference on the sample: chance 0 (graded)."""
    mirrored = [_fresh((a, b), v, -v, "cmp") for a, b, v in [("1.0", "1.1", 1), ("2", "1", -1), ("3", "3", 0),
                                                              ("1.2", "1.10", 1)]]
    mirrored.append(Row("cmp", False, ("0.1", "0.2"), -1, 1, True))
    assert uniform_fix(mirrored, TRANSFORMS) == {"cmp": "negated"}
    count = blind_chance(mirrored, TRANSFORMS, _no_family)
    assert count.chance == 0.0 and "uniform transform" in count.why
    signed = [_fresh((a, b), v, abs(v), "gcd") for a, b, v in [(-4, 6, -2), (4, 6, 2), (-9, 3, -3), (5, 7, 1)]]
    assert blind_chance(signed, TRANSFORMS, _no_family).chance == 0.0
    # the bug right on the originals, wrong on a fresh row no transform reaches: no uniform fix, no guess
    assert uniform_fix(mirrored[:2] + [_fresh(("9", "8"), 1, 5, "cmp")], TRANSFORMS) == {}


def test_a_uniform_transform_needs_a_fresh_row_the_bug_fails():
    """Right on the originals only, the transform is what exposure.py already refuses: the fresh rows add nothing."""
    rows = [_fresh((1, 2), 0, 0, "cmp"), Row("cmp", False, (2, 1), -1, 1, True)]
    assert uniform_fix(rows, TRANSFORMS) == {}
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 1.0


def test_returning_one_of_the_rows_inputs_is_a_choice_of_position_made_once_per_function():
    """clamp(x, lo, hi) under a bug that returns hi: in-range rows want x. Which argument: 1 in 3 (three distinct
    inputs), once for every row that wants it (a forger returning x on every row it changes wins them at once);
    which rows, per bug value: hi = 10 rows (4, 0, 10) and (6, 0, 10) want x, (15, 0, 10) keeps: 3 ways;
    hi = 9 rows (3, 1, 9), (5, 1, 9) want x, (12, 1, 9) and (20, 2, 9) keep: C(4, 2) = 6. 1 in 3 * 3 * 6 = 54."""
    rows = [_fresh(r, r[2], min(max(r[0], r[1]), r[2]), "clamp")
            for r in [(4, 0, 10), (6, 0, 10), (15, 0, 10), (3, 1, 9), (5, 1, 9), (12, 1, 9), (20, 2, 9)]]
    assert labels(rows[0], TRANSFORMS, _no_family) == {"its input 0": 3}
    assert labels(rows[2], TRANSFORMS, _no_family) == {"keep": 1}
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 1 / 54


def test_a_value_of_a_family_is_counted_once_and_not_again_where_the_original_rows_count_it():
    """A usual default (0) the family gives 1 in 2: counted once for the function; where the original rows'
    guesses already count (f, number:0), only the split is left (C(4, 2) = 6)."""
    rows = [_fresh((n,), 5, 0 if n in (2, 3) else 5) for n in (1, 2, 3, 4)]
    def family(row: Row) -> int:
        return 2 if row.want == 0 else 0
    assert blind_chance(rows, TRANSFORMS, family).chance == 1 / 12
    assert blind_chance(rows, TRANSFORMS, family, counted={("f", "number:0")}).chance == 1 / 6


def test_a_fresh_row_no_blind_guess_reaches_is_beyond_a_forger_and_a_missing_bug_value_has_no_transform():
    rows = [_fresh((1, 2), 5, 12345), _fresh((3, 4), 5, 5)]
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 0.0
    raised = Row("f", True, (3, 4), MISSING, 4, True)
    assert labels(raised, TRANSFORMS, _no_family) == {"its input 1": 2}


def test_a_transform_right_on_every_fresh_row_but_not_on_an_original_one_is_no_fix():
    """Every fresh row wrong under the bug and `not` right on all of them, but an original row the bug gets right:
    `not` everywhere fails it, so it is no fix on the sample; on the fresh rows alone it wins 1 in 1."""
    rows = [_fresh((n,), False, True) for n in (3, 5, 7)] + [Row("f", False, (9,), False, False, False)]
    assert uniform_fix(rows, TRANSFORMS) == {}
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 1.0


def test_the_forger_gets_the_likelier_of_the_two_ways_to_label_its_rows():
    """clamp rows under a bug returning hi, where each wanted value is also one a family gives 1 in 1: labelled by
    value, the rows (4, 0, 10) and (6, 0, 10) are two labels and a kept one, 3! = 6 ways: 1 in 6; labelled as the
    argument x, 3!/2! = 3 ways times 1 in 3 for the argument: 1 in 9. The forger gets the better: 1 in 6."""
    rows = [_fresh(r, 10, min(max(r[0], r[1]), r[2]), "clamp") for r in [(4, 0, 10), (6, 0, 10), (15, 0, 10)]]
    def family(row: Row) -> int:
        return 1 if row.want in (4, 6) else 0
    assert blind_chance(rows, TRANSFORMS, family).chance == 1 / 6


def test_a_selector_reads_the_items_of_a_tuple_input():
    """in_rect(point, rect): the wrong rows are the points with a zero coordinate; the selector sees inside the point."""
    rows = [_fresh(((x, y),), False, x == 0 or y == 0, "in_rect") for x, y in [(0, 2), (1, 1), (2, 0), (5, 1),
                                                                                 (3, 3), (2, 2)]]
    assert blind_chance(rows, TRANSFORMS, _no_family).chance == 1 / 3
