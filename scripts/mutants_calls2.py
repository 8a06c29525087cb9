"""Two sets of scripts/mutate.py on twins (tandem.envs.coding.call_rows). `calls2`: twins in a test module that never
imports pytest, under raising_rows.PYTEST_ALIAS (calendarx's plain asserts: `or year == 2000` was paid without them).
`keywords`: a parametrize table's call judged with the keywords another test passes to its callee
(tandem.envs.coding.keyword_rows; hooked in raising_rows.add_rows, its rows the table's by call_rows.same_table)."""

T = "tests/test_call_rows.py::"
CALLS = "tandem/envs/coding/call_rows.py"
RAISE = "tandem/envs/coding/raising_rows.py"
ALIAS = T + "test_a_module_without_import_pytest_gets_its_twin_under_an_alias"
E2E = T + "test_february_is_graded_by_its_twin_without_import_pytest[unshare]"
CALL_IMPORT_MUTANTS = [
 ("no twin where the module has no import pytest", RAISE,
  "        made = twin(func, fixtures, rng,", "        made = None if not imported else twin(func, fixtures, rng,", E2E),
 ("the alias never imported", RAISE, "    if tails and not imported:", "    if tails and False:", ALIAS),
 ("the twin's decorator ignores the alias", CALLS, '@{pytest_name}.mark.parametrize(', "@pytest.mark.parametrize(",
  ALIAS),
 ("a rows test where the module has no import pytest", RAISE, "        if block is None or not imported:",
  "        if block is None:", ALIAS),
]


K = "tests/test_keyword_rows.py::"
KEYS = "tandem/envs/coding/keyword_rows.py"
KEYED = K + "test_the_tables_twin_crosses_its_column_with_the_other_tests_keywords"
NOT_KEYED = K + "test_no_keyword_twin_where_the_table_or_the_keywords_are_not_plain"
KEYWORD_MUTANTS = [
 ("no keyword twin for a failing table", RAISE, "            tails += [keyed[0]] if keyed else []",
  "            tails += []", KEYED),
 ("the keyword twin's rows are not the table's", CALLS,
  "return owner(row) in (owner(test), owner(test) + CALLS_SUFFIX)", "return owner(row) in (owner(test), test + CALLS_SUFFIX)",
  KEYED),
 ("the other test's keywords not added", KEYS, "            checked.keywords += [ast.keyword(k, ast.Constant(v)) for k, v in extra]",
  "            pass", KEYED),
 ("a keyword the table's call passes itself taken", KEYS, "all(k.arg and k.arg not in own and", "all(k.arg and", NOT_KEYED),
 ("a keyword that is no constant taken", KEYS, "and isinstance(k.value, ast.Constant)\n", "\n", NOT_KEYED),
 ("a hidden table's probe rows taken as its domain", KEYS, 'if str(i).startswith("case")]', "]",
  K + "test_a_hidden_tables_fresh_and_probe_rows_are_not_the_twins_domain"),
 ("a table body of more than its check", KEYS, "    if len(body) != 1 or not isinstance(check := body[0], ast.Assert)",
  "    if not isinstance(check := body[0], ast.Assert)", NOT_KEYED),
]
