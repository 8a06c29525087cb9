"""The sections of the config tree that every run uses, one pydantic model per config.toml table.

Every field carries a docstring, which is what `python train.py --help` prints and what
scripts/write_config_toml.py writes into config.toml. Ranges are declared on the fields
(`Field(ge=..)`), so pydantic names the key and the bound; a rule that ties several keys
of one section together is a model validator named after the rule. The engine and router
sections are in tandem.config.engine_sections, the coding-agent sections in
tandem.config.agent_sections; the root, and the rules across sections, in tandem.config.schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tandem.config.base import DecayRate, Section, rule_broken


# --------------------------------------------------------------------------- run
class RunConfig(Section):
    mode: Literal["sync", "async"] = "async"
    """sync: rollout, then train, then sync weights. async: the rollout of step k+1 overlaps training on step k, bounded by rollout.max_staleness."""
    steps: int = Field(200, ge=1)
    """Number of optimizer steps (trainer steps) to run."""
    run_dir: str = "runs/default"
    """Directory for logs, weights, metrics and endpoints.json of this run. One that already holds a run is refused (nothing in it is touched) unless `--resume` continues that run or `--overwrite` replaces it."""
    seed: int = Field(0, ge=0)
    """Seed for data order, sampling and model init."""
    cpu_split: Literal["phase", "even"] = "phase"
    """How a CPU-only run shares the cores (torch trainer, embedded engines): phase = the side that computes gets them (sync: engines while they generate, the trainer while it trains; async: split by measured demand while both run); even = a fixed, equal share per child."""
    cache_dir: str = ""
    """Where locally built assets (the tiny model) are cached across runs. Empty: the user's cache directory ($XDG_CACHE_HOME/tandem, else ~/.cache/tandem), wherever tandem is run from."""
    keep_rollouts: int | Literal["all"] = 5
    """Per-step files kept in the run dir (rollouts/step_N.json, the samples each step trained on, and trainer/step_N.json): the last N steps', older ones are removed as the run goes; "all" keeps every one (at 32k-token agent trajectories that is gigabytes per hundred steps)."""
    max_failed_fraction: float = Field(0.5, gt=0.0, le=1.0)
    """Stop the run (exit 1, after a checkpoint it can resume from) when more than this fraction of the samples of the last run.failed_window_steps steps failed: a reward that raised or timed out, or a rollout that raised. A step whose every sample failed stops it at once; 1 = only that."""
    failed_window_steps: int = Field(5, ge=1)
    """The window of steps run.max_failed_fraction is measured over."""

    @field_validator("keep_rollouts")
    @classmethod
    def _keeps_at_least_one_step(cls, keep: int | str) -> int | str:
        if keep != "all" and keep < 1:  # the trainer reads the newest file after the orchestrator wrote it
            raise ValueError("must be at least 1, or 'all'")
        return keep
    rehearse: bool = False
    """Rehearse this config on this machine (`--rehearse`): a few steps with a tiny model of the same family, the
    Megatron trainer on CPU ranks at the configured TP/PP/DP and embedded engines, then a report of what was
    substituted, what ran for real, what stays unverified and the logprob agreement after every sync."""


# --------------------------------------------------------------------------- model
class TinyModelConfig(Section):
    hidden_size: int = Field(64, ge=1)
    """Hidden size of the locally built tiny Qwen3 model."""
    num_layers: int = Field(2, ge=1)
    """Number of transformer layers of the tiny model."""
    num_heads: int = Field(4, ge=1)
    """Attention heads of the tiny model."""
    num_kv_heads: int = Field(2, ge=1)
    """Key/value heads (GQA) of the tiny model."""
    head_dim: int = Field(16, ge=1)
    """Per-head dimension of the tiny model."""
    intermediate_size: int = Field(256, ge=1)
    """MLP width of the tiny model."""
    max_position_embeddings: int = Field(4096, ge=1)
    """Longest context of the tiny model."""
    tie_word_embeddings: bool = True
    """Share the input embedding with the output layer (Qwen3-4B does, Qwen3-14B does not); a rehearsal
    copies the real model's choice."""
    tool_tokens: int = Field(0, ge=0, le=64)
    """Tokens <|tool_0|>... added to the tiny tokenizer, one per tool of an environment: the tiny model calls tool k by emitting one token (environment.tool_parser = 'tool_tokens'), which a random model can find by chance; 0 = none."""


