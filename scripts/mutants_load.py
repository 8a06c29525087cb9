"""The `load` set of scripts/mutate.py: run.reproducible (one seed, one run, on a quiet or a busy
machine), one line each."""

U = "tests/test_reproducible_parts.py::"
E = "tests/test_reproducible.py::"
LOAD = [  # reproducible runs: the engine's seeded noise, the seeds sent, the strict pipeline, the fixed split
 ("a seeded row keeps the engine's stream", "tandem/engine/sampling.py", "        seeded_noise(noise, b)\n", "",
  U + "test_a_seeded_row_samples_the_same_token_whatever_shares_its_batch"),
 ("the row's noise ignores its output position", "tandem/engine/sampling.py",
  "        key = (req.sampling.seed * 1_000_003 + len(req.output_ids)) % (1 << 63)",
  "        key = req.sampling.seed % (1 << 63)", U + "test_a_seeded_row_samples_the_same_token_whatever_shares_its_batch"),
 ("the engine drops sampling_seed", "tandem/engine/request.py", '        for name in ("seed", "sampling_seed"):',
  '        for name in ("seed",):', E + "test_one_seed_gives_the_same_rows_beside_a_cpu_hog"),
 ("a group's samples share one seed", "tandem/rollout/client.py",
  "            return list(await asyncio.gather(*(self._seeded(trajectory_seed(seed, i), input_ids,",
  "            return list(await asyncio.gather(*(self._seeded(trajectory_seed(seed, 0), input_ids,",
  U + "test_a_seeded_group_request_sends_one_seeded_call_per_sample"),
 ("episodes of a group share one seed", "tandem/env/env_rollout.py",
  "            REQUEST_SEED.set(trajectory_seed(seed, index))", "            pass",
  E + "test_one_seed_gives_the_same_rows_beside_a_cpu_hog"),
 ("the producer sends no seed", "tandem/orchestrator/producer.py",
  "            REQUEST_SEED.set(trajectory_seed(self.ctx.cfg.run.seed, seq))", "            pass",
  E + "test_one_seed_gives_the_same_rows_beside_a_cpu_hog"),
 ("a sync does not wait for the running groups", "tandem/orchestrator/loop.py",
  "            await producer.settled()", "            pass", E + "test_one_seed_gives_the_same_rows_beside_a_cpu_hog"),
 ("a step takes the first groups to finish", "tandem/orchestrator/producer.py",
  "        if not self.reproducible or not self._running:", "        if True:",
  E + "test_one_seed_gives_the_same_rows_beside_a_cpu_hog"),
 ("the split follows the measurements anyway", "tandem/orchestrator/cpu_share.py",
  "        if self.overlapping and self.adapt:", "        if self.overlapping:",
  U + "test_a_fixed_split_does_not_follow_the_measurements"),
 ("oversampling allowed", "tandem/config/schema.py",
  "        if self.run.reproducible and self.rollout.oversample != 1.0:", "        if False:",
  U + "test_reproducible_refuses_oversampling_and_is_read"),
 ("reproducible rows compare the reward loosely", "tandem/orchestrator/reproducibility.py",
  "            if not same:", "            if not same and key != \"reward_mean\":",
  U + "test_row_differences_skip_times_and_the_queue_but_not_learning"),
]
