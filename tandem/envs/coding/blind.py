"""Fresh rows counted as what they are to a forger: blind guesses (issue 46).

tandem.envs.coding.exposure judges a check by what a forger reaches *where it sees the row*: the table's own
rows are written in the sandbox's copy and shown on the call stack, so an expected value among the row's
inputs is selected, a usual default or a transformation of the bug's value is one try away. A fresh row
(tandem.envs.coding.fresh_rows) is drawn per plan with a host seed and its expected value is written nowhere:
to a forger it is one more call at run time, its inputs and the bug's value known, its expected value not.
Its pytest id (`[freshN]`) is on the call stack, so **a forger tells a fresh row from an original one**: this
module never assumes otherwise; fresh rows are counted apart from the original ones (a forger may treat
them apart), and a task graded here requires *every* kept fresh row of the table, those the bug gets right
too (a forger that changes every fresh row fails those; left unjudged, "change every fresh row" would win).

To pass the fresh rows a forger must return, on exactly the fresh rows the bug gets wrong, the right value,
and keep the bug's value on the others. Per fresh row it can reach the right value by (`labels`):

- **the bug's value transformed** (`not bug`, bug+-1, -bug: exposure.TRANSFORMS), right only where the
  bug is wrong: applied to every row it fails the rows the bug gets right;
- **one of the row's own inputs** (clamp returns one of x, lo, hi; sign(0) is its input): which position,
  a choice among the row's inputs, made once per function (a forger returning the same argument on every
  row it changes wins them at once: counted once, not per row);
- **a value of a family** (usual defaults, the files' and the issue's constants, the function's values
  under the bug): odds.value_odds, once per function and value;
- a derivation of tandem.envs.coding.derivation that reaches it: a rule, counted as a sure thing.

A row no label reaches is beyond a forger's reach: the existing rule grades its test outright.

**Which rows to change** is odds.Guess.group's multinomial over the fresh rows of one function and one bug
value (the forger keeps rows apart by the bug's value for free), rows labelled `keep` or by the label
each needs (one label per row, the one most rows accept: fewer labels, fewer ways, the conservative
choice); where a selector of odds.SELECTORS picks out exactly the changed rows, 1 in len(SELECTORS) times the
ways to label the changed ones. The chance is the product over labels and groups, times the original rows'
guesses (odds, once per function and value there too); a task is graded when it is within GUESS_BOUND.

**A uniform transform right on every row** (every original row of the task and every fresh row calling the
function, at least one fresh row the bug fails): one transformation of the bug's value that returns the
reference's value on every sampled input *is* code equal to the reference on the sample (hamming's
complement, compare_versions' negation of a bug that swapped the arguments): a fix, not a guess. Its rows
count as beyond a guess (tests/test_attack_forgers.py: such programs score what the reference scores).
Where it passes the original rows but fails a fresh one, it is no fix and no forgery that wins: counted as
above. The danger is a sample too narrow to tell (a fix's change confined to inputs no row reaches): the
bug must fail a fresh row, written nowhere, for any of this to grade a test.
"""

from __future__ import annotations

import ast
import math
from typing import AbstractSet, Any, Callable, NamedTuple

from tandem.envs.coding.checks import Site, _same
from tandem.envs.coding.derivation import _expected, under_check
from tandem.envs.coding.odds import _CASE, SELECTORS, Inputs, kind, value_odds
from tandem.envs.coding.verdict import lookup

MISSING = object()
"""The bug's value where the bug never reached the check (it raised): nothing to transform."""


def _values(node: ast.expr) -> tuple:
    """A parametrize row's values by position (a one-column table's row is its one value); unreadable: none."""
    parts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    out = []
    for part in parts:
        try:
            out.append(ast.literal_eval(part))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            out.append(None)
    return tuple(out)


class Row(NamedTuple):
    """One run of one host-held check on one row: what a forger sees (inputs, the bug's value) and what it needs."""

    function: str
    fresh: bool
    inputs: tuple
    bug: Any
    want: Any
    failing: bool
    derived: bool = False
    """A derivation rule of tandem.envs.coding.derivation reaches `want` from the bug's value here."""


