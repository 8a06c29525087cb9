"""The `memory` set of scripts/mutate.py: the flagship's memory features, one line each."""

NL = "\n"

T = "tests/test_torch_trainer.py::"
MM = "tests/test_megatron_memory.py::"
MEMORY = [  # the flagship's memory features: what makes them equal to the plain path, and what the planner counts
 ("chunked head keeps every chunk's logits", "tandem/losses.py",
  "parts.append(checkpoint(one, h, t, use_reentrant=False, preserve_rng_state=False) if recompute else one(h, t))",
  "parts.append(one(h, t))", "tests/test_losses.py::test_chunked_scores_never_keep_the_whole_logits_for_the_backward"),
 ("chunked entropy loses its gradient", "tandem/losses.py",
  "with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):", "with torch.set_grad_enabled(False):",
  "tests/test_losses.py::test_chunked_scores_equal_the_whole_logits"),
 ("packing overfills a micro-batch", "tandem/trainer/batching.py", "if free >= length[i]), None)", "if free >= 0), None)",
  T + "test_packing_by_token_budget_and_the_packed_layout"),
 ("packed positions run on across samples", "tandem/trainer/batching.py",
  "positions[0, offset:offset + n] = torch.arange(n)", "positions[0, offset:offset + n] = torch.arange(offset, offset + n)",
  T + "test_packed_micro_batches_and_the_chunked_head_give_the_padded_whole_head_numbers"),
 ("packed attention crosses samples (Megatron)", "tandem/trainer/megatron_model.py",
  "            if packed_seq_params is not None:", "            if False:",
  MM + "test_chunked_head_and_packed_micro_batches_equal_the_whole_head_on_padded_ones[tp1]"),
 ("the offload never reaches megatron-core (CPU path)", "tandem/trainer/megatron_model.py",
  "            if mcfg.optimizer_cpu_offload else None", "            if False else None",
  MM + "test_offloaded_optimizer_trains_like_the_on_device_one_and_resumes"),
 ("precision-aware without the offload accepted", "tandem/config/trainer_sections.py",
  "        if self.precision_aware_optimizer and not self.optimizer_cpu_offload:", "        if False:",
  MM + "test_the_config_refuses_by_name_what_this_stack_cannot_run"),
 ("planner: the offload saves nothing", "tandem/lab/plan/memory.py",
  "    offloaded = offload_fraction if offload_fraction > 0 else 0.0", "    offloaded = 0.0",
  "tests/test_plan.py::test_offloaded_optimizer_by_hand"),
 ("planner: the chunked head counted whole", "tandem/lab/plan/memory.py", "    if chunk <= 0:" + NL, "    if True:" + NL,
  "tests/test_plan.py::test_chunked_head_by_hand"),
 ("a rehearsal that does not fit exits 0", "tandem/lab/rehearse.py",
  "    if rehearsal.plan_fits is False:  # the run here worked", "    if False:  # the run here worked",
  "tests/test_rehearse.py::test_rehearsal_of_the_example_node_configs[4b-async-does-not-fit]"),
 ("LoRA TP: a column adapter's dh not all-reduced", "tandem/trainer/megatron_lora.py",
  "            return copy_to_tensor_model_parallel_region(h)", "            return h",
  "tests/test_megatron_lora.py::test_megatron_lora_matches_torch_peft[tp2]"),
]
