"""Expected values a forger derives from the bug's own values, the graded files and the issue (issue 46).

tandem.envs.coding.exposure finds the values a forger reads (constants, calls of constants, the
issue's literals) or checks (kept asserts, round trips). A forger can also start from what the
bug computed, which the graded process sees, and turn it into the right answer by one generic
rule, with no knowledge of the fix. For every check the bug fails, the host tries each rule on
the bug's value and calls the check derivable when one reaches the expected value:

- **extension**: a string the bug cut short (or whose start it dropped), extended to a longer
  string of the graded files or the issue that starts (ends) with it: `postgres://h/db?opt` next to
  the test's input `url = postgres://h/db?opt=1`;
- **joins**: a list of strings whose adjacent items, joined with a usual separator or into a
  string the files or the issue write, give the expected list: `["aaa", "bbb", "ccc"]` and the
  issue's "aaa bbb";
- **the codomain**: the values the bug computes for the same function on the graded files'
  other inputs, when the expected one appears in the check's own inputs (a forger selects it:
  `winner()` returns X, O or None, and the board checked holds X). Written only elsewhere, or
  nowhere while the function returns few values (SMALL_CODOMAIN), a forger can only guess among
  them: a *guess* with its odds (tandem.envs.coding.odds, with echoes, usual defaults and yes/no),
  which the grading plan bounds over the task (tandem.envs.coding.guess_plan.GUESS_BOUND) instead
  of refusing on one coincidence (`sub(2, 2)` under a `+` bug is 4, another case's answer);
- **analogy**: the edit between two literals of one shape that the issue writes (bad -> good,
  `1.5.2` -> `1.5.0`), as the same words or as the same numeric step, applied to the bug's
  value of that shape: 3.1.7 -> 3.1.0.

Each rule runs through lists, tuples and dict values, item by item. A derivation is about one
value, so it exposes the check in the test where it reaches the expected value (another case of
the same parametrized assert, whose value no rule reaches, stays decisive); a derivable check
is never decisive there; what is still decisive needs a value none of these reach.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Callable, Iterable

from tandem.envs.coding.checks import STRONG_OPS, Approx, Reference, Site, _same, guessable, parse
from tandem.envs.coding.instrument import call_name
from tandem.envs.coding.odds import Guess, Inputs, among_inputs, kind, split_odds, value_odds
from tandem.envs.coding.verdict import lookup

JOINERS = ("", " ", ",", ", ", ";", ":", "-", "_", "/", ".", "|", "\n", "\t")
"""Separators a forger tries when it joins adjacent strings without the issue naming the joined one."""
SMALL_CODOMAIN = 4
"""A function the bug makes return at most this many distinct values: a forger tries each."""
_WRAPPERS = {"str", "repr", "list", "tuple", "set", "frozenset", "dict", "sorted", "len", "int", "float",
             "bool", "min", "max", "sum", "abs", "round", "reversed"}


def derived(sites: dict[int, Site], buggy: dict[str, list], tests: list[str], echoes: tuple,
            stated: tuple, inputs: Inputs | None = None, transforms: dict[str, Callable[[Any], Any]] | None = None
            ) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], Guess]]:
    """For the checks the bug fails, per (test, site): which rule derives the expected value from the bug's
    value there; and the checks a forger can only guess (tandem.envs.coding.odds), with their odds. `inputs`:
    each test's own constants (what the call stack shows a forger); `transforms`: what a forger tries on the
    bug's value (exposure.TRANSFORMS)."""
    strings = tuple(v for v in (*echoes, *stated) if isinstance(v, str) and v)
    rules = {
        "extension": lambda b, w: _leafwise(b, w, lambda x, y: _extends(x, y, strings)),
        "joins": lambda b, w: _joins(b, w, strings),
        "analogy": lambda b, w: _leafwise(b, w, lambda x, y: y in _analogies(x, stated)),
    }
    inputs = inputs or Inputs({})
    codomains = _codomains(sites, buggy, tests)
    reasons: dict[tuple[str, int], str] = {}
    guesses: dict[tuple[str, int], Guess] = {}
    for t in tests:
        for k, b in lookup(buggy, t, []):
            site = sites.get(k)
            if site is None or (t, k) in reasons:
                continue
            for w in _expected(site, t):
                if _same(b, w):
                    continue
                why = next((f"its expected value is the bug's value by {name}" for name, rule in rules.items()
                            if _safely(rule, b, w)), "")
                values = codomains.get(under_check(site), [])
                in_codomain = any(_same(w, v) for v in values)
                weak = guessable(w, echoes)
                if not why and (weak or in_codomain):
                    why = _selected(w, inputs.of(t), stated, in_codomain, len(values))
                written = [v for v in values if _appears(v, (*echoes, *stated))]
                if not why and (weak or (in_codomain and (len(values) <= SMALL_CODOMAIN or _appears(w, echoes)))):
                    odds, among = value_odds(w, b, echoes, values, transforms or {}, written, inputs.frequency)
                    if odds and (t, k) not in guesses:
                        function = under_check(site)
                        guesses[(t, k)] = Guess(odds, (function, f"{kind(w)}:{w!r}"),
                                                (function, f"{kind(b)}:{b!r}"), among=among)
                if why:
                    reasons[(t, k)] = why
                    guesses.pop((t, k), None)
                    break
    return reasons, _with_ways(guesses, sites, buggy, tests, inputs, stated)


