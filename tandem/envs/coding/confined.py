"""Confined changes (issue 46): a fix whose whole effect is at the inputs the visible checks name.

    RETRYABLE = frozenset({408, 502, 503, 504})          # the bug; the fix adds 429

    @pytest.mark.parametrize("code, expected", [(429, True), (503, True), (404, False), ...])
    def test_is_retryable(code, expected):
        assert is_retryable(code) == expected

`is_retryable(429) == True` is the only row the bug fails, and its value is a guess a forger wins (a yes/no
the issue asks for), so the task was refused. But a forger that writes `if code == 429: return True` and
keeps the bug's code elsewhere *is* the fix: the reference differs from the bug nowhere else. The host can
see that: the table's fresh rows (tandem.envs.coding.differential) and the **probe rows** drawn here, a
wide sample around the table's inputs, are run by the reference and by the bug in the plan's runs. Where
the bug agrees with the reference on every one of them (where the reference raises, the bug raises too),
the reference's change is *confined* to the visible rows the bug fails, and such a table's hidden tests are
graded by their own checks plus every fresh row as a **guard** (a row where bug == reference, its expected
value the reference's, held on the host and written nowhere). A program passing all of them equals the
reference on every visible and every sampled input: a fix on that sample, whatever its code looks like.
An over-broad forger (`return True` everywhere, the visible rows' value on every row it does not know)
fails the guards; one that keeps the bug everywhere fails the visible rows.

Conditions (tested in tests/test_confined.py, mutants in scripts/mutants_confined.py):
- at least MIN_GUARDS guards, showing the function's behaviour: every value the reference gives on a
  visible row the bug passes appears among the guards' values, or the guards hold MIN_GUARD_VALUES
  distinct values (a table of many outputs);
- no fresh row where the bug and the reference differ (a wrong value, the bug raising where the reference
  answers, the bug answering where the reference raises), and no fresh row dropped from the plan on which
  the bug answers (the reference's value there was not held: unknown, so not confined).

**The assumption is the sample's breadth.** The decision is only as good as the rows: a fix that changes
the function on inputs no row samples is called confined, and a lookup table of the visible rows would
then score 1 while wrong there. The probe rows are drawn to make that unlikely for the changes procedural
bugs make: each input varied alone around every row's value (neighbours +-1 and +-2, x2, //2, negated,
x10, 0 and +-1) and extrapolated by the differences between the column's values (b + (b - a), a - (b - a)):
is_leap's fix, which changes every multiple of 400 while the table's years 1600..2024 hold only the two
visible ones, meets 800, 2400, 3200 and 4000 there and is not confined. Strings that spell ints are varied as
those ints; other strings, bools and None are not varied (fresh_rows joins strings). A change that is
confined to a region of the domain these rows never reach (an `x > 10**6` branch, a non-integral input
between two ints) stays invisible: that is the residual risk, measured on the realistic set's corpus
(tests/_fix_corpus_real.py) and attacked in tests/test_confined.py.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from tandem.envs.coding.checks import _same
from tandem.envs.coding.fresh_rows import fresh_rows, owner

MIN_GUARDS = 8
"""Fresh rows where bug == reference a confined table needs before its hidden tests are graded by them."""
MIN_GUARD_VALUES = 3
"""Distinct guard values that stand in for the visible rows' values (a function of many outputs)."""
PROBE_ID = "probe"
"""pytest id prefix of a probe row in the graded copy (`test_f[probe3]`), after the fresh rows."""
PROBE_ROWS = 160
"""At most this many probe rows per table (the structural ones first, then the extrapolations)."""


def sample(rows: list[tuple], expected: list[int], rng: random.Random, failing: list[int] | None = None
           ) -> tuple[list[tuple], list[tuple]]:
    """The table's fresh rows (tandem.envs.coding.fresh_rows, half near its `failing` rows) and its probe rows."""
    fresh = fresh_rows(rows, expected, rng, failing=failing)
    return fresh, probe_rows(rows, expected, rng, taken=fresh)


def is_probe(row_id: str) -> bool:
    """Is this graded id a probe row (`test_f[probe3]`)? Probe rows decide and guard a confined change only:
    they reach outside the table's own domain, where a correct fix may answer otherwise (a negative count
    refused), so the fresh-row rule (tandem.envs.coding.differential) never grades by them."""
    return row_id.endswith("]") and row_id.rsplit("[", 1)[-1].startswith(PROBE_ID)


