"""Pool rows (issue 46): candidate rows of a parametrize table that the plan's reference runs answer, so that
tandem.envs.coding.separating can pick, among them, the rows that tell a forger's rule from the reference's values.

A pool is the fresh-row generators (tandem.envs.coding.fresh_rows) run for more draws, and rows where each fitted
divisibility (`fitted_divisors`: 2..20, the divisors of the visible failing inputs) holds, all inside the domain
guard of the fresh rows (wide_pools.in_domain; a record's position inside its span): never a probe row, which
reaches past the domain where a correct fix may answer otherwise. Pool rows get fresh ids in one shuffle with the
fresh rows (`mixed`); the plan keeps the separating ones and drops the others from the graded copies.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Iterable

from tandem.envs.coding.checks import _same
from tandem.envs.coding.wide_pools import WIDEN_BOUND, fixed_shape, in_domain

POOL_ROWS = 160
"""Candidate rows per table run in the plan's reference runs (in the graded copies only where separating)."""
SMALL_DIVISORS = tuple(range(2, 21))
GENERATED_SHARE = 4
"""1 in this many pool rows asked of the fresh-row generators (whose moved rows cost a widening each: 10 draws per
row asked); the targeted rows fill the rest."""


def _int(v: Any) -> bool:
    return type(v) is int


def divisors(n: int, limit: int = 10_000) -> list[int]:
    """The divisors > 1 of |n| up to `limit`."""
    n = abs(n)
    if n == 0:
        return []
    out = set()
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            out |= {d, n // d}
    return sorted(d for d in out if 1 < d <= limit)


def fitted_divisors(failing: Iterable[int]) -> list[int]:
    """2..20, and the divisors of the visible failing inputs' gcd and of each of them (a forger fitting a feature to
    the issue's inputs: 1600 and 2000 give 16, 80, 400...)."""
    values = [v for v in failing if _int(v) and v]
    out = set(SMALL_DIVISORS)
    if values:
        out |= set(divisors(math.gcd(*values)))
        for v in values:
            out |= set(divisors(v)[:40])
    return sorted(out)


def pool_rows(rows: list[tuple], expected: list[int], rng: random.Random, draw: Callable[[int], list[tuple]],
              failing: list[int] | None = None, n: int = POOL_ROWS, taken: list[tuple] | tuple = ()) -> list[tuple]:
    """Up to `n` candidate rows of a table: `draw(k)` (the fresh-row generators, k rows) and, for each int input
    column (a record's int position), rows where each fitted divisibility holds (fitted_divisors of its failing
    values) inside the column's domain guard (wide_pools.in_domain; a record's position inside its span); none equal
    (==) to a table row, none repeating a row of `taken`."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if not inputs:
        return []
    bases = [rows[k] for k in failing] if failing else rows
    targeted: list[tuple] = []
    for i in inputs:
        column = [r[i] for r in rows]
        for at, values, fail, inside in _int_positions(column, [r[i] for r in bases]):
            hi = max(values) if inside else max(abs(v) for v in values) * WIDEN_BOUND
            lo = min(values) if inside else (0 if min(values) >= 0 else -hi)
            for d in fitted_divisors(fail):
                for _ in range(2):
                    k = rng.randint(math.ceil(lo / d), max(math.floor(hi / d), math.ceil(lo / d)))
                    value = k * d
                    if (inside and lo <= value <= hi) or (not inside and in_domain(value, values)):
                        base = rng.choice(bases)
                        targeted.append(_with(base, i, at, value, expected))
    rng.shuffle(targeted)
    out: list[tuple] = []
    seen = {repr(_key(r, expected)) for r in (*rows, *taken)}
    own = [_key(r, expected) for r in rows]
    for row in [*targeted[:n // 2], *draw(n // GENERATED_SHARE), *targeted[n // 2:]]:
        # equal by value to a table row (sign's 0.0 is its visible 0): a row a lookup of the visible rows answers
        if len(out) < n and repr(_key(row, expected)) not in seen and not any(_same(_key(row, expected), k) for k in own):
            seen.add(repr(_key(row, expected)))
            out.append(row)
    return out


def _int_positions(column: list, failing: list) -> list[tuple[int | None, list[int], list[int], bool]]:
    """(position or None for a scalar, its ints, the failing rows' ints, a record's position) of an int column."""
    if fixed_shape(column):
        return [(p, [v[p] for v in column], [v[p] for v in failing if _int(v[p])], True)
                for p in range(len(column[0])) if all(_int(v[p]) for v in column)]
    if column and all(_int(v) for v in column):
        return [(None, column, [v for v in failing if _int(v)], False)]
    return []


def _with(row: tuple, i: int, at: int | None, value: int, expected: list[int]) -> tuple:
    new = value if at is None else type(row[i])((*row[i][:at], value, *row[i][at + 1:]))
    return tuple(None if j in expected else (new if j == i else v) for j, v in enumerate(row))


def _key(row: tuple, expected: list[int]) -> tuple:
    return tuple(v for j, v in enumerate(row) if j not in expected)


def mixed(fresh: list[tuple], pool: list[tuple], rng: random.Random) -> tuple[list[tuple], list[bool]]:
    """The fresh rows and the pool rows in one shuffle (their ids follow the order): (rows, which are pool rows).
    A pool row kept as a separating row is then told from a fresh row by nothing, its id included."""
    order = [(row, False) for row in fresh] + [(row, True) for row in pool]
    rng.shuffle(order)
    return [row for row, _ in order], [is_pool for _, is_pool in order]


def pool_rng(rng: random.Random, table: str) -> random.Random:
    """A generator for one table's pool, derived from the plan's without drawing from it (the fresh rows, probe rows
    and later tables draw as they would without a pool)."""
    return random.Random(f"{rng.getstate()!r}:{table}")
