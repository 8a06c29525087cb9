"""What a step generates, from what, and how: [data], [rollout] and its sub-tables.

[rollout] is split by concern: the plug-ins and the batch shape at its top, then
[rollout.sampling] (what each request asks the engine for), [rollout.client] (the HTTP client
to the router) and [rollout.staleness] (how far rollouts may run ahead of the trainer).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from tandem.config.base import Section, rule_broken


class DataConfig(Section):
    path: str = "data/echo/train.jsonl"
    """Local JSONL or parquet dataset, loaded with `datasets`."""
    prompt_key: str = "prompt"
    """Dataset field holding the prompt (a string, or a list of chat messages)."""
    apply_chat_template: bool = False
    """Wrap string prompts as a user message and apply the tokenizer's chat template."""
    shuffle: bool = True
    """Shuffle the dataset each epoch (seeded by run.seed)."""


class SamplingConfig(Section):
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

    @field_validator("top_k")
    @classmethod
    def _top_k_is_off_or_positive(cls, top_k: int) -> int:
        # The engines reject top_k = 0 per request; say so once, at load time.
        if top_k == 0:
            raise ValueError("must be -1 (off) or at least 1")
        return top_k


class ClientConfig(Section):
    concurrency: int = Field(256, ge=1)
    """Most generation requests in flight from the orchestrator at once."""
    group_request: bool = True
    """The default single-turn rollout asks for a group's G samples in one batched /generate (the prompt G times, SGLang's batch form): one round trip and one engine per group, logprobs kept per sample. false: G separate requests, which the router may spread over engines."""
    request_timeout_s: float = Field(300.0, gt=0)
    """Timeout of one generation request."""


class StalenessConfig(Section):
    max: int = Field(1, ge=0)
    """Async mode: S, the most weight versions a trained-on sample may lag the trainer (see measured_by). Sync mode forces 0."""
    measured_by: Literal["oldest_token", "admission"] = "oldest_token"
    """What a sample's lag is measured from. oldest_token: step - the version of its oldest token must be <= S (a trajectory may span versions). admission: step - the version engines served when its group was admitted must be <= S (stricter: a group that queued through a sync counts as old)."""
    request_priority: Literal["admission", "age"] = "age"
    """Engine queue order (with engine.priority_scheduling): age = strictly the oldest trajectory first (its admission order; measured faster on the reference profile, see docs/performance.md); admission = groups admitted under older weights first (ties by arrival)."""
    admission_hold: bool = False
    """Admit no new group while a running group must make the next step or become too stale (its tail gets the engines)."""
    partial_rollout: Literal["drain", "abort", "continue"] = "continue"
    """What in-flight rollouts do at a weight update: drain (finish, then sync), abort (abort and regenerate the group), continue (keep decoding on the new weights)."""


class SignalConfig(Section):
    overlong: Literal["train", "mask", "penalty"] = "train"
    """Samples the engine cut at rollout.sampling.max_new_tokens (finish_reason "length"): train = as any other; mask = no loss weight (their rewards still count in their group's statistics; DAPO's overlong filtering); penalty = DAPO's soft overlong punishment, added to the reward of a response longer than max_new_tokens - overlong_buffer_tokens model tokens, growing linearly to -overlong_penalty at max_new_tokens."""
    overlong_buffer_tokens: int = Field(0, ge=0)
    """With overlong = "penalty": L_cache, the length of the band below rollout.sampling.max_new_tokens where the penalty grows (1 .. max_new_tokens)."""
    overlong_penalty: float = Field(1.0, gt=0.0)
    """With overlong = "penalty": the penalty a response of max_new_tokens model tokens gets (DAPO: 1)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: a group whose valid rewards are all equal (zero variance: no GRPO signal) is dropped as it finishes and another prompt is admitted in its place, up to max_refills_per_step such groups per step."""
    max_refills_per_step: int = Field(8, ge=0)
    """With dynamic_sampling: how many zero-variance groups one step may drop and replace. Past it the step trains on fewer groups: each further zero-variance group gives up its slot, down to one group (the last slot takes the next group to finish, whatever its rewards)."""

    @model_validator(mode="after")
    def _penalty_has_a_buffer(self) -> SignalConfig:
        if self.overlong == "penalty" and self.overlong_buffer_tokens < 1:
            raise rule_broken("rollout.signal.overlong = \"penalty\" needs rollout.signal.overlong_buffer_tokens >= 1 "
                              "(the band below max_new_tokens where the penalty grows)")
        return self


