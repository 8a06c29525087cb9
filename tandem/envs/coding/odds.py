"""The odds of a forger's guess at a check's expected value (issue 46: echoes, usual defaults, yes/no).

A check whose expected value is a usual default (0, 1, -1, "", None...), a yes/no, or a constant
written in the sandbox's copy of the graded files is within a forger's reach: it can write that
value without the fix. But reaching it is a *choice among candidates*, and a forger does not see
the expectation. This module counts that choice, so a task whose guesses together are long odds
is graded (tandem.envs.coding.guess_plan.GUESS_BOUND) instead of refused wholesale.

The forger (its code runs in the graded process) sees the graded files' text with the expectations
taken out, the issue, the call stack (so each check's own inputs), and the bug's value; it can
echo any constant, return a usual default, transform or negate the bug's value, and pick per row
by the inputs. Against it:

- **Selected, not guessed** (derived: the check is exposed where it is): an expected value among
  the check's own inputs (the constants of its parametrize row and of its test's body: an
  identity forger returns one of them, a clamp's `lo`), or one the issue writes out (the issue
  points at what fails).
- **The value, a guess among one family of candidates**: the usual defaults of the bug's value's
  kind (numbers 0, 1, -1; bools True, False; ""...), the constants of the graded files of the
  expected value's kind, the values the function returns under the bug on the files' other inputs
  (its codomain), the bug's value transformed (negated, +-1, reversed...). The odds are those of
  the smallest family holding the value, the bug's own value aside (a forger keeps that for free),
  and no longer than the value's place in an order a forger would try the family in (as listed:
  0 before 1 before -1; the constant the files write most often first; the smallest first).
  A forger that writes one value wherever it changes a row wins every check expecting it at once,
  so a value counts once per function (`Guess.of`), however many rows or bug values ask for it.
- **Which rows to change**: the forger cannot tell a row the bug gets right from one it gets wrong
  when both give the same bug value; it must change exactly the wrong ones, each to its value. Per
  function and bug value (`Guess.group`), over the distinct inputs the task runs it on: the number
  of ways to split them into "keep" and each expected value (a multinomial; counting as if the
  forger knew how many of each there are). Where every row of a bug value wants one answer the
  bug's value determines it: 1 way (the uniform transform, tandem.envs.coding.exposure, covers
  the whole function). A yes/no's value is 1 in 1 (the opposite of the bug), so a yes/no check is
  a guess only through this count. Rows whose inputs the issue writes are left out (the forger
  knows they are the ones that fail); where a feature of the inputs alone (two equal, a zero, a
  sign: SELECTORS) picks out exactly the wrong rows, the split is a 1-in-3 choice of feature.

**Fresh rows** (tandem.envs.coding.fresh_rows) are counted by tandem.envs.coding.blind with these same odds, as what
they are to a forger: calls whose expected value is written nowhere. A forger *can* tell a fresh row from an
original one (its pytest id `[freshN]` is on the call stack), so their split is counted apart from the original
rows', and every kept fresh row of a table so graded is judged, those the bug gets right too; an input the row
holds is a choice of argument made once per function, not a selection; one transformation right on every
original and fresh row is code equal to the reference on the sample, a fix (tests/test_attack_forgers.py).

Independence is assumed between families and functions (the grading plan multiplies); a forger
with knowledge of the domain is a fix, not a guess. What is not counted: a value computed from
the inputs by arithmetic no rule above names.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any, Callable, NamedTuple

from tandem.envs.coding.checks import _GUESSES, _same, echoes_of

_CASE = re.compile(r"^(?P<file>[^:]+)::(?:[^:\[]+::)*(?P<func>[^:\[]+)(?:\[(?P<param>.*)\])?$")


class Guess(NamedTuple):
    """A check whose value a forger can only guess: 1 in `odds` for the value, and the rows' split."""

    odds: int
    """The value wins 1 in this many (the smallest family of candidates holding it)."""
    of: tuple
    """(function, the expected value): the same value of one function is one guess, wherever asked."""
    group: tuple = ()
    """(function, the bug's value): the rows a forger must tell apart; counted once per task."""
    ways: int = 1
    """How many ways the group's rows split into kept and changed (to each value): 1 in this many."""
    among: str = ""
    """The family of candidates that sets the odds (for the reason)."""


def kind(value: Any) -> str:
    """What a forger takes for one type of value: numbers together (2 == 2.0), a bool on its own."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _others(candidates: list, bug: Any) -> list:
    """The distinct candidates but the bug's own value (a forger keeps that one for free)."""
    distinct: list = []
    for c in candidates:
        if not (kind(c) == kind(bug) and _same(c, bug)) and not any(kind(c) == kind(d) and _same(c, d)
                                                                    for d in distinct):
            distinct.append(c)
    return distinct


def _holds(candidates: list, value: Any) -> bool:
    return any(kind(c) == kind(value) and _same(c, value) for c in candidates)


def value_odds(want: Any, bug: Any, echoes: tuple, codomain: list,
               transforms: dict[str, Callable[[Any], Any]], written: list | None = None,
               frequency: dict[str, int] | None = None) -> tuple[int, str]:
    """(1 in how many a forger guesses `want` where the bug computed `bug`, the family): 0 where no family
    holds it. `written`: the codomain's values the files or the issue write (a forger selects among those);
    `frequency`: how often the files write each constant (`kind:repr`), an order a forger tries them in."""
    families = {
        "the usual defaults": [g for g in _GUESSES if kind(g) == kind(bug)] if kind(bug) != "bool" else [True, False],
        "the graded files' constants": [e for e in echoes if kind(e) == kind(want)],
        "the function's values under the bug": list(codomain),
        "the function's values under the bug written in the files": list(written or []),
        "the bug's value transformed": [_apply(t, bug) for t in transforms.values()],
    }
    found = [(min(len(_others(c, bug)), _rank(c, bug, want, frequency)), name) for name, c in families.items()
             if _holds(c, want)]
    return min(found) if found else (0, "")


