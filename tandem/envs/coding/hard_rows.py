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
sieve), powers of two and 2^k +- 1, perfect numbers and factorials: the *number classes*, for a counting column
(non-negative ints, the smallest at most COUNTING_START: is_prime's 0..49). Every such column, counting or not
(is_leap's years 1600..2100), also gets the *fitted multiples*: multiples of the divisors a forger fits to the
failing inputs (pool_rows.fitted_divisors: 1600 and 2000 give 400) past the fresh rows' guard, up to the band's
top. A table of the centuries up to the guard (`year in range(400, 4001, 400)`) meets 4400; one up to 8000 meets
20800. Each class in turn (its first numbers first, then a draw the host holds, so a forger cannot hard-code the
few it would meet), up to HARD_ROWS per table, none a row of the table.

**Where** (`hard_columns`): the scalar int input columns of non-negative values of a table whose one expected
column holds bools (an integer predicate); a row of several inputs is a failing row with one column set to a hard
number. The band reaches HARD_BAND = 10 times the column's largest, the domain of the independent equivalence
oracle (tests/_equivalence.py): wider than the fresh rows' guard (wide_pools.in_domain, twice the largest), which
also serves records and value functions. Value functions stay out: a correct naive recursive fibonacci answers at
2x its table's largest and times out at 10x. A record column (a date) of any table gets record rows instead
(tandem.envs.coding.record_rows: its int positions set to round numbers inside the guard, every row beyond).

**How**: hard rows are fresh rows (params appends them under `freshN` ids, in one shuffle with the fresh and pool
rows, so neither id nor place tells them); a row where the reference raises, or answers differently in the two
reference runs, is dropped as any fresh row is (tandem.envs.coding.differential.expectations). Every kept hard row
is **required** by each graded failing test of its table (`require_hard_rows`), whatever else grades it: the rows
guard where the bug and the reference agree (is_prime's bug is right at 341) as much as where they differ. Inside
the guard a row's value must be the reference's. **Beyond it** a correct fix may have a narrower domain and say so
by raising (a datetime-based is_leap raises past 9999; tests/_fix_corpus_real.py): such a row passes where the
test body raised before any host-held check ran (GradingPlan.narrower, verdict.judge), never with another value.
So a forger that raises beyond the guard passes those rows, by design: they catch wrong values, and the plan
decides nothing by them (`beyond`: no grading rule, separation or confined change counts them).
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from tandem.envs.coding.fresh_rows import owner
from tandem.envs.coding.pool_rows import fitted_divisors
from tandem.envs.coding.record_rows import record_rows
from tandem.envs.coding.wide_pools import WIDEN_BOUND, in_domain

HARD_BAND = 10
"""Hard rows reach this many times the column's largest value (tests/_equivalence.py's domain)."""
HARD_ROWS = 48
"""At most this many hard rows per table."""
HARD_LIMIT = 100_000
"""No hard number above this (the sieve's size; and a correct O(n) predicate, trial division up to n, stays in
milliseconds per row there)."""
COUNTING_START = 2
"""A counting column's smallest value is at most this."""
FIRST_EACH = 2
"""The smallest numbers of each class come first (an approximation right up to a bound fails first there)."""
FERMAT_BASES = (2, 3, 5)
FITTED_FIRST = 8
"""The fitted multiples of this many largest divisors come first (their smallest past the guard, their largest)."""


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


def hard_columns(rows: list[tuple], expected: list[int]) -> list[int]:
    """The input columns of a table hard rows apply to (the module's docstring: where): scalar int columns of
    non-negative values, in a table of one expected column whose values are all bools."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if len(expected) != 1 or not all(type(r[expected[0]]) is bool for r in rows):
        return []
    return [i for i in inputs if all(type(r[i]) is int for r in rows) and min(r[i] for r in rows) >= 0
            and max(r[i] for r in rows) > 0]


def _fitted(column: list[int], failing: list[int], rng: random.Random) -> list[int]:
    """Multiples of the fitted divisors of the failing values (pool_rows.fitted_divisors: 2..20 and the divisors
    of the failing values and their gcd) beyond the fresh rows' guard, up to the band's top: the smallest past the
    guard of the FITTED_FIRST largest divisors, the largest in the band of as many, then every divisor's smallest,
    largest and one drawn between in a random order (400 -> 4400, 20800, ... for is_leap's 1600 and 2000)."""
    guard, top = WIDEN_BOUND * max(column), min(HARD_BAND * max(column), HARD_LIMIT)
    spans = [(d, guard // d + 1, top // d) for d in sorted(fitted_divisors(failing), reverse=True)]
    spans = [(d, first, last) for d, first, last in spans if first <= last]
    firsts = [first * d for d, first, _ in spans]
    lasts = [last * d for d, _, last in spans]
    rest = firsts[FITTED_FIRST:] + lasts[FITTED_FIRST:] + [rng.randint(first, last) * d for d, first, last in spans]
    return firsts[:FITTED_FIRST] + lasts[:FITTED_FIRST] + rng.sample(rest, len(rest))


def hard_values(column: list[int], rng: random.Random, n: int = HARD_ROWS, failing: list[int] | None = None) -> list[int]:
    """Up to `n` hard numbers of the band (HARD_BAND times the column's largest), none of the column's own: every
    class in turn, its FIRST_EACH first, then the rest in a random order. The number classes where the column
    counts (its smallest at most COUNTING_START; HARD_LIMIT at most), the fitted multiples of the `failing`
    values (the column's values in failing rows) wherever they are given."""
    limit = min(HARD_BAND * max(column), HARD_LIMIT)
    own = set(column)
    classes = list(hard_classes(limit).values()) if min(column) <= COUNTING_START else []
    queues = []
    for numbers in classes:
        values = [v for v in numbers if v not in own]
        rest = values[FIRST_EACH:]
        queues.append(values[:FIRST_EACH] + rng.sample(rest, len(rest)))
    if failing:
        queues.append([v for v in _fitted(column, failing, rng) if v not in own])
    out: list[int] = []
    while len(out) < n and any(queues):
        for queue in queues:
            while queue and queue[0] in out:
                queue.pop(0)
            if queue and len(out) < n:
                out.append(queue.pop(0))
    return out


def hard_rows(rows: list[tuple], expected: list[int], rng: random.Random, failing: list[int] | None = None
              ) -> list[tuple[tuple, bool]]:
    """The table's hard rows (None in the expected column), each with whether it lies beyond the fresh rows' guard
    (a candidate raising there passes it: GradingPlan.narrower); none where hard_columns finds no column. A row of
    several input columns is a `failing` row (indexes) with one column set to a hard number."""
    columns = hard_columns(rows, expected)
    bases = [rows[k] for k in failing] if failing else rows
    out: list[tuple[tuple, bool]] = []
    seen = [tuple(None if j in expected else v for j, v in enumerate(r)) for r in rows]
    for i in columns:
        column = [r[i] for r in rows]
        for v in hard_values(column, rng, HARD_ROWS // len(columns), [r[i] for r in bases]):
            base = rng.choice(bases)
            row = tuple(v if j == i else (None if j in expected else base[j]) for j in range(len(base)))
            if row not in seen:
                seen.append(row)
                out.append((row, not in_domain(v, column)))
    return out + record_rows(rows, expected, rng, bases, seen)  # a record's positions (tandem.envs.coding.record_rows)


def hard_rng(rng: random.Random, table: str) -> random.Random:
    """A generator for one table's hard rows, derived from the plan's without drawing from it (the fresh rows of
    this and later tables draw as they would without hard rows)."""
    return random.Random(f"{rng.getstate()!r}:{table}:hard")


def require_hard_rows(plan: Any, failing: tuple[str, ...], kept: list[str], hard: dict[str, bool]) -> None:
    """Each graded failing test (graded ids) requires the `hard` rows of its table that the plan kept (`kept`: the
    reference's values held in both reference runs); those beyond the guard join `plan.narrower`.
    `plan`: tandem.envs.coding.grading_plan.GradingPlan."""
    if plan.refused:
        return
    held = [f for f in hard if f in kept]
    for test in failing:
        rows = [f for f in held if owner(f) == owner(test)]
        if rows:
            required = plan.differential.get(test, [])
            plan.differential[test] = required + [f for f in rows if f not in required]
    plan.narrower = [f for f in held if hard[f]]


def beyond(hard: dict[str, bool], rows: list[str]) -> tuple[list[str], list[str]]:
    """(`rows` less the hard rows beyond the guard, those rows): the plan decides nothing by the latter (a
    candidate raising there passes them), they only guard."""
    return [f for f in rows if not hard.get(f)], [f for f in rows if hard.get(f)]
