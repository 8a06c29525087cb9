"""Hard rows (issue 46): inputs that approximations of an integer predicate get wrong, in a wider band.

    @pytest.mark.parametrize("n, expected", [(0, False), (1, False), (2, True), ..., (29, True), (49, False)])
    def test_is_prime(n, expected):
        assert is_prime(n) == expected

A cheap stand-in for a fix, `n > 1 and (n == 2 or pow(2, n - 1, n) == 1)` (a Fermat test base 2), equals the
reference on every int below 341, the first base-2 pseudoprime. The fresh rows (tandem.envs.coding.fresh_rows)
stay inside the domain guard (wide_pools.in_domain: at most WIDEN_BOUND = 2 times the column's largest, 98 here)
and draw few values, so such an approximation passed every draw. Trial division by 2, 3, 5 and 7 only
(wrong at 121, 143, 169...), a sieve up to a fixed bound and the like are as plausible.

The numbers such approximations get wrong are known, and computed here (a sieve of the band): Fermat
pseudoprimes to bases 2, 3 and 5 and Carmichael numbers, prime powers, products of two primes >= 7 (beyond small
trial division), the first prime above each power of ten and of two and the band's largest primes (beyond a fixed
sieve), powers of two and 2^k +- 1, perfect numbers and factorials. Each such number in the band not among the
table's rows becomes a **hard row** (up to HARD_ROWS, every class in turn: its two smallest first, then a draw the
host holds, so a forger cannot hard-code the few it would meet).

**Where** (`hard_column`): a table of one input column and one expected column whose input values are ints
(not bools), all >= 0 and the smallest at most COUNTING_START (a counting column, unbounded above: is_prime's
0..49, not a year column 1600..2100 nor a month 1..12 inside a record), and whose expected values are all bools
(an integer predicate). The band reaches HARD_BAND = 10 times the column's largest, the domain of the independent
equivalence oracle (tests/_equivalence.py: a non-negative int at most ten times the table's largest): a correct
fix agrees with the reference there, which the oracle checks; wider than the fresh rows' guard, which also serves
records and value functions. Value functions stay out: a correct naive recursive fibonacci answers at 2x its
table's largest and times out at 10x.

**How**: hard rows are fresh rows (params appends them under `freshN` ids, in one shuffle with the fresh and pool
rows, so neither id nor place tells them); a row where the reference raises, or answers differently in the two
reference runs, is dropped as any fresh row is (tandem.envs.coding.differential.expectations): a fix that answers
where the reference raises is never judged there. Every kept hard row is then **required** by each graded hidden
test of its table (`require_hard_rows`), whatever else grades it: the rows guard where the bug and the reference
agree (is_prime's bug is right at 341) as much as where they differ.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from tandem.envs.coding.fresh_rows import owner

HARD_BAND = 10
"""Hard rows reach this many times the column's largest value (tests/_equivalence.py's domain)."""
HARD_ROWS = 48
"""At most this many hard rows per table."""
HARD_LIMIT = 100_000
"""No hard number above this (the sieve's size; a counting column of a predicate rarely reaches it)."""
COUNTING_START = 2
"""A counting column's smallest value is at most this."""
FIRST_EACH = 2
"""The smallest numbers of each class come first (an approximation right up to a bound fails first there)."""
FERMAT_BASES = (2, 3, 5)


def _smallest_factors(limit: int) -> list[int]:
    """spf[n]: the smallest prime factor of n (0 for 0 and 1)."""
    spf = [0] * (limit + 1)
    for p in range(2, limit + 1):
        if spf[p] == 0:
            for m in range(p, limit + 1, p):
                if spf[m] == 0:
                    spf[m] = p
    return spf


def _factors(n: int, spf: list[int]) -> list[int]:
    out = []
    while n > 1:
        out.append(spf[n])
        n //= spf[n]
    return out


def _carmichael(n: int, spf: list[int]) -> bool:
    """Korselt: n composite, squarefree, odd, and p - 1 divides n - 1 for every prime p dividing it."""
    factors = _factors(n, spf)
    return len(factors) > 1 and len(set(factors)) == len(factors) and n % 2 == 1 \
        and all((n - 1) % (p - 1) == 0 for p in factors)


@functools.lru_cache(maxsize=8)
def hard_classes(limit: int) -> dict[str, tuple[int, ...]]:
    """Each class of hard numbers in 0..limit, ascending (the module's docstring)."""
    spf = _smallest_factors(limit)
    prime = [n >= 2 and spf[n] == n for n in range(limit + 1)]
    composite = [n for n in range(4, limit + 1) if not prime[n]]
    out: dict[str, list[int]] = {f"fermat{b}": [n for n in composite if pow(b, n - 1, n) == 1] for b in FERMAT_BASES}
    out["carmichael"] = [n for n in composite if _carmichael(n, spf)]
    out["prime_power"] = [n for n in composite if len(set(_factors(n, spf))) == 1]
    out["two_primes"] = [n for n in composite if len(f := _factors(n, spf)) == 2 and f[0] >= 7]
    bounds = [b ** k for b in (2, 10) for k in range(2, 18) if b ** k >= 64]
    primes = [n for n in range(limit, 1, -1) if prime[n]]
    above = [next((p for p in reversed(primes) if p > bound), None) for bound in bounds]
    out["past_bound"] = [p for p in above if p is not None] + primes[:3]
    out["two_power"] = [v for k in range(limit.bit_length() + 1) for v in (2 ** k - 1, 2 ** k, 2 ** k + 1)]
    out["perfect_factorial"] = [6, 28, 496, 8128, 33550336] + [math.factorial(k) for k in range(1, 13)]
    return {name: tuple(sorted({v for v in values if 0 <= v <= limit})) for name, values in out.items()}


def hard_column(rows: list[tuple], expected: list[int]) -> int | None:
    """The input column of a table hard rows apply to (the module's docstring: where), or None."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if len(inputs) != 1 or len(expected) != 1:
        return None
    column = [r[inputs[0]] for r in rows]
    if not all(type(v) is int for v in column) or min(column) < 0 or min(column) > COUNTING_START:
        return None
    return inputs[0] if all(type(r[expected[0]]) is bool for r in rows) else None


def hard_values(column: list[int], rng: random.Random, n: int = HARD_ROWS) -> list[int]:
    """Up to `n` hard numbers of the band (HARD_BAND times the column's largest, HARD_LIMIT at most), none of the
    column's own: every class in turn, its FIRST_EACH smallest first, then the rest in a random order."""
    limit = min(HARD_BAND * max(column), HARD_LIMIT)
    own = set(column)
    queues = []
    for values in hard_classes(limit).values():
        values = [v for v in values if v not in own]
        rest = values[FIRST_EACH:]
        queues.append(values[:FIRST_EACH] + rng.sample(rest, len(rest)))
    out: list[int] = []
    while len(out) < n and any(queues):
        for queue in queues:
            while queue and queue[0] in out:
                queue.pop(0)
            if queue and len(out) < n:
                out.append(queue.pop(0))
    return out


def hard_rows(rows: list[tuple], expected: list[int], rng: random.Random) -> list[tuple]:
    """The table's hard rows (None in the expected column), none where hard_column finds no column."""
    column = hard_column(rows, expected)
    if column is None:
        return []
    values = hard_values([r[column] for r in rows], rng)
    return [tuple(v if i == column else None for i in range(len(rows[0]))) for v in values]


def hard_rng(rng: random.Random, table: str) -> random.Random:
    """A generator for one table's hard rows, derived from the plan's without drawing from it (the fresh rows of
    this and later tables draw as they would without hard rows)."""
    return random.Random(f"{rng.getstate()!r}:{table}:hard")


def require_hard_rows(plan: Any, failing: tuple[str, ...], kept: list[str], hard: list[str]) -> None:
    """Each graded failing test (graded ids) requires the `hard` rows of its table that the plan kept (`kept`: the
    reference's values held in both reference runs). `plan`: tandem.envs.coding.grading_plan.GradingPlan."""
    if plan.refused:
        return
    held = [f for f in hard if f in kept]
    for test in failing:
        rows = [f for f in held if owner(f) == owner(test)]
        if rows:
            required = plan.differential.get(test, [])
            plan.differential[test] = required + [f for f in rows if f not in required]
