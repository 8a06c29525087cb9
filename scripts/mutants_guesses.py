"""Mutants of issue 46's refusal-rate work: derivations judged per value, small codomains as bounded guesses.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py guesses ["name" ...]
"""

D = "tests/test_reward_derivation.py::"
PLAN = "tandem/envs/coding/grading_plan.py"
GUESS_PLAN = "tandem/envs/coding/guess_plan.py"
EXPOSURE = "tandem/envs/coding/exposure.py"
DERIVATION = "tandem/envs/coding/derivation.py"

GUESSES = [
    ("guesses graded at any odds", GUESS_PLAN,
     "if weak and all(odds.values()) and chance <= GUESS_BOUND:", "if weak and all(odds.values()):",
     D + "test_guesses_grade_a_task_only_at_long_odds_together"),
    ("a guess counted as a decisive check", EXPOSURE,
     "            (test, site.k) not in self.guesses and site.strong_against(",
     "            site.strong_against(",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("a derivation exposes the assert in every test", EXPOSURE,
     "(test, site.k) not in self.derived and", "site.k not in {k for _, k in self.derived} and",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("the same value asked twice counted as two guesses", GUESS_PLAN,
     "distinct[g.of] = min(distinct.get(g.of, g.odds), g.odds)", "distinct[(t, k)] = g.odds",
     D + "test_guesses_grade_a_task_only_at_long_odds_together"),
    ("a codomain value written out guessed, not derived", DERIVATION,
     "(among_inputs(w, mine) if in_codomain else", "(False if in_codomain else",
     D + "test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive"),
    ("a guess's odds count the bug's own value", "tandem/envs/coding/odds.py",
     "if not (kind(c) == kind(bug) and _same(c, bug)) and not any(", "if not any(",
     "tests/test_guess_odds.py::test_a_value_is_guessed_among_the_smallest_family_that_holds_it"),
]