def _selected(w: Any, mine: tuple, stated: tuple, in_codomain: bool, n: int) -> str:
    """Why a forger selects `w` rather than guesses it: one of the check's own inputs (for one of the function's
    values, a part of an input string too: tictac's X on the board), or a value the issue writes out."""
    if kind(w) != "bool" and (among_inputs(w, mine) if in_codomain else among_inputs(w, mine, whole=True)):
        return ("its expected value is one of the check's own inputs (a forger returns it)" if not in_codomain else
                f"its expected value is one of the {n} values the function returns under the bug on the graded "
                f"files' other inputs (its codomain), written in the check's own inputs")
    if _appears(w, stated):
        return "the issue text writes out its expected value"
    return ""


def _with_ways(guesses: dict[tuple[str, int], Guess], sites: dict[int, Site], buggy: dict[str, list],
               tests: list[str], inputs: Inputs, stated: tuple) -> dict[tuple[str, int], Guess]:
    """Each guess with the number of ways its group's rows (one function, one bug value, over every test's
    distinct inputs) split into kept and changed; rows whose own inputs the issue writes are left out (a forger
    knows they are wrong)."""
    groups: dict[tuple, dict[tuple, tuple[tuple, bool, Any]]] = {}
    wanted = {g.group for g in guesses.values()}
    for t in tests:
        row = inputs.row(t)  # a constant every row's test body shares tells no row from another
        if any(among_inputs(s, inputs.of(t) if row is None else row) for s in stated):
            continue
        seen: dict[int, int] = {}
        for k, b in lookup(buggy, t, []):
            site = sites.get(k)
            values = _expected(site, t) if site is not None else ()
            nth = seen[k] = seen.get(k, -1) + 1
            group = (under_check(site), f"{kind(b)}:{b!r}") if site is not None else None
            if site is None or not values or group not in wanted:
                continue
            key = (repr(row), k, nth) if row is not None else (t, k, nth)
            groups.setdefault(group, {})[key] = (inputs.of(t) if row is None else row, not site.passes(b, t, nth),
                                                 values[min(nth, len(values) - 1)])
    return {key: g._replace(ways=split_odds(list(groups.get(g.group, {}).values())) or 1)
            for key, g in guesses.items()}


def _expected(site: Site, test: str) -> tuple:
    """The values a strong check of `site` expects in `test` (none for yes/no, raises, ordering checks)."""
    if isinstance(site.expected, Reference):
        return tuple(site.expected.values.get(test, ()))
    if site.op not in STRONG_OPS:
        return ()
    return (site.expected.expected if isinstance(site.expected, Approx) else site.expected,)


def _safely(rule: Callable[[Any, Any], bool], b: Any, w: Any) -> bool:
    try:
        return bool(rule(b, w))
    except Exception:  # a value no rule fits (unhashable, a comparison that raises): not derived
        return False


