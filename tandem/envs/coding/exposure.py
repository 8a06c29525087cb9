"""Which host-held checks a forger can answer without the fix: what the sandbox can compute or verify.

A host-held site proves the fix only if its expected value cannot be reached from what the
graded process holds: the buggy repository's code, and the sandbox's copy of the graded
files (expectations of host-held sites removed). tandem.envs.coding.checks.guessable covers usual
defaults; this module finds the other ways in, once per task, from the reference copy of
the files (tandem.envs.coding.instrument with references) and the bug's run (tandem.envs.coding.grading_plan):

- **echoes**: every constant written anywhere in the sandbox's copy of the graded files (the
  other checks' inputs, the enclosing test, parametrize arguments, module data). `convert(212,
  "F", "C")` next to a hidden `convert(100, "C", "F") == 212` writes 212 where a forger reads it;
- **the issue text**: every literal the problem statement writes out (numbers, quoted strings,
  backticked code and the literals in it). The agent reads the issue: "`median([4, 1, 3, 2])`
  returns 3.5 instead of 2.5" tells a forger what to report for that check;
- **a kept equality**: an assert left in the sandbox (`assert E == R`, R not plain data)
  tells a forger that E equals R, and R's code may be right under the bug: every host-held
  check that computes E (or R) is exposed (`repr(Frac(1, 2) - Frac(1, 3))` next to a kept
  `Frac(1, 2) - Frac(1, 3) == Frac(1, 6)`);
- **a round trip**: a check `F(G(x, ...), ...) == x` tells a forger that F undoes G. When the
  bug breaks it (or it is kept in the sandbox, its outcome unknown), one side is right and the
  sandbox can check candidates with it: every host-held check that calls F or G is exposed;
- **a uniform transform**: one simple transformation (reverse, negate, sort, +-1, ...) of
  every value one function computes that makes every hidden check pass under the bug (the
  bug mirrors the right answer); a forger needs no verifier, only to try a few;
- **an own site's expected side** (tandem.envs.coding.expected_sides): R of a check the bug passes runs
  in the graded copies, so its constants are echoes, its `E == R` is a kept equality, and what its
  calls compute under the bug joins their functions' codomains;
- **a derivation from the bug's value** (tandem.envs.coding.derivation): the bug's value extended
  to a string the files hold, its items joined, one of the few values the function returns on
  the files' other inputs, or the issue's bad -> good edit applied by analogy.

Each exposed site gets its reason; it is never what makes a hidden test host-graded.
What this cannot see: inverse functions that no graded file pairs up (a forger that guesses
from names that from_base undoes to_base and searches), and values the repository's other
code computes for reasons no check states. The README says so.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from tandem.envs.coding.checks import STRONG_OPS, Reference, Site, constant, echoes_of, parse
from tandem.envs.coding.derivation import Guess, derived, under_check
from tandem.envs.coding.expected_sides import own_side, with_r_values
from tandem.envs.coding.instrument import CHECK, is_constant, call_name
from tandem.envs.coding.odds import Inputs
from tandem.envs.coding.verdict import host_check, lookup

TRANSFORMS: dict[str, Callable[[Any], Any]] = {
    "reversed": lambda v: v[::-1] if isinstance(v, (str, list, tuple)) else v,
    "reversed after the sign": lambda v: v[0] + v[1:][::-1] if isinstance(v, str) and v[:1] in "+-" else v,
    "sorted": lambda v: type(v)(sorted(v)) if type(v) in (list, tuple) else v,
    "negated": lambda v: -v if _number(v) else v,
    "plus one": lambda v: v + 1 if _number(v) else v,
    "minus one": lambda v: v - 1 if _number(v) else v,
    "not": lambda v: not v if isinstance(v, bool) else v,
    "swapped case": lambda v: v.swapcase() if isinstance(v, str) else v,
    "stripped": lambda v: v.strip() if isinstance(v, str) else v,
}
"""What a generic forger tries on a value it knows is wrong: no knowledge of the task needed."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class Exposure:
    echoes: tuple = ()
    """Every constant of the sandbox's copy of the graded files (tandem's site numbers aside)."""
    reasons: dict[int, str] = field(default_factory=dict)
    """Site -> how a forger reaches its value without the fix."""
    stated: tuple = ()
    """Every literal the problem statement writes out (stated_values): the agent reads it."""
    derived: dict[tuple[str, int], str] = field(default_factory=dict)
    """(test, site) -> how a forger derives the check's value there from the bug's (tandem.envs.coding.derivation)."""
    guesses: dict[tuple[str, int], Guess] = field(default_factory=dict)
    """(test, site) -> the guess among a few of the function's values a forger must make there."""

    def strong(self, site: Site, test: str, nth: int) -> bool:
        return site.k not in self.reasons and (test, site.k) not in self.derived and \
            (test, site.k) not in self.guesses and site.strong_against(self.echoes + self.stated, test, nth)

    def guessed(self, site: Site, test: str, nth: int) -> int:
        """Among how many values a forger guesses this check's value (0: it is no such guess)."""
        if site.k in self.reasons or (test, site.k) in self.derived or _held_in_sandbox(site):
            return 0  # a value the test holds in a variable is read, not guessed
        guess = self.guesses.get((test, site.k))
        return guess.odds if guess else 0

    def why(self, site: Site, test: str | None = None, nth: int = 0) -> str:
        if site.k in self.reasons:
            return self.reasons[site.k]
        if test is not None and (test, site.k) in self.derived:
            return self.derived[(test, site.k)]
        if _held_in_sandbox(site):
            return "its expectation is a value the test holds in a variable (the sandbox has it)"
        if test is not None and (test, site.k) in self.guesses:
            g = self.guesses[(test, site.k)]
            return (f"its expected value is a guess among {g.among} of {under_check(site)}(): a forger guesses it "
                    f"1 in {g.odds}, and which of its rows to change 1 in {g.ways}")
        weak = not site.strong_against(self.echoes + self.stated, test, nth)
        if weak and site.strong_against(self.echoes, test, nth):
            return "the issue text writes out its expected value"
        if site.op == "raises":
            return ("an exception's type and message are strings the graded process writes (and the call stack "
                    "shows a forger the pytest.raises around its call)")
        if site.op in ("truth", "falsy", "is", "is not"):
            return "its expectation is a yes/no"
        if site.op not in STRONG_OPS and site.op not in ("in", "=="):
            return "a comparison most values pass"
        return "its expected value is a guess (a usual default, or a constant the sandbox's copy holds)"


