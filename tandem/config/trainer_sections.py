"""The trainer section of the config tree: [trainer], by backend.

The keys every trainer reads ([trainer], [trainer.loss], [trainer.lora]) and one sub-table per
backend that exists only for it ([trainer.megatron], [trainer.sim]); the torch trainer has none.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from tandem.config.base import DecayRate, Section, by_backend, rule_broken


class LossConfig(Section):
    objective: Literal["ppo", "gspo", "cispo"] = "ppo"
    """Policy-gradient objective: ppo = the PPO clip per token; gspo = GSPO, the PPO clip on each sample's sequence ratio exp(mean of its token log-ratios), so whole samples are kept or clipped (its paper clips at eps_clip = 3e-4, eps_clip_high = 4e-4); cispo = CISPO, -sg(clip(ratio)) * A * logp per token, which clips the importance weight but keeps every token's gradient (its paper sets only an upper clip: a large eps_clip such as 1.0). docs/algorithms.md has the equations."""
    eps_clip: float = Field(0.2, ge=0.0, le=1.0)
    """PPO lower clip: ratio is clipped at 1 - eps_clip."""
    eps_clip_high: float = Field(0.28, ge=0.0)
    """PPO upper clip: ratio is clipped at 1 + eps_clip_high (asymmetric, DAPO-style)."""
    dual_clip_c: float | None = Field(None, gt=1.0)
    """Dual-clip constant c > 1 for negative advantages; None disables it."""
    use_std_norm: bool = True
    """GRPO: divide group-centred rewards by the group std (turned off automatically when G = 1); with advantage_baseline = "batch", by the batch std."""
    advantage_baseline: Literal["group", "batch"] = "group"
    """What each reward is measured against: group = its group's mean (GRPO); batch = the mean over every kept trajectory of the step, and with use_std_norm its std (REINFORCE with a batch baseline: the global-batch normalization of REINFORCE++, OpenRLHF's advantage_estimator = "reinforce", verl's reinforce_plus_plus). A group whose rewards are all equal gets advantage 0 under group, so once a policy acts the same on every sample of each prompt no step has a gradient left (configs/counter.toml fell into this); under batch such a group still scores above or below the other prompts. Batch makes prompts of different difficulty carry signed advantages of their own, and leaves zero-variance groups a signal (so rollout.signal.dynamic_sampling drops groups that would still teach)."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL penalty to the frozen reference model; 0 disables the reference."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator: k1 = x, k2 = x^2/2, k3 = exp(-x) - 1 + x with x = logp - logp_ref."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always reported)."""
    aggregation: Literal["seq_mean_token_mean", "token_mean"] = "seq_mean_token_mean"
    """Loss aggregation: mean over samples of each sample's token mean, or one mean over all tokens."""
    tis: bool = False
    """Truncated importance sampling on exp(logp_old - logp_rollout) to correct engine/trainer mismatch."""
    tis_clip_high: float = Field(2.0, gt=0.0)
    """Upper clamp of the TIS weight."""


class SimTrainerSettings(Section):
    train_time_s: float = Field(400.0, ge=0.0)
    """Simulated train time per step, in (unscaled) seconds."""
    weight_size_gb: float = Field(0.01, ge=0.0)
    """Size of the weight version the sim trainer publishes each step."""


