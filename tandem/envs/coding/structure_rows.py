"""Fresh rows that keep the structure a table's failing rows share (issue 46).

A bug on a comparison or an equality fails where two inputs are equal, sum to a third, or sit on an axis:
needs_reorder's `count < threshold` (for `<=`) fails only where count == threshold; classify_triangle's
`a + b < c` (for `<=`) only on a degenerate triangle (1, 2, 3); its `a == b or a == c` (for `... or b == c`)
only where the two longest sides are equal. A row crossed from the columns' values, or a failing row with one
input moved, keeps none of that, so such tasks got no failing fresh row beyond the visible ones. The rows drawn
here keep it:

- the diagonal: two inputs of one type (two columns, or two positions of a record) set equal, and off by ±1;
- a failing row permuted: its values swapped between positions of one record (or between the row's scalar
  columns), each value landing inside the guard of the position it moves to (triangle (1, 2, 3) -> (3, 1, 2));
- a failing row scaled or shifted uniformly: every number ×2, ×3, halved where exact, or +d (equalities, order
  and, for scaling, sums kept: (1, 2, 3) -> (2, 4, 6));
- sign patterns: numbers negated where their column shows both signs, set to 0 where their column holds a 0.

**The guard.** Each new value stays inside its position's domain (wide_pools.in_domain: type, sign, zero,
magnitude, characters). Where the row's numbers are of one kind (every two positions' spans overlap: sides,
coordinates, a count and its threshold) that is all; where they are not (a date: the year's span meets neither
the month's nor the day's) each position also stays inside its own span and the row is never scaled or shifted
as a whole: a day 29 shifted, or a date scaled, is no date, and weekday's datetime-based correct fix raises where
the reference answers (wide_pools._inside). Permuting month and day, or setting one equal to the other, stays
a valid date there: the new day is at most 12.
"""

from __future__ import annotations

import random
from functools import partial
from itertools import combinations, permutations
from operator import add, mul
from typing import Any, Callable, Iterator

from tandem.envs.coding.wide_pools import _distinct, _inside, _number, fixed_shape, in_domain

Leaf = tuple[int, int | None]
"""An input position: (column, None) for a scalar column, (column, position) inside a record column."""
SCALES = (2, 3)
SHIFTS = (1, -1, 2, -2, 3, -3)
MAX_PERMUTED = 4
"""Positions permuted at most (4! rows per record); a longer record is not permuted."""


def _leaves(rows: list[tuple]) -> list[Leaf]:
    out: list[Leaf] = []
    for c in range(len(rows[0])):
        column = [r[c] for r in rows]
        out += [(c, p) for p in range(len(column[0]))] if fixed_shape(column) else [(c, None)]
    return out


def _get(row: tuple, leaf: Leaf) -> Any:
    c, p = leaf
    return row[c] if p is None else row[c][p]


def _set(row: tuple, changes: dict[Leaf, Any]) -> tuple:
    out = list(row)
    for (c, p), v in changes.items():
        if p is None:
            out[c] = v
        else:
            record = list(out[c])
            record[p] = v
            out[c] = type(row[c])(record)
    return tuple(out)


class Table:
    """A table's input rows (expected columns left out) with each position's values and guard."""

    def __init__(self, rows: list[tuple]):
        self.rows = rows
        self.leaves = _leaves(rows)
        self.values = {leaf: [_get(r, leaf) for r in rows] for leaf in self.leaves}
        self.numbers = [leaf for leaf in self.leaves if all(_number(v) for v in self.values[leaf])]
        spans = [(min(self.values[leaf]), max(self.values[leaf])) for leaf in self.numbers]
        self.one_kind = all(max(a[0], b[0]) <= min(a[1], b[1]) for a, b in combinations(spans, 2))
        """Every two numeric positions' spans overlap: the row may be scaled or shifted as a whole."""

    def fits(self, leaf: Leaf, value: Any) -> bool:
        """Whether `value` may stand at `leaf` (the module's docstring: the guard)."""
        values = self.values[leaf]
        if not in_domain(value, values):
            return False
        return self.one_kind or not _number(value) or _inside(values, value)

    def changed(self, row: tuple, changes: dict[Leaf, Any]) -> tuple | None:
        """`row` with `changes`, None where a changed value leaves its guard."""
        if any(not self.fits(leaf, v) for leaf, v in changes.items()):
            return None
        return _set(row, changes)


