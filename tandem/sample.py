"""The unit of data that flows from rollout to trainer.

A sample is one token sequence: `prompt_ids` followed by `response_ids`. For multi-turn
rollouts the response holds the model's tokens *and* the observation/template tokens
between turns; `loss_mask` (1 = the model's own token) and `rollout_logprobs` (the
engine's logprob for that token, 0.0 where the mask is 0) are aligned with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tandem.moe import ROUTED_EXPERTS, decode_routed_experts, extend_routing


@dataclass
class Sample:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    weight_version: int = 0
    """Oldest weight version that produced any of this sample's tokens."""
    finish_reason: str = ""
    reward: float = 0.0
    reward_info: dict[str, Any] = field(default_factory=dict)
    advantage: float = 0.0
    excluded: str = ""
    """Why this sample has no loss weight ("" = trained on): its reward failed, its group kept fewer than
    two valid rewards, or it was truncated under rollout.signal.overlong = "mask". An excluded sample stays in
    the step's batch file (for inspection) and the trainer skips it (tandem.orchestrator.signal)."""
    group_id: int = 0
    """Index of the prompt group within its step."""
    prompt_index: int = -1
    """Position of the prompt row in the dataset."""
    response_text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    token_versions: list[int] = field(default_factory=list)
    """Per response token: the weight version that produced it (-1 where the mask is 0). A
    trajectory may span versions; empty when the plug-in did not say (then every model token
    counts as `weight_version`)."""
    routed_experts: dict[str, Any] = field(default_factory=dict)
    """The experts the engine routed token positions [0, rows) to, in every layer (tandem.moe.pack_routing:
    rows x (layers x top_k) small integers, base64); empty when the engines were not asked
    (trainer.moe). Positions past `rows` are routed by the trainer itself."""

    def append_model_tokens(self, ids: list[int], logprobs: list[float], version: int | None = None) -> None:
        """Tokens the policy generated: trained on, with the engine's logprobs and (when known) the
        weight version the engine reported for them."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} output ids but {len(logprobs)} logprobs")
        if version is not None or self.token_versions:
            self._pad_versions()
            self.token_versions.extend([self.weight_version if version is None else int(version)] * len(ids))
        self.response_ids.extend(ids)
        self.loss_mask.extend([1] * len(ids))
        self.rollout_logprobs.extend(logprobs)

    @property
    def routed_rows(self) -> int:
        """Token positions whose engine routing this sample holds (the next request asks from here)."""
        return int(self.routed_experts.get("rows", 0))

    def record_routing(self, meta: dict[str, Any], start: int) -> None:
        """Keep meta_info["routed_experts"] of the request just appended (asked from position `start`):
        it covers positions [start, len(tokens) - 1). Nothing when the engine sent none."""
        text = meta.get(ROUTED_EXPERTS)
        if not text:
            return
        chunk = decode_routed_experts(text, len(self.tokens) - 1 - start)
        self.routed_experts = extend_routing(self.routed_experts, chunk, start)

    def append_context_tokens(self, ids: list[int]) -> None:
        """Observation / chat-template tokens: part of the sequence, never trained on."""
        if self.token_versions:
            self.token_versions.extend([-1] * len(ids))
        self.response_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.rollout_logprobs.extend([0.0] * len(ids))

    def _pad_versions(self) -> None:
        # Tokens appended before the first version was known count as this sample's oldest.
        known = len(self.token_versions)
        self.token_versions.extend(self.weight_version if m else -1 for m in self.loss_mask[known:])

    def model_token_versions(self) -> list[int]:
        """The version of every trained-on token, in order."""
        if len(self.token_versions) != len(self.response_ids):
            return [self.weight_version] * self.num_model_tokens
        return [v for v, m in zip(self.token_versions, self.loss_mask) if m]

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        # Shallow on purpose: dataclasses.asdict deep-copies every token list, which on
        # agent batches blocked the orchestrator's event loop for seconds per step.
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        return cls(**d)


def trained(samples: list[Sample]) -> list[Sample]:
    """The samples with a loss weight (`Sample.excluded` empty): what a trainer backend trains on."""
    return [s for s in samples if not s.excluded]
