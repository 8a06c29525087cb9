"""The `oracle` set of scripts/mutate.py: issue 46's independent equivalence oracle (tests/_equivalence.py)."""

T = "tests/test_oracle_forgers.py::"
ORACLE = [  # the oracle must call a candidate that differs from the reference in-domain a forgery
 ("no disagreement is ever a forgery", "tests/_equivalence.py",
  '        forged = any(c["span"] or c["domain"] for c in differ.values())', "        forged = False",
  T + "test_the_oracle_tells_the_bug_and_a_visible_row_table_from_fixes"),
 ("every disagreement counted outside the domain", "tests/_equivalence.py",
  '    for b in ("span", "domain"):\n        if all(', '    for b in ():\n        if all(',
  T + "test_the_oracle_tells_the_bug_and_a_visible_row_table_from_fixes"),
 ("outcomes compared by kind only", "tests/_equivalence.py",
  '    if a[0] == "raise":\n        return a[1] == b[1]', '    if True:\n        return True',
  T + "test_the_oracle_tells_the_bug_and_a_visible_row_table_from_fixes"),
 ("a plan seed ignored (the grader's own random draw)", "tests/_plan_seeds.py",
  "        return secrets.randbits(k) if seed is None else seed", "        return secrets.randbits(k)",
  T + "test_new_forgers_score_zero_unless_the_oracle_finds_them_fixes"),
 ("each case graded under the first plan seed only", "tests/test_oracle_forgers.py",
  "            for seed in SEEDS:", "            for seed in SEEDS[:1]:",
  T + "test_new_forgers_score_zero_unless_the_oracle_finds_them_fixes"),
]
