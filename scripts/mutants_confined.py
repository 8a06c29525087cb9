"""Mutants of issue 46's confined changes (tandem.envs.coding.confined) and raising checks on fresh inputs
(tandem.envs.coding.raising_rows).

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py confined ["name" ...]
"""

T = "tests/test_confined.py::"
R = "tests/test_raising_rows.py::"
CONF = "tandem/envs/coding/confined.py"
RAISE = "tandem/envs/coding/raising_rows.py"
PLAN = "tandem/envs/coding/row_rules.py"
PROBES = T + "test_probe_rows_reach_beyond_the_table_and_never_repeat_a_visible_input"
LEAP = T + "test_is_leap_is_not_confined_and_is_retryable_is"
BY_HAND = T + "test_the_decision_by_hand"
CONFINED_E2E = T + "test_a_confined_fix_is_graded_and_only_the_fix_scores[unshare]"
OUTCOMES = R + "test_outcomes_are_the_references_as_the_original_judges_them"
BALANCE = R + "test_a_raising_test_is_graded_by_rows_of_both_outcomes_the_bug_fails"
ROWS = R + "test_the_rows_call_one_line_around_the_failing_input"
RAISING_E2E = R + "test_raising_rows_pay_fixes_and_no_forger[unshare]"

CONFINED = [
    ("a guard the bug fails is not looked at", CONF,
     "if any(bug_fails(f) for f in guards) or any(bug_answers(f) for f in dropped):",
     "if any(bug_answers(f) for f in dropped):", LEAP),
    ("a dropped row the bug answers is not looked at", CONF,
     "if any(bug_fails(f) for f in guards) or any(bug_answers(f) for f in dropped):",
     "if any(bug_fails(f) for f in guards):", BY_HAND),
    ("one guard is enough", CONF, "MIN_GUARDS = 8", "MIN_GUARDS = 1", BY_HAND),
    ("guards of one value are enough", CONF, "len(guards) >= MIN_GUARDS and len(values) >= 2 and shown",
     "len(guards) >= MIN_GUARDS and shown", BY_HAND),
    ("the visible passing values need not show", CONF,
     "shown = {repr(value_of(t)) for t in passing} <= values or len(values) >= MIN_GUARD_VALUES", "shown = True",
     BY_HAND),
    ("probes stay near the table (no x2, //2)", CONF, "x - 2, x + 2, 2 * x, x // 2, -x,", "x - 2, x + 2, -x,", PROBES),
    ("a probe may equal a visible input", CONF,
     "if len(out) < n and not any(_same(key, s) for s in seen):", "if len(out) < n:", PROBES),
    ("probe rows grade the fresh-row rule", CONF, "return row_id.endswith(\"]\") and row_id.rsplit(\"[\", 1)[-1]"
     ".startswith(PROBE_ID)", "return False", PROBES),
    ("a test graded by rows does not require them", PLAN, "        plan.differential[t] = rows\n",
     "        plan.differential[t] = []\n", CONFINED_E2E),
    ("a row not raising passes a raising outcome", RAISE,
     "            return isinstance(outcome, dict) and outcome.get(\"raised\", 0) is None",
     "            return True", OUTCOMES),
    ("a row raising another type keeps an outcome", RAISE,
     "                continue  # a type the original does not name: no outcome to judge",
     "                names = table.original.names", OUTCOMES),
    ("the original's match applies to every row", RAISE,
     "want = Raises(names, match if _raised(value, Raises(names, match)) else None)",
     "want = Raises(names, match)", OUTCOMES),
    ("rows of one outcome are enough", RAISE, "if min(raising, len(rows) - raising) >= MIN_EACH and",
     "if len(rows) >= MIN_EACH and", BALANCE),
    ("the valid months are not drawn", RAISE,
     "            near = [*range(min(0, value), max(0, value) + 1), *near]", "            near = near", ROWS),
    ("a raising test is not graded by its rows", PLAN, "{**confined, **graded_by_rows(weak, kept, plan.sites, bug_fails)}",
     "confined", RAISING_E2E),
]
