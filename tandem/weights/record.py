"""What one publish wrote: the typed record `WeightPublisher.publish` returns, which the trainer
hands on to the orchestrator inside its answer for the step (tandem.handoff.TrainResult)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

SYNC_KEYS = ("publish_bytes", "changed_fraction", "encode_time", "upload_time")
"""The record's numbers in a step's metrics row (0.0 where a publish did not measure one)."""


@dataclass
class Published:
    """Weight version `version`, written whole, as a delta or as a LoRA adapter at `weights_path`."""
    version: int
    weights_path: str
    """The directory engines load (a local or shared path)."""
    weights_kind: Literal["full", "delta", "lora"] = "full"
    publish_bytes: int | None = None
    """Bytes written (None: not measured, as by the virtual-clock trainer's stand-in publish)."""
    changed_fraction: float | None = None
    """sync.encoding = "delta": the fraction of elements that changed since the last version."""
    encode_time: float | None = None
    """sync.encoding = "delta": seconds spent encoding."""
    weights_url: str | None = None
    """A remote sync.url: where the version was uploaded."""
    upload_time: float | None = None
    """A remote sync.url: seconds the upload took."""

    def sync_metrics(self) -> dict[str, float]:
        return {key: 0.0 if (value := getattr(self, key)) is None else value for key in SYNC_KEYS}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Published:
        return cls(**payload)


NOTHING_PUBLISHED = dict.fromkeys(SYNC_KEYS, 0.0)
"""A step that published no version, in the row."""
