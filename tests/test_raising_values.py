"""Issue 46: fresh rows of a value table where the reference and the bug raise (tandem.envs.coding.raising_values).

`parse_seconds(' 30 -5')` (two of the table's strings joined) raises ValueError under the reference and the bug
alike; the row used to be dropped, so a rewrite answering 0 for a malformed header passed. The row is now kept as
one that must raise (that class or another: the class is no contract): the wrong rewrite scores 0, a correct fix
raising a subclass from another path scores 1, and a forger raising wherever the input is not a visible one fails the rows that must not
raise.
"""

from __future__ import annotations

import json

import pytest

from tandem.envs.coding.checks import Reference, Site
from tandem.envs.coding.differential import fold
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.raising_values import agreed_with_bug, confirmed, reference_raises
from tandem.envs.coding.verdict import Stream, Verdict, judge, parse_stream
from tests._swe import make_cfg, sandbox_backends
from tests.test_confined import _local_task
from tests.test_param_columns import _diff, rewards_of

_, BACKENDS = sandbox_backends()

T = "tests/t.py::test_parse"
ROW, VALUE = T + "[fresh0]", T + "[fresh1]"
SITES = {0: Site(0, "tests/t.py", 5, "==", Reference({VALUE: (30,)}, held=True))}
MRO = ["ValueError", "Exception", "BaseException", "object"]


def _stream(rows: dict[str, object]) -> Stream:
    """A run's stream: each row either raised (its class names) or computed a value at site 0."""
    out = Stream(started=True, exitstatus=1)
    for row, what in rows.items():
        raised = isinstance(what, list)
        out.status[row], out.raised[row] = ("FAILED" if raised else "PASSED"), raised
        if raised:
            out.raised_types[row] = tuple(what)
        else:
            out.checks[row] = [(0, what)]
    return out


def _judged(rows: dict[str, object]) -> dict[str, str]:
    return judge([ROW, VALUE], _stream(rows), 1, "", SITES, {VALUE: {0}}, must_raise={ROW: "ValueError"}).tests


def test_a_must_raise_row_passes_on_any_exception_raised_before_its_check_and_fails_on_a_value():
    assert _judged({ROW: MRO, VALUE: 30})[ROW] == "PASSED"
    assert _judged({ROW: ["HeaderError", *MRO], VALUE: 30})[ROW] == "PASSED"  # a subclass, another path
    assert _judged({ROW: 0, VALUE: 30})[ROW] == "FAILED"  # the wrong fix's 0 for a malformed header
    # another class: span() through sorted() raises IndexError on [] where min() raised ValueError, and passes every
    # hidden test (tests/test_param_columns.py's other_algorithm): the class rejecting an untested input is no contract
    index_error = ["IndexError", "LookupError", "Exception", "BaseException", "object"]
    assert _judged({ROW: index_error, VALUE: 30})[ROW] == "PASSED"
    assert _judged({ROW: ["TypeError", "Exception", "BaseException", "object"], VALUE: 30})[ROW] == "PASSED"
    late = _stream({ROW: MRO, VALUE: 30})
    late.checks[ROW] = [(0, 0)]  # computed a value at the row's check, then raised: not what the reference did
    assert judge([ROW], late, 1, "", SITES, {}, must_raise={ROW: "ValueError"}).tests[ROW] == "FAILED"


def test_raising_everywhere_fails_the_rows_that_must_not_raise():
    """A forger raising ValueError on every fresh row passes the must-raise row and fails the kept value row, so the
    test that requires both fails (differential.fold)."""
    tests = _judged({ROW: MRO, VALUE: MRO})
    assert tests == {ROW: "PASSED", VALUE: "FAILED"}
    folded = fold(Verdict({T + "[case0]": "PASSED", **tests}, [], True), {T + "[case0]": [ROW, VALUE]})
    assert folded.tests[T + "[case0]"] == "FAILED"


def test_the_call_record_names_what_the_body_raised_and_a_malformed_one_is_tampering():
    records = [{"ev": "call", "id": ROW, "raised": True, "types": MRO},
               {"ev": "report", "id": ROW, "when": "call", "outcome": "failed"}]
    stream = parse_stream("\n".join(json.dumps(r) for r in records).encode(), SITES)
    assert stream.raised_types == {ROW: tuple(MRO)} and not stream.tamper
    bad = parse_stream(json.dumps({"ev": "call", "id": ROW, "raised": True, "types": [3]}).encode(), SITES)
    assert bad.tamper and ROW not in bad.raised_types


