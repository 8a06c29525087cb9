"""The `moe` set of scripts/mutate.py: mixture-of-experts policies and routing replay, one line each."""

NL = "\n"

M = "tests/test_moe.py::"
MOE = [  # mixture-of-experts policies: routing replay, the routed-experts forms, expert weights, the planner
 ("replay never replaces the router's experts", "tandem/trainer/routing_replay.py", "            if not self.replay:" + NL,
  "            if True:" + NL, M + "test_with_replay_every_token_uses_the_engines_experts_and_the_mismatch_falls"),
 ("replayed gates are the router's own weights", "tandem/trainer/routing_replay.py", "            return logits, gates.to(weights.dtype), chosen",
  "            return logits, weights, chosen", M + "test_replayed_gates_are_the_routers_probabilities_at_the_engines_experts"),
 ("replayed gates not renormalised", "tandem/trainer/routing_replay.py", '            if getattr(module, "norm_topk_prob", False):',
  "            if False:", M + "test_replayed_gates_are_the_routers_probabilities_at_the_engines_experts"),
 ("packed samples read each other's routing", "tandem/trainer/batching.py", "    return [(0, start) for start in starts]",
  "    return [(0, 0) for start in starts]", M + "test_packed_micro_batches_replay_the_same_experts"),
 ("engine records the padding's routing", "tandem/engine/batch_scheduler.py", "r.routed_chunks = [routed[i, L - len(seq):]]",
  "r.routed_chunks = [routed[i, :len(seq)]]", M + "test_engine_records_the_experts_an_hf_forward_routes_to"),
 ("routed_experts_start_len ignored", "tandem/engine/http/native.py", "np.concatenate(req.routed_chunks)[req.routed_experts_start_len:])",
  "np.concatenate(req.routed_chunks))", M + "test_engine_records_the_experts_an_hf_forward_routes_to"),
 ("gate and up swapped in checkpoint names", "tandem/moe.py", "                gate, up = t[e].chunk(2, dim=0)",
  "                up, gate = t[e].chunk(2, dim=0)", M + "test_expert_weights_convert_to_and_from_hf_checkpoint_names_bitwise"),
 ("a later turn's rows appended again", "tandem/moe.py", "    fresh = chunk[held.shape[0] - start:]", "    fresh = chunk",
  M + "test_multi_turn_sample_keeps_each_turns_rows_in_position_order"),
 ("the agent loop drops each turn's routing", "tandem/env/loop.py", '        self.sample.record_routing(out.get("meta_info") or {}, routed_from)',
  "        pass", M + "test_a_multi_turn_trajectory_carries_every_positions_routing"),
 ("later turns ask for the whole trajectory again", "tandem/env/loop.py", "            routed_from = self.sample.routed_rows",
  "            routed_from = 0", M + "test_a_multi_turn_trajectory_carries_every_positions_routing"),
 ("requests never ask for routing", "tandem/rollout/client.py", "        if self.routed_experts:", "        if False:",
  M + "test_client_asks_for_routing_straight_from_the_routers_engines"),
 ("trajectories not sticky to one engine", "tandem/rollout/direct.py", "        if routing_key is not None and routing_key in self._pinned:",
  "        if False:", M + "test_client_asks_for_routing_straight_from_the_routers_engines"),
 ("SGLang never records routing", "tandem/engine/sglang_launch.py", "    if not moe.wants_routing:", "    if True:",
  "tests/test_sglang_launch.py::test_routed_experts_flag_only_with_routing_replay_or_record"),
 ("every expert counted as active", "tandem/lab/plan/shape.py", "        experts = self.experts_per_token if active else self.experts",
  "        experts = self.experts", M + "test_planner_counts_total_and_active_parameters_of_moe_models"),
 ("MoE accepted with the Megatron trainer", "tandem/config/schema.py", '        if tiny_moe and self.trainer.backend == "megatron":',
  "        if False:", M + "test_moe_config_refused_where_it_does_not_run"),
]
