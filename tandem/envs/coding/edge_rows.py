"""Fresh rows at the edges of each input column's domain (issue 46): where a sloppy fix is wrong and the original
rows, and rows drawn at random from the columns' pools, rarely look.

A fix that passes the original rows can still be wrong at a column's edge: a sign with a tolerance (`abs(x) < 0.1`
reads 0.06 as 0), a gcd that takes the divisor's magnitude first (wrong where the divisor is 0 and the other
argument negative), a title-caser that compares the small words without lower() (wrong on 'THE LORD OF THE RINGS').
A random draw among the pools' values meets such an input on some plans only. The rows drawn here meet it on every
plan: a table row with one input set to an edge value of that input's column:

- numbers: 0 where the column may hold it; the smallest non-zero magnitude of the column halved, quartered and
  eighthed (floats only: an int column has no magnitude between), with each sign the column shows; round numbers
  (multiples of 10, 100, 1000... below the column's largest) inside the band;
- strings: the value upper-cased, lower-cased and title-cased, and, where the column's strings hold a space, with
  a space doubled and a space at the end; and each row's own string joined to itself (by a separator every string
  of the column holds, as fresh_rows joins two) as often as the guard's length admits, the row's other inputs kept:
  from_base('21i3v9', 36) -> from_base('21i3v921i3v9', 36), past 2 ** 53, where a fix that sums math.pow's floats
  rounds. The row's own value keeps what its other inputs need (its digits valid in its base); another row's
  value set in would mostly be an input the reference rejects.

**The guard.** Every edge value passes wide_pools.in_domain for its column (type, sign, zero, magnitude no more
than WIDEN_BOUND times the largest, the column's characters and their ASCII case partners), the same guard every
fresh row keeps: a correct fix answers as the reference does there. A record's positions (a date) are left alone:
a record position stays inside its own span (wide_pools._inside), where there is no edge beyond the rows' own.
A smallest magnitude no less than a tenth of the column's smallest: below it a tolerance is a choice of precision,
not a wrong answer.
"""

from __future__ import annotations

import random
from itertools import zip_longest
from tandem.envs.coding.wide_pools import WIDEN_BOUND, _distinct, _number, in_domain, shared_separator

EDGE_ROWS = 12
"""Edge rows per table at most (each on top of the fresh rows drawn at random)."""
LONG_ROWS = 3
"""Rows with a string joined to itself (repeated_rows) per table at most, the failing rows' first: on top of the
EDGE_ROWS, so that a table whose columns have many edges still gets its long strings."""
BASES_PER_EDGE = 2
"""Table rows each edge value is set into: one failing row (where the bug lives) and one row at random."""
FRACTIONS = (2, 4, 8)
"""The smallest non-zero magnitude of a float column divided by these (0.25 -> 0.125, 0.0625, 0.03125)."""


def _round_numbers(values: list, rng: random.Random) -> list:
    """Two multiples of each power of ten (and not of the next) below the column's largest magnitude, drawn among
    those inside its guard (a year column 1600..2024: two of 1610..4040 by tens, two of 100..4000 by hundreds)."""
    ints = [v for v in values if type(v) is int]
    if not ints:
        return []
    largest, out, step = max(abs(v) for v in ints), [], 10
    while step <= largest:
        reach = 2 * largest // step
        multiples = [m * step for m in range(-reach, reach + 1) if m % 10 and in_domain(m * step, values)]
        out += rng.sample(multiples, min(2, len(multiples)))
        step *= 10
    return out


def _number_edges(values: list, rng: random.Random) -> list:
    nums = [v for v in values if _number(v)]
    out: list = [0, 0.0] if any(type(v) is float for v in nums) else [0]
    floats = [abs(v) for v in nums if v and type(v) is float]
    if floats:
        smallest = min(abs(v) for v in nums if v)
        out += [s * smallest / d for d in FRACTIONS for s in (1, -1)]
    return out + _round_numbers(values, rng)


