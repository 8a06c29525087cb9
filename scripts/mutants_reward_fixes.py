"""The `reward_fixes` set of scripts/mutate.py: issue 46's corpus of correct alternative fixes (tests/_fix_corpus*.py)
keeps scoring 1, and its checker (bench/fix_corpus.py) never counts a fix that fails the original tests as correct.

    PYTHONPATH=$PWD python scripts/mutate.py reward_fixes
"""

F = "tests/test_fix_corpus.py::"
ONE = F + "test_a_correct_fix_of_each_form_scores_one"
REWARD_FIXES = [  # (name, file, old, new, guarding test)
 ("an exact Fraction written opaque", "tandem/envs/coding/grader_plugin/tandem_checks.py",
  '        return {"q": [int(value.numerator), int(value.denominator)]}', '        return {"o": "fractions.Fraction"}',
  ONE + "[tinystats:return_type]"),
 ("a diff that is no UTF-8 refused", "tandem/envs/coding/graded_diff.py",
  '    return diff.decode("utf-8", "surrogateescape") if isinstance(diff, bytes) else diff',
  '    return diff.decode("utf-8") if isinstance(diff, bytes) else diff', ONE + "[ciphers:latin1]"),
 ("an agent's new private module dropped as a leftover", "tandem/envs/coding/graded_diff.py",
  "    return (any(p in LEFTOVER_DIRS", '    return parts[-1].startswith("_") or (any(p in LEFTOVER_DIRS',
  ONE + "[jpointer:new_module]"),
 ("graded copy read-only (no file beside the module)", "tandem/envs/coding/grading.py",
  "        sb.open_graded(protected_paths(task.test_files, sb.testbed))", "        pass", ONE + "[checkout:cache]"),
 ("the checker counts a failing fix as correct", "bench/fix_corpus.py",
  '    return {t: s for t, s in outcomes.items() if s != "PASSED"}', "    return {}",
  F + "test_the_checker_drops_a_fix_that_fails_the_original_tests"),
 ("the checker takes a test it never saw as passed", "bench/fix_corpus.py",
  '    return {t: seen.get(t, "NOT_RUN") for t in task.tests}', '    return {t: seen.get(t, "PASSED") for t in task.tests}',
  F + "test_the_checker_drops_a_fix_that_fails_the_original_tests"),
]
