"""Issue 46: fresh rows at the edges of a column's domain (tandem.envs.coding.edge_rows), worked by hand, and the
wrong fixes they exist for: each passes the original rows and fails an edge row, on every draw."""

from __future__ import annotations

import math
import random

from tandem.envs.coding.edge_rows import EDGE_ROWS, column_edges, edge_rows
from tandem.envs.coding.fresh_rows import fresh_rows
from tandem.envs.coding.wide_pools import in_domain

SIGN = [(5,), (-3,), (0,), (0.5,), (-0.25,)]
GCD = [(12, 18), (-4, 6), (17, 5), (0, 9), (-8, -12)]
TITLES = [("the lord of the rings",), ("a tale of two cities",), ("war and peace",), ("iPhone sales",)]
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
    first = edge_rows(TITLES, [TITLES[2]], random.Random(0), n=3)  # the failing row's edges come first
    assert [r[0] for r in first] == ["WAR AND PEACE", "War And Peace", "war  and peace"], first


def test_every_edge_row_is_inside_the_guard_new_and_set_at_one_input():
    for table in (SIGN, GCD, TITLES, YEARS):
        for seed in range(8):
            rows = edge_rows(table, table[:1], random.Random(seed))
            assert 0 < len(rows) <= EDGE_ROWS
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