class ModelConfig(Section):
    path: str = "tiny"
    """'tiny' builds a tiny Qwen3-architecture model and byte tokenizer locally (no download); otherwise an HF model id (e.g. Qwen/Qwen3-0.6B) or a local directory, loaded through transformers."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for trainer and engines."""
    trust_remote_code: bool = False
    """Passed to transformers when loading model.path."""
    tiny: TinyModelConfig = TinyModelConfig()
    """Shape of the locally built tiny model (used when path = 'tiny')."""


# --------------------------------------------------------------------------- rollout
class RolloutConfig(Section):
    function: str = "tandem.rollout:single_turn"
    """Rollout plug-in, 'module:function' or 'path/to/file.py:function'; it turns one prompt row into a group of samples."""
    reward: str = "tandem.envs.echo:echo_reward"
    """Reward plug-in, 'module:function' or 'file.py:function'; it receives each sample with its whole dataset row (labels included). Not used with rollout.environment (the environment's reward() scores)."""
    environment: str = ""
    """A multi-turn environment class, 'module:Class' or 'file.py:Class' (tandem.env.Environment); its episodes run on the shared agent loop and its reward() scores them. Empty: rollout.function runs."""
    data_path: str = "data/echo/train.jsonl"
    """Local JSONL or parquet dataset, loaded with `datasets`."""
    prompt_key: str = "prompt"
    """Dataset field holding the prompt (a string, or a list of chat messages)."""
    apply_chat_template: bool = False
    """Wrap string prompts as a user message and apply the tokenizer's chat template."""
    prompts_per_step: int = Field(8, ge=1)
    """Groups (prompts) per training step."""
    samples_per_prompt: int = Field(16, ge=1)
    """G: samples drawn per prompt."""
    oversample: float = Field(1.0, ge=1.0)
    """Keep ceil(prompts_per_step * oversample) - prompts_per_step groups running beyond what the steps ahead need; each step trains on the first fresh groups to finish."""
    max_new_tokens: int = Field(8, ge=1)
    """Longest response per generation call."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (the trainer scores with the same temperature)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    top_k: int = Field(-1, ge=-1)
    """Top-k sampling; -1 disables it, else at least 1."""
    stop: list[str] = []
    """Stop strings."""
    concurrency: int = Field(256, ge=1)
    """Most generation requests in flight from the orchestrator at once."""
    group_request: bool = True
    """The default single-turn rollout asks for a group's G samples in one batched /generate (the prompt G times, SGLang's batch form): one round trip and one engine per group, logprobs kept per sample. false: G separate requests, which the router may spread over engines."""
    max_staleness: int = Field(1, ge=0)
    """Async mode: S, the most weight versions a trained-on sample may lag the trainer (see staleness_by). Sync mode forces 0."""
    staleness_by: Literal["oldest_token", "admission"] = "oldest_token"
    """What a sample's lag is measured from. oldest_token: step - the version of its oldest token must be <= S (a trajectory may span versions). admission: step - the version engines served when its group was admitted must be <= S (stricter: a group that queued through a sync counts as old)."""
    request_priority: Literal["admission", "age"] = "age"
    """Engine queue order (with engine.priority_scheduling): age = strictly the oldest trajectory first (its admission order; measured faster on the reference profile, see the README); admission = groups admitted under older weights first (ties by arrival)."""
    admission_hold: bool = False
    """Admit no new group while a running group must make the next step or become too stale (its tail gets the engines)."""
    partial_rollout: Literal["drain", "abort", "continue"] = "continue"
    """What in-flight rollouts do at a weight update: drain (finish, then sync), abort (abort and regenerate the group), continue (keep decoding on the new weights)."""
    request_timeout_s: float = Field(300.0, gt=0)
    """Timeout of one generation request."""
    reward_timeout_s: float = Field(30.0, gt=0)
    """A reward call that runs longer scores 0 with reason 'timeout'."""
    shuffle: bool = True
    """Shuffle the dataset each epoch (seeded by run.seed)."""

    @field_validator("top_k")
    @classmethod
    def _top_k_is_off_or_positive(cls, top_k: int) -> int:
        # The engines reject top_k = 0 per request; say so once, at load time.
        if top_k == 0:
            raise ValueError("must be -1 (off) or at least 1")
        return top_k


