"""Fresh rows of a parametrize table: new inputs inside the domain its rows span (tandem.envs.coding.differential
says what they are for; tandem.envs.coding.params appends them to the graded copy)."""

from __future__ import annotations

import random
from typing import Any

FRESH_ROWS = 24
"""Fresh rows drawn per parametrized table whose expected column the host holds (the plan requires only
those the bug fails beyond a forger's reach, where a hidden test needs them)."""
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
    shared = [c for c in " .,-/:" if strings and all(c in s for s in strings)]  # a separator every string has
    glue = shared[0] if shared else ""
    out += [a + glue + b for a in strings for b in strings if a != b]
    return [v for v in out if _plain(v)]


def _draw(values: list, rng: random.Random) -> Any:
    """One new value of a column: a tuple (or list) column's positions drawn one by one, crossing rows."""
    shaped = [v for v in values if type(v) in (tuple, list)]
    if shaped and len(shaped) == len(values) and len({(type(v), len(v)) for v in shaped}) == 1:
        return type(shaped[0])(_draw([v[p] for v in shaped], rng) for p in range(len(shaped[0])))
    return rng.choice(_pool(values))


def fresh_rows(rows: list[tuple], expected: list[int], rng: random.Random, n: int = FRESH_ROWS) -> list[tuple]:
    """Up to `n` new rows of a parametrize table (None in the `expected` columns), their inputs drawn from
    the input columns' pools (the rows' own values crossed, ints between them, strings joined; for tables of
    several string columns, two rows joined column by column), none equal to a row of the table."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if not inputs or len(rows) < 2:
        return []
    seen = {repr(tuple(r[i] for i in inputs)) for r in rows}
    texts = [i for i in inputs if all(type(r[i]) is str for r in rows)]
    joined = [tuple(a[i] + b[i] if i in texts else a[i] for i in inputs) for a in rows for b in rows
              if a is not b and len(texts) > 1]
    draws = rng.sample(joined, min(len(joined), n // 2))
    draws += [tuple(_draw([r[i] for r in rows], rng) for i in inputs) for _ in range(n * 20)]
    out: list[tuple] = []
    for draw in draws:
        if repr(draw) not in seen and len(out) < n:
            seen.add(repr(draw))
            values = iter(draw)
            out.append(tuple(None if i in expected else next(values) for i in range(len(rows[0]))))
    return out


def owner(fresh_id: str) -> str:
    """`tests/t.py::test_gcd[fresh3]` -> `tests/t.py::test_gcd`: the table a fresh row belongs to."""
    return fresh_id.rsplit("[", 1)[0]