def probe_rows(rows: list[tuple], expected: list[int], rng: random.Random, taken: tuple | list = (),
               n: int = PROBE_ROWS) -> list[tuple]:
    """New rows, each a table row with one input column replaced by a value around it (see the module
    docstring), none equal (==) to a row of the table or of `taken`; the expected columns None."""
    inputs = [i for i in range(len(rows[0])) if i not in expected] if rows else []
    if not inputs or len(rows) < 2:
        return []
    seen = [tuple(r[i] for i in inputs) for r in (*rows, *taken)]
    near, far = [], []
    for i in inputs:
        column = [r[i] for r in rows]
        for row in rows:
            ours, extrapolated = _around(row[i], column)
            near += [_with(row, i, v, expected) for v in ours]
            far += [_with(row, i, v, expected) for v in extrapolated]
    rng.shuffle(far)
    out: list[tuple] = []
    for row in near + far:
        key = tuple(row[i] for i in inputs)
        if len(out) < n and not any(_same(key, s) for s in seen):
            seen.append(key)
            out.append(row)
    return out


def _with(row: tuple, i: int, value: Any, expected: list[int]) -> tuple:
    return tuple(None if j in expected else (value if j == i else v) for j, v in enumerate(row))


def _around(value: Any, column: list) -> tuple[list, list]:
    """(values near `value`, values extrapolated from the column's differences) of its own type."""
    if type(value) is int:
        return _ints(value, [v for v in column if type(v) is int])
    if type(value) is float:
        return [value + 1, value - 1, value * 2, value / 2, -value, value * 10], []
    spelled = _spelled_int(value)
    if spelled is not None:
        ints, far = _ints(spelled, [i for v in column if (i := _spelled_int(v)) is not None])
        return [str(v) for v in ints], [str(v) for v in far]
    if type(value) in (tuple, list) and value:
        near: list = []
        for p, item in enumerate(value):
            if type(item) in (int, float):
                around, _ = _around(item, [item])
                near += [type(value)((*value[:p], v, *value[p + 1:])) for v in around]
        return near, []
    return [], []


def _ints(x: int, column: list[int]) -> tuple[list[int], list[int]]:
    near = [x - 1, x + 1, x - 2, x + 2, 2 * x, x // 2, -x, -2 * x, 10 * x, -10 * x, 0, 1, -1]
    values = sorted(set(column))
    far = [v for a in values for b in values if a < b and x in (a, b) for v in (b + (b - a), a - (b - a))]
    return near, far


def _spelled_int(value: Any) -> int | None:
    if type(value) is not str or not value.strip().lstrip("+-").isdigit() or len(value) > 30:
        return None
    return int(value)


def confined_tables(weak: list[str], passing: list[str], fresh: list[str], kept: list[str],
                    bug_fails: Callable[[str], bool], bug_answers: Callable[[str], bool],
                    value_of: Callable[[str], Any]) -> dict[str, list[str]]:
    """Weak hidden tests (rows of a table) -> the fresh rows (guards) grading them, for the tables whose
    change is confined (module docstring). `passing`: the task's rows the bug passes; `fresh`: every fresh
    row the plan drew; `kept`: those whose reference values the host holds; `bug_fails(row)`: the bug fails
    a held check of the row (or never reaches one); `bug_answers(row)`: the bug's run reached a check of
    the row; `value_of(row)`: the reference's value the row's check expects."""
    out: dict[str, list[str]] = {}
    for table in sorted({owner(t) for t in weak if owner(t) != t}):
        guards = [f for f in kept if owner(f) == table]
        dropped = [f for f in fresh if owner(f) == table and f not in kept]
        if any(bug_fails(f) for f in guards) or any(bug_answers(f) for f in dropped):
            continue  # the fix changes an input no visible row names
        if _enough(guards, [t for t in passing if owner(t) == table], value_of):
            out.update({t: guards for t in weak if owner(t) == table})
    return out


def _enough(guards: list[str], passing: list[str], value_of: Callable[[str], Any]) -> bool:
    """MIN_GUARDS guards whose values show every value of the visible rows the bug passes, or at least
    MIN_GUARD_VALUES distinct values; never one value alone (a constant written on every row it does
    not know would pass them)."""
    values = {repr(value_of(f)) for f in guards}
    shown = {repr(value_of(t)) for t in passing} <= values or len(values) >= MIN_GUARD_VALUES
    return len(guards) >= MIN_GUARDS and len(values) >= 2 and shown