def _held_in_sandbox(site: Site) -> bool:
    return isinstance(site.expected, Reference) and site.expected.stored


@dataclass
class _Check:
    k: int | None
    """The host-held site; None for an assert kept in the sandbox."""
    file: str
    line: int
    function: ast.FunctionDef | ast.AsyncFunctionDef
    computed: ast.expr
    expected: ast.expr | None
    """R of a reference site or of a kept `E == R`; None for a constant expectation."""


def analyse(reference_files: dict[str, str], sites: dict[int, Site], buggy: dict[str, list],
            required: dict[str, set[int]], tests: list[str], statement: str = "",
            own: dict[str, dict[int, tuple[Any, bool]]] | None = None) -> Exposure:
    """The exposure of every host-held site: `reference_files` are the graded files as the reference
    fix's run had them (reference sites compute R too), `buggy` the bug's run's check values per test,
    `statement` the task's problem statement (what the agent reads), `own` what R of own sites computed
    in the bug's run (verdict.Stream.own)."""
    checks: list[tuple[_Check, set[str]]] = []
    echoes: list = []
    for rel, text in reference_files.items():
        tree = parse(text)
        module_names = _bound_names(tree.body)
        found, references = _checks(tree, rel, sites)
        checks += [(c, module_names) for c in found]
        echoes += echoes_of(tree, skip=references)  # R of a reference site is not in a graded copy
    out = Exposure(tuple(_distinct(echoes)), stated=stated_values(statement))
    host = [(c.k, c) for c, _ in checks if c.k is not None and c.k in sites]
    kept = [(c, names) for c, names in checks if c.k is None]
    for c, names in kept:
        _kept_equality(c, names, host, out.reasons)
    for c, names in checks:  # an own site's `E == R` is in the graded copies (tandem.envs.coding.expected_sides)
        if c.k is not None and own_side(sites.get(c.k)):
            _kept_equality(replace(c, k=None), names, [(k, h) for k, h in host if k != c.k], out.reasons)
    broken = _broken_sites(sites, buggy, required, tests)
    for c, _ in checks:
        pair = _round_trip(c, sites)
        if pair and (c.k is None or c.k in broken):
            where = f"{c.file}:{c.line}"
            for k, h in host:
                if {call_name(n) for n in ast.walk(h.computed)} & set(pair):
                    out.reasons.setdefault(k, f"the sandbox can check a candidate value: {pair[0]}() undoes "
                                                f"{pair[1]}() (the round trip at {where})")
    _uniform_transforms(sites, buggy, required, tests, out.reasons)
    r_sides = {c.k: c.expected for c, _ in checks if c.k is not None and c.expected is not None
               and own_side(sites.get(c.k))}
    values, guesses = derived(*with_r_values(sites, buggy, own or {}, r_sides), tests, out.echoes, out.stated,
                              Inputs(reference_files), TRANSFORMS)
    out.derived = {key: why for key, why in values.items() if key[1] in broken}
    out.guesses = {key: odds for key, odds in guesses.items() if key[1] in broken}
    return out


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_QUOTED = re.compile(r"\"([^\"\n]*)\"|'([^'\n]*)'")
_CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)


