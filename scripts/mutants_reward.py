"""The `reward` set of scripts/mutate.py: issue 46's guarantees (no correct fix refused, no derivation pays).

    PYTHONPATH=$PWD python scripts/mutate.py reward
"""

NL = "\n"
R = "tests/test_reward_fidelity.py::"
REWARD = [  # (name, file, old, new, guarding test)
 ("UserList and friends opaque again", "tandem/envs/coding/grader_plugin/tandem_checks.py",
  "            plain = _compares_as(value)" + NL, "            plain = None" + NL,
  R + "test_the_hosts_verdict_on_standard_types_is_the_original_asserts"),
 ("dict views not set-like", "tandem/envs/coding/grader_plugin/tandem_checks.py",
  "    if kind in (type({}.keys()), type({}.items())):", "    if False:",
  R + "test_the_hosts_verdict_on_standard_types_is_the_original_asserts"),
 ("numeric tower opaque", "tandem/envs/coding/grader_plugin/tandem_checks.py",
  '    numbers = sys.modules.get("numbers")', "    numbers = None",
  R + "test_the_hosts_verdict_on_standard_types_is_the_original_asserts"),
 ("diff decoded with replacement characters", "tandem/envs/coding/sandbox/pool.py",
  "        return out.stdout  # bytes", '        return out.stdout.decode("utf-8", "replace").encode()  # bytes',
  R + "test_a_fix_in_a_latin1_source_file_is_graded_as_the_agent_wrote_it[unshare]"),
 ("binary file without contents applied", "tandem/envs/coding/graded_diff.py",
  '        if "GIT binary patch" not in text and re.search(', '        if False and re.search(',
  R + "test_a_binary_file_without_its_contents_is_refused_by_name"),
 ("graded copy read-only again", "tandem/envs/coding/grading.py",
  "        sb.open_graded(protected_paths(task.test_files, sb.testbed))", "        pass",
  R + "test_correct_fixes_the_reference_did_not_write_score_one[unshare]"),
 ("graded test files the run's", "tandem/envs/coding/sandbox/pool.py",
  "                os.chown(path, 0, 0, follow_symlinks=False)" + NL + "                os.chmod(path, 0o444)",
  "                pass", R + "test_a_writable_graded_copy_keeps_the_graded_tests_tandems[unshare]"),
 ("directories above graded tests the run's", "tandem/envs/coding/sandbox/pool.py",
  "                    os.chown(parent, 0, 0, follow_symlinks=False)", "                    pass",
  R + "test_a_writable_graded_copy_keeps_the_graded_tests_tandems[unshare]"),
 ("reference values compared by position", "tandem/envs/coding/checks.py",
  "            return any(value == w for w in wanted)", "            return nth < len(wanted) and value == wanted[nth]",
  R + "test_a_check_reached_more_often_than_the_reference_is_judged_as_the_original[unshare]"),
 ("a reference value never met passes", "tandem/envs/coding/checks.py",
  "        return [nth for nth, w in enumerate(wanted) if not any(", "        return [nth for nth, w in [] if not any(",
  R + "test_a_check_reached_more_often_than_the_reference_is_judged_as_the_original[unshare]"),
 ("parametrized expectations left in the graded copy", "tandem/envs/coding/params.py",
  "    if not columns or None in ids or len(set(ids)) != len(ids):", "    if True:",
  R + "test_a_parametrized_expectation_leaves_the_graded_copy"),
 ("parametrized expectations taken from the run", "tandem/envs/coding/grading_plan.py",
  "                                          if isinstance(s.expected, Reference) and not s.expected.held}",
  "                                          if isinstance(s.expected, Reference)}",
  R + "test_parametrized_expectations_are_graded_not_refused[unshare]"),
 ("a case pytest names otherwise aliased anyway", "tandem/envs/coding/params.py",
  "    if any(t not in originals for t in ours):", "    if False:",
  R + "test_a_parametrized_expectation_leaves_the_graded_copy"),
 ("calls of constants are no echoes", "tandem/envs/coding/checks.py",
  "ast.UnaryOp, ast.BinOp, ast.Call)):", "ast.UnaryOp, ast.BinOp)):",
  "tests/test_reward_derivation.py::test_a_constant_built_by_a_call_is_an_echo "
  "tests/test_reward_derivation.py::test_a_forger_that_folds_calls_scores_zero[unshare]"),
]

D = "tests/test_reward_derivation.py::"
DERIVATION = "tandem/envs/coding/derivation.py"
REWARD += [  # issue 46's derivation families 2-5, each closed on the host (tandem/envs/coding/derivation.py)
 ("a value cut short and extended is not derived", DERIVATION,
  "lambda x, y: _extends(x, y, strings)", "lambda x, y: False",
  D + "test_a_value_the_bug_cut_short_extended_to_the_tests_input_is_derived"),
 ("adjacent items joined are not derived", DERIVATION,
  '"joins": lambda b, w: _joins(b, w, strings),', '"joins": lambda b, w: False,',
  D + "test_adjacent_items_joined_into_what_the_issue_quotes_are_derived"),
 ("the codomain is not derived", DERIVATION,
  "in_codomain = any(_same(w, v) for v in values)", "in_codomain = False",
  D + "test_a_value_of_the_functions_few_values_is_derived"),
 ("the issue's edit by analogy is not derived", DERIVATION,
  "lambda x, y: y in _analogies(x, stated)", "lambda x, y: False",
  D + "test_the_issues_edit_applied_by_analogy_is_derived"),
 ("derivations from the bug's value not applied", "tandem/envs/coding/exposure.py",
  "    out.derived = {key: why for key, why in values.items() if key[1] in broken}", "    out.derived = {}",
  D + "test_a_value_the_bug_cut_short_extended_to_the_tests_input_is_derived"),
 ("a codomain never small", DERIVATION,
  "(len(values) <= SMALL_CODOMAIN or _appears(w, echoes))", "(False or _appears(w, echoes))",
  D + "test_a_value_of_the_functions_few_values_is_derived"),
]
