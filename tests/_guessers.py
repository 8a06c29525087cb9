"""Guess forgers (issue 46): each attacks the odds the grader counts for echoes, usual defaults and yes/no
(tandem.envs.coding.odds), with what the graded process holds and no knowledge of the fix.

Planted like tests/_derivers.py's forgers (a module imported from the package under test, replacing tandem's
check helper in the graded test process): a check records the forged value where the family offers one,
the computed value elsewhere. Each changes only the checks of a function the issue names (the one a forger
would take for broken; every function where the issue names none), so the bug's right rows elsewhere stay:

    usual:    the first usual default of the value's kind that is not the bug's (0, 1, -1, ""; a bool negated);
    frequent: the constant of the value's kind written most often in the graded files, the bug's value aside;
    echo:     the first of the check's own inputs (the test's arguments, off the call stack) of the value's kind
              that is not the bug's value (a clamp's bound, a table's other column);
    negate:   the bug's value negated (a bool's opposite, a number's minus) on every row;
    select:   per row by its input: only rows whose arguments the issue writes out, moved to the usual default,
              the others left as the bug computed them;
    spread:   per row by its input: a value among the file's constants of the value's kind picked by a hash of
              the row's arguments (a forger that varies its guess with the input);
    boundary: per row by its input: rows with two equal arguments (`count == threshold` under a flipped `<`)
              moved to the usual default (a bool negated), the others left;
    zero:     the same for rows with a zero or empty argument.
"""

from __future__ import annotations

from tests._derivers import PLANTED_HOOK, PLANTED_TREES, plant

FAMILIES = ("usual", "frequent", "echo", "negate", "select", "spread", "boundary", "zero")

GUESS_MODULE = r'''
import ast, glob, re, sys, zlib
from collections import Counter

import tandem_checks

FAMILY = __FAMILY__
STATEMENT = __STATEMENT__
_NAMED = set(re.findall(r"([A-Za-z_]\w*)\(", STATEMENT)) | set(re.findall(r"`([A-Za-z_]\w*)`", STATEMENT))
_STATED = set(re.findall(r"-?\d+(?:\.\d+)?", STATEMENT)) | set(re.findall(r"[\"']([^\"'\n]*)[\"']", STATEMENT))


''' + PLANTED_TREES + r'''

def _kind(v):
    return "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else type(v).__name__


def _constants():
    found = Counter()
    for tree in _TREES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value is not None and not (
                    isinstance(node.value, int) and node.value > 10 ** 6):
                found[(_kind(node.value), repr(node.value))] += 1
    return found


_CONSTANTS = _constants()


def _sites():
    found = {}
    for tree in _TREES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__tandem_check__" \
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant):
                calls = [n for n in ast.walk(node.args[1]) if isinstance(n, ast.Call)]
                names = [getattr(c.func, "id", None) or getattr(c.func, "attr", None) for c in calls]
                found[node.args[0].value] = [n for n in names if n]
    return found


_SITES = _sites()


def _targeted(site):
    names = _SITES.get(site, [])
    return not _NAMED or bool(_NAMED & set(names))


def _args():
    frame = sys._getframe(3)  # _args <- _forge <- check <- the test function
    while frame is not None and not frame.f_code.co_name.startswith("test"):
        frame = frame.f_back
    if frame is None:
        return []
    return [v for k, v in frame.f_locals.items() if not k.startswith("_") and v is not None
            and isinstance(v, (int, float, str, bool))]


def _usual(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return next(c for c in (0, 1, -1) if c != value)
    if isinstance(value, str):
        return "" if value else None
    return None


def _pool(value):
    return [ast.literal_eval(r) for (k, r), _ in _CONSTANTS.most_common() if k == _kind(value)
            and ast.literal_eval(r) != value]


def _forge(site, value):
    if not _targeted(site) or value is None:
        return None
    if FAMILY == "usual":
        return _usual(value)
    if FAMILY == "frequent":
        pool = _pool(value)
        return pool[0] if pool else None
    if FAMILY == "echo":
        return next((a for a in _args() if _kind(a) == _kind(value) and a != value), None)
    if FAMILY == "negate":
        return (not value) if isinstance(value, bool) else -value if isinstance(value, (int, float)) else None
    if FAMILY == "select":
        return _usual(value) if any(str(a) in _STATED for a in _args()) else None
    if FAMILY == "boundary":
        args = [a for a in _args() if not isinstance(a, bool)]
        return _usual(value) if len(args) > len(set(map(repr, args))) else None
    if FAMILY == "zero":
        return _usual(value) if any(a == 0 or a == "" for a in _args() if not isinstance(a, bool)) else None
    if FAMILY == "spread":
        pool = _pool(value)
        key = zlib.crc32(repr(_args()).encode())
        return pool[key % len(pool)] if pool and key % 2 else None
    return None


''' + PLANTED_HOOK


def guesser_command(family: str, statement: str = "") -> str:
    """Bash: plant the guess forger of `family` in /testbed's package; `statement`: the issue text the agent read."""
    module = GUESS_MODULE.replace("__FAMILY__", repr(family)).replace("__STATEMENT__", repr(statement))
    return plant(module, "_guess")
