"""Issue 46: fresh rows at the edges of a column's domain (tandem.envs.coding.edge_rows), worked by hand, and the
wrong fixes they exist for: each passes the original rows and fails an edge row, on every draw."""

from __future__ import annotations

import math
import random

from tandem.envs.coding.edge_rows import EDGE_ROWS, LONG_ROWS, column_edges, edge_rows, repeated_rows
from tandem.envs.coding.fresh_rows import fresh_rows
from tandem.envs.coding.wide_pools import WIDEN_BOUND, in_domain
from tests.test_edge_plans import RADIX_ROWS

SIGN = [(5,), (-3,), (0,), (0.5,), (-0.25,)]
GCD = [(12, 18), (-4, 6), (17, 5), (0, 9), (-8, -12)]
TITLES = [("the lord of the rings",), ("a tale of two cities",), ("war and peace",), ("iPhone sales",)]
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
YEARS = [(1600,), (1700,), (1900,), (2000,), (2004,), (2023,), (2024,)]


def _sign(x):
    return (x > 0) - (x < 0)


def _sign_with_tolerance(x):  # a wrong fix: 0 within 0.1 of zero
    return 0 if abs(x) < 0.1 else _sign(x)


def _gcd(a, b):
    return math.gcd(a, b)


def _gcd_divisor_made_positive(a, b):  # a wrong fix: the divisor's magnitude taken, not the result's
    b = abs(b)
    while b:
        a, b = b, a % b
    return a


def _title(text, small=("a", "an", "of", "the")):
    words = text.split(" ")
    return " ".join(w.lower() if i > 0 and w.lower() in small else w[:1].upper() + w[1:] for i, w in enumerate(words))


def _title_case_sensitive(text, small=("a", "an", "of", "the")):  # a wrong fix: small words compared as written
    words = text.split(" ")
    return " ".join(w.lower() if i > 0 and w in small else w[:1].upper() + w[1:] for i, w in enumerate(words))


def test_a_float_columns_edges_are_zero_and_its_smallest_magnitude_halved_quartered_eighthed_with_both_signs():
    edges = column_edges([r[0] for r in SIGN], random.Random(0))
    assert {e for e in edges if e} == {0.125, -0.125, 0.0625, -0.0625, 0.03125, -0.03125}
    assert 0 not in [e for e in edges if type(e) is int]  # 0 is the column's own (0.0 is kept: fresh_rows drops it
    # where it equals a visible row)


def test_an_int_column_gets_zero_where_it_shows_both_signs_and_round_numbers_inside_its_band():
    b = column_edges([r[1] for r in GCD], random.Random(0))
    assert 0 in b and all(type(e) is int for e in b)
    years = column_edges([r[0] for r in YEARS], random.Random(0))
    assert 0 not in years and all(0 < y <= 2 * 2024 for y in years)  # positive column: no 0, no negative year
    assert any(y % 100 == 0 and y % 1000 for y in years) and any(y % 1000 == 0 for y in years)


def test_a_string_columns_edges_change_case_and_spacing_inside_its_alphabet():
    edges = column_edges([r[0] for r in TITLES], random.Random(0))
    assert "THE LORD OF THE RINGS" in edges and "War And Peace" in edges and "war  and peace" in edges
    assert "war and peace " in edges and "the lord of the rings" not in edges  # never the column's own value
    first = edge_rows(TITLES, [TITLES[2]], random.Random(0), n=3)[:3]  # the failing row's edges first
    assert [r[0] for r in first] == ["WAR AND PEACE", "War And Peace", "war  and peace"], first


def test_every_edge_row_is_inside_the_guard_new_and_set_at_one_input():
    for table in (SIGN, GCD, TITLES, YEARS):
        for seed in range(8):
            rows = edge_rows(table, table[:1], random.Random(seed))
            assert 0 < len(rows) <= EDGE_ROWS + LONG_ROWS
            for row in rows:
                assert row not in table  # == too: 0.0 is not drawn beside a visible 0
                changed = [c for c in range(len(row)) if all(repr(r[c]) != repr(row[c]) for r in table)]
                assert len(changed) == 1 and in_domain(row[changed[0]], [r[changed[0]] for r in table])


