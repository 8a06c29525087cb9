"""Inside the grading sandbox: what the graded tests compute, written out as plain data.

The host rewrites each hidden check `assert <actual> == <expected>` of a graded test file
into `__tandem_check__(k, <actual>)` (and `with pytest.raises(E): ...` into
`with __tandem_raises__(k): ...`), keeping site k's expectation on the host
(tandem.checks). Here the value of <actual> is encoded as plain data and written to the
report pipe, tagged with the running test; the host decodes it and compares it with the
expectation, which never enters this process. Nothing here decides pass or fail, and
nothing here is trusted: code under test can rewrite this module, and then it must still
produce the right values, which is what a fix does.

Encoding (JSON): None, bool, int, float (NaN and infinities as JSON's extensions), str and
list are themselves; {"t": [...]} tuple, {"s": [...]} set, {"f": [...]} frozenset,
{"d": [[k, v], ...]} dict, {"y": latin-1 text} bytes, {"c": [re, im]} complex; anything
else, a subclass of these included, is {"o": "<type name>"}, which the host never equals.
"""

from __future__ import annotations

import tandem_report

MAX_DEPTH = 48
MAX_ITEMS = 200_000
MAX_MESSAGE = 4000


class _Budget:
    def __init__(self):
        self.items = 0


def encode(value, depth: int = 0, budget: _Budget | None = None):
    """Plain data for `value` (exact built-in types only; see the module docstring)."""
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
    return {"o": f"{kind.__module__}.{kind.__qualname__}"[:200]}


def check(site: int, value) -> None:
    """Record the value one hidden check computed; the host judges it."""
    tandem_report.emit({"ev": "check", "id": tandem_report.current_test(), "k": site, "v": encode(value)})


class raises:
    """Stands in for `pytest.raises(E)`: records what the block raised (or that it did not) and goes on."""

    def __init__(self, site: int):
        self.site = site

    def __enter__(self):
        return None

    def __exit__(self, kind, exc, tb) -> bool:
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