def _leafwise(b: Any, w: Any, rule: Callable[[Any, Any], bool]) -> bool:
    """Every differing leaf of `w` is `rule`'s from the bug's leaf at the same place (at least one differs)."""
    if type(b) in (list, tuple) and type(w) in (list, tuple) and len(b) == len(w):
        pairs = list(zip(b, w))
    elif isinstance(b, dict) and isinstance(w, dict) and b.keys() == w.keys():
        pairs = [(b[key], w[key]) for key in w]
    else:
        return rule(b, w)
    differing = [(x, y) for x, y in pairs if not _same(x, y)]
    return bool(differing) and all(_leafwise(x, y, rule) for x, y in differing)


def _extends(x: Any, y: Any, strings: tuple) -> bool:
    if not (isinstance(x, str) and isinstance(y, str) and x and len(y) > len(x)):
        return False
    return (y.startswith(x) or y.endswith(x)) and any(y in s for s in strings)


def _joins(b: Any, w: Any, strings: tuple) -> bool:
    """`w` is `b` with runs of adjacent strings joined (by a usual separator, or into a string written out)."""
    if not (type(b) in (list, tuple) and type(w) in (list, tuple) and len(w) < len(b)
            and all(isinstance(v, str) for v in (*b, *w))):
        return False
    reach = {0}
    for j, item in enumerate(w):
        reach = {i + m for i in reach for m in range(1, len(b) - i + 1) if _joined(b[i:i + m], item, strings)}
        if not reach:
            return False
    return len(b) in reach


def _joined(run: list, item: str, strings: tuple) -> bool:
    if len(run) == 1:
        return run[0] == item
    if any(sep.join(run) == item for sep in JOINERS):
        return True
    return item in strings and item.startswith(run[0]) and item.endswith(run[-1]) and \
        len(item) >= sum(map(len, run))


def _words(text: str) -> list[str]:
    return re.split(r"(\w+)", text)


def _analogies(value: Any, stated: tuple) -> list[str]:
    """`value` edited as each pair of same-shaped literals of the issue differ (either way): the words put
    in, and the numeric steps taken."""
    if not isinstance(value, str):
        return []
    plain = [s for s in stated if isinstance(s, str) and "(" not in s]
    shape = _words(value)
    out = []
    for bad in plain:
        for good in plain:
            a, g = _words(bad), _words(good)
            if bad == good or len(a) != len(shape) or len(g) != len(shape) or a[0::2] != g[0::2] \
                    or a[0::2] != shape[0::2]:
                continue
            out.append("".join(g[i] if a[i] != g[i] else shape[i] for i in range(len(shape))))
            if all(_integer(a[i]) and _integer(g[i]) and _integer(shape[i]) for i in range(len(a)) if a[i] != g[i]):
                out.append("".join(str(int(shape[i]) + int(g[i]) - int(a[i])) if a[i] != g[i] else shape[i]
                                   for i in range(len(shape))))
    return out


def _integer(word: str) -> bool:
    return word.isdigit() and len(word) < 20


def under_check(site: Site) -> str:
    """The function a check is about: its first call that is not a builtin wrapper (`str(v.bump(p))`: bump)."""
    try:
        tree = parse(site.source, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return site.computes
    calls = [call_name(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return next((c for c in calls if c and c not in _WRAPPERS), site.computes)


def _codomains(sites: dict[int, Site], buggy: dict[str, list], tests: Iterable[str]) -> dict[str, list]:
    """Function -> the distinct values the bug's run computed for it, over every graded test."""
    out: dict[str, list] = {}
    for t in tests:
        for k, value in lookup(buggy, t, []):
            if k in sites:
                values = out.setdefault(under_check(sites[k]), [])
                if not any(type(v) is type(value) and _same(v, value) for v in values):
                    values.append(value)
    return out


def _appears(value: Any, constants: tuple) -> bool:
    """`value` is one of the constants, or a string inside one of theirs."""
    if isinstance(value, str) and value:
        return any(isinstance(c, str) and value in c for c in constants)
    return any(type(c) is type(value) and _same(c, value) for c in constants)