def test_only_rows_the_reference_and_the_bug_raise_alike_are_kept():
    probe, generated, hard, asserted = T + "[probe0]", T + "__rows[fresh0]", T + "[fresh2]", T + "[fresh3]"
    other, wide, deep = T + "[fresh4]", T + "[fresh5]", T + "[fresh6]"
    recursion = ["RecursionError", "RuntimeError", "Exception", "BaseException", "object"]
    clean = _stream({ROW: ["HeaderError", *MRO], VALUE: 30, probe: MRO, generated: MRO, hard: MRO,
                     asserted: ["AssertionError", "Exception", "BaseException", "object"], other: MRO, wide: MRO,
                     deep: recursion})
    fresh = [ROW, VALUE, probe, generated, hard, asserted, other, wide, deep]
    raising = reference_raises(clean, fresh, SITES, {hard: True})
    assert set(raising) == {ROW, asserted, other, wide, deep}  # no probe, generated row, hard row beyond the guard
    buggy = _stream({ROW: MRO, other: 7, wide: ["KeyError", "LookupError", "Exception", "BaseException", "object"],
                     asserted: ["AssertionError", "Exception", "BaseException", "object"], deep: recursion})
    kept = agreed_with_bug(raising, buggy, SITES)
    assert kept == {ROW: "ValueError"}  # the class both raised; a value, an assert, a limit, Exception alone: out
    assert confirmed(kept, clean, SITES, fresh) == kept
    assert confirmed(kept, clean, SITES, [VALUE]) == {}  # no longer drawn
    assert confirmed(kept, _stream({ROW: 0}), SITES, fresh) == {}  # the confirming run answered


SOURCE = '''def parse_seconds(value):
    """Seconds from a Retry-After header given in seconds (never negative)."""
    seconds = int(value.strip())
    return max(seconds, 0)
'''
BUGGY = SOURCE.replace("    return max(seconds, 0)", "    return seconds")
TESTS = '''import pytest

from pkg import parse_seconds


@pytest.mark.parametrize("value, expected", [("120", 120), (" 30 ", 30), ("0", 0), ("-5", 0)])
def test_parse_seconds(value, expected):
    assert parse_seconds(value) == expected
'''
P = "tests/test_pkg.py::test_parse_seconds"
FIXES = {  # name: (lines appended to the buggy module, the reward it must get)
    "reference": ("def parse_seconds(value):\n    return max(int(value.strip()), 0)\n", 1.0),
    "a_subclass_from_a_regex": ("import re\n\n\nclass HeaderError(ValueError):\n    pass\n\n\n"
                                "def parse_seconds(value):\n    text = value.strip()\n"
                                "    if not re.fullmatch(r'-?[0-9]+', text):\n        raise HeaderError(value)\n"
                                "    return max(int(text), 0)\n", 1.0),
    "malformed_is_zero": ("def parse_seconds(value):\n    value = value.strip()\n"
                          "    return int(value) if value.isdigit() else 0\n", 0.0),
    "raises_beyond_the_visible_rows": ("_SEEN = {'120': 120, ' 30 ': 30, '0': 0, '-5': 0}\n\n\n"
                                       "def parse_seconds(value):\n    if value not in _SEEN:\n"
                                       "        raise ValueError(value)\n    return _SEEN[value]\n", 0.0),
}


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_must_raise_rows_pay_fixes_and_not_a_malformed_header_read_as_zero(tmp_path, backend):
    task = _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), [P + "[-5-0]"],
                       [P + "[120-120]", P + "[ 30 -30]", P + "[0-0]"], "A negative Retry-After comes through.")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards = rewards_of(runtime, task, FIXES)
    finally:
        reset_runtime()
    assert not plan.refused and set(plan.must_raise.values()) == {"ValueError"}, (plan.refused, plan.must_raise)
    assert set(plan.must_raise) <= set(plan.differential[plan.graded_id(P + "[-5-0]")])
    assert rewards == {name: want for name, (_, want) in FIXES.items()}, rewards
