"""Mutants of issue 52's typed trainer answer and the core's import contract derived from the backend
tables: `python scripts/mutate.py typed2`."""

L = "tests/test_layout.py::"
P = "tests/test_loop.py::"

TYPED2 = [
 ("the contract's plug-ins not derived from the engine table", "scripts/write_import_contracts.py",
  "             for s in (model.core, model.launch_command, model.launch_env, model.preflight) if s]",
  "             for s in (model.core, model.launch_command, model.launch_env, model.preflight) if False]",
  L + "test_a_backend_table_entry_makes_its_package_a_plugin"),
 ("the trainer's publish record lost on the way back from the file", "tandem/handoff.py",
  "None if published is None else Published.from_json(published)", "None",
  P + "test_a_train_result_crosses_the_file_as_it_was_written"),
 ("routing replay's agreement dropped from the trainer's answer", "tandem/handoff.py",
  "        return cls(**found) if found else None", "        return None",
  P + "test_a_train_result_crosses_the_file_as_it_was_written"),
]
