"""Hidden checks judged on the host: the expectation never enters the graded process.

A *site* is one check of a graded test file that tandem.envs.coding.instrument split in two: the sandbox computes
`<actual>` and writes its value as plain data (grader_plugin/tandem_checks); the host keeps the operator and the
expected value, decodes what came back and compares here. A forger that controls the whole test process can write any
value it likes, so to pass a site it has to write the right one without ever seeing it: what a fix computes.

Some expectations can be guessed without the fix, and a site built on one proves little: a yes/no answer, None, zero
or an empty value, a value written anywhere in the sandbox's copy of the graded files, a comparison that almost
anything satisfies (`!=`, `<`), an exception's type. `Site.strong_against` says whether a site is beyond such guesses;
tandem.envs.coding.exposure adds the ways the sandbox can compute or verify a value without the fix, and a hidden test
is graded by the host only when the bug fails at least one site that is beyond both (tandem.envs.coding.grading_plan).
`Site.source` never holds an expectation: it is the check as the sandbox's copy has it (what it computes), for reasons
that leave the host's judging code (reward_info, logs).
"""

from __future__ import annotations

import ast
import math
import operator
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, overload

from tandem.envs.coding.enum_value import EnumMember

_AST_LOCK = threading.Lock()
"""CPython 3.11 keeps the AST constructor's recursion-depth counter in interpreter-wide state, so
two threads building ASTs at once can fail with 'SystemError: AST constructor recursion depth
mismatch' (CPython gh-106905); rewards are scored on worker threads, so every parse here locks."""


@overload
def parse(text: str) -> ast.Module: ...
@overload
def parse(text: str, mode: str) -> ast.AST: ...
def parse(text: str, mode: str = "exec") -> ast.AST:
    with _AST_LOCK:
        return ast.parse(text, mode=mode)


MAX_CONSTANT_ITEMS = 100_000
"""Largest expected value (items or characters) the host folds from a check's constant expression."""
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
            "contains": lambda a, b: b in a, "not contains": lambda a, b: b not in a,
            "is": operator.is_, "is not": operator.is_not}
STRONG_OPS = {"==", "approx", "counteq", "almost"}
_GUESSES: tuple[Any, ...] = (None, True, False, 0, 1, -1, 0.0, 1.0, -1.0, "", [], (), {}, set(), frozenset(), b"")


class Opaque:
    """A value the sandbox could not write as plain data: it equals nothing, passes nothing."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


@dataclass(frozen=True)
class Approx:
    """`pytest.approx(expected, **options)`, built on the host when judged."""

    expected: Any
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Raises:
    """`pytest.raises(names, match=...)`: the raised type's MRO must hold one of `names`."""

    names: tuple[str, ...]
    match: str | None = None


@dataclass(frozen=True)
class Reference:
    """An expectation the test computes (`assert E == R`, R not a constant): R's values in the
    reference fix's run, per test and in the order the check ran; R is in no graded copy unless own."""

    values: dict[str, tuple] = field(default_factory=dict)
    stored: bool = False
    """R is a value the test holds (a name, an attribute, an item): the sandbox has it anyway."""
    held: bool = False
    """The values are a parametrize column the host took out of the graded copy (tandem.envs.coding.params):
    held from the start, per case, never taken from a run."""

    def of(self, test: str | None) -> tuple:
        """R's values in the run of `test`, in order (none without a test)."""
        return () if test is None else self.values.get(test, ())


