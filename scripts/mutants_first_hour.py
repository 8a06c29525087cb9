"""The `first_hour` set of scripts/mutate.py: what a new user meets first, one line each."""

NL = "\n"

F = "tests/test_first_hour.py::"
FIRST_HOUR = [  # the first hour: fast refusals, README lines that run as printed, the Python API
 ("the launcher loads the loop (and torch) before its checks", "tandem/orchestrator/launcher.py",
  "from tandem.orchestrator.hooks import NO_HOOKS, RunHooks" + NL,
  "from tandem.orchestrator.hooks import NO_HOOKS, RunHooks" + NL + "from tandem.orchestrator.session import run" + NL,
  F + "test_a_bad_key_is_named_before_torch_loads"),
 ("JSONL data read through datasets (pandas, pyarrow)", "tandem/rollout/data.py",
  "        rows = _fill_missing_keys(rows)", "        import datasets; rows = _fill_missing_keys(rows)",
  F + "test_a_used_run_dir_is_refused_before_torch_loads"),
 ("the inspector's header shows an environment run's default plug-ins", "tandem/inspect/run_data.py",
  '    task = {"environment": environment} if environment else', '    task = {"environment": environment} if False else',
  "tests/test_inspect_page.py::test_the_header_names_an_environment_runs_environment_not_the_default_plug_ins"),
 ("no did-you-mean for another trainer's name", "tandem/config/loading.py",
  "    name = OTHER_TRAINERS_NAMES.get(name, name)" + NL, "",
  F + "test_a_name_from_another_trainer_gets_tandems_name"),
 ("tandem.train drops the functions it was given", "tandem/api.py",
  "        check_inputs, reward=reward if callable(reward) else None, rollout=rollout if callable(rollout) else None))",
  "        check_inputs, reward=None, rollout=None))", F + "test_train_hands_its_functions_and_rows_to_the_launchers_checks"),
 ("a Python reward skips the reward contract", "tandem/orchestrator/launcher.py",
  '    reward_fn = check_contract(reward, "reward", cfg.rollout.reward) if reward else',
  "    reward_fn = reward if reward else", F + "test_train_hands_its_functions_and_rows_to_the_launchers_checks"),
 ("a failed run without a checkpoint suggests --resume", "tandem/orchestrator/run_state.py",
  "    if checkpoint.complete_steps(run_dir):", "    if True:", F + "test_after_a_stop_the_message_and_the_next_start_agree"),
 ("preflight forgets the sandbox's pytest", "tandem/envs/coding/coding_env.py",
  "        return problems + [f\"environment.name = CodingEnv: {p}\" for p in pytest_problems(coding_args(cfg).sandbox.python)]",
  "        return problems", F + "test_the_coding_agent_without_pytest_in_its_sandbox_python_is_refused_before_anything_starts"),
 ("preflight does not ask the hub", "tandem/orchestrator/preflight.py",
  "    problems += model" + NL, "", F + "test_a_hub_model_with_no_hub_is_refused_before_anything_starts"),
 ("the rehearsal shows the node's unused model.tiny as on the node", "tandem/lab/rehearse.py",
  "        before = parent[name] if on_node is None else on_node", "        before = parent[name]",
  "tests/test_rehearse.py::test_the_report_shows_the_real_models_shape_on_the_node"),
 ("a TOML's plug-in file is looked up from the current directory", "tandem/config/loading.py",
  "    resolve_plugin_files(tree, base)" + NL, "",
  F + "test_a_plug_in_file_resolves_like_data_path_from_the_toml_that_names_it"),
]
