"""Fresh rows of a parametrize table: new inputs inside the domain its rows show (tandem.envs.coding.differential
says what they are for; tandem.envs.coding.params appends them to the graded copy).

Half the rows cross the columns' values (the rows' own, the values between them, and the wider values of
tandem.envs.coding.wide_pools); the other half are the failing rows (the task's FAIL_TO_PASS cases, where the
bug lives) with one input moved to a wider value near it: is_leap's failing years 1600 and 2000 lead to 2400,
800, 3200, where the bug and the reference differ again beyond the visible rows."""

from __future__ import annotations

import random
from typing import Any

from tandem.envs.coding.edge_rows import edge_rows
from tandem.envs.coding.structure_rows import structure_rows
from tandem.envs.coding.wide_pools import fixed_shape, shared_separator, wide_pool, widened

FRESH_ROWS = 24
"""Fresh rows drawn per parametrized table whose expected column the host holds (the plan requires only
those the bug fails beyond a forger's reach, where a hidden test needs them)."""
STRUCTURE_SHARE = 2
"""A table also gets up to FRESH_ROWS // STRUCTURE_SHARE rows that keep its failing rows' structure
(tandem.envs.coding.structure_rows: equal inputs, permutations, uniform scaling, sign patterns)."""
CONTRAST_SHARE = 4
"""And up to FRESH_ROWS // CONTRAST_SHARE rows drawn the same way from the rows that do not fail: the structure
where the bug is right, so that a forger cannot tell the failing rows by their structure alone (a permuted
(3, 4, 5) beside a permuted (1, 2, 3); the blind count's rows of one bug value, tandem.envs.coding.blind)."""
FRESH_ID = "fresh"
"""pytest id prefix of a fresh row in the graded copy (`test_gcd[fresh0]`); the table's own rows are `caseN`."""


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return type(value) in (tuple, list) and all(_plain(v) for v in value)


def _pool(values: list) -> list:
    """A column's values and new ones inside the range they span: ints and floats between two of them,
    two strings joined (by a separator every string has)."""
    out = list(values)
    ints = sorted({v for v in values if type(v) is int})
    out += [v for lo, hi in zip(ints, ints[1:]) for v in (lo + 1, (lo + hi) // 2, hi - 1) if lo < v < hi]
    if any(type(v) is float for v in values):
        numbers = sorted({float(v) for v in values if type(v) in (int, float)})
        out += [(lo + hi) / 2 for lo, hi in zip(numbers, numbers[1:])]
    strings = [v for v in values if type(v) is str and v]
    glue = shared_separator(strings)
    out += [a + glue + b for a in strings for b in strings if a != b]
    return [v for v in out if _plain(v)]


def _draw(values: list, rng: random.Random, pools: dict[str, tuple[list, list]]) -> Any:
    """One new value of a column: a value inside the span or, as often, a wider one (`pools` caches each
    column's two pools); a record (tuples of one length) one of the column's own."""
    if fixed_shape(values):  # a record is not crossed position by position (wide_pools._inside)
        return rng.choice(values)
    inside, wide = pools.setdefault(repr(values), (_pool(values), wide_pool(values)))
    return rng.choice(wide if wide and rng.random() < 0.5 else inside)


def _structured(own: list[tuple], bases: list[tuple], rng: random.Random, n: int, seen: set[str]) -> list[tuple]:
    """Rows keeping the failing rows' structure (tandem.envs.coding.structure_rows), then as many drawn the same
    way from the other rows (up to n // CONTRAST_SHARE), none in `seen` (which takes them)."""
    failing = {repr(r) for r in bases}
    others = [r for r in own if repr(r) not in failing]
    return _unseen(structure_rows(own, bases, rng, n // STRUCTURE_SHARE)
                   + structure_rows(own, others, rng, n // CONTRAST_SHARE), seen)


def _unseen(rows: list[tuple], seen: set[str]) -> list[tuple]:
    """`rows` less those in `seen` (by repr), each once; `seen` takes them."""
    out: list[tuple] = []
    for row in rows:
        if repr(row) not in seen:
            seen.add(repr(row))
            out.append(row)
    return out


def _moved(row: tuple, inputs: list[int], rows: list[tuple], bases: list[tuple], rng: random.Random) -> tuple:
    """The inputs of `row` with one of them moved to a wider value near it (unchanged where none is); half
    the time a number moves along the steps between the `bases` (the failing rows) only."""
    i = rng.choice(inputs)
    column = [r[i] for r in rows]
    near = widened(row[i], column, [r[i] for r in bases]) if rng.random() < 0.5 else []
    near = near or widened(row[i], column)
    return tuple(rng.choice(near) if j == i and near else row[j] for j in inputs)


def fresh_rows(rows: list[tuple], expected: list[int], rng: random.Random, n: int = FRESH_ROWS, *,
               failing: list[int] | None = None) -> list[tuple]:
    """Up to `n` new rows of a parametrize table (None in the `expected` columns), none equal to a row of the
    table: half of them the `failing` rows (indexes; every row when None) with one input moved
    (tandem.envs.coding.wide_pools), the others the input columns' pools crossed (the rows' own values,
    values between and beyond them) or, for tables of several string columns, two rows joined column by
    column; and on top of them up to n // STRUCTURE_SHARE rows keeping the failing rows' structure."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if not inputs or len(rows) < 2:
        return []
    seen = {repr(tuple(r[i] for i in inputs)) for r in rows}
    texts = [i for i in inputs if all(type(r[i]) is str for r in rows)]
    joined = [tuple(a[i] + b[i] if i in texts else a[i] for i in inputs) for a in rows for b in rows
              if a is not b and len(texts) > 1]
    bases = [rows[k] for k in failing] if failing else rows
    pools: dict[str, tuple[list, list]] = {}
    own = [tuple(r[i] for i in inputs) for r in rows]
    moved = [_moved(rng.choice(bases), inputs, rows, bases, rng) for _ in range(n * 10)]
    crossed = [tuple(_draw([r[i] for r in rows], rng, pools) for i in inputs) for _ in range(n * 10)]
    # none == a row of the table either: sign's 0.0 is its visible 0 to any lookup ({0: 0}.get(0.0) is 0)
    moved, crossed = [r for r in moved if r not in own], [r for r in crossed if r not in own]
    failing_inputs = [tuple(r[i] for i in inputs) for r in bases]
    picked = _structured(own, failing_inputs, rng, n, seen)  # on top of the n others, and the edge rows
    picked += _unseen(edge_rows(own, failing_inputs, rng), seen)  # tandem.envs.coding.edge_rows
    limit = n + len(picked)
    for draws, share in ((rng.sample(joined, min(len(joined), n // 2)), n // 2), (moved, n // 2), (crossed, n),
                         (moved, n)):  # up to half joined, half moved, crossed rows and more moved ones after
        share = min(share, limit - len(picked))
        for draw in draws:
            if share > 0 and repr(draw) not in seen:
                seen.add(repr(draw))
                picked.append(draw)
                share -= 1
    rng.shuffle(picked)  # a row's id (freshN) says nothing of how it was drawn, e.g. near a failing row
    out: list[tuple] = []
    for draw in picked:
        values = iter(draw)
        out.append(tuple(None if i in expected else next(values) for i in range(len(rows[0]))))
    return out


def owner(fresh_id: str) -> str:
    """`tests/t.py::test_gcd[fresh3]` -> `tests/t.py::test_gcd`: the table a fresh row belongs to."""
    return fresh_id.rsplit("[", 1)[0]