# --------------------------------------------------------------------------- trainer
class LossConfig(Section):
    eps_clip: float = Field(0.2, ge=0.0, le=1.0)
    """PPO lower clip: ratio is clipped at 1 - eps_clip."""
    eps_clip_high: float = Field(0.28, ge=0.0)
    """PPO upper clip: ratio is clipped at 1 + eps_clip_high (asymmetric, DAPO-style)."""
    dual_clip_c: float | None = Field(None, gt=1.0)
    """Dual-clip constant c > 1 for negative advantages; None disables it."""
    use_std_norm: bool = True
    """GRPO: divide group-centred rewards by the group std (turned off automatically when G = 1)."""
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


class SimTrainerConfig(Section):
    train_time_s: float = Field(400.0, ge=0.0)
    """Simulated train time per step, in (unscaled) seconds."""
    weight_size_gb: float = Field(0.01, ge=0.0)
    """Size of the weight version the sim trainer publishes each step."""


class MegatronConfig(Section):
    tensor_parallel: int = Field(2, ge=1)
    """Megatron tensor-parallel size."""
    pipeline_parallel: int = Field(1, ge=1)
    """Megatron pipeline-parallel size."""
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
    def _memory_features_run_on_this_stack(self) -> MegatronConfig:
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


class TrainerConfig(Section):
    backend: Literal["torch", "megatron", "sim"] = "torch"
    """torch: an HF causal LM trained with plain torch (CPU or one GPU). megatron: megatron-core across trainer.gpus. sim: a timed stand-in for sizing studies."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the torch trainer runs."""
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
    megatron: MegatronConfig = MegatronConfig()
    """Settings of the megatron backend."""
    sim: SimTrainerConfig = SimTrainerConfig()
    """Settings of the sim backend."""
    lora: LoraConfig = LoraConfig()
    """LoRA: train low-rank adapters instead of the whole model (off while rank = 0)."""

    @model_validator(mode="after")
    def _megatron_gpus_fill_whole_model_replicas(self) -> TrainerConfig:
        # Each data-parallel rank holds one whole tensor x pipeline model; a remainder GPU
        # would have no rank to run.
        tp, pp = self.megatron.tensor_parallel, self.megatron.pipeline_parallel
        if self.backend == "megatron" and self.gpus % (tp * pp):
            raise rule_broken(f"trainer.gpus ({self.gpus}) must be a multiple of trainer.megatron.tensor_parallel"
                              f" x pipeline_parallel ({tp} x {pp} = {tp * pp})")
        return self


# --------------------------------------------------------------------------- sync, logging, faults
def is_remote_url(url: str) -> bool:
    """A sync.url that processes on other hosts read through fsspec (s3://, gs://, ...), not a path."""
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    return protocol not in ("file", "local")


