"""Issue 46: a wrong fix that mends the stated inputs and breaks the function at a column's edge scores 0 on the
real grader under every plan seed tested (tandem.envs.coding.edge_rows: rows at the columns' edges on every plan;
the plan requires them, here as a confined change's guards, elsewhere as regression rows:
tandem.envs.coding.regression_rows); correct fixes in other forms score 1.

The task: sign() answers 1 for every negative number (the bug). A fix that rounds to a tolerance (`abs(x) < 0.1`
is 0) mends every negative row and breaks 0.0625 and 0.03125, where the bug answered 1 as the reference does. A
random draw of the float column's pools meets such a value on some plans only.

The second task: from_base() adds each digit times the base (the bug). A fix that sums positional values through
math.pow mends every row and rounds past 2 ** 53, which only a row's own string joined to itself reaches inside
the guard (edge_rows.repeated_rows); int() and exact powers score 1.
"""

from __future__ import annotations

import types

import pytest

import tandem.envs.coding.grading_plan as grading_plan
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tests._swe import make_cfg, sandbox_backends
from tests.test_param_columns import _diff, rewards_of
from tests.test_reward_fidelity import _local_task

_, BACKENDS = sandbox_backends()

SIGN = "def sign(x):\n    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n    return 0\n"
SIGN_BUG = "def sign(x):\n    if x > 0:\n        return 1\n    if x < 0:\n        return 1\n    return 0\n"
ROWS = [(5, 1), (-3, -1), (0, 0), (0.5, 1), (-0.25, -1), (2, 1), (-7, -1)]
TESTS = ("import pytest\n\nfrom pkg import sign\n\n\n@pytest.mark.parametrize(\"x, want\", "
         f"{ROWS!r})\ndef test_sign(x, want):\n    assert sign(x) == want\n")
PROGRAMS = {  # name: (lines appended to the buggy module, the reward it must get)
    "reference": (SIGN, 1.0),
    "copysign": ("import math\n\n\ndef sign(x):\n    return int(math.copysign(1, x)) if x else 0\n", 1.0),
    "comparisons": ("def sign(x):\n    return (x > 0) - (x < 0)\n", 1.0),
    "tolerance": ("def sign(x):\n    if abs(x) < 0.1:\n        return 0\n    return 1 if x > 0 else -1\n", 0.0),
    "tolerance_on_negatives_only": ("def sign(x):\n    if -0.1 < x < 0:\n        return 0\n"
                                    "    return 1 if x > 0 else (-1 if x < 0 else 0)\n", 0.0),
}

RADIX_ROWS = [("ff", 16, 255), ("-1010", 2, -10), ("21i3v9", 36, 123456789), ("0", 5, 0)]
"""from_base's table: text, base, value (tests.test_edge_rows works its long rows by hand)."""
DIGITS_OF = ("DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'\n\n\ndef _digits(text, base):\n"
             "    if not 2 <= base <= 36:\n        raise ValueError(base)\n    text = text.strip().lower()\n"
             "    sign = -1 if text.startswith('-') else 1\n    text = text.lstrip('+-')\n    if not text:\n"
             "        raise ValueError('empty')\n    for ch in text:\n        if not 0 <= DIGITS.find(ch) < base:\n"
             "            raise ValueError(ch)\n    return sign, text\n\n\n")
FROM_BASE = DIGITS_OF + ("def from_base(text, base):\n    sign, text = _digits(text, base)\n    value = 0\n"
                         "    for ch in text:\n        value = value * base + DIGITS.find(ch)\n    return sign * value\n")
FROM_BASE_BUG = FROM_BASE.replace("value * base + DIGITS.find(ch)", "value + DIGITS.find(ch) * base")
RADIX_TESTS = ("import pytest\n\nfrom pkg import from_base\n\n\n@pytest.mark.parametrize(\"text, base, want\", "
               f"{RADIX_ROWS!r})\ndef test_from_base(text, base, want):\n    assert from_base(text, base) == want\n")
RADIX_PROGRAMS = {  # the reference, two exact rewrites, and positional values summed as floats (math.pow)
    "reference": (FROM_BASE, 1.0),
    "int_builtin": ("def from_base(text, base):\n    sign, text = _digits(text, base)\n"
                    "    return sign * int(text, base)\n", 1.0),
    "exact_powers": ("def from_base(text, base):\n    sign, text = _digits(text, base)\n    return sign * sum("
                     "DIGITS.find(c) * base ** i for i, c in enumerate(reversed(text)))\n", 1.0),
    "math_pow": ("import math\n\n\ndef from_base(text, base):\n    sign, text = _digits(text, base)\n    return sign * "
                 "int(sum(DIGITS.find(c) * math.pow(base, i) for i, c in enumerate(reversed(text))))\n", 0.0),
}

def _sign_task(tmp_path):
    ids = ["-".join(map(str, row)) for row in ROWS]
    f2p = [f"tests/test_pkg.py::test_sign[{i}]" for i, (x, _) in zip(ids, ROWS) if x < 0]
    p2p = [f"tests/test_pkg.py::test_sign[{i}]" for i, (x, _) in zip(ids, ROWS) if x >= 0]
    return _local_task(tmp_path, {"pkg/__init__.py": SIGN.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SIGN, SIGN_BUG), f2p, p2p, "sign() is 1 for negative numbers")


def _graded(tmp_path, task, programs: dict, seed: int, backend: str, monkeypatch):
    """The task's plan under plan seed `seed` and each program's reward; the plan grades the task (no refusal) and
    every program gets the reward it names."""
    monkeypatch.setattr(grading_plan, "secrets", types.SimpleNamespace(randbits=lambda bits: seed))  # one draw
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards = rewards_of(runtime, task, programs)
    finally:
        reset_runtime()
    assert not plan.refused, plan.refused
    assert rewards == {name: want for name, (_, want) in programs.items()}, rewards
    return plan


@pytest.mark.parametrize("backend", BACKENDS[-1:])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_fix_wrong_at_a_columns_edge_scores_zero_on_every_plan(tmp_path, seed, backend, monkeypatch):
    task = _sign_task(tmp_path)
    plan = _graded(tmp_path, task, PROGRAMS, seed, backend, monkeypatch)
    for t in task.fail_to_pass:  # rows the bug gets right are required too (the regression rows)
        required = {f for f in plan.differential[plan.graded_id(t)] if "[fresh" in f}  # probes guard apart
        failed = {f for f in plan.fresh_failed if "[fresh" in f}
        assert failed < required, (len(failed), len(required))


@pytest.mark.parametrize("backend", BACKENDS[-1:])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_float_positional_sum_scores_zero_and_exact_rewrites_score_one(tmp_path, seed, backend, monkeypatch):
    """from_base through math.pow mends every row of the table and rounds past 2 ** 53: a row's own string joined
    to itself (edge_rows.repeated_rows: '21i3v921i3v9' in base 36) shows it on every plan; exact rewrites score 1."""
    f2p = [f"tests/test_pkg.py::test_from_base[{t}-{b}-{w}]" for t, b, w in RADIX_ROWS if w]
    p2p = [f"tests/test_pkg.py::test_from_base[{t}-{b}-{w}]" for t, b, w in RADIX_ROWS if not w]
    task = _local_task(tmp_path, {"pkg/__init__.py": FROM_BASE.encode(), "tests/test_pkg.py": RADIX_TESTS.encode()},
                       _diff("pkg/__init__.py", FROM_BASE, FROM_BASE_BUG), f2p, p2p,
                       "from_base('ff', 16) is 480, not 255")
    _graded(tmp_path, task, RADIX_PROGRAMS, seed, backend, monkeypatch)