class MegatronSettings(Section):
    tensor_parallel: int = Field(2, ge=1)
    """Megatron tensor-parallel size."""
    pipeline_parallel: int = Field(1, ge=1)
    """Megatron pipeline-parallel size."""
    expert_parallel: int = Field(1, ge=1)
    """Expert-parallel size for mixture-of-experts models: each MoE layer's experts are split over this many ranks of the data-parallel dimension (each holds num_experts / expert_parallel of them, whole), and tokens travel to their experts and back by all-to-all. Must divide the number of experts and the data-parallel size; 1 for dense models."""
    use_distributed_optimizer: bool = True
    """Shard optimizer state across data-parallel ranks."""
    bf16: bool = True
    """Train in bf16 with fp32 master weights."""
    recompute: bool = False
    """Recompute each layer's activations in the backward pass (Megatron full recompute): far less memory for long contexts, about a third more compute."""
    optimizer_cpu_offload: bool = False
    """Keep the optimizer on the CPU: megatron-core's HybridDeviceOptimizer holds the fp32 master copy, Adam's moments and the update of trainer.megatron.optimizer_offload_fraction of the parameters in pinned host memory (16 bytes per offloaded parameter per rank) and runs torch's AdamW there; gradients go to the host and updated weights come back every step. Needs use_distributed_optimizer and precision_aware_optimizer."""
    optimizer_offload_fraction: float = Field(1.0, ge=0.0, le=1.0)
    """With optimizer_cpu_offload: the fraction of the parameters (by count) whose optimizer state and update live on the CPU; the rest stay on the GPU."""
    overlap_cpu_optimizer_d2h_h2d: bool = True
    """With optimizer_cpu_offload: copy gradients to the host and weights back on their own CUDA streams, overlapped with the CPU update (one CPU optimizer per parameter)."""
    precision_aware_optimizer: bool = False
    """megatron-core's precision-aware optimizer. On this stack (no Transformer Engine) it runs only with optimizer_cpu_offload, and the two go together: it drops the distributed optimizer's fp32 master copy from the GPU (the HybridDeviceOptimizer keeps its own, on the CPU for the offloaded part), 4 bytes per offloaded parameter less on the GPU, and without it megatron-core 0.16.1 cannot resume an offloaded optimizer from a checkpoint. Needs use_distributed_optimizer."""
    main_grads_dtype: Literal["float32", "bfloat16"] = "float32"
    """Dtype of the gradient buffer gradients accumulate and are reduced in (megatron's main grads): bfloat16 halves it (2 bytes per parameter) at the cost of accumulation precision. bfloat16 needs precision_aware_optimizer (megatron-core's rule)."""
    exp_avg_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of Adam's first moment. Only float32 runs on this stack: megatron-core 0.16.1 passes lower precision to Transformer Engine's FusedAdam alone (torch's AdamW has no such argument, and the CPU-offload path keeps torch AdamW's fp32 moments)."""
    exp_avg_sq_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of Adam's second moment; only float32 runs on this stack (see exp_avg_dtype)."""
    context_parallel: int = Field(1, ge=1)
    """Context-parallel size. Only 1 runs on this stack: megatron-core 0.16.1 implements context-parallel attention in Transformer Engine alone (its local DotProductAttention asserts context_parallel_size == 1)."""

    @model_validator(mode="after")
    def _memory_features_run_on_this_stack(self) -> MegatronSettings:
        # tandem's Megatron stack is megatron-core's local layers without Transformer Engine; what
        # only TE provides is refused here by name instead of failing deep inside megatron-core.
        needs_te = [f"{k} = {getattr(self, k)!r}" for k in ("exp_avg_dtype", "exp_avg_sq_dtype")
                    if getattr(self, k) != "float32"]
        if needs_te:
            raise rule_broken(f"trainer.megatron.{' and '.join(needs_te)} cannot run on this stack: megatron-core 0.16.1 "
                              "takes lower-precision Adam moments only through Transformer Engine's FusedAdam, which "
                              "tandem's Megatron stack does not use (torch's AdamW keeps them in float32)")
        if self.context_parallel > 1:
            raise rule_broken(f"trainer.megatron.context_parallel = {self.context_parallel} cannot run on this stack: "
                              "megatron-core 0.16.1 implements context-parallel attention only in Transformer Engine "
                              "(its local DotProductAttention asserts context_parallel_size == 1)")
        if self.precision_aware_optimizer and not self.optimizer_cpu_offload:
            raise rule_broken("trainer.megatron.precision_aware_optimizer needs trainer.megatron.optimizer_cpu_offload on "
                              "this stack: without offload megatron-core 0.16.1 requires Transformer Engine's FusedAdam "
                              "for it (OptimizerConfig raises), with offload its HybridDeviceOptimizer takes that place")
        if self.optimizer_cpu_offload and not self.precision_aware_optimizer:
            raise rule_broken("trainer.megatron.optimizer_cpu_offload needs trainer.megatron.precision_aware_optimizer on "
                              "megatron-core 0.16.1: without it the distributed optimizer hands HybridDeviceOptimizer fp32 "
                              "main params, and resuming from a checkpoint fails (KeyError in its "
                              "_update_fp32_params_by_new_state)")
        if (self.optimizer_cpu_offload or self.precision_aware_optimizer) and not self.use_distributed_optimizer:
            raise rule_broken("trainer.megatron.optimizer_cpu_offload and precision_aware_optimizer need "
                              "trainer.megatron.use_distributed_optimizer = true")
        if self.main_grads_dtype != "float32" and not self.precision_aware_optimizer:
            raise rule_broken(f"trainer.megatron.main_grads_dtype = {self.main_grads_dtype!r} needs "
                              "trainer.megatron.precision_aware_optimizer (megatron-core keeps main grads in float32 "
                              "otherwise)")
        return self


