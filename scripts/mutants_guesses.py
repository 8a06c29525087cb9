"""Mutants of issue 46's refusal-rate work: derivations judged per value, small codomains as bounded guesses.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py guesses ["name" ...]
"""

D = "tests/test_reward_derivation.py::"
PLAN = "tandem/envs/coding/grading_plan.py"
EXPOSURE = "tandem/envs/coding/exposure.py"
DERIVATION = "tandem/envs/coding/derivation.py"

GUESSES = [
    ("guesses graded at any odds", PLAN,
     "if weak and all(odds.values()) and chance <= GUESS_BOUND:", "if weak and all(odds.values()):",
     D + "test_guesses_grade_a_task_only_at_long_odds_together"),
    ("a guess counted as a decisive check", EXPOSURE,
     "            (test, site.k) not in self.guesses and site.strong_against(",
     "            site.strong_against(",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("a derivation exposes the assert in every test", EXPOSURE,
     "(test, site.k) not in self.derived and", "site.k not in {k for _, k in self.derived} and",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("the same value asked twice counted as two guesses", PLAN,
     "distinct = {exposure.guesses[(t, k)].of: n", "distinct = {(t, k): n",
     D + "test_guesses_grade_a_task_only_at_long_odds_together"),
    ("a codomain value written out guessed, not derived", DERIVATION,
     "if _appears(w, (*echoes, *stated)):", "if False:",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("a guess's odds count the bug's own value", DERIVATION,
     "Guess(max(len(values) - 1, 1),", "Guess(len(values),",
     D + "test_a_value_of_the_functions_few_values_is_derived"),
]