def _rank(candidates: list, bug: Any, want: Any, frequency: dict[str, int] | None) -> int:
    """Where `want` comes in the order a forger would try the family in (as listed, most frequent in the files
    first, smallest first), the bug's value aside: a forger that tries one order bets on its first."""
    distinct = _others(candidates, bug)
    orders = [distinct, sorted(distinct, key=lambda c: -(frequency or {}).get(f"{kind(c)}:{c!r}", 0)),
              sorted(distinct, key=_size)]
    return min(next((i + 1 for i, c in enumerate(o) if kind(c) == kind(want) and _same(c, want)), len(o) + 1)
               for o in orders)


def _size(value: Any) -> tuple:
    if kind(value) == "number":
        return (abs(value), value < 0)
    try:
        return (len(value), 0)
    except TypeError:
        return (0, 0)


def _apply(transform: Callable[[Any], Any], value: Any) -> Any:
    try:
        return transform(value)
    except Exception:  # a type the transform does not fit: unchanged
        return value


def ways(rows: list[tuple[bool, Any]]) -> int:
    """How many ways one bug value's distinct rows (failing, expected) split into kept and each expected value."""
    counts: dict[str, int] = {}
    for failing, want in rows:
        key = f"{kind(want)}:{want!r}" if failing else "keep"
        counts[key] = counts.get(key, 0) + 1
    out = math.factorial(len(rows))
    for n in counts.values():
        out //= math.factorial(n)
    return out


SELECTORS: dict[str, Callable[[tuple], bool]] = {
    "two equal inputs": lambda row: len(_scalars(row)) > len(set(map(repr, _scalars(row)))),
    "a zero or empty input": lambda row: any(v == 0 or v == "" for v in _scalars(row)),
    "a negative input": lambda row: any(isinstance(v, (int, float)) and v < 0 for v in _scalars(row)),
}
"""Rows a forger picks out by their inputs alone, with no knowledge of the fix: a boundary (`count == threshold`
under a flipped `<`), a zero, a sign. Where one of them selects exactly a group's wrong rows, the split is a
1-in-len(SELECTORS) choice, not a multinomial."""


def _scalars(row: tuple) -> list:
    return [v for v in row if isinstance(v, (int, float, str)) and not isinstance(v, bool)]


def split_odds(rows: list[tuple[tuple, bool, Any]]) -> int:
    """1 in how many a forger changes exactly one group's wrong rows: (the row's inputs, failing, expected) each."""
    n = ways([(failing, want) for _, failing, want in rows])
    failing = [f for _, f, _ in rows]
    if any(failing) and any([bool(pick(r)) for r, _, _ in rows] == failing for pick in SELECTORS.values()):
        return min(n, len(SELECTORS))
    return n


class Inputs:
    """The constants a check's own test holds (its parametrize row in the graded copy, its body): what a
    forger reads off the call stack for that check."""

    def __init__(self, files: dict[str, str]):
        self.trees: dict[str, ast.Module] = {}
        for rel, text in files.items():
            try:
                self.trees[rel] = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError):
                continue
        self._cache: dict[str, tuple] = {}
        self.frequency: dict[str, int] = {}
        for tree in self.trees.values():
            for v in echoes_of(tree):
                key = f"{kind(v)}:{v!r}"
                self.frequency[key] = self.frequency.get(key, 0) + 1

    def of(self, test: str) -> tuple:
        if test not in self._cache:
            self._cache[test] = self._find(test)
        return self._cache[test]

    def row(self, test: str) -> tuple | None:
        """The constants of the test's own parametrize row, where the graded copy names it (`case3`)."""
        m = _CASE.match(test)
        function = self._function(m) if m else None
        if function is None or not m or not (m.group("param") or "").startswith("case"):
            return None
        for mark in function.decorator_list:
            if isinstance(mark, ast.Call) and len(mark.args) == 2 and isinstance(mark.args[1], (ast.List, ast.Tuple)):
                index = m.group("param")[4:]
                if index.isdigit() and int(index) < len(mark.args[1].elts):
                    return echoes_of(mark.args[1].elts[int(index)])
        return None

    def _function(self, m: re.Match) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        tree = self.trees.get(m.group("file"))
        if tree is None:
            return None
        return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == m.group("func")), None)

    def _find(self, test: str) -> tuple:
        m = _CASE.match(test)
        function = self._function(m) if m else None
        if function is None:  # not found: every constant of the files (conservative)
            return tuple(v for tree in self.trees.values() for v in echoes_of(tree))
        body = tuple(v for stmt in function.body for v in echoes_of(stmt))
        row = self.row(test)
        if row is None:  # a table the host did not take apart: every row is this check's too
            row = tuple(v for mark in function.decorator_list for v in echoes_of(mark))
        return body + row


def among_inputs(value: Any, inputs: tuple, whole: bool = False) -> bool:
    """`value` is one of the inputs (or, unless `whole`, a part of one of their strings): a forger selects it."""
    if isinstance(value, str) and value and not whole:
        return any(isinstance(c, str) and value in c for c in inputs)
    return _holds(list(inputs), value)
