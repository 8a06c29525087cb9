"""The `wrong_fixes` set of scripts/mutate.py: the oracle rules issue 46's plausible wrong fixes needed
(tests/_equivalence.py: a mixed-kind column judged by kind, a raise beyond the grader's band a narrower domain)."""

T = "tests/test_wrong_fixes.py::test_the_oracle_judges_mixed_columns_by_kind_and_counts_a_narrower_domain_apart"
WRONG_FIX_MUTANTS = [
 ("a raise beyond the grader's band is a forgery again", "tests/_equivalence.py",
  "any(abs(x) > WIDEN_BOUND * max(largest, 1) for x in numbers(a))", "False", T),
 ("the narrower band starts at the column's largest, not at 2x", "tests/_equivalence.py",
  "any(abs(x) > WIDEN_BOUND * max(largest, 1) for x in numbers(a))", "any(abs(x) > max(largest, 1) for x in numbers(a))",
  T),
 ("a mixed-kind column judged as a whole (every dedupe input outside)", "tests/_equivalence.py",
  '    if k in kinds and len(kinds) > 1 and not kinds <= {"int", "float"}:', "    if False:", T),
 ("a tuple argument's items not looked into", "tests/_equivalence.py",
  "[x for item in v for x in numbers(item)] if isinstance(v, (tuple, list)) else []", "[]", T),
]