def diagonal(table: Table, row: tuple) -> Iterator[tuple | None]:
    """`row` with one position set equal to another of its type, and off by ±1."""
    for a, b in permutations(table.leaves, 2):
        value = _get(row, a)
        if {type(v) for v in table.values[a]} != {type(v) for v in table.values[b]}:
            continue
        for near in ([value, value + 1, value - 1] if _number(value) else [value]):
            yield table.changed(row, {b: near})


def _groups(table: Table) -> list[list[Leaf]]:
    """Positions whose values may trade places: a record's positions, and the row's scalar columns."""
    scalars = [leaf for leaf in table.leaves if leaf[1] is None]
    records = {c for c, p in table.leaves if p is not None}
    return [scalars] + [[leaf for leaf in table.leaves if leaf[0] == c] for c in sorted(records)]


def permuted(table: Table, row: tuple) -> Iterator[tuple | None]:
    """`row` with the values of a group of positions permuted (each landing inside its new position's guard)."""
    for group in _groups(table):
        if not 2 <= len(group) <= MAX_PERMUTED:
            continue
        values = [_get(row, leaf) for leaf in group]
        for order in permutations(values):
            if all(type(a) is type(b) for a, b in zip(order, values)):
                yield table.changed(row, dict(zip(group, order)))


def uniform(table: Table, row: tuple) -> Iterator[tuple | None]:
    """`row` with every number scaled (×2, ×3, halved where exact) or shifted (+d): only in a row of one kind."""
    if not table.one_kind or not table.numbers:
        return
    values = {leaf: _get(row, leaf) for leaf in table.numbers}
    moves: list[Callable[[Any], Any]] = [partial(mul, k) for k in SCALES] + [partial(add, d) for d in SHIFTS]
    if all(type(v) is float or v % 2 == 0 for v in values.values()):
        moves.append(_halved)
    for move in moves:
        yield table.changed(row, {leaf: move(v) for leaf, v in values.items()})


def _halved(value: Any) -> Any:
    return value / 2 if type(value) is float else value // 2


def signs(table: Table, row: tuple) -> Iterator[tuple | None]:
    """`row` with numbers negated where their column shows both signs (every pattern), and one number set to 0
    where its column holds a 0."""
    both = [leaf for leaf in table.numbers if min(table.values[leaf]) < 0 < max(table.values[leaf])]
    for n in range(1, len(both) + 1):
        for flipped in combinations(both, n):
            yield table.changed(row, {leaf: -_get(row, leaf) for leaf in flipped})
    for leaf in table.numbers:
        if 0 in table.values[leaf]:
            yield table.changed(row, {leaf: type(_get(row, leaf))(0)})


GENERATORS = (diagonal, permuted, uniform, signs)


def structure_pools(rows: list[tuple], bases: list[tuple]) -> dict[str, list[tuple]]:
    """Each generator's rows (by its name), drawn from `bases` (rows of `rows`, the table's input columns only),
    each row once, none a row of the table nor == one (0.0 where 0 is visible): the diagonal from every row (it
    makes the structure), the others from `bases` (they keep the structure the failing rows have)."""
    if len(rows) < 2:
        return {}
    table = Table(rows)
    seen = {repr(r) for r in rows}
    out: dict[str, list[tuple]] = {}
    for generate in GENERATORS:
        drawn = [r for base in (rows if generate is diagonal else bases) for r in generate(table, base)]
        out[generate.__name__] = [r for r in _distinct([r for r in drawn if r is not None])
                                  if repr(r) not in seen and r not in rows]  # sign's 0.0 is its visible 0
        seen.update(repr(r) for r in out[generate.__name__])
    return out


def structure_rows(rows: list[tuple], bases: list[tuple], rng: random.Random, n: int) -> list[tuple]:
    """Up to `n` rows of structure_pools drawn with `rng`, the generators in turn (each as many as it has, up to
    its share), so that a generator of many rows (the diagonal of every row) does not crowd out one of few (a
    failing row's permutations). One draw per call: a caller may draw again, or many at once."""
    pools = [rng.sample(p, len(p)) for p in structure_pools(rows, bases).values()]
    out: list[tuple] = []
    while len(out) < n and any(pools):
        out += [p.pop() for p in pools if p][:n - len(out)]
    return out