@dataclass(frozen=True)
class Site:
    k: int
    file: str
    line: int
    op: str
    """One of _COMPARE's keys, or approx, counteq, almost, truth, falsy, raises."""
    expected: Any = field(repr=False)
    """Host only: never written into the sandbox, a record or reward_info (a Reference for `E == R`)."""
    source: str = ""
    """What the check computes, as the sandbox's copy has it (no expectation): for reasons."""
    places: int | None = None
    computes: str = ""
    """The function or attribute the check's value comes from (tandem.envs.coding.exposure's uniform transforms)."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def runs(self, test: str | None) -> int:
        """The reference run's values a run of `test` must meet (each at least once): every value the
        reference reached for a Reference, else one."""
        if isinstance(self.expected, Reference):
            return max(1, len(self.expected.of(test)))
        return 1

    def unmet(self, test: str | None, values: list) -> list[int]:
        """Which of the reference's runs of this check (by position) no value of `values` meets: a check
        must be reached, and a Reference must be met on each of R's values, in any order and as often as
        the code reaches it (a callback checked 4 times where the reference checked 3: the original
        compares each time it runs, whatever the count)."""
        if not isinstance(self.expected, Reference):
            return [] if values else [0]
        wanted = self.expected.of(test)
        if not wanted:
            return [] if values else [0]
        return [nth for nth, w in enumerate(wanted) if not any(_same(v, w) and not _has_opaque(v) for v in values)]

    def passes(self, value: Any, test: str | None = None, nth: int = 0) -> bool:
        """Does `value` (decoded from the sandbox; the nth time `test` reached this check) meet the
        expectation? Never raises."""
        if _has_opaque(value):
            return False
        try:
            return bool(self._passes(value, test, nth))
        except Exception:  # e.g. '<' between str and int: the check fails, as the assert would
            return False

    def _passes(self, value: Any, test: str | None, nth: int) -> bool:
        op, expected = self.op, self.expected
        if isinstance(expected, Reference):  # in order, or any of R's values (Site.unmet: each one met)
            wanted = [w for w in expected.of(test) if not _has_opaque(w)]
            return any(value == w for w in wanted)
        if op == "truth":
            return bool(value)
        if op == "falsy":
            return not value
        if op == "approx":
            import pytest

            return value == pytest.approx(expected.expected, **dict(expected.options))
        if op == "counteq":
            return _count_equal(value, expected)
        if op == "almost":
            return value == expected or round(abs(value - expected), 7 if self.places is None else self.places) == 0
        if op == "raises":  # a Raises, or per row (tandem.envs.coding.raising_rows.Outcomes)
            return expected.judge(value, test) if hasattr(expected, "judge") else _raised(value, expected)
        return _COMPARE[op](value, expected)

    def strong_against(self, echoes: tuple = (), test: str | None = None, nth: int = 0) -> bool:
        """Can a forger that never saw the expectation not hit it with a generic guess (a usual
        default, or one of `echoes`: the constants the sandbox holds)? For a Reference, the
        value the nth run of the check in `test` expects."""
        if isinstance(self.expected, Reference):
            wanted = self.expected.of(test)
            return not self.expected.stored and nth < len(wanted) and not guessable(wanted[nth], echoes)
        if self.op in STRONG_OPS:
            target = self.expected.expected if isinstance(self.expected, Approx) else self.expected
            return not guessable(target, echoes)
        if self.op == "in" and isinstance(self.expected, (list, tuple, set, frozenset)):
            return 1 <= len(self.expected) <= 4 and not any(guessable(v, echoes) for v in self.expected)
        return False


def guessable(value: Any, echoes: tuple = ()) -> bool:
    """A yes/no-like value, a usual default, or a constant of the check itself."""
    if _all_leaves_flags(value):
        return True
    return any(_same(value, g) for g in (*_GUESSES, *echoes))


def _same(a: Any, b: Any) -> bool:
    """Python's own equality, as the host will judge: a forger writing 2 passes `== 2.0` (and True `== 1`)."""
    try:
        return bool(a == b)
    except Exception:
        return False


def _all_leaves_flags(value: Any) -> bool:
    if value is None or type(value) is bool:
        return True
    if type(value) in (list, tuple, set, frozenset) and value:
        return all(_all_leaves_flags(v) for v in value)
    return False


def _has_opaque(value: Any, depth: int = 0) -> bool:
    if isinstance(value, Opaque):
        return True
    if depth > 200:
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_opaque(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_has_opaque(k, depth + 1) or _has_opaque(v, depth + 1) for k, v in value.items())
    return False


def _count_equal(a: Any, b: Any) -> bool:
    a, b = list(a), list(b)
    try:
        return Counter(a) == Counter(b)
    except TypeError:  # unhashable items: unittest's slow path
        rest = list(b)
        for item in a:
            if item not in rest:
                return False
            rest.remove(item)
        return not rest


def _raised(outcome: Any, expected: Raises) -> bool:
    if not isinstance(outcome, dict) or not isinstance(outcome.get("raised"), list):
        return False
    if not set(expected.names) & {str(n) for n in outcome["raised"]}:
        return False
    return expected.match is None or re.search(expected.match, str(outcome.get("message", ""))) is not None


# ----------------------------------------------------------------------------- values from the sandbox
class Malformed(ValueError):
    """A check record that no honest encoder writes (tandem.envs.coding.verdict calls it tampering)."""


def decode(data: Any, depth: int = 0) -> Any:
    """The Python value of one encoded value (grader_plugin/tandem_checks.encode), or Malformed."""
    if depth > 100:
        raise Malformed("nested deeper than the encoder writes")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise Malformed(f"not an encoded value: {type(data).__name__}")
    (tag, body), = data.items()
    if tag == "o":
        return Opaque(str(body)[:200])
    if tag == "y" and type(body) is str:
        return body.encode("latin-1")
    if tag == "e" and type(body) is list and len(body) == 2 and all(type(x) is str for x in body):
        return EnumMember(*body)  # a plain Enum member: (class name, member name), tandem.envs.coding.enum_value
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag == "q":  # an exact rational (Fraction, finite Decimal): compared as Python compares them
        if not (type(body) is list and len(body) == 2 and all(type(x) is int for x in body) and body[1] > 0):
            raise Malformed("a rational is [numerator, positive denominator]")
        return Fraction(body[0], body[1])
    if type(body) is not list:
        raise Malformed(f"bad body for tag {tag!r}")
    if tag == "d":
        if not all(type(p) is list and len(p) == 2 for p in body):
            raise Malformed("dict entries must be pairs")
        return _hashable(lambda: {decode(k, depth + 1): decode(v, depth + 1) for k, v in body})
    items = [decode(v, depth + 1) for v in body]
    if tag == "t":
        return tuple(items)
    if tag in ("s", "f"):
        return _hashable(lambda: (set if tag == "s" else frozenset)(items))
    raise Malformed(f"unknown tag {tag!r}")


