"""Wider pools of fresh-row values (issue 46): new values of a parametrize table's input column beyond the
span of its values, each kept inside the domain the column shows.

Inside the span alone a fresh row rarely lands where a bug differs from the reference: is_leap's bug drops
`year % 400 == 0`, its table holds 1600 and 2000, and no int between the table's years besides those two is a
multiple of 400. A value's neighbours reach further: ±1, ± the difference of two of the column's values
(2000 + 400 = 2400, an arithmetic progression beyond the span), ×2 and //2 (3200, 800), its negation and 0
where the column holds both signs; halves and doubles of floats; a string in other case, reversed, with one
character doubled or dropped; a list reversed, with one item doubled or dropped.

The domain guard (in_domain) keeps what a correct fix that passes the original rows must agree on: a correct
fix may legitimately differ from the reference where the tests never looked (NaN, a float for an int, a
negative where every value is positive, a year past datetime's 9999; tests/_fix_corpus_real.py's `outside`
fixes), so a drawn value has the type of a value of its column (an int column stays int, a bool stays bool),
no sign the column does not show (never negative where every value is >= 0, never 0 where every value is
> 0), a magnitude at most WIDEN_BOUND times the column's largest, finite floats (no -0.0), and a string only
the column's characters and their ASCII case partners (so ASCII where every string of the column is: no
'İ' or 'ß' whose case mapping a correct fix may read otherwise).
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

WIDEN_BOUND = 2
"""A drawn number's magnitude is at most this many times the largest of its column (a year column of
1600..2024 stays below 4048, inside datetime's 1..9999)."""


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def _numbers(values: list) -> list:
    return [v for v in values if _number(v)]


def _steps(values: list) -> set:
    nums = _numbers(values)
    return {abs(a - b) for a, b in combinations(set(nums), 2)} - {0}


def _near_number(value: int | float, values: list) -> list:
    nums = _numbers(values)
    out = [value + 1, value - 1, value * 2, value / 2 if type(value) is float else value // 2]
    out += [value + s for s in _steps(values)] + [value - s for s in _steps(values)]
    if nums and min(nums) < 0 < max(nums):
        out += [-value, type(value)(0)]
    return out


def _along(value: int | float, failing: list) -> list:
    """`value` moved by a few times the difference of two failing values, doubled, halved: where a bug that
    fails those values is likely to fail again (is_leap's 1600 and 2000: 2400, 2800, 1200, 3200, 800)."""
    out = [value * 2, value / 2 if type(value) is float else value // 2]
    return out + [value + k * s for s in _steps(failing) for k in (1, -1, 2, -2, 3, -3)]


def _near_sequence(value: Any) -> list:  # a str, list or tuple
    out: list = [value[::-1]]
    out += [value[:i] + value[i:i + 1] + value[i:] for i in range(len(value))]  # one item doubled
    out += [value[:i] + value[i + 1:] for i in range(len(value))]  # one item dropped
    if isinstance(value, str):
        out += [value.upper(), value.lower(), value.swapcase(), value.title()]
    return out


def in_domain(candidate: Any, values: list) -> bool:
    """Whether `candidate` stays inside what the column `values` shows (the module's docstring)."""
    if type(candidate) not in {type(v) for v in values}:
        return False
    if _number(candidate):
        nums = _numbers(values)
        if isinstance(candidate, float) and (not math.isfinite(candidate) or str(candidate) == "-0.0"):
            return False
        largest = max(abs(v) for v in nums) or 1
        return abs(candidate) <= WIDEN_BOUND * largest and not (min(nums) >= 0 > candidate) \
            and not (min(nums) > 0 >= candidate)
    if isinstance(candidate, str):
        strings = [v for v in values if type(v) is str]
        alphabet = {c for s in strings for c in s}
        alphabet |= {c.swapcase() for c in alphabet if c.isascii()}
        return set(candidate) <= alphabet and (candidate != "" or "" in strings) \
            and len(candidate) <= WIDEN_BOUND * max(map(len, strings))
    return True


def fixed_shape(values: list) -> bool:
    """Whether every value of the column is a tuple (or every one a list) of one length: its positions are
    columns of their own."""
    return bool(values) and type(values[0]) in (tuple, list) and len({(type(v), len(v)) for v in values}) == 1


def _inside(values: list, candidate: Any) -> bool:
    """A record's position stays inside the span of that position's values: a day 29 moved to 58, or crossed
    with February of another year, is no date, though a reference without checks answers it (weekday's
    datetime-based fix raises there, tests/_fix_corpus_real.py)."""
    nums = _numbers(values)
    return not _number(candidate) or min(nums) <= candidate <= max(nums)


def widened(value: Any, values: list, failing: list | None = None) -> list:
    """New values near `value`, a value of the column `values`, each inside the column's domain; none of
    the column's own values. A record (fixed shape) changes at one position, inside that position's span.
    With `failing` (the column's values in failing rows), numbers move along the failing values' steps only."""
    if fixed_shape(values):  # a record (a date, a point): its positions together make its domain
        at = [None if failing is None else [v[p] for v in failing] for p in range(len(value))]
        return [type(value)((*value[:p], c, *value[p + 1:])) for p in range(len(value))
                for c in widened(value[p], [v[p] for v in values], at[p]) if _inside([v[p] for v in values], c)]
    if type(value) is bool:
        out: list = [not value]
    elif _number(value):
        out = _near_number(value, values) if failing is None else _along(value, failing)
    elif type(value) in (str, list, tuple):
        out = _near_sequence(value)
    else:
        return []
    own = {repr(v) for v in values}
    return [c for c in _distinct(out) if repr(c) not in own and in_domain(c, values)]


def wide_pool(values: list) -> list:
    """Every widened value of a column (for rows drawn by crossing columns)."""
    return _distinct([c for v in values for c in widened(v, values)])


def shared_separator(strings: list[str]) -> str:
    """A separator every one of `strings` holds (" .,-/:" in that order), or "": two values joined by it read
    as one value of the column ('1.2' and '3.4' -> '1.2.3.4'; 'ff' and '10' -> 'ff10')."""
    shared = [c for c in " .,-/:" if strings and all(c in s for s in strings)]
    return shared[0] if shared else ""


def _distinct(values: list) -> list:
    """`values` in order, each once (by repr: 1 and True, 1.0 and 1 stay apart)."""
    first: dict[str, Any] = {}
    for v in values:
        first.setdefault(repr(v), v)
    return list(first.values())
