"""Separating rows (issue 46): grading by separation instead of by a forger's odds.

A forger that does not compute the fix still has to choose, per fresh row, whether to change the bug's value and to
what. What it can write without the fix is a *rule*: a selector S over the inputs and a value source V,

    where S(x) holds return V(x, bug(x)), else bug(x)

S fitted to what it reads (the issue's inputs, the visible rows, the files' constants), V one of what it reaches
without the fix (the bug's value transformed, one of the inputs, a constant of a family). `rules` builds a finite
family F of them: the selectors of odds.SELECTORS, divisibility by 2..20 and by the divisors of the visible failing
inputs, parity, squares, digit count, last digit and digit-sum parity, signs, a position equal to a constant of
the issue or the files or compared with the failing inputs' extremes, two positions compared, string features, the
bug's own value equal to one it takes; each one negated; "always" (the uniform transform). The oracle's features
(tests/_oracle_forgers.py) are among them: learn:odd's multiple of 16 is the divisibility by a divisor of 1600 and
2000.

The plan runs a **pool** of candidate rows per table (`pool_rows`: the fresh-row generators run for more draws,
and rows where each divisibility feature holds, all inside the same domain guard, never a probe row) in its
reference runs. For each rule no kept fresh row refutes (it agrees with the reference on all of them), `separate`
looks for a pool row where the rule's answer differs from the reference's and adds such rows to the table's fresh
rows (greedy: the row that separates most rules first, at most SEPARATING_ROWS per table); a rule no pool row
separates equals the reference on the whole pool: code equal to the reference on the sampled domain, a fix there
(the argument the uniform-transform clause of tandem.envs.coding.blind makes, from transforms to F).

A function is **separated** when the bug fails one of its kept fresh rows whose inputs no visible row holds (a
lookup of the visible rows fails it) and every rule of F is refuted by a kept fresh row or is such a fix: then its
fresh rows leave no guess but fixes (blind.blind_chance drops it from the count). Every kept fresh row of a table
so graded is required (a forger tells fresh rows by their `[freshN]` id, and pool rows carry the same ids, drawn
in one shuffle with the fresh rows, so a separating row is not told from another fresh row).

What stays outside: a rule outside F (two features joined, a constant F does not list) is counted by nothing
here; the odds model still applies where separation does not grade.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, Iterable, NamedTuple

from tandem.envs.coding.blind import MISSING
from tandem.envs.coding.checks import _GUESSES, _same
from tandem.envs.coding.odds import SELECTORS, kind
from tandem.envs.coding.pool_rows import _int, fitted_divisors

SEPARATING_ROWS = 16
"""At most this many pool rows join a table's fresh rows."""
REFUTE_TIMES = 2
"""Separating rows sought per open rule (the first for every rule before a second for any)."""

Selector = Callable[[tuple, Any], bool]
Source = Callable[[tuple, Any], Any]


class Item(NamedTuple):
    """One check of one row: its id, the row's inputs (flattened), the bug's value and the reference's."""

    row: str
    inputs: tuple
    bug: Any
    want: Any


def flat(values: Any) -> tuple:
    if isinstance(values, (tuple, list)):
        return tuple(v for item in values for v in flat(item))
    return (values,)


def _safe(pick: Callable[[], Any]) -> Any:
    try:
        return pick()
    except Exception:
        return MISSING


def selectors(positions: list[list[Any]], failing: list[tuple], constants: list, bug_values: list) -> dict[str, Selector]:
    """F's selectors for one function: `positions[p]`, the values seen at flat position p; `failing`, the flat inputs
    of the visible rows the bug fails; `constants`, the issue's and the files' constants; `bug_values`, the bug's."""
    out: dict[str, Selector] = {"always": _always}
    out.update({name: _on_row(pick) for name, pick in SELECTORS.items()})
    for p, seen in enumerate(positions):
        at = [x[p] for x in failing if p < len(x)]
        if any(_int(v) for v in seen):
            out.update(_number_selectors(p, [v for v in at if _int(v)], [c for c in constants if _int(c)]))
        if any(isinstance(v, str) for v in seen):
            out.update(_string_selectors(p, [v for v in at if isinstance(v, str)],
                                         [c for c in constants if isinstance(c, str)]))
        for q in range(p + 1, len(positions)):
            if any(_int(v) for v in seen) and any(_int(v) for v in positions[q]):
                out.update({f"x{p} < x{q}": _pair(p, q, None), f"x{p} == x{q}": _pair(p, q, 0),
                            f"x{p} == x{q} + 1": _pair(p, q, 1), f"x{p} == x{q} - 1": _pair(p, q, -1)})
    for v in _distinct(bug_values)[:20]:
        out[f"the bug's value is {v!r}"] = _bug_is(v)
    return out


