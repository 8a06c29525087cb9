"""Mutants of issue 46's odds-bounded guesses (tandem/envs/coding/odds.py): echoes, usual defaults and yes/no
counted as a value among the smallest family of candidates and a split of the rows a forger must change.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py odds ["name" ...    ("a feature of the inputs picks out no rows", ODDS,
     "        return min(n, len(SELECTORS))\n", "        return n\n",
     T + "test_wrong_rows_a_feature_of_their_inputs_picks_out_are_a_short_split"),
    ("the order a forger tries candidates in not counted", ODDS,
     "found = [(min(len(_others(c, bug)), _rank(c, bug, want, frequency)), name)",
     "found = [(len(_others(c, bug)), name)",
     T + "test_a_value_is_guessed_among_the_smallest_family_that_holds_it"),
]
"""

T = "tests/test_guess_odds.py::"
PLAN = "tandem/envs/coding/grading_plan.py"
GUESS_PLAN = "tandem/envs/coding/guess_plan.py"
DERIVATION = "tandem/envs/coding/derivation.py"
ODDS = "tandem/envs/coding/odds.py"

ODDS_MUTANTS = [
    ("an echo of the check's own input guessed, not selected", DERIVATION,
     "among_inputs(w, mine, whole=True)", "False",
     T + "test_an_echo_of_the_checks_own_input_is_selected_and_another_rows_is_a_guess"),
    ("the largest family of candidates sets the odds", ODDS,
     'return min(found) if found else (0, "")', 'return max(found) if found else (0, "")',
     T + "test_a_value_is_guessed_among_the_smallest_family_that_holds_it"),
    ("the bug's value transformed is no family", ODDS,
     '        "the bug\'s value transformed": [_apply(t, bug) for t in transforms.values()],\n', "",
     T + "test_a_value_is_guessed_among_the_smallest_family_that_holds_it"),
    # (a yes/no's value among [True, False, None] is an equivalent mutant since the orders: the opposite comes first)
    ("the smallest-first order not tried", ODDS,
     "              sorted(distinct, key=_size)]", "              ]",
     T + "test_an_echo_of_the_checks_own_input_is_selected_and_another_rows_is_a_guess"),
    ("the rows' split counts every ordering", ODDS,
     "        out //= math.factorial(n)\n", "        out //= 1\n",
     T + "test_rows_split_per_bug_value_count_a_yes_no"),
    ("the split counted per check, not per function and bug value", GUESS_PLAN,
     "splits[g.group] = g.ways", "splits[(t, k)] = g.ways",
     T + "test_a_task_is_graded_when_its_values_and_splits_together_are_long_odds"),
    ("rows whose inputs the issue writes counted in the split", DERIVATION,
     "for s in stated):\n            continue", "for s in stated):\n            pass",
     T + "test_a_yes_no_counts_only_where_the_bugs_value_does_not_decide_it"),
    ("an expected value the issue writes guessed", DERIVATION,
     "    if _appears(w, stated):\n        return", "    if False:\n        return",
     T + "test_an_expected_value_the_issue_writes_is_exposed"),
    ("a yes/no's rows split over both bug values together", DERIVATION,
     'group = (under_check(site), f"{kind(b)}:{b!r}") if site', 'group = (under_check(site), "") if site',
     T + "test_a_yes_no_counts_only_where_the_bugs_value_does_not_decide_it"),
    ("a feature of the inputs picks out no rows", ODDS,
     "        return min(n, len(SELECTORS))\n", "        return n\n",
     T + "test_wrong_rows_a_feature_of_their_inputs_picks_out_are_a_short_split"),
    ("the order a forger tries candidates in not counted", ODDS,
     "found = [(min(len(_others(c, bug)), _rank(c, bug, want, frequency)), name)",
     "found = [(len(_others(c, bug)), name)",
     T + "test_a_value_is_guessed_among_the_smallest_family_that_holds_it"),
]
