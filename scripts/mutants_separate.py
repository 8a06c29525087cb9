"""Mutants of issue 46's separating rows and grading by separation (tandem/envs/coding/separating.py,
separating_plan.py, pool_rows.py, their hooks in params.py, blind.py and grading_plan.py).

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py separate ["name" ...]
"""

S = "tests/test_separating.py::"
SEP = "tandem/envs/coding/separating.py"
SEP_PLAN = "tandem/envs/coding/separating_plan.py"
POOL = "tandem/envs/coding/pool_rows.py"
WIDE_ROWS = "tests/test_wide_rows.py::test_learn_odd_meets_a_required_separating_row_where_the_fresh_rows_hold_none"

SEPARATE = [
    ("the pool never separates", SEP, "            if best is None or counts[best] == 0:", "            if True:",
     S + "test_a_rule_no_required_row_refutes_gets_a_pool_row_that_does"),
    ("a rule a pool row refutes counted as refuted", SEP, "            if wrong & need:", "            if wrong:",
     S + "test_the_cap_leaves_rules_open_and_the_function_not_separated"),
    ("a rule wrong on a pool row counted as a fix", SEP, "            elif not wrong:", "            elif True:",
     S + "test_the_cap_leaves_rules_open_and_the_function_not_separated"),
    ("the cap ignored", SEP, "if per_table.get(table_of(row), 0) < cap and row not in picked}",
     "if row not in picked}", S + "test_the_cap_leaves_rules_open_and_the_function_not_separated"),
    ("no divisor fitted to the failing inputs", POOL, "    if values:\n        out |= set(divisors(math.gcd(", "    if False:\n        out |= set(divisors(math.gcd(",
     S + "test_the_selectors_fitted_to_the_failing_inputs_hold_the_divisors_of_their_gcd"),
    ("a function separated where only a visible row fails the bug", SEP_PLAN,
     "        beyond = [it for it in items if not _agrees(it.bug, it.want) and not any(",
     "        beyond = [it for it in items if not _agrees(it.bug, it.want) or not any(",
     S + "test_a_function_whose_fresh_rows_the_bug_passes_or_only_visible_ones_fail_is_not_separated"),
    ("pool rows past the domain guard", POOL, "(not inside and in_domain(value, values))", "(not inside)",
     S + "test_pool_rows_stay_inside_the_domain_and_no_probe_row_is_among_them"),
    ("pool rows told by their ids", POOL, "    rng.shuffle(order)\n", "",
     S + "test_pool_rows_stay_inside_the_domain_and_no_probe_row_is_among_them"),
    ("a separated function still counted blind", "tandem/envs/coding/blind.py",
     ', **{f: "every rule of F refuted or a fix on the pool" for f in separated}}', "}",
     S + "test_a_separated_function_leaves_the_blind_count"),
    ("no separating row kept", SEP_PLAN, "    picked = set(separating_rows(required, learnt))", "    picked = set()",
     WIDE_ROWS),
    ("the pool rows that separate nothing stay in the graded copies", SEP_PLAN,
     "    if not unpicked:\n        return learnt, reference_files, fresh, kept\n",
     "    if True:\n        return learnt, reference_files, fresh, kept\n", WIDE_ROWS),
    ("learn:odd's divisibility not among the selectors", SEP,
     '    out: dict[str, Selector] = {f"x{p} % {d} == 0": _at(p, int, partial(_divisible, d)) for d in fitted_divisors(failing)}',
     '    out: dict[str, Selector] = {f"x{p} % {d} == 0": _at(p, int, partial(_divisible, d)) for d in fitted_divisors(failing) if d != 16}',
     S + "test_the_selectors_fitted_to_the_failing_inputs_hold_the_divisors_of_their_gcd"),
    ("a check calling another function counted as the separated one's", SEP_PLAN,
     "    return bool(calls & functions) and calls <= functions | plain", "    return bool(calls & functions)",
     S + "test_a_check_counts_as_computed_by_separated_functions_only_through_them_and_builtins"),
]