def _always(x: tuple, b: Any) -> bool:
    return True


def _on_row(pick: Callable[[tuple], bool]) -> Selector:
    return lambda x, b: bool(pick(x))


def _pair(p: int, q: int, offset: int | None) -> Selector:
    """x[p] < x[q] (offset None), else x[p] == x[q] + offset."""
    def pick(x: tuple, b: Any) -> bool:
        if not (_int(x[p]) and _int(x[q])):
            raise TypeError("not two ints")
        return x[p] < x[q] if offset is None else x[p] == x[q] + offset
    return pick


def _bug_is(v: Any) -> Selector:
    return lambda x, b: kind(b) == kind(v) and _same(b, v)


def _at(p: int, want: type, test: Callable[[Any], bool]) -> Selector:
    """The selector `test(x[p])` where x[p] is a `want` (else no answer: neither it nor its negation holds)."""
    def pick(x: tuple, b: Any) -> bool:
        if type(x[p]) is not want:
            raise TypeError(f"not a {want.__name__}")
        return bool(test(x[p]))
    return pick


def _divisible(d: int, v: int) -> bool:
    return v % d == 0


def _square(v: int) -> bool:
    return v >= 0 and math.isqrt(v) ** 2 == v


def _digit_sum_even(v: int) -> bool:
    return sum(map(int, str(abs(v)))) % 2 == 0


def _digits(k: int, v: int) -> bool:
    return len(str(abs(v))) == k


def _ends_in(k: int, v: int) -> bool:
    return abs(v) % 10 == k


def _equals(c: Any, v: Any) -> bool:
    return v == c


def _compare(op: str, t: int, v: int) -> bool:
    return {"<": v < t, "<=": v <= t, ">": v > t, ">=": v >= t}[op]


def _number_selectors(p: int, failing: list[int], constants: list[int]) -> dict[str, Selector]:
    out: dict[str, Selector] = {f"x{p} % {d} == 0": _at(p, int, partial(_divisible, d)) for d in fitted_divisors(failing)}
    out.update({f"x{p} a square": _at(p, int, _square), f"x{p} > 0": _at(p, int, partial(_compare, ">", 0)),
                f"x{p} < 0": _at(p, int, partial(_compare, "<", 0)), f"x{p} digit sum even": _at(p, int, _digit_sum_even)})
    out.update({f"x{p} has {k} digits": _at(p, int, partial(_digits, k)) for k in {len(str(abs(v))) for v in failing}})
    out.update({f"x{p} ends in {k}": _at(p, int, partial(_ends_in, k)) for k in {abs(v) % 10 for v in failing}})
    out.update({f"x{p} == {c}": _at(p, int, partial(_equals, c)) for c in _distinct([*failing, *constants])[:40]})
    for t in {min(failing), max(failing)} if failing else ():
        out.update({f"x{p} {op} {t}": _at(p, int, partial(_compare, op, t)) for op in ("<", "<=", ">", ">=")})
    return out


def _string_selectors(p: int, failing: list[str], constants: list[str]) -> dict[str, Selector]:
    tests: dict[str, Callable[[str], bool]] = {
        "empty": lambda v: v == "", "upper": str.isupper, "lower": str.islower, "has a space": lambda v: " " in v,
        "has a digit": lambda v: any(c.isdigit() for c in v), "even length": lambda v: len(v) % 2 == 0,
        "first == last": lambda v: v[:1].lower() == v[-1:].lower()}
    out = {f"x{p} {name}": _at(p, str, test) for name, test in tests.items()}
    out.update({f"x{p} of length {k}": _at(p, str, partial(_has_length, k)) for k in {len(v) for v in failing}})
    out.update({f"x{p} == {c!r}": _at(p, str, partial(_equals, c)) for c in _distinct([*failing, *constants])[:40]})
    return out


def _has_length(k: int, v: str) -> bool:
    return len(v) == k


def sources(transforms: dict[str, Callable[[Any], Any]], width: int, constants: list) -> dict[str, Source]:
    """F's value sources: the bug's value transformed, each of `width` input positions, each constant."""
    out: dict[str, Source] = {"the bug's value": _the_bug}
    out.update({f"the bug's value {name}": _transformed(t) for name, t in transforms.items()})
    out.update({f"input {p}": _input(p) for p in range(width)})
    out.update({f"the constant {c!r}": _constant(c) for c in _distinct([*_GUESSES, *constants])[:80]})
    return out


