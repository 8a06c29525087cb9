"""A trainer setting (the knobs the planner reads from the config and searches over), and the layouts
tandem's trainers cannot build, refused naming the key (see tandem.lab.plan.planner)."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.lab.plan.shape import ModelShape, PlanError


@dataclass(frozen=True)
class TrainerSetting:
    backend: str
    gpus: int
    tp: int
    pp: int
    micro_batch: int
    recompute: bool
    seq_len: int
    bf16: bool = True
    distributed_optimizer: bool = True
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    reference_model: bool = False
    logit_chunk: int = 0
    """trainer.logprob_chunk_tokens (0: the whole micro-batch's logits at once)."""
    max_tokens: int = 0
    """trainer.max_tokens_per_micro_batch (0: padded micro-batches of micro_batch samples)."""
    offload_fraction: float = 0.0
    """Of the optimizer, the fraction on the CPU (0: not offloaded)."""
    precision_aware: bool = False
    grad_bytes: int = 4
    ep: int = 1
    """trainer.megatron.expert_parallel: each rank holds num_experts / ep experts of every MoE layer."""

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp) if self.backend == "megatron" else 1

    @property
    def expert_dp(self) -> int:
        """The expert-data-parallel size (expert TP 1): the ranks that hold the same experts, over which
        the distributed optimizer shards their state."""
        return self.gpus // (self.ep * self.pp) if self.backend == "megatron" else 1

    @property
    def tokens(self) -> int:
        """Tokens of the largest micro-batch: a packed one holds up to its budget, or one longer sample."""
        return max(self.max_tokens, self.seq_len) if self.max_tokens else self.micro_batch * self.seq_len


# --------------------------------------------------------------------------- layouts refused
def check_layout(shape: ModelShape, s: TrainerSetting) -> None:
    """Refuse a layout tandem's Megatron trainer would refuse (tandem.trainer.megatron_convert)."""
    for what, n in (("num_attention_heads", shape.heads), ("num_key_value_heads", shape.kv_heads),
                    ("intermediate_size", shape.ffn)):
        if n % s.tp:
            raise PlanError(f"trainer.megatron.tensor_parallel = {s.tp} does not divide the model's {what} ({n})")
    if shape.layers % s.pp:
        raise PlanError(f"trainer.megatron.pipeline_parallel = {s.pp} does not divide the model's "
                        f"num_hidden_layers ({shape.layers})")
    if s.backend == "megatron" and s.gpus % (s.tp * s.pp):
        raise PlanError(f"trainer.gpus ({s.gpus}) is not a multiple of tensor_parallel x pipeline_parallel "
                        f"({s.tp} x {s.pp})")
    if shape.experts and s.lora_rank:
        raise PlanError(f"trainer.lora.rank = {s.lora_rank} with a mixture-of-experts model: tandem trains no "
                        "adapters on experts; set trainer.lora.rank = 0")
    if s.backend == "megatron":
        check_expert_layout(shape, s)


def check_expert_layout(shape: ModelShape, s: TrainerSetting) -> None:
    """Refuse an expert-parallel layout tandem's Megatron trainer cannot build (module docstring)."""
    if not shape.experts:
        if s.ep > 1:
            raise PlanError(f"trainer.megatron.expert_parallel = {s.ep} with a dense model (no experts): set it to 1")
        return
    if s.tp > 1:
        raise PlanError(f"trainer.megatron.tensor_parallel = {s.tp} with a mixture-of-experts model: megatron-core "
                        "0.16.1 trains MoE layers at TP > 1 only with sequence parallelism, which tandem does not "
                        "use; set tensor_parallel = 1 and split the experts with trainer.megatron.expert_parallel")
    if shape.experts % s.ep:
        raise PlanError(f"trainer.megatron.expert_parallel = {s.ep} does not divide the model's num_experts "
                        f"({shape.experts})")
    if s.dp % s.ep:
        raise PlanError(f"trainer.megatron.expert_parallel = {s.ep} does not divide the data-parallel size "
                        f"(trainer.gpus / pipeline_parallel = {s.dp})")