class LoraConfig(Section):
    rank: int = Field(0, ge=0, le=1024)
    """LoRA rank r; 0 = off (full fine-tuning). On: only the adapters train, the optimizer holds only them, and
    each weight sync ships the adapter (adapter_model.safetensors) instead of the whole model."""
    alpha: float = Field(16.0, gt=0.0)
    """LoRA alpha: the adapter's output is scaled by alpha / rank."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input while training (peft's lora_dropout). The engines sample without it, so
    above 0 the training forward no longer scores tokens exactly as the engines did."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Linear layers that get an adapter, by module name (HF/peft names; also SGLang's --lora-target-modules)."""

    @field_validator("target_modules")
    @classmethod
    def _target_modules_are_plain_names(cls, names: list[str]) -> list[str]:
        if not names:
            raise ValueError("at least one target module is needed")
        bad = [n for n in names if not n or not n.replace("_", "").isalnum()]
        if bad:
            raise ValueError(f"{bad} are not module names (letters, digits and '_', e.g. 'q_proj')")
        if len(set(names)) != len(names):
            raise ValueError(f"{names} names a module twice")
        return names

    @property
    def enabled(self) -> bool:
        return self.rank > 0


class MoeConfig(Section):
    routing_replay: bool = False
    """Routing replay (R3): engines return the experts they routed every token to, per MoE layer (SGLang's --enable-return-routed-experts, return_routed_experts), and the training forward sends each token to those experts; the gates are still the router's softmax over all experts taken at the chosen ones, so the router keeps learning. Tokens without a record (a rollout plug-in that did not ask) keep the trainer's own routing. Also logs routing_agreement each step."""
    record_routing: bool = False
    """Engines return their routing and the trainer logs routing_agreement (the fraction of tokens whose recomputed top-k equals the engine's) without replaying it; routing_replay implies it."""

    @property
    def wants_routing(self) -> bool:
        """Engines are asked for the experts they routed each token to."""
        return self.routing_replay or self.record_routing