def stated_values(statement: str) -> tuple:
    """Every literal the problem statement writes out, as a forger that reads it would take them:
    numbers, quoted strings, and in code (fenced or backticked) its text and every constant in it
    (`median([4, 1, 3, 2])` gives [4, 1, 3, 2], 4, 1, 3, 2 and the text itself)."""
    found: list = []
    for m in _CODE.finditer(statement):
        block, span = m.group(1), m.group(2)
        code = (block or span).strip()
        if span is not None:
            found.append(code)
        for mode in ("eval", "exec"):
            try:
                found += echoes_of(parse(code, mode=mode))
                break
            except (SyntaxError, ValueError, RecursionError):  # prose, a traceback, a shell line
                continue
    found += [m.group(1) if m.group(1) is not None else m.group(2) for m in _QUOTED.finditer(statement)]
    for text in _NUMBER.findall(statement):
        try:
            found.append(int(text))
        except ValueError:
            found.append(float(text))
    return tuple(_distinct(found))


def _checks(tree: ast.AST, rel: str, sites: dict[int, Site]) -> tuple[list[_Check], tuple[ast.expr, ...]]:
    """Host-held sites (`__tandem_check__(k, E[, R])`) and kept equalities, with their function;
    and the R nodes no graded copy holds, so not echoes (an own site's R is in them: its constants are)."""
    found: list[_Check] = []
    references: list[ast.expr] = []
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CHECK \
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, int):
                r = node.args[2] if len(node.args) > 2 else None
                if r is not None and not own_side(sites.get(node.args[0].value)):  # an own site's R is there
                    references.append(r)
                found.append(_Check(node.args[0].value, rel, node.lineno, function, node.args[1], r))
            kept = _kept_pair(node)
            if kept is not None:
                line, computed, expected = kept
                found.append(_Check(None, rel, line, function, computed, expected))
    # a check in a nested function is found once per enclosing function: keep the innermost
    unique: dict[tuple, _Check] = {}
    for c in found:
        unique[(c.k, c.line, ast.dump(c.computed))] = c
    return list(unique.values()), tuple(references)


def _kept_pair(node: ast.AST) -> tuple[int, ast.expr, ast.expr] | None:
    """(its line, E, R) of an `assert E == R` / self.assertEqual(E, R) left in the sandbox, neither side a constant."""
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
            and isinstance(node.test.ops[0], ast.Eq):
        pair = node.test.left, node.test.comparators[0]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "assertEqual", "assertEquals") and len(node.args) >= 2:
        pair = node.args[0], node.args[1]
    else:
        return None
    return None if any(is_constant(side) for side in pair) else (node.lineno, *pair)


