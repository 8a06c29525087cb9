"""Delta weight versions: only the changed elements cross the wire.

After an RL step at a typical learning rate most bf16 weights are bit-identical to the last
version (fp32 master weights move less than one bf16 ulp). The trainer keeps the bytes it last
published and, per tensor, writes only the positions whose bits changed (as gaps from the
previous changed position) and their new values (an overwrite encoding: applying it twice gives
the same result), zstd-compressed, in
`delta.safetensors.zst`. Unchanged tensors are omitted. Every version's manifest carries the
xxh3-128 of every tensor of the full model it reconstructs, so whoever applies a delta checks
it bit for bit against what a full publish would have written.

A full anchor is written every `sync.anchor_interval` versions, for the first version, when
the tensor set changes, when a checkpoint needs whole weights, and whenever the delta would be
larger than the full copy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import xxhash

DELTA_FILE = "delta.safetensors.zst"
DELTA_FORMAT = "tandem-delta/1: zstd(safetensors{name::gap int32|int64, name::value}), overwrite"
"""Named in every delta's manifest: an applier refuses a format it does not know, by name."""
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_ZSTD_LEVEL = 3


class DeltaError(RuntimeError):
    """A delta cannot be applied (wrong base, a broken chain, a tensor that fails its checksum)."""


def tensor_digest(t: torch.Tensor) -> str:
    """xxh3-128 of a tensor's raw bytes (what safetensors stores)."""
    return xxhash.xxh3_128(t.reshape(-1).contiguous().view(torch.uint8).numpy().data).hexdigest()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers, so -0.0 vs 0.0 and NaN payloads count as changes."""
    return t.reshape(-1).view(_INT_VIEW[t.element_size()])


def tensor_nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


@dataclass
class Encoded:
    """One version, as the encoder decided to publish it."""
    kind: str
    """'full' or 'delta'."""
    tensors: dict[str, str]
    """name -> xxh3-128 of every tensor of the reconstructed model."""
    full_bytes: int
    changed_elements: int = 0
    total_elements: int = 0
    payload: bytes = b""
    """The compressed delta (kind 'delta')."""
    base_version: int | None = None
    reason: str = ""
    encode_s: float = 0.0

    @property
    def changed_fraction(self) -> float:
        return self.changed_elements / max(self.total_elements, 1)

    def manifest_fields(self) -> dict[str, Any]:
        fields = {"kind": self.kind, "tensors": self.tensors, "full_bytes": self.full_bytes,
                  "changed_fraction": self.changed_fraction}
        if self.kind == "delta":
            fields.update(base_version=self.base_version, delta_format=DELTA_FORMAT)
        return fields


@dataclass
class DeltaEncoder:
    """The trainer's memory of the last published version (CPU copies in the published dtype)."""
    anchor_interval: int
    previous: dict[str, torch.Tensor] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    previous_version: int | None = None
    anchor_version: int | None = None

    def _why_full(self, state: dict[str, torch.Tensor], version: int, force_full: bool) -> str:
        if force_full:
            return "whole weights needed (checkpoint or start)"
        if self.previous_version is None or self.anchor_version is None:
            return "first version"
        if version != self.previous_version + 1:
            return f"not the successor of version {self.previous_version}"
        if version - self.anchor_version >= self.anchor_interval:
            return f"anchor every {self.anchor_interval} versions"
        if {k: (v.shape, v.dtype) for k, v in state.items()} != {k: (v.shape, v.dtype) for k, v in self.previous.items()}:
            return "the tensor set changed"
        return ""

    def encode(self, state: dict[str, torch.Tensor], version: int, force_full: bool = False) -> Encoded:
        started = time.perf_counter()
        state = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
        full_bytes = tensor_nbytes(state)
        total = sum(t.numel() for t in state.values())
        reason = self._why_full(state, version, force_full)
        if not reason:
            encoded = self._delta(state, version, full_bytes, total)
            if len(encoded.payload) >= full_bytes:
                reason = f"the delta ({len(encoded.payload)} B) is not smaller than the full copy ({full_bytes} B)"
        if reason:
            encoded = Encoded("full", {k: tensor_digest(t) for k, t in state.items()}, full_bytes,
                              changed_elements=total, total_elements=total, reason=reason)
            self.anchor_version = version
        # Snapshots, not views: the trainer updates its parameters in place next step.
        self.previous = {k: t.clone() for k, t in state.items()}
        self.digests, self.previous_version = dict(encoded.tensors), version
        encoded.encode_s = time.perf_counter() - started
        return encoded

    def _delta(self, state: dict[str, torch.Tensor], version: int, full_bytes: int, total: int) -> Encoded:
        import zstandard
        from safetensors.torch import save

        parts: dict[str, torch.Tensor] = {}
        digests = dict(self.digests)
        changed = 0
        for name, t in state.items():
            positions = (_bits(t) != _bits(self.previous[name])).nonzero().reshape(-1)
            if positions.numel() == 0:
                continue
            changed += positions.numel()
            # Gaps between successive changed positions: small numbers, which zstd packs far
            # tighter than absolute positions (bench/delta_sync.py: about half the bytes).
            gaps = torch.diff(positions, prepend=positions.new_zeros(1))
            parts[f"{name}::gap"] = gaps.to(torch.int32 if t.numel() < 2**31 else torch.int64)
            parts[f"{name}::value"] = t.reshape(-1)[positions]
            digests[name] = tensor_digest(t)
        payload = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(save(parts) if parts else b"")
        return Encoded("delta", digests, full_bytes, changed, total, payload, base_version=self.previous_version)


def apply_delta(base: dict[str, torch.Tensor], payload: bytes, manifest: dict[str, Any]) -> set[str]:
    """Write the delta over the base version's tensors (in place) and check every tensor against
    the manifest's digest (DeltaError names the first that does not match); returns the names
    of the tensors it changed."""
    import zstandard
    from safetensors.torch import load

    if manifest.get("delta_format") != DELTA_FORMAT:
        raise DeltaError(f"weight version {manifest['version']}: delta format {manifest.get('delta_format')!r} is "
                         f"not the one this tandem applies ({DELTA_FORMAT!r}); run the same tandem on every host")
    raw = zstandard.ZstdDecompressor().decompress(payload) if payload else b""
    parts = load(raw) if raw else {}
    changed = set()
    for key, gaps in parts.items():
        if not key.endswith("::gap"):
            continue
        name = key[: -len("::gap")]
        if name not in base:
            raise DeltaError(f"weight version {manifest['version']}: the delta changes {name}, "
                             f"which its base (version {manifest['base_version']}) does not have")
        flat = base[name].view(-1)  # a view: the write lands in the base tensor
        flat[torch.cumsum(gaps.long(), 0)] = parts[f"{name}::value"]
        changed.add(name)
    verify_tensors(base, manifest)
    return changed


def verify_tensors(state: dict[str, torch.Tensor], manifest: dict[str, Any]) -> None:
    want = manifest["tensors"]
    if set(want) != set(state):
        missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
        raise DeltaError(f"weight version {manifest['version']}: tensors differ from the manifest "
                         f"(missing {missing[:3]}, unexpected {extra[:3]})")
    for name, digest in want.items():
        if tensor_digest(state[name]) != digest:
            raise DeltaError(f"weight version {manifest['version']}: tensor {name} does not match its checksum "
                             f"after applying the delta to version {manifest.get('base_version')}")


def write_delta_dir(out_dir: Path, encoded: Encoded) -> None:
    out_dir.mkdir(parents=True)
    (out_dir / DELTA_FILE).write_bytes(encoded.payload)
