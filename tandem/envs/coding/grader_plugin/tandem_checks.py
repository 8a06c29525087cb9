"""Inside the grading sandbox: what the graded tests compute, written out as plain data.

The host rewrites each hidden check `assert <actual> == <expected>` of a graded test file
into `__tandem_check__(k, <actual>)` (and `with pytest.raises(E): ...` into
`with __tandem_raises__(k): ...`), keeping site k's expectation on the host
(tandem.envs.coding.checks). Here the value of <actual> is encoded as plain data and written to the
report pipe, tagged with the running test; the host decodes it and compares it with the
expectation, which never enters this process. Nothing here decides pass or fail, and
nothing here is trusted: code under test can rewrite this module, and then it must still
produce the right values, which is what a fix does.

Encoding (JSON): None, bool, int, float (NaN and infinities as JSON's extensions), str and
list are themselves; {"t": [...]} tuple, {"s": [...]} set, {"f": [...]} frozenset,
{"d": [[k, v], ...]} dict, {"y": latin-1 text} bytes, {"c": [re, im]} complex, {"q": [num,
den]} an exact rational (fractions.Fraction, a finite decimal.Decimal), {"e": [class name, member
name]} a member of a plain Enum (tandem.envs.coding.enum_value). A subclass of these
(a namedtuple, OrderedDict, Counter, IntEnum, StrEnum, numpy.float64) is written as its
base value, and a numpy scalar as its .item(): the original assert compares them as such
values; so are the standard types `==` compares as one of them (UserList, UserDict, UserString, a
mapping proxy, set-like dict views, Mapping and Set ABCs, the numeric tower: _compares_as). Anything
else is {"o": "<type name>"}, which the host never equals.

In the reference fix's run, `assert E == R` (R not a constant) reaches check(k, E, R): R's value
goes along as "r", and becomes the expectation the host holds (tandem.envs.coding.checks.Reference). A
graded copy computes R too only where the bug already passes the check and R runs the repository's
code (tandem.envs.coding.expected_sides): there "eq" says whether `E == R` held in this process.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import tandem_report

MAX_DEPTH = 48
MAX_ITEMS = 200_000
MAX_MESSAGE = 4000
"""The host refuses a longer message as one no honest run writes (tandem.envs.coding.checks.MAX_MESSAGE)."""


class _Budget:
    def __init__(self):
        self.items = 0


def encode(value, depth: int = 0, budget: _Budget | None = None):
    """Plain data for `value` (see the module docstring)."""
    budget = budget or _Budget()
    budget.items += 1
    if budget.items > MAX_ITEMS or depth > MAX_DEPTH:
        return {"o": "too large"}
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if value.bit_length() < 12000 else {"o": "int too large"}
    if kind is list:
        return [encode(v, depth + 1, budget) for v in value]
    if kind is tuple:
        return {"t": [encode(v, depth + 1, budget) for v in value]}
    if kind in (set, frozenset):
        return {"s" if kind is set else "f": [encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()]}
    if kind is bytes:
        return {"y": value.decode("latin-1")}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    return _encode_other(value, depth, budget)


def _encode_other(value, depth: int, budget: _Budget):
    """Exact rationals, numpy scalars, and subclasses of the plain types as their base value."""
    kind = type(value)
    rational = _rational(value)
    if rational is not None:
        return rational
    if any(c.__module__ == "numpy" and c.__qualname__ == "generic" for c in kind.__mro__):
        try:
            return encode(value.item(), depth + 1, budget)
        except Exception:  # a numpy scalar with no Python value (np.datetime64('NaT'))
            return {"o": f"{kind.__module__}.{kind.__qualname__}"[:200]}
    for base, plain in _BASES:
        if isinstance(value, base):
            try:
                return encode(plain(value), depth + 1, budget)
            except Exception:  # a subclass whose iteration or conversion fails: not a value
                break
    else:
        try:
            plain = _compares_as(value)
        except Exception:  # a view of unhashable items, a conversion that fails: not a value
            plain = None
        if plain is not None:
            return encode(plain[0], depth + 1, budget)
        member = _enum_member(value)
        if member is not None:
            return member
    return {"o": f"{kind.__module__}.{kind.__qualname__}"[:200]}


def _enum_member(value):
    """{"e": [class name, member name]} for a member of a plain Enum that keeps Enum's identity `==`
    (IntEnum / StrEnum members are int / str subclasses, written as their base value above)."""
    enum = sys.modules.get("enum")
    kind = type(value)
    if enum is None or not isinstance(value, enum.Enum) or kind.__eq__ is not enum.Enum.__eq__:
        return None
    name = getattr(value, "_name_", None)
    return {"e": [str(kind.__name__), name]} if type(name) is str else None


def _compares_as(value):
    """(the plain value `==` compares `value` as,) for the standard types that are no subclass of a plain
    one, or None: UserList/UserString as their data, UserDict, a mapping proxy and any Mapping that keeps
    Mapping's own __eq__ as a dict, set-like dict views and any Set that keeps Set's __eq__ as a frozenset
    (`d.keys() == {1, 2}` holds), numbers of the numeric tower as int, Fraction, float or complex. What
    `==` compares by identity (a dict's values view, a Sequence without an __eq__) stays opaque, as the
    original never finds it equal to a constant either."""
    import collections
    import collections.abc as abc
    import types

    kind = type(value)
    if isinstance(value, (collections.UserList, collections.UserString)):
        return (value.data,)
    if isinstance(value, (collections.UserDict, types.MappingProxyType)):
        return (dict(value.data if isinstance(value, collections.UserDict) else value.items()),)
    if kind in (type({}.keys()), type({}.items())):
        return (frozenset(value),)
    if isinstance(value, abc.Mapping) and kind.__eq__ is abc.Mapping.__eq__:
        return (dict(value.items()),)
    if isinstance(value, abc.Set) and kind.__eq__ is abc.Set.__eq__:
        return (frozenset(value),)
    numbers = sys.modules.get("numbers")
    if numbers is not None and isinstance(value, numbers.Number):
        fractions = sys.modules.get("fractions")
        if isinstance(value, numbers.Integral):
            return (int(value),)
        if isinstance(value, numbers.Rational) and fractions is not None:
            return (fractions.Fraction(int(value.numerator), int(value.denominator)),)
        if isinstance(value, numbers.Real):
            return (float(value),)
        if isinstance(value, numbers.Complex):
            return (complex(value),)
    return None


_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = ((bool, bool), (int, int.__int__), (float, float.__float__), (str, str.__str__),
          (bytes, lambda v: bytes.__getitem__(v, slice(None))), (complex, lambda v: complex(v.real, v.imag)),
          (tuple, tuple), (list, list), (dict, lambda v: dict(dict.items(v))), (frozenset, frozenset), (set, set))
"""Subclass -> the plain value the original assert compares it as (base-class methods: an override
of __str__ or __int__ does not get a say)."""


def _rational(value):
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")  # only if the code used them
    if fractions is not None and isinstance(value, fractions.Fraction):
        return {"q": [int(value.numerator), int(value.denominator)]}
    if decimal is not None and isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return float(value)
        num, den = value.as_integer_ratio()
        return {"q": [num, den]} if max(abs(num), den).bit_length() < 12000 else {"o": "rational too large"}
    return None


def check(site: int, value, *expected) -> None:
    """Record the value one hidden check computed; the host judges it. `expected`: R of `E == R`, in
    the reference fix's run, and in graded runs for the checks the bug already passes whose R runs the
    repository's code: R's value goes along, and whether `E == R` held here, as the original assert judges."""
    record = {"ev": "check", "id": tandem_report.current_test(), "k": site, "v": encode(value)}
    if expected:
        record["r"] = encode(expected[0])
        record["eq"] = _holds(value, expected[0])
    tandem_report.emit(record)


def _holds(value, expected) -> bool:
    try:
        return bool(value == expected)
    except Exception:  # the original assert raises: the check fails
        return False


class raises:
    """Stands in for `pytest.raises(E)`: records what the block raised (or that it did not) and goes on."""

    def __init__(self, site: int):
        self.site = site

    def __enter__(self):
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        outcome: dict[str, Any]
        if kind is None:
            outcome = {"raised": None}
        else:
            try:
                message = str(exc)[:MAX_MESSAGE]
            except Exception:  # a __str__ that fails: the type still counts
                message = ""
            outcome = {"raised": [c.__name__ for c in kind.__mro__][:64], "message": message}
        check(self.site, outcome)
        # pytest.raises lets other exceptions fail the test; here the host decides, so the block's
        # exception ends here as it would under a matching pytest.raises (KeyboardInterrupt and
        # pytest's own skip/fail outcomes still go through).
        return kind is not None and issubclass(kind, (Exception, SystemExit))