class RolloutConfig(Section):
    function: str = "tandem.rollout:single_turn"
    """Rollout plug-in, 'module:function' or 'path/to/file.py:function'; it turns one prompt row into a group of samples. Not used with environment.name (the environment's episodes run on the shared agent loop)."""
    reward: str = "tandem.envs.echo:echo_reward"
    """Reward plug-in, 'module:function' or 'file.py:function'; it receives each sample with its whole dataset row (labels included). Not used with environment.name (the environment's reward() scores)."""
    prompts_per_step: int = Field(8, ge=1)
    """Groups (prompts) per training step."""
    samples_per_prompt: int = Field(16, ge=1)
    """G: samples drawn per prompt."""
    oversample: float = Field(1.0, ge=1.0)
    """Keep ceil(prompts_per_step * oversample) - prompts_per_step groups running beyond what the steps ahead need; each step trains on the first fresh groups to finish."""
    reward_timeout_s: float = Field(30.0, gt=0)
    """A reward call that runs longer scores 0 with reason 'timeout'."""
    harness: str = ""
    """An outside agent run in process, 'file.py:function' or 'module:function': `async def run(client, row)` gets an openai.AsyncOpenAI client whose base URL and key reach a per-trajectory recording endpoint, and returns a reward, (reward, info), or None to leave scoring to rollout.reward. Every call's tokens are captured exactly (docs/harness.md). Empty: rollout.function runs."""
    harness_command: str = ""
    """An outside agent run as a program, one process per trajectory (split like a shell command, run from the working directory): OPENAI_BASE_URL and OPENAI_API_KEY in its environment, the dataset row as JSON on stdin, its reward as a JSON line on stdout ({"reward": 1.0, "info": {...}} or a number), else scored by rollout.reward."""
    harness_timeout_s: float = Field(600.0, gt=0)
    """Wall-clock limit of one harness trajectory; past it the function is cancelled or the program killed with its process group, and the trajectory fails with reason 'timeout'."""
    harness_tool_parser: Literal["auto", "hermes", "tool_tokens"] = "auto"
    """How the harness endpoint reads tool calls from a completion into OpenAI `tool_calls`: hermes = `<tool_call>{json}</tool_call>`; tool_tokens = the tiny model's one token per tool; auto = tool_tokens when the tokenizer has them, else hermes."""
    sampling: SamplingConfig = SamplingConfig()
    """What each generation request asks the engines for."""
    client: ClientConfig = ClientConfig()
    """The HTTP client that sends generation requests to the router."""
    staleness: StalenessConfig = StalenessConfig()
    """How far rollouts may run ahead of the trainer (async mode) and what happens to them at a weight update."""
    signal: SignalConfig = SignalConfig()
    """Which samples and groups carry a learning signal: truncated samples, zero-variance groups (DAPO)."""

    @model_validator(mode="after")
    def _overlong_buffer_fits_the_response(self) -> RolloutConfig:
        buffer, limit = self.signal.overlong_buffer_tokens, self.sampling.max_new_tokens
        if self.signal.overlong == "penalty" and buffer > limit:
            raise rule_broken(f"rollout.signal.overlong_buffer_tokens ({buffer}) must be at most "
                              f"rollout.sampling.max_new_tokens ({limit})")
        return self
