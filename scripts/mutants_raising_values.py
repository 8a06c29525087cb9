"""Mutants of issue 46's must-raise rows (tandem.envs.coding.raising_values): a fresh row of a value table where the
reference and the bug raise one class must raise (that class or another).

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py raising_values ["name" ...]
"""

T = "tests/test_raising_values.py::"
JUDGED = T + "test_a_must_raise_row_passes_on_any_exception_raised_before_its_check_and_fails_on_a_value"
KEPT = T + "test_only_rows_the_reference_and_the_bug_raise_alike_are_kept"
RECORD = T + "test_the_call_record_names_what_the_body_raised_and_a_malformed_one_is_tampering"
GRADED = T + "test_must_raise_rows_pay_fixes_and_not_a_malformed_header_read_as_zero[unshare]"
VERDICT = "tandem/envs/coding/verdict.py"
RULE = "tandem/envs/coding/raising_values.py"

RAISING_VALUES = [
    ("a must-raise row passes whatever the run did", VERDICT,
     '            if "Exception" in raised_before_checks(stream, t, sites):', "            if True:", JUDGED),
    ("the reference's class required", VERDICT,
     '            if "Exception" in raised_before_checks(stream, t, sites):',
     "            if must_raise[t] in raised_before_checks(stream, t, sites):", JUDGED),
    ("only the raised class's own name read", VERDICT,
     "    return lookup(stream.raised_types, test, ())", "    return lookup(stream.raised_types, test, ())[:1]", JUDGED),
    ("a row that reached its check and then raised counts as raised", VERDICT,
     "    if any(k in sites for k, _ in lookup(stream.checks, test, [])):", "    if False:", JUDGED),
    ("malformed class names accepted", VERDICT,
     '            raise Malformed("types: up to 64 class names")', "            pass", RECORD),
    ("the bug need not raise there", RULE, "        bug = raised_before_checks(buggy, f, sites)",
     "        bug = names", KEPT),
    ("a class every exception shares is required", RULE, "        if common is not None and common not in TOO_WIDE:",
     "        if common is not None:", KEPT),
    ("a limit of the machine is required", RULE, '"AssertionError", "RecursionError", "MemoryError",',
     '"AssertionError", "MemoryError",', KEPT),
    ("probe rows kept", RULE, "        if is_probe(f) or hard.get(f) or", "        if hard.get(f) or", KEPT),
    ("the confirming run not asked", RULE, "            if f in fresh and name in raised_before_checks(confirm, f, sites)}",
     "            if f in fresh}", KEPT),
    ("must-raise rows not required", "tandem/envs/coding/grading_plan.py",
     "        require_kept_rows(plan.differential, task.tests, [*counted, *plan.must_raise])",
     "        require_kept_rows(plan.differential, task.tests, counted)", GRADED),
    ("the sandbox names no class", "tandem/envs/coding/grader_plugin/tandem_report.py",
     '"types": [c.__name__ for c in type(exc).__mro__][:64]', '"types": []', GRADED),
    ("the judging child forgets the must-raise rows", "tandem/envs/coding/judging.py",
     "frozenset(narrower), dict(must_raise or {})))", "frozenset(narrower), {}))", GRADED),
]