def _text_edges(values: list) -> list:
    """Per value, in order: upper-, lower- and title-cased, then (where it holds an inner space) a space doubled and
    a space at the end."""
    out = []
    for v in values:
        out += [v.upper(), v.lower(), v.title()]
        out += [v.replace(" ", "  ", 1), v + " "] if " " in v.strip() else []
    return out


def column_edges(values: list, rng: random.Random, first: list | None = None) -> list:
    """The edge values of a scalar column (module docstring), each inside its guard, none a value it holds; a
    string's edges of the `first` values (the failing rows') come before the others'."""
    if not values:
        return []
    if all(_number(v) for v in values):
        edges = _number_edges(values, rng)
    elif all(type(v) is str for v in values):
        edges = _text_edges(_distinct([*(first or []), *values]))
    else:
        return []
    own = {repr(v) for v in values}
    return [e for e in _distinct(edges) if repr(e) not in own and in_domain(e, values)]


def _repeated(value: str, column: list[str]) -> str | None:
    """`value` joined to itself by the column's shared separator as often as its length stays inside the guard
    (WIDEN_BOUND times the column's longest string); None where it fits once only."""
    glue = shared_separator([v for v in column if v])
    room = WIDEN_BOUND * max(map(len, column))
    copies = (room + len(glue)) // (len(value) + len(glue)) if value else 0
    return glue.join([value] * copies) if copies > 1 else None


def repeated_rows(own: list[tuple], bases: list[tuple]) -> list[tuple]:
    """Rows of `bases` (the failing rows), then of `own`, each with one string input joined to itself (_repeated),
    its other inputs kept (module docstring). Among each, the longest strings
    first: the fewest copies of the most digits (from_base's '21i3v9' before 'ff': 36 ** 12 passes 2 ** 53, 16 ** 12
    does not)."""
    texts = [c for c in range(len(own[0])) if all(type(r[c]) is str for r in own)]
    failing = {repr(r) for r in bases}
    out = []
    for row in _distinct([*bases, *own]):
        for c in texts:
            column = [r[c] for r in own]
            long = _repeated(row[c], column)
            if long is not None:  # inside the guard: the column's characters, no longer than it admits
                out.append(((repr(row) not in failing, -len(row[c])), (*row[:c], long, *row[c + 1:])))
    return [row for _, row in sorted(out, key=lambda o: o[0])]  # sorted() keeps the rows' order among equals


def edge_rows(own: list[tuple], bases: list[tuple], rng: random.Random, n: int = EDGE_ROWS) -> list[tuple]:
    """Up to `n` rows (input columns only): a row of `bases` (the failing rows) and one of `own` (every row of the
    table) with one input set to an edge value of its column; none equal to a row of the table. The columns take
    turns, each in its edges' order (the failing rows' strings first); the rng draws the rows an edge is set into.
    Then up to LONG_ROWS rows with a string joined to itself (repeated_rows)."""
    if not own:
        return []
    bases = bases or own
    per_column = []
    for c in range(len(own[0])):
        edges = column_edges([r[c] for r in own], rng, [b[c] for b in bases])
        per_column.append([(*base[:c], edge, *base[c + 1:]) for edge in edges
                           for base in (rng.choice(bases), rng.choice(own))[:BASES_PER_EDGE]])
    out: list[tuple] = []
    seen = {repr(r) for r in own}
    for row in (r for turn in zip_longest(*per_column) for r in turn if r is not None):
        if len(out) < n and repr(row) not in seen and row not in own:  # == too: 0.0 is sign's visible 0 to a lookup
            seen.add(repr(row))
            out.append(row)
    return out + _unseen_first(repeated_rows(own, bases), seen, own, LONG_ROWS)


def _unseen_first(rows: list[tuple], seen: set[str], own: list[tuple], n: int) -> list[tuple]:
    """The first `n` of `rows` neither in `seen` nor equal to a row of `own`."""
    fresh = [r for r in _distinct(rows) if repr(r) not in seen and r not in own]
    return fresh[:n]
