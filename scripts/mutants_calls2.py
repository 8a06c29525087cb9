"""The `calls2` set of scripts/mutate.py: twins (tandem.envs.coding.call_rows) in a test module that never imports
pytest, under raising_rows.PYTEST_ALIAS (calendarx's plain asserts: `or year == 2000` was paid without them)."""

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
