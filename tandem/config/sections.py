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
    """sync: rollout, then train, then sync weights. async: the rollout of step k+1 overlaps training on step k, bounded by rollout.staleness.max."""
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
    colocate: bool | Literal["auto"] = "auto"
    """Trainer and engines share the same GPU(s) (sync mode only): the engines hand their weights and KV cache back (SGLang's release/resume_memory_occupation, on engines launched with its memory saver) while the trainer trains, and the trainer moves its optimizer state and weights to host memory while the engines generate. auto: on a box with exactly one GPU that the trainer and the engines would use, colocated sync mode when the memory plan says it fits (said at start-up; run.mode is set to sync), else off. true / false: always / never."""
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
    num_experts: int = Field(0, ge=0, le=1024)
    """Routed experts per MoE layer: above 0 the tiny model is a Qwen3-MoE (transformers' Qwen3MoeForCausalLM: a top-k router and num_experts expert MLPs, no shared experts); 0 = dense Qwen3."""
    num_experts_per_tok: int = Field(2, ge=1)
    """Experts each token is routed to (top-k) in the tiny MoE model."""
    moe_intermediate_size: int = Field(64, ge=1)
    """MLP width of each expert of the tiny MoE model."""
    decoder_sparse_step: int = Field(1, ge=1)
    """Every this-many-th layer is an MoE layer (Qwen3-MoE's decoder_sparse_step); the others are dense MLPs of intermediate_size."""
    norm_topk_prob: bool = True
    """Renormalise the chosen experts' router probabilities to sum to 1 (Qwen3-MoE's norm_topk_prob)."""
    router_init_std: float = Field(0.02, gt=0.0)
    """Standard deviation of the tiny MoE router's random weights: a small value gives near-tied router logits, where an engine in bfloat16 and an fp32 trainer pick different experts (what routing replay corrects)."""

    @model_validator(mode="after")
    def _experts_per_token_fit_the_experts(self) -> TinyModelConfig:
        if self.num_experts and self.num_experts_per_tok > self.num_experts:
            raise rule_broken(f"model.tiny.num_experts_per_tok = {self.num_experts_per_tok} exceeds "
                              f"model.tiny.num_experts = {self.num_experts}")
        return self


class ModelConfig(Section):
    path: str = "tiny"
    """'tiny' builds a tiny Qwen3-architecture model and byte tokenizer locally (no download); otherwise an HF model id (e.g. Qwen/Qwen3-0.6B) or a local directory, loaded through transformers."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for trainer and engines."""
    trust_remote_code: bool = False
    """Passed to transformers when loading model.path."""
    tiny: TinyModelConfig = TinyModelConfig()
    """Shape of the locally built tiny model (used when path = 'tiny')."""


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
    """How often each engine's load (SGLang's /v1/loads) is sampled into queue.jsonl."""
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
