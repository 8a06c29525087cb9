"""The `baseline` set of scripts/mutate.py: trainer.loss.advantage_baseline (group vs batch), one line each."""

B = "tests/test_advantage_baseline.py::"
BASELINE = [  # the batch baseline: one mean over the step's kept trajectories, taken only when configured
 ("batch baseline keeps the groups apart", "tandem/advantages.py", "        groups = torch.zeros_like(groups)",
  "        groups = groups", B + "test_groups_that_are_each_all_equal_learn_only_against_the_batch"),
 ("batch baseline counts a trajectory's segments apart", "tandem/advantages.py",
  'trajectory_of.setdefault((int(s.group_id), s.metadata.get("trajectory", ("sample", i))), i)',
  'trajectory_of.setdefault((int(s.group_id), ("sample", i)), i)', B + "test_a_harness_trajectorys_segments_count_once_in_the_batch"),
 ("prepare_step drops the baseline", "tandem/orchestrator/signal.py", "assign_advantages(valid, use_std_norm, baseline=baseline)",
  "assign_advantages(valid, use_std_norm)", B + "test_prepare_step_takes_the_batch_mean_over_the_kept_samples_only"),
 ("the loop ignores advantage_baseline", "tandem/orchestrator/loop.py",
  "prepare_step(batch.samples, cfg.rollout, loss.use_std_norm, loss.advantage_baseline)",
  "prepare_step(batch.samples, cfg.rollout, loss.use_std_norm)", "tests/test_loop.py::test_the_loop_centres_on_the_batch_when_configured"),
]