class SyncConfig(Section):
    every_k_steps: int = Field(1, ge=1)
    """Publish weights and reload engines after every k optimizer steps."""
    keep_last: int = Field(3, ge=1)
    """Weight versions kept on disk (and in the store); older ones are pruned."""
    url: str = ""
    """Where weight versions are published. Empty: <run_dir>/weights. A path: that directory, e.g. a shared filesystem that engine hosts mount at the same path. An fsspec URL (s3://bucket/prefix, gs://...): uploaded there, manifest last, for a weight agent on each engine host."""
    storage_options: dict[str, Any] = {}
    """fsspec options for sync.url (e.g. {endpoint_url = "http://minio:9000"}); credentials come from the environment (AWS_ACCESS_KEY_ID, ...)."""
    encoding: Literal["full", "delta"] = "full"
    """full: every version is a whole HF checkpoint. delta: only the elements whose bits changed since the last version, zstd-compressed, with a checksum of every tensor; whoever loads it (the weight agent, or the orchestrator on one node) applies it to a local copy of the previous version. Pays off in bf16, where most weights do not change per step."""
    anchor_interval: int = Field(20, ge=1)
    """sync.encoding = 'delta': publish a whole checkpoint (an anchor) every this many versions, so a host that missed a delta rebuilds from the newest anchor."""
    reload_by: Literal["auto", "orchestrator", "agent"] = "auto"
    """Who has engines load a version. orchestrator: it sends /update_weights_from_disk with the published path (engines must see that path). agent: a weight agent beside each engine (`python -m tandem.weights agent`) fetches and loads it; the orchestrator waits until every engine reports the version. auto: agent when sync.url is remote, else orchestrator."""
    reload_timeout_s: float = Field(300.0, gt=0)
    """Timeout of one engine's /update_weights_from_disk."""
    trainer_timeout_s: float = Field(1800.0, gt=0)
    """How long the orchestrator waits for one training step before stopping the run."""


class WandbConfig(Section):
    mode: Literal["disabled", "online", "offline"] = "disabled"
    """Weights & Biases: online streams to the W&B server (needs `wandb login` or WANDB_API_KEY); offline writes the run under <run_dir>/wandb for a later `wandb sync`, with no network; disabled logs nothing (wandb need not be installed). Metrics go under the same prefixes as TensorBoard's (rollout/, train/, sync/, engine/, env/), with the run's config and a table of sample trajectories."""
    project: str = "tandem"
    """The W&B project the run is logged to."""
    entity: str = ""
    """The W&B entity (user or team); empty: the logged-in user's default."""
    table_samples: int = Field(4, ge=0)
    """Trajectories of each step logged to the rollout/trajectories table (prompt, response, reward, end reason, versions); 0 logs no table."""


class LoggingConfig(Section):
    live: Literal["auto", "on", "off"] = "auto"
    """Rich live view in the terminal; auto shows it when stdout is a TTY, else prints one line per step."""
    tensorboard: bool = True
    """Write TensorBoard event files under <run_dir>/tensorboard."""
    queue_sample_interval_s: float = Field(0.5, gt=0)
    """How often each engine's /get_load is sampled into queue.jsonl."""
    verbose: bool = False
    """Let other libraries print their progress bars and warnings (datasets, safetensors, transformers, uvicorn's per-connection notices) in the terminal and the children's logs (`--verbose`); off, tandem says what is loading itself."""
    wandb: WandbConfig = WandbConfig()
    """Weights & Biases logging ([logging.wandb])."""


class CheckpointConfig(Section):
    interval: int = Field(10, ge=0)
    """Save a checkpoint every this many steps (and after the last); 0 disables checkpoints."""
    keep_last: int = Field(2, ge=1)
    """Complete checkpoints kept on disk; older ones are removed."""


class FaultsConfig(Section):
    max_engine_restarts: int = Field(3, ge=0)
    """Engine crashes (or hangs) the run survives by restarting the engine; one more stops the run. 0: any engine death stops the run."""
    engine_check_interval_s: float = Field(1.0, gt=0)
    """How often the engine doctor checks each engine's process and /health."""
    engine_unresponsive_s: float = Field(10.0, gt=0)
    """An engine whose /health has not answered for this long is declared hung, killed and replaced."""
    stall_warning_s: float = Field(600.0, gt=0)
    """The watchdog reports (with what is waiting on what) when no step has finished for this long."""