MAX_MESSAGE = 4000
"""Characters of an exception's message the sandbox writes (grader_plugin/tandem_checks.MAX_MESSAGE)."""
MAX_RAISED_NAMES = 64


def check_outcome(site: Site, value: Any) -> None:
    """Malformed unless `value` is what the sandbox's encoder writes for this site: a `raises`
    outcome is {"raised": None or up to 64 class names, "message": up to MAX_MESSAGE characters}
    (a longer message is never honest, and the host would run the task's regex on it)."""
    if site.op != "raises":
        return
    if not isinstance(value, dict) or not set(value) <= {"raised", "message"}:
        raise Malformed("a pytest.raises outcome is {raised, message}")
    raised, message = value.get("raised"), value.get("message", "")
    if raised is not None and not (type(raised) is list and len(raised) <= MAX_RAISED_NAMES
                                   and all(type(n) is str and len(n) <= 200 for n in raised)):
        raise Malformed("raised: up to 64 class names")
    if type(message) is not str or len(message) > MAX_MESSAGE:
        raise Malformed(f"an exception message longer than the {MAX_MESSAGE} characters the sandbox writes")


def _hashable(build):
    try:
        return build()
    except TypeError as err:
        raise Malformed(f"unhashable item in a set or dict key: {err}") from err


# ----------------------------------------------------------------------------- constants on the host
class NotConstant(ValueError):
    pass


_CALLS: dict[str, Callable[..., Any]] = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "dict": dict, "range": range,
          "sorted": sorted, "str": str, "int": int, "float": float, "bool": bool, "bytes": bytes, "abs": abs,
          "len": len, "min": min, "max": max, "sum": sum, "round": round, "complex": complex}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def constant(node: ast.AST) -> Any:
    """The value of an expression made only of literals and a few pure builtins, or NotConstant.

    Sizes are checked before anything is built ('x' * 10**9 is refused, not computed)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [constant(e) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](_sized(items))
    if isinstance(node, ast.Dict) and None not in node.keys:
        return _sized({constant(k): constant(v) for k, v in zip(node.keys, node.values) if k is not None})
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        value = constant(node.operand)
        return _UNARY[type(node.op)](value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = constant(node.left), constant(node.right)
        _check_binop(node.op, left, right)
        return _sized(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        args = [constant(a) for a in node.args]
        kwargs = {k.arg: constant(k.value) for k in node.keywords if k.arg == "reverse"}
        if len(kwargs) != len(node.keywords) or any(_size(a) > MAX_CONSTANT_ITEMS for a in args):
            raise NotConstant("call")
        return _sized(_CALLS[node.func.id](*args, **kwargs))
    raise NotConstant(type(node).__name__)


def _check_binop(op: ast.AST, left: Any, right: Any) -> None:
    if isinstance(op, ast.Mult):
        n, seq = (left, right) if isinstance(left, int) else (right, left)
        if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n * len(seq) > MAX_CONSTANT_ITEMS:
            raise NotConstant("too large")
    if isinstance(op, ast.Pow) and not (isinstance(right, (int, float)) and abs(right) <= 64):
        raise NotConstant("power")


def _size(value: Any) -> int:
    if isinstance(value, range):
        return len(value)
    return len(value) if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)) else 1


def _sized(value: Any) -> Any:
    if _size(value) > MAX_CONSTANT_ITEMS:
        raise NotConstant("too large")
    if isinstance(value, float) and math.isnan(value):
        raise NotConstant("nan never equals")
    return value


def echoes_of(node: ast.AST, skip: tuple[ast.AST, ...] = ()) -> tuple:
    """Every constant (and constant sub-expression, a call of constants included; a range also as its list)
    written inside `node`, but inside `skip` and the
    site numbers of the sandbox's check helpers (`__tandem_check__(7, ...)`: tandem's, not the test's)."""
    numbers = {id(sub.args[0]) for sub in ast.walk(node) if isinstance(sub, ast.Call) and sub.args
               and isinstance(sub.func, ast.Name) and sub.func.id.startswith("__tandem_")}
    numbers |= {id(sub) for part in skip for sub in ast.walk(part)}
    found = []
    for sub in ast.walk(node):
        if id(sub) in numbers:
            continue
        # a call of constants folds too (`list(range(50))`: issue 46's forger evaluated it in the sandbox)
        if isinstance(sub, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.Call)):
            try:
                value = constant(sub)
            except Exception:  # NotConstant, or a literal that fails to fold (1 / 0)
                continue
            found += [value, list(value)] if isinstance(value, range) else [value]
    return tuple(found)


def read_record_value(raw: Any) -> Any:
    """decode() for a value that came out of json.loads; Malformed for anything else."""
    try:
        return decode(raw)
    except Malformed:
        raise
    except (RecursionError, ValueError, TypeError, OverflowError) as err:
        raise Malformed(f"{type(err).__name__}: {err}"[:200]) from err