def _the_bug(x: tuple, b: Any) -> Any:
    return b


def _transformed(t: Callable[[Any], Any]) -> Source:
    return lambda x, b: t(b) if b is not MISSING else MISSING


def _input(p: int) -> Source:
    return lambda x, b: x[p]


def _constant(c: Any) -> Source:
    return lambda x, b: c


def _distinct(values: Iterable[Any]) -> list:
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(f"{kind(v)}:{v!r}", v)
    return list(seen.values())


class Family(NamedTuple):
    """F for one function, as bitmasks over its items (required rows' and pool rows')."""

    items: list[Item]
    selected: dict[str, int]
    """Selector -> the items where it holds (each selector and its negation)."""
    right: dict[str, int]
    """Value source -> the items where its value is the reference's."""
    bug_right: int


def family(items: list[Item], chosen: dict[str, Selector], values: dict[str, Source]) -> Family:
    def mask(test: Callable[[Item], bool]) -> int:
        return sum(1 << i for i, it in enumerate(items) if test(it))

    full = (1 << len(items)) - 1
    selected: dict[str, int] = {}
    for name, pick in chosen.items():
        holds = mask(lambda it: _safe(lambda: bool(pick(it.inputs, it.bug))) is True)
        selected[name] = holds
        if name != "always":
            selected[f"not ({name})"] = full & ~holds & mask(lambda it: _safe(lambda: pick(it.inputs, it.bug))
                                                             is not MISSING)
    right = {name: mask(lambda it: _agrees(_safe(lambda: source(it.inputs, it.bug)), it.want))
             for name, source in values.items()}
    return Family(items, selected, right, mask(lambda it: _agrees(it.bug, it.want)))


def _agrees(value: Any, want: Any) -> bool:
    return value is not MISSING and kind(value) == kind(want) and _same(value, want)


def wrong_at(fam: Family, selector: str, source: str) -> int:
    """The items where the rule (selector, source) answers other than the reference."""
    full = (1 << len(fam.items)) - 1
    s = fam.selected[selector]
    return (s & ~fam.right[source] | ~s & ~fam.bug_right) & full


def _rows_mask(fam: Family, rows: set[str]) -> int:
    return sum(1 << i for i, it in enumerate(fam.items) if it.row in rows)


class Verdict(NamedTuple):
    refuted: int
    """Rules a required row refutes."""
    fixes: list[str]
    """Rules equal to the reference on every row, required and pool: fixes on the sample."""
    open: list[tuple[str, str]]
    """Rules only a pool row outside the required ones tells from the reference."""


def judge_rules(fam: Family, required: set[str]) -> Verdict:
    """Each rule of `fam` refuted by a `required` row, a fix on every row, or open (a pool row separates it)."""
    need = _rows_mask(fam, required)
    refuted, fixes, still = 0, [], []
    for selector in fam.selected:
        for source in fam.right:
            wrong = wrong_at(fam, selector, source)
            if wrong & need:
                refuted += 1
            elif not wrong:
                fixes.append(f"{source} where {selector}")
            else:
                still.append((selector, source))
    return Verdict(refuted, fixes, still)


def separate(fam: Family, required: set[str], table_of: Callable[[str], str], cap: int = SEPARATING_ROWS) -> list[str]:
    """Pool rows (not in `required`) that refute every open rule, greedily the row that refutes most first, at most
    `cap` per table (`table_of(row)`); rules left open where the cap is met. Where the cap leaves room, a second
    row for each rule (REFUTE_TIMES): a forger just outside F (the rule joined with a feature the one separating
    row happens to have) then meets two rows drawn apart."""
    wrongs = [wrong_at(fam, s, v) for s, v in judge_rules(fam, required).open]
    by_row: dict[str, int] = {}
    for i, it in enumerate(fam.items):
        if it.row not in required:
            by_row[it.row] = by_row.get(it.row, 0) | 1 << i
    picked: list[str] = []
    per_table: dict[str, int] = {}
    for times in range(1, REFUTE_TIMES + 1):
        need = [w for w in wrongs if sum(1 for row in picked if w & by_row[row]) < times]
        while need:
            counts = {row: sum(1 for w in need if w & bits) for row, bits in sorted(by_row.items())
                      if per_table.get(table_of(row), 0) < cap and row not in picked}
            best = max(counts, key=lambda row: counts[row], default=None)
            if best is None or counts[best] == 0:
                break
            picked.append(best)
            per_table[table_of(best)] = per_table.get(table_of(best), 0) + 1
            need = [w for w in need if not w & by_row[best]]
    return picked
