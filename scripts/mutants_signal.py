"""The `signal` set of scripts/mutate.py: failed rewards masked, DAPO's overlong handling and dynamic
sampling, GSPO and CISPO (issue 48), one line each."""

S = "tests/test_signal.py::"
L = "tests/test_loop.py::"
LO = "tests/test_losses.py::"
P = "tests/test_producer.py::"
SIG = "tandem/orchestrator/signal.py"
LOSSES = "tandem/losses.py"
PROD = "tandem/orchestrator/producer.py"
SIGNAL = [  # which samples carry a signal, and the objectives GSPO and CISPO
 ("failed rewards trained", SIG, 's.advantage, s.excluded = 0.0, (REWARD_FAILED if reward_failed(s) else "")',
  's.advantage, s.excluded = 0.0, ""', L + "test_a_reward_that_raises_on_a_quarter_of_samples_trains_only_the_others"),
 ("failed rewards in the group statistics", SIG, "ok = [s for s in members if not s.excluded]", "ok = list(members)",
  L + "test_a_reward_that_raises_on_a_quarter_of_samples_trains_only_the_others"),
 ("a group left with one valid reward trained", SIG, "if len(ok) < min(2, len(members)):", "if len(ok) < 1:",
  S + "test_a_group_left_with_one_valid_reward_is_dropped_whole"),
 ("a group of one dropped as failed", SIG, "if len(ok) < min(2, len(members)):", "if len(ok) < 2:",
  S + "test_a_group_of_one_is_not_dropped_as_failed"),
 ("the trainer trains excluded samples", "tandem/trainer/__main__.py", "backend.train_step(trained(batch.samples))",
  "backend.train_step(batch.samples)", S + "test_the_trainer_trains_only_the_samples_with_a_loss_weight"),
 ("a step with nothing to train trains", "tandem/orchestrator/loop.py", "if batch.samples and not trained(batch.samples):",
  "if False:", L + "test_a_step_whose_failures_leave_no_group_two_valid_rewards_stops_the_run"),
 ("overlong penalty not linear", SIG, "return -penalty * min(length - start, buffer) / buffer", "return -penalty",
  S + "test_overlong_penalty_is_dapos_linear_band"),
 ("overlong penalty never reaches the reward", SIG, "s.reward, penalized = shaped, penalized + 1",
  "penalized = penalized + 1", S + "test_overlong_penalty_shapes_the_rewards_before_the_advantages"),
 ("overlong mask trains truncated samples", SIG, 'if s.finish_reason == "length":', "if False:",
  S + "test_overlong_mask_keeps_the_truncated_reward_in_the_statistics"),
 ("zero variance counts failed rewards", SIG,
  "rewards = {shaped_reward(s, signal, max_tokens) for s in samples if not reward_failed(s)}",
  "rewards = {shaped_reward(s, signal, max_tokens) for s in samples}", S + "test_zero_variance_looks_at_valid_rewards_only"),
 ("GSPO clips per token", LOSSES, "seq_log_ratio = sequence_mean(logp - old_logp, mask, segments)",
  "seq_log_ratio = logp - old_logp", LO + "test_gspo_clips_whole_sequences_on_the_sequence_ratio"),
 ("GSPO ignores packed sample boundaries", LOSSES, "    if segments is None:\n        means = (values * mask)",
  "    if True:\n        means = (values * mask)", LO + "test_gspo_of_a_packed_row_is_the_padded_batch_s"),
 ("objective setting ignored", LOSSES, '        if self.objective == "gspo":', "        if False:",
  LO + "test_gspo_clips_whole_sequences_on_the_sequence_ratio"),
 ("seq_clip_frac counts tokens", LOSSES, "return (per_sample > 0).sum().to(flags.dtype)",
  "return per_sample.sum().to(flags.dtype)", LO + "test_gspo_clips_whole_sequences_on_the_sequence_ratio"),
 ("CISPO weight differentiated", LOSSES, "ratio = torch.exp(logp - old_logp).detach()",
  "ratio = torch.exp(logp - old_logp)", LO + "test_cispo_clips_the_weight_and_keeps_every_gradient"),
 ("CISPO weight unclipped", LOSSES, "weight = ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)", "weight = ratio",
  LO + "test_cispo_clips_the_weight_and_keeps_every_gradient"),
 ("dynamic sampling refills without bound", PROD, "if self._filtered >= self.signal.max_refills_per_step:",
  "if False:", P + "test_dynamic_sampling_replaces_zero_variance_groups_up_to_the_bound_then_trains_fewer"),
 ("a forfeited slot is refilled", PROD, "- len(self._buffer) - self._forfeited", "- len(self._buffer)",
  P + "test_dynamic_sampling_replaces_zero_variance_groups_up_to_the_bound_then_trains_fewer"),
 ("the last slot forfeited too", PROD, "if self._forfeited >= self.prompts_per_step - 1:", "if False:",
  P + "test_dynamic_sampling_keeps_the_last_slot_whatever_comes"),
 ("dynamic sampling on by default", PROD,
  "if not self.signal.dynamic_sampling or not zero_variance(samples, self.signal, self.max_new_tokens):",
  "if not zero_variance(samples, self.signal, self.max_new_tokens):",
  P + "test_without_dynamic_sampling_zero_variance_groups_are_trained"),
]
