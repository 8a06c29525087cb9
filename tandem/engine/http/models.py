"""Request bodies of SGLang's HTTP API, as pydantic models.

Every model accepts unknown fields: sglang-router adds its own (ignore_eos, no_stop_trim,
separate_reasoning, return_hidden_states, ...) and renames max_tokens to max_completion_tokens.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, BaseModel, ConfigDict


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class GenerateReqInput(_Open):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    return_logprob: bool | list[bool] | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    stream: bool = False
    priority: int | None = None
    lora_path: str | list[str | None] | None = None
    """SGLang: the name of a loaded LoRA adapter to run on (one, or one per prompt of a batch)."""
    return_routed_experts: bool = False
    """SGLang: answer meta_info["routed_experts"], the experts each token was routed to (MoE models)."""
    routed_experts_start_len: int = 0
    """SGLang: the first token position routed_experts covers, in [0, prompt tokens]."""


class LoadLoRAAdapterReqInput(_Open):
    lora_name: str
    lora_path: str
    pinned: bool = False


class UnloadLoRAAdapterReqInput(_Open):
    lora_name: str


class UpdateWeightFromDiskReqInput(_Open):
    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class ReleaseMemoryOccupationReqInput(_Open):
    tags: list[str] | None = None
    """SGLang's memory regions to release ("weights", "kv_cache", "cuda_graph"); none: all."""


class ResumeMemoryOccupationReqInput(_Open):
    tags: list[str] | None = None
    """The regions to take back; none: every released one."""


class SetCpuThreadsReqInput(_Open):
    """tandem's own (SGLang has no such route): the torch threads this engine computes with."""
    threads: int = Field(ge=1)


class PauseGenerationReqInput(_Open):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class ContinueGenerationReqInput(_Open):
    torch_empty_cache: bool = True
    """SGLang: empty the CUDA allocator's cache before generation resumes (nothing to do on a CPU)."""


class AbortReq(_Open):
    rid: str | None = ""
    abort_all: bool = False


class StreamOptions(_Open):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class OpenAISampling(_Open):
    """Sampling fields shared by /v1/completions and /v1/chat/completions (SGLang extensions included)."""

    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    rid: str | None = None


class CompletionRequest(OpenAISampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool = False


class ChatCompletionRequest(OpenAISampling):
    messages: list[dict[str, Any]]
    logprobs: bool = False
    top_logprobs: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