def test_a_record_column_has_no_edge():
    assert column_edges([(2023, 1, 1), (2024, 3, 1)], random.Random(0)) == []


def test_the_wrong_fixes_pass_the_original_rows_and_fail_an_edge_row_on_every_draw():
    cases = ((SIGN, _sign, _sign_with_tolerance, [1]), (GCD, _gcd, _gcd_divisor_made_positive, [1, 4]),
             (TITLES, _title, _title_case_sensitive, [0]))
    for table, reference, wrong, failing in cases:
        assert all(reference(*r) == wrong(*r) for r in table)  # the original rows cannot tell them apart
        for seed in range(16):
            rows = fresh_rows([(*r, None) for r in table], [len(table[0])], random.Random(seed), failing=failing)
            inputs = [r[:-1] for r in rows]
            assert any(reference(*r) != wrong(*r) for r in inputs), (wrong.__name__, seed)


def _digits(text, base):  # from_base's checks: a base of 2..36, a sign, the base's digits
    sign, text = (-1, text[1:]) if text.startswith("-") else (1, text)
    if not 2 <= base <= 36 or not text or not all(0 <= DIGITS.find(c) < base for c in text):
        raise ValueError(text)
    return sign, text


def _from_base(text, base):  # a correct fix: int() parses the digits it validated
    sign, text = _digits(text, base)
    return sign * int(text, base)


def _from_base_exact_powers(text, base):  # another correct fix: the positional sum in ints
    sign, text = _digits(text, base)
    return sign * sum(DIGITS.find(c) * base ** i for i, c in enumerate(reversed(text)))


def _from_base_math_pow(text, base):  # the wrong fix: a float sum, exact below 2 ** 53 only
    sign, text = _digits(text, base)
    return sign * int(sum(DIGITS.find(c) * math.pow(base, i) for i, c in enumerate(reversed(text))))


def _answer(function, row):
    try:
        return function(*row)
    except ValueError:
        return ValueError


def test_a_rows_string_is_joined_to_itself_as_long_as_the_guard_admits_its_other_inputs_kept():
    own = [r[:2] for r in RADIX_ROWS]
    assert repeated_rows(own, own[:1]) == [("ffffffffffff", 16), ("21i3v921i3v9", 36), ("-1010-1010", 2),
                                           ("000000000000", 5)]  # the failing row's first, then the longest first
    versions = [("1.2",), ("10.4.1",)]  # joined by the separator every string holds, never past the guard
    assert repeated_rows(versions, []) == [("1.2.1.2.1.2",)]
    assert all(in_domain(r[0], [v[0] for v in versions]) for r in repeated_rows(versions, []))
    assert len("1.2.1.2.1.2") <= WIDEN_BOUND * len("10.4.1") < len("1.2.1.2.1.2.1.2")


def test_the_long_rows_come_on_top_of_the_edge_rows_the_failing_rows_first():
    titles = [("the lord of the rings",), ("a tale of two cities",), ("war and peace",), ("iPhone sales",)]
    rows = edge_rows(titles, titles[2:3], random.Random(0))
    assert len(rows) == EDGE_ROWS + LONG_ROWS  # the case and spacing edges keep their twelve
    assert rows[-LONG_ROWS:] == [("war and peace war and peace war and peace",),  # the failing row's first
                                  ("a tale of two cities a tale of two cities",),  # 'the lord of the rings' fits once
                                  ("iPhone sales iPhone sales iPhone sales",)]


def test_the_math_pow_fix_passes_the_rows_and_fails_a_long_row_on_every_draw_the_exact_ones_never():
    own = [r[:2] for r in RADIX_ROWS]
    assert all(_from_base_math_pow(*r) == _from_base(*r) for r in own)  # the table cannot tell them apart
    for seed in range(16):
        drawn = [r[:2] for r in fresh_rows(RADIX_ROWS, [2], random.Random(seed), failing=[0, 1, 2])]
        assert any(_answer(_from_base_math_pow, r) != _answer(_from_base, r) for r in drawn), seed
        assert all(_answer(_from_base_exact_powers, r) == _answer(_from_base, r) for r in drawn), seed