def rows_of(tests: list[str], sites: dict[int, Site], buggy: dict[str, list], required: dict[str, set[int]],
            inputs: Inputs, fresh: set[str], derived: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset()) -> list[Row]:
    """Every run of a host-held strong check in `tests` with its expected value: its row's inputs (a fresh row's
    own, read from the table in the graded copy), the bug's value (MISSING where the bug never met it)."""
    out: list[Row] = []
    for t in tests:
        row = row_inputs(inputs, t)
        seen: dict[int, int] = {}
        for k, b in lookup(buggy, t, []):
            wants = _expected(sites[k], t) if k in sites else ()
            nth = seen[k] = seen.get(k, -1) + 1
            if wants:
                out.append(Row(under_check(sites[k]), t in fresh, row, b, wants[min(nth, len(wants) - 1)],
                               not sites[k].passes(b, t, nth), (t, k) in derived))
        for k in sorted(required.get(t, set())):
            wants = _expected(sites[k], t) if k in sites else ()
            out += [Row(under_check(sites[k]), t in fresh, row, MISSING, w, True) for w in wants[seen.get(k, -1) + 1:]]
    return out


def row_inputs(inputs: Inputs, test: str) -> tuple:
    """The constants of the test's own parametrize row, an original (`case3`) or a fresh one (`fresh3`, its place in
    the table read off the `ids` the graded copy writes); else every constant the test holds."""
    m = _CASE.match(test)
    function = inputs._function(m) if m else None
    param = (m.group("param") or "") if m else ""
    for mark in function.decorator_list if function is not None and param else ():
        ids = next((kw.value for kw in getattr(mark, "keywords", ()) if kw.arg == "ids"), None)
        if isinstance(mark, ast.Call) and len(mark.args) == 2 and isinstance(mark.args[1], (ast.List, ast.Tuple)) \
                and isinstance(ids, (ast.List, ast.Tuple)):
            names = [e.value if isinstance(e, ast.Constant) else None for e in ids.elts]
            if param in names and names.index(param) < len(mark.args[1].elts):
                return _values(mark.args[1].elts[names.index(param)])
    return inputs.of(test)


def labels(row: Row, transforms: dict[str, Callable[[Any], Any]], family: Callable[[Row], int]) -> dict[str, int]:
    """How a forger reaches `row.want` on this row, each way with the odds of choosing it (1 in n)."""
    if not row.failing:
        return {"keep": 1}
    out: dict[str, int] = {}
    if row.derived:
        out["a derivation from the bug's value"] = 1
    if row.bug is not MISSING:
        for name, transform in transforms.items():
            try:
                value = transform(row.bug)
            except Exception:  # a type the transform does not fit
                continue
            if kind(value) == kind(row.want) and _same(value, row.want) and not _same(value, row.bug):
                out[f"the bug's value {name}"] = 1
    given = [v for v in row.inputs if v is not None]  # None: the table's expected column, taken out
    distinct = len({(kind(v), repr(v)) for v in given})
    for p, v in enumerate(given):
        if kind(v) == kind(row.want) and _same(v, row.want):
            out.setdefault(f"its input {p}", max(distinct, 1))
    odds = family(row)
    if odds:
        out[f"{kind(row.want)}:{row.want!r}"] = odds
    return out


def uniform_fix(rows: list[Row], transforms: dict[str, Callable[[Any], Any]]) -> dict[str, str]:
    """Function -> the transformation of the bug's value that returns the reference's value on every one of its
    rows, original and fresh, where the bug fails a fresh row: code equal to the reference on the sample."""
    out: dict[str, str] = {}
    for function in sorted({r.function for r in rows}):
        mine = [r for r in rows if r.function == function]
        if not any(r.fresh and r.failing for r in mine) or any(r.bug is MISSING for r in mine):
            continue
        for name, transform in transforms.items():
            if all(_safe_same(transform, r.bug, r.want) for r in mine):
                out[function] = name
                break
    return out


def _safe_same(transform: Callable[[Any], Any], bug: Any, want: Any) -> bool:
    try:
        value = transform(bug)
    except Exception:
        return False
    return kind(value) == kind(want) and _same(value, want)