class TrainerCommon(Section):
    """The keys every trainer backend reads; each backend's own settings are its sub-table. A backend
    is one subclass here, named in TRAINER_BACKENDS below: its `implementation` is the one place that
    says which class trains (docs/architecture.md, "Adding a trainer backend")."""
    implementation: ClassVar[str]
    """'module:Class' of the TrainerBackend `python -m tandem.trainer` builds (tandem.registry loads it by name,
    so the core imports no backend)."""
    launch_command: ClassVar[str | None] = None
    """'module:function' (cfg, run_config) -> argv, for a backend started by its own launcher (torchrun)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the trainer runs (auto: cuda when GPUs exist)."""
    gpus: int = Field(4, ge=1)
    """GPUs given to the trainer on a GPU node (engines take the following ones)."""
    startup_timeout_s: float = Field(900.0, gt=0)
    """How long the trainer may take to load (model, optimizer, a checkpoint to resume) and write trainer/ready.json before the run is stopped; it loads while the engines do."""
    lr: float = Field(2e-3, gt=0.0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    betas: tuple[DecayRate, DecayRate] = (0.9, 0.99)
    """AdamW betas, each in [0, 1)."""
    grad_clip: float = Field(1.0, ge=0.0)
    """Clip the global gradient norm to this value (0 disables clipping)."""
    micro_batch_size: int = Field(16, ge=1)
    """Samples per forward/backward micro-batch (gradients accumulate); right-padded to the longest. Not used when max_tokens_per_micro_batch is set."""
    max_tokens_per_micro_batch: int = Field(0, ge=0)
    """Form micro-batches by token budget instead: samples packed end to end, without padding, up to this many tokens each (a longer sample gets one of its own), with block-diagonal attention. Per-token and per-sample loss means are those of the padded layout. 0: off (micro_batch_size samples, padded)."""
    logprob_chunk_tokens: int = Field(0, ge=0)
    """Compute the LM head, log-probs and entropy this many token positions at a time, each chunk's logits recomputed in the backward instead of kept, so a micro-batch's whole [tokens, vocab] logits never exist. 0: the whole micro-batch at once."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per training step; the batch is split into this many mini-batches."""
    loss: LossConfig = LossConfig()
    """Policy-loss settings shared by every trainer backend."""
    lora: LoraConfig = LoraConfig()
    """LoRA: train low-rank adapters instead of the whole model (off while rank = 0)."""
    moe: MoeConfig = MoeConfig()
    """Mixture-of-experts policies: routing replay and routing agreement."""


class TorchTrainerConfig(TrainerCommon):
    backend: Literal["torch"] = "torch"
    """An HF causal LM trained with plain torch (CPU or one GPU)."""
    implementation = "tandem.trainer.torch_backend:TorchTrainer"


class MegatronTrainerConfig(TrainerCommon):
    backend: Literal["megatron"] = "megatron"
    """megatron-core across trainer.gpus."""
    implementation = "tandem.trainer.megatron_backend:MegatronTrainer"
    launch_command = "tandem.trainer.megatron_backend:trainer_launch_command"
    megatron: MegatronSettings = MegatronSettings()
    """Settings of the megatron backend (only with trainer.backend = "megatron")."""

    @model_validator(mode="after")
    def _gpus_fill_whole_model_replicas(self) -> MegatronTrainerConfig:
        # Each data-parallel rank holds one whole tensor x pipeline model; a remainder GPU
        # would have no rank to run.
        tp, pp = self.megatron.tensor_parallel, self.megatron.pipeline_parallel
        if self.gpus % (tp * pp):
            raise rule_broken(f"trainer.gpus ({self.gpus}) must be a multiple of trainer.megatron.tensor_parallel"
                              f" x pipeline_parallel ({tp} x {pp} = {tp * pp})")
        ep = self.megatron.expert_parallel
        if (self.gpus // pp) % ep:  # the experts are split over the ranks of one pipeline stage
            raise rule_broken(f"trainer.megatron.expert_parallel ({ep}) must divide trainer.gpus / pipeline_parallel "
                              f"({self.gpus} / {pp} = {self.gpus // pp})")
        return self


class SimTrainerConfig(TrainerCommon):
    backend: Literal["sim"] = "sim"
    """A timed stand-in for sizing studies."""
    implementation = "tandem.lab.sim_trainer:SimTrainer"
    sim: SimTrainerSettings = SimTrainerSettings()
    """Settings of the sim backend (only with trainer.backend = "sim")."""


TRAINER_BACKENDS: dict[str, type[TrainerCommon]] = {"torch": TorchTrainerConfig, "megatron": MegatronTrainerConfig, "sim": SimTrainerConfig}
"""trainer.backend -> its config model, which names its implementation: the one table of trainer backends."""
TrainerConfig = by_backend("torch", TRAINER_BACKENDS)
"""[trainer]: the common keys, and the sub-table of trainer.backend's own settings."""