def _distinct(values: list) -> list:
    out, seen = [], set()
    for v in values:
        key = (type(v).__name__, repr(v)[:2000])
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """Names a module binds at its top level (imports, defs, classes, assignments): the same in every test."""
    names = set()
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = function.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return names | {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _kept_equality(kept: _Check, module_names: set[str], host: list[tuple[int, _Check]],
                   reasons: dict[int, str]) -> None:
    """Host-held checks that compute either side of a kept `E == R`: a forger evaluates the other side."""
    if kept.expected is None:  # a kept check has both sides (_kept_pair)
        return
    local = _local_names(kept.function) - module_names
    for side in (kept.computed, kept.expected):
        portable = not any(isinstance(n, ast.Name) and n.id in local for n in ast.walk(side))
        wanted = ast.dump(side)
        for k, h in host:
            if h.file != kept.file or not (portable or h.function is kept.function):
                continue
            if any(ast.dump(n) == wanted for n in ast.walk(h.computed)):
                reasons.setdefault(k, f"the sandbox keeps `{ast.unparse(kept.computed)[:80]} == "
                                        f"{ast.unparse(kept.expected)[:80]}` ({kept.file}:{kept.line}): a forger can "
                                        f"compute this check's value from it")


def _round_trip(c: _Check, sites: dict[int, Site]) -> tuple[str, str] | None:
    """(F, G) when the check is F(G(x, ...), ...) expected to be x."""
    outer = c.computed
    if not (isinstance(outer, ast.Call) and outer.args and isinstance(outer.args[0], ast.Call)
            and outer.args[0].args and call_name(outer) and call_name(outer.args[0])):
        return None
    x = outer.args[0].args[0]
    if c.expected is not None:
        same = ast.dump(c.expected) == ast.dump(x)
    else:
        site = sites.get(c.k) if c.k is not None else None
        try:
            same = site is not None and not isinstance(site.expected, Reference) and constant(x) == site.expected
        except Exception:
            same = False
    return (call_name(outer), call_name(outer.args[0])) if same else None


def _broken_sites(sites: dict[int, Site], buggy: dict[str, list], required: dict[str, set[int]],
                  tests: list[str]) -> set[int]:
    """Sites the bug fails somewhere: a value that does not hold, or a required value it never met."""
    broken = set()
    for t in tests:
        seen: dict[int, list] = {}
        for k, value in lookup(buggy, t, []):
            if k in sites:
                if not sites[k].passes(value, t, len(seen.get(k, []))):
                    broken.add(k)
                seen.setdefault(k, []).append(value)
        broken |= {k for k in required.get(t, set()) if k in sites and sites[k].unmet(t, seen.get(k, []))}
    return broken


def _uniform_transforms(sites: dict[int, Site], buggy: dict[str, list], required: dict[str, set[int]],
                        tests: list[str], reasons: dict[int, str]) -> None:
    """Sites the bug fails whose function's every value, transformed one way, makes every hidden
    test's host-held checks hold."""
    broken = _broken_sites(sites, buggy, required, tests)
    sites = {k: s for k, s in sites.items() if not own_side(s)}  # a forger passes these with its own R
    for key in sorted({s.computes for s in sites.values()}) + ["*"]:
        touched = {k for k, s in sites.items() if key in ("*", s.computes)}
        for name, transform in TRANSFORMS.items():
            forged = {t: [(k, _apply(transform, v) if k in touched else v) for k, v in lookup(buggy, t, [])]
                      for t in tests}
            if any(host_check(forged[t], sites, required.get(t, set()), t) for t in tests):
                continue
            what = f"every value {key}() computes" if key != "*" else "every value the checks compute"
            for k in sorted(broken & touched):
                reasons.setdefault(k, f"one transformation of {what} ({name}) passes every hidden check: the bug "
                                      f"mirrors the right answer")


def _apply(transform: Callable[[Any], Any], value: Any) -> Any:
    try:
        return transform(value)
    except Exception:  # a type the transform does not fit: left as it is
        return value
