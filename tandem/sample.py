"""The unit of data that flows from rollout to trainer.

A sample is one token sequence: `prompt_ids` followed by `response_ids`. For multi-turn
rollouts the response holds the model's tokens *and* the observation/template tokens
between turns; `loss_mask` (1 = the model's own token) and `rollout_logprobs` (the
engine's logprob for that token, 0.0 where the mask is 0) are aligned with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


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
    group_id: int = 0
    """Index of the prompt group within its step."""
    prompt_index: int = -1
    """Position of the prompt row in the dataset."""
    response_text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def append_model_tokens(self, ids: list[int], logprobs: list[float]) -> None:
        """Tokens the policy generated: trained on, with the engine's logprobs."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} output ids but {len(logprobs)} logprobs")
        self.response_ids.extend(ids)
        self.loss_mask.extend([1] * len(ids))
        self.rollout_logprobs.extend(logprobs)

    def append_context_tokens(self, ids: list[int]) -> None:
        """Observation / chat-template tokens: part of the sequence, never trained on."""
        self.response_ids.extend(ids)
        self.loss_mask.extend([0] * len(ids))
        self.rollout_logprobs.extend([0.0] * len(ids))

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
