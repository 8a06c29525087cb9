"""The `expected_sides` set of scripts/mutate.py: issue 46's check whose expected side calls code the fix changes
(tandem/envs/coding/expected_sides.py), right both ways.

    PYTHONPATH=$PWD python scripts/mutate.py expected_sides

A correct fix that changes what an own check's R computes scores 1 (the first five); the agent's code never
writes both sides of a check that decides the task, and what an own check's R tells a forger is counted
(the rest).
"""

NL = "\n"
X = "tests/test_expected_sides.py::"
SANDBOX = X + "test_a_fix_that_changes_the_expected_sides_code_scores_one_and_a_forger_of_both_sides_zero[unshare]"
VERDICT = X + "test_an_own_sites_expected_side_is_the_runs_and_a_decisive_ones_is_the_hosts"
EXPOSURE = X + "test_an_own_sites_expected_side_counts_as_what_the_sandbox_holds"
CHOOSING = X + "test_a_check_the_bug_passes_is_made_own_unless_its_r_changes_what_the_bug_computes"
PLAN = "tandem/envs/coding/grading_plan.py"
EXPOSURE_PY = "tandem/envs/coding/exposure.py"
EXPECTED_SIDES = [  # (name, file, old, new, guarding test)
 # no correct fix refused
 ("no check is own", PLAN, "    own = eligible(plan.sites, plan.required) - decisive(buggy)", "    own = set()",
  CHOOSING),
 ("an own check's R not in the graded copies", "tandem/envs/coding/instrument.py",
  "_check_call(s.k, e, r, with_references or s.k in own)", "_check_call(s.k, e, r, with_references)", CHOOSING),
 ("a run's own E == R ignored", "tandem/envs/coding/verdict.py",
  "            if not agreed(site, own.get(i)):", "            if True:", VERDICT),
 ("an own check must meet every reference value", "tandem/envs/coding/verdict.py",
  "            if k in changed:", "            if False:", VERDICT),
 ("the sandbox writes no outcome of E == R", "tandem/envs/coding/grader_plugin/tandem_checks.py",
  '        record["eq"] = _holds(value, expected[0])', '        record["eq"] = False', SANDBOX),
 # no forgery pays
 ("a decisive check is own too", PLAN,
  [("    own = eligible(plan.sites, plan.required) - decisive(buggy)", "    own = eligible(plan.sites, plan.required)"),
   ("    if own & decisive(again):", "    if False:")], None, SANDBOX),
 ("the bug failing an own check after R ran is ignored", PLAN, "    if own & decisive(again):", "    if False:",
  CHOOSING),
 ("a graded run writes any check's R", "tandem/envs/coding/verdict.py",
  "        if sites is None or not own_side(sites.get(site)):", "        if False:", VERDICT),
 ("an own check's R is no echo", EXPOSURE_PY,
  "                if r is not None and not own_side(sites.get(node.args[0].value)):",
  "                if r is not None:", EXPOSURE),
 ("an own check's E == R is no kept equality", EXPOSURE_PY,
  "            _kept_equality(replace(c, k=None), names, [(k, h) for k, h in host if k != c.k], out.reasons)",
  "            pass", EXPOSURE),
 ("R's values join no codomain", EXPOSURE_PY,
  "derived(*with_r_values(sites, buggy, own or {}, r_sides), tests,", "derived(sites, buggy, tests,", EXPOSURE),
 ("a uniform transformation must pass own checks", EXPOSURE_PY,
  "    sites = {k: s for k, s in sites.items() if not own_side(s)}  # a forger passes these with its own R" + NL, "",
  X + "test_a_uniform_transformation_need_not_pass_own_sites"),
]