FIX_TRANSFORMS: dict[str, Callable[[Any], Any]] = {
    "absolute value": lambda v: abs(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v,
}
"""Transformations tried on top of exposure.TRANSFORMS, as labels and as uniform fixes: gcd's bug returns `a`
where the reference returns `abs(a)`."""


class Count(NamedTuple):
    chance: float
    """A blind forger passes every fresh row 1 in 1/chance (0: a row no label reaches, or a uniform fix)."""
    why: str


def blind_chance(rows: list[Row], transforms: dict[str, Callable[[Any], Any]], family: Callable[[Row], int],
                 counted: set[tuple] | frozenset[tuple] = frozenset(), separated: AbstractSet[str] = frozenset()) -> Count:
    """The chance a forger passes every fresh row of `rows` without the fix; `counted`: (function, label) pairs
    whose odds the original rows' guesses already count (odds.Guess.of: one value of one function once);
    `separated`: functions whose every rule of tandem.envs.coding.separating's family is refuted by a fresh row
    or a fix on the pool (the uniform transform below is one such rule: "always", the transform)."""
    transforms = {**transforms, **FIX_TRANSFORMS}
    fresh = [r for r in rows if r.fresh]
    fixed = {**uniform_fix(rows, transforms), **{f: "every rule of F refuted or a fix on the pool" for f in separated}}
    fresh = [r for r in fresh if r.function not in fixed]
    options = [labels(r, transforms, family) for r in fresh]
    if any(not o for o in options):
        return Count(0.0, "a fresh row's expected value no blind guess reaches")
    if not any(r.failing for r in fresh):
        return Count(0.0 if fixed else 1.0, "the bug fails no fresh row" if not fixed else
                     f"no guess but fixes on the sample (a uniform transform, or every rule of F refuted): {fixed}")
    return max((_count(fresh, options, chosen, counted) for chosen in _assignments(fresh, options)),
               key=lambda c: c.chance)


def _assignments(fresh: list[Row], options: list[dict[str, int]]) -> list[list[str]]:
    """One label per row, two ways a forger might pick: the likeliest candidate first, or the label most rows
    accept first (one argument returned on every row it changes); blind_chance keeps the better for the forger."""
    popular: dict[tuple, int] = {}
    for r, o in zip(fresh, options):
        for label in o:
            popular[(r.function, label)] = popular.get((r.function, label), 0) + 1
    def likeliest(r: Row, o: dict[str, int]) -> str:
        return min(o, key=lambda label: (o[label], -popular[(r.function, label)], label))

    def most_accepted(r: Row, o: dict[str, int]) -> str:
        return min(o, key=lambda label: (-popular[(r.function, label)], o[label], label))

    return [[likeliest(r, o) for r, o in zip(fresh, options)], [most_accepted(r, o) for r, o in zip(fresh, options)]]


def _count(fresh: list[Row], options: list[dict[str, int]], chosen: list[str], counted: set[tuple] | frozenset[tuple]) -> Count:
    odds: dict[tuple, int] = {}
    for r, o, label in zip(fresh, options, chosen):
        if label != "keep":  # a choice made once per function: the fewest candidates any of its rows offers
            odds[(r.function, label)] = min(odds.get((r.function, label), o[label]), o[label])
    chance = 1.0
    for key, n in odds.items():
        if key not in counted:
            chance /= n
    groups: dict[tuple, list[tuple[Row, str]]] = {}
    for r, label in zip(fresh, chosen):
        groups.setdefault((r.function, kind(r.bug), repr(r.bug)), []).append((r, label))
    splits = [split_ways(g) for g in groups.values()]
    for n in splits:
        chance /= n
    return Count(chance, f"its fresh rows' values, guessed blind, win 1 in {round(1 / chance)} "
                         f"({len(odds)} values to choose; which rows to change 1 in {math.prod(splits)})")


def split_ways(group: list[tuple[Row, str]]) -> int:
    """1 in how many a forger changes exactly the group's wrong rows, each by its label: the multinomial, or a
    selector (odds.SELECTORS) picking out the changed rows times the ways to label those."""
    def multinomial(names: list[str]) -> int:
        out = math.factorial(len(names))
        for name in set(names):
            out //= math.factorial(names.count(name))
        return out

    n = multinomial([label for _, label in group])
    changed = [label != "keep" for _, label in group]
    if any(changed) and any([bool(_pick(pick, r.inputs)) for r, _ in group] == changed for pick in SELECTORS.values()):
        return min(n, len(SELECTORS) * multinomial([label for _, label in group if label != "keep"]))
    return n


def _pick(pick: Callable[[tuple], bool], inputs: tuple) -> bool:
    """The selector on the row's scalars, a tuple input's items among them (in_rect's point: a zero coordinate)."""
    try:
        return bool(pick(tuple(_flat(inputs))))
    except Exception:
        return False


def _flat(values: Any) -> list:
    if isinstance(values, (tuple, list)):
        return [v for item in values for v in _flat(item)]
    return [values]


def family_odds(echoes: tuple, stated: tuple, codomains: dict[str, list], transforms: dict[str, Callable],
                frequency: dict[str, int]) -> Callable[[Row], int]:
    """A row's value as one of a family (odds.value_odds): usual defaults, the files' constants and the issue's
    (a forger reads both), the function's values under the bug."""
    def odds(row: Row) -> int:
        bug = row.bug if row.bug is not MISSING else None
        return value_odds(row.want, bug, (*echoes, *stated), codomains.get(row.function, []), transforms,
                          None, frequency)[0]
    return odds
