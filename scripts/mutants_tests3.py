"""The `tests3` set of scripts/mutate.py: guarantees once reached only at a default value or on a path
a CPU makes trivial (issue 45), one line each, and the config keys its tests set off their default."""

NL = "\n"

H = "tests/test_handover.py::"
G = "tests/test_guarantees_off_default.py::"
K = "tests/test_key_effects.py::"
TESTS3 = [  # the eight breaks of issue 45, then the trainer's hand-back trace
 ("colocation: caches resumed with the weights, before the load", "tandem/orchestrator/colocation.py",
  '        await self._each("resume_memory_occupation", WEIGHTS)' + NL,
  '        await self._each("resume_memory_occupation", WEIGHTS + CACHES)' + NL,
  H + "test_engines_are_drained_then_released_and_resume_weights_load_then_caches"),
 ("colocation: engines released before the rollouts are idle", "tandem/orchestrator/colocation.py",
  "        await self.client.wait_idle()" + NL, "",
  H + "test_engines_are_drained_then_released_and_resume_weights_load_then_caches"),
 ("colocation: engines released without a drain", "tandem/orchestrator/colocation.py",
  "        await asyncio.gather(*(self.fleet.drain(u, self.timeout_s) for u in self.fleet.engines.values()))" + NL, "",
  H + "test_engines_are_drained_then_released_and_resume_weights_load_then_caches"),
 ("trainer: a colocated trainer never offloads after a step", "tandem/trainer/__main__.py",
  "        if cfg.colocated:  # the device goes to the engines before the orchestrator hears of this step",
  "        if False:  # the device goes to the engines before the orchestrator hears of this step",
  H + "test_a_colocated_trainer_hands_its_memory_back_every_step_and_takes_it_again"),
 ("trainer: the device kept until the first batch", "tandem/trainer/__main__.py",
  "    if cfg.colocated:  # the engines generate first: the device is theirs until the first batch comes",
  "    if False:  # the engines generate first: the device is theirs until the first batch comes",
  H + "test_a_colocated_trainer_hands_its_memory_back_every_step_and_takes_it_again"),
 ("trainer: offloaded after the orchestrator hears of the step", "tandem/trainer/__main__.py",
  [("        if cfg.colocated:  # the device goes to the engines before the orchestrator hears of this step" + NL
    + "            result.update(backend.offload())" + NL, ""),
   ("        handoff.write_train_result(run_dir, step, result)" + NL,
    "        handoff.write_train_result(run_dir, step, result)" + NL
    + "        if cfg.colocated:" + NL + "            backend.offload()" + NL)], None,
  H + "test_a_colocated_trainer_hands_its_memory_back_every_step_and_takes_it_again"),
 ("trainer: the CPU hand-over leaves no trace", "tandem/trainer/offload.py",
  "        if self.offloaded:" + NL + "            return {}" + NL + "        t0",
  "        if self.offloaded or not self.active:" + NL + "            return {}" + NL + "        t0",
  H + "test_a_colocated_trainer_hands_its_memory_back_every_step_and_takes_it_again"),
 ("routing replay: expert 0 taken for no record", "tandem/trainer/routing_replay.py",
  "        has = record[:, 0] != NO_RECORD", "        has = record[:, 0] > 0",
  G + "test_an_engine_record_of_expert_zero_is_replayed_not_taken_for_no_record"),
 ("routing replay: expert 0 not counted as a recorded position", "tandem/trainer/routing_replay.py",
  "            has = (self.routed[:, :, self.layers[0], 0].reshape(-1) != NO_RECORD)",
  "            has = (self.routed[:, :, self.layers[0], 0].reshape(-1) > 0)",
  G + "test_an_engine_record_of_expert_zero_is_replayed_not_taken_for_no_record"),
 ("--overwrite: every directory in the run dir removed", "tandem/orchestrator/run_state.py",
  "    for name in RUN_OUTPUTS if run_dir.exists() and describe_run(run_dir) else ():",
  "    for name in [*RUN_OUTPUTS, *(p.name for p in run_dir.iterdir() if p.is_dir())] "
  "if run_dir.exists() and describe_run(run_dir) else ():",
  G + "test_overwrite_keeps_the_users_own_directories_inside_the_run_dir"),
 ("--overwrite: the user's data/ counted as tandem's", "tandem/orchestrator/run_state.py",
  '"wandb", "inspect.html")', '"wandb", "inspect.html", "data")',
  G + "test_overwrite_keeps_the_users_own_directories_inside_the_run_dir"),
 ("preflight: the environment's requirements not asked", "tandem/orchestrator/preflight.py",
  "        problems += environment_problems(cfg, inputs[1])", "        pass",
  G + "test_the_launchers_preflight_asks_the_environment_what_it_needs"),
 ("preflight: delta sync without zstandard not named", "tandem/orchestrator/preflight.py",
  '    if cfg.sync.encoding == "delta":', "    if False:", G + "test_preflight_names_zstandard_for_delta_weight_sync"),
 ("TIS: tis_clip_high ignored", "tandem/losses.py", "high=self.tis_clip_high) if self.tis else None",
  "high=2.0) if self.tis else None", G + "test_tis_clip_high_is_the_configured_bound"),
]
