"""Mixture-of-experts pieces every side shares: the routed-experts wire forms and the expert weight layout.

**Routed experts.** SGLang 0.5.23 (`--enable-return-routed-experts`, request field
`return_routed_experts`, optional `routed_experts_start_len`) answers with
`meta_info["routed_experts"]`: base64 of a C-order int32 array [rows, num_hidden_layers, top_k],
one row per token position in [routed_experts_start_len, prompt + output - 1) - every token the
engine fed through the model (the last output token never is). A dense layer's entries are 0.
The embedded engine answers the same way.

A `Sample` keeps them compactly (`pack_routing`): the rows for positions [0, rows) of its tokens,
flattened to [rows, layers x top_k] in the smallest unsigned integer type that holds the expert
ids (uint8 up to 256 experts: 1 byte per id instead of SGLang's 4), base64 in the JSON the trainer
reads. A multi-turn trajectory asks each turn from the row it has (routed_experts_start_len), so
the observation and template tokens a later turn prefills get the routing the engine gave them in
that prefill; rows are never rewritten, so a prefix keeps the routing it had when the tokens after
it were generated.

**Expert weights.** transformers 5 holds a Qwen3-MoE layer's experts fused (`mlp.experts.gate_up_proj`
[E, 2I, H], `mlp.experts.down_proj` [E, H, I]); HF checkpoints (what save_pretrained writes, what
SGLang loads) keep one module per expert (`mlp.experts.{e}.gate_proj.weight` [I, H], `up_proj`,
`down_proj` [H, I]). `to_checkpoint_names` and `from_checkpoint_names` convert, bit for bit.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import numpy as np

ROUTED_EXPERTS = "routed_experts"
"""The request flag's stem (return_routed_experts, routed_experts_start_len) and meta_info's key."""

_FUSED = re.compile(r"^(?P<stem>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")
_PER_EXPERT = re.compile(r"^(?P<stem>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<kind>gate_proj|up_proj|down_proj)\.weight$")


# --------------------------------------------------------------------------- wire form (SGLang)
def encode_routed_experts(ids: np.ndarray) -> str:
    """SGLang's meta_info["routed_experts"]: base64 of the int32 array's bytes."""
    return base64.b64encode(np.ascontiguousarray(ids, dtype=np.int32).tobytes()).decode("ascii")


def decode_routed_experts(text: str, rows: int) -> np.ndarray:
    """meta_info["routed_experts"] as [rows, layers x top_k] int32; ValueError naming what does not fit."""
    flat = np.frombuffer(base64.b64decode(text.encode("ascii"), validate=True), dtype=np.int32)
    if rows <= 0 or flat.size % rows:
        raise ValueError(f"routed_experts holds {flat.size} expert ids, not a whole number of ids for each of "
                         f"the {rows} token positions the request covers")
    return flat.reshape(rows, flat.size // rows)


# --------------------------------------------------------------------------- compact form (Sample)
def pack_routing(ids: np.ndarray) -> dict[str, Any]:
    """[rows, width] expert ids as {"rows", "width", "dtype", "data": base64}, in uint8 when they fit."""
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"routing must be [rows, layers x top_k], got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.uint16).max):
        raise ValueError(f"expert ids must lie in [0, 65535], got [{ids.min()}, {ids.max()}]")
    dtype = np.uint8 if not ids.size or ids.max() <= np.iinfo(np.uint8).max else np.uint16
    data = base64.b64encode(np.ascontiguousarray(ids, dtype=dtype).tobytes()).decode("ascii")
    return {"rows": int(ids.shape[0]), "width": int(ids.shape[1]), "dtype": np.dtype(dtype).name, "data": data}


def unpack_routing(packed: dict[str, Any]) -> np.ndarray:
    """`pack_routing`'s inverse: [rows, width] int64 (empty [0, 0] for an empty dict)."""
    if not packed:
        return np.zeros((0, 0), dtype=np.int64)
    if packed.get("dtype") not in ("uint8", "uint16"):
        raise ValueError(f"routing dtype {packed.get('dtype')!r} is neither uint8 nor uint16")
    flat = np.frombuffer(base64.b64decode(packed["data"]), dtype=np.dtype(packed["dtype"]))
    rows, width = int(packed["rows"]), int(packed["width"])
    if flat.size != rows * width:
        raise ValueError(f"routing holds {flat.size} ids, not rows x width = {rows} x {width}")
    return flat.reshape(rows, width).astype(np.int64)


def extend_routing(packed: dict[str, Any], chunk: np.ndarray, start: int) -> dict[str, Any]:
    """`packed` with `chunk`'s rows for positions [start, start + len(chunk)) added. Rows already held are
    kept (the routing the tokens after them were generated with); a gap is refused."""
    held = unpack_routing(packed)
    if held.size and chunk.size and held.shape[1] != chunk.shape[1]:
        raise ValueError(f"routing rows of width {chunk.shape[1]} do not extend rows of width {held.shape[1]}")
    if start > held.shape[0]:
        raise ValueError(f"routing rows from position {start} leave positions {held.shape[0]}..{start - 1} without any")
    fresh = chunk[held.shape[0] - start:]
    if not fresh.size:
        return packed
    return pack_routing(np.concatenate([held, fresh]) if held.size else fresh)


# --------------------------------------------------------------------------- the model's routers
_ROUTER = re.compile(r"(?:^|\.)layers\.(\d+)\.mlp\.gate$")


def moe_routers(model: Any) -> dict[int, Any]:
    """{decoder layer index: its top-k router} of an HF MoE model (transformers' `layers.N.mlp.gate`, which
    returns (router logits, top-k weights, top-k expert ids)); {} for a dense model."""
    found = {}
    for name, module in model.named_modules():
        m = _ROUTER.search(name)
        if m is not None and hasattr(module, "top_k") and hasattr(module, "num_experts"):
            found[int(m.group(1))] = module
    return found


# --------------------------------------------------------------------------- expert weight layout
def to_checkpoint_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """Fused expert tensors (transformers' in-memory layout) split into HF checkpoint names, one
    per expert (contiguous copies: safetensors refuses tensors that share storage); the rest as is."""
    out: dict[str, Any] = {}
    for name, t in tensors.items():
        m = _FUSED.match(name)
        if m is None:
            out[name] = t
            continue
        stem = m["stem"]
        for e in range(t.shape[0]):
            if m["kind"] == "down_proj":
                out[f"{stem}.{e}.down_proj.weight"] = t[e].clone()
            else:
                gate, up = t[e].chunk(2, dim=0)
                out[f"{stem}.{e}.gate_proj.weight"] = gate.clone()
                out[f"{stem}.{e}.up_proj.weight"] = up.clone()
    return out


def from_checkpoint_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """HF checkpoint expert tensors stacked into transformers' fused layout; the rest as is.
    ValueError when a layer's experts are incomplete."""
    import torch

    out: dict[str, Any] = {}
    experts: dict[tuple[str, str], dict[int, Any]] = {}
    for name, t in tensors.items():
        m = _PER_EXPERT.match(name)
        if m is None:
            out[name] = t
        else:
            experts.setdefault((m["stem"], m["kind"]), {})[int(m["e"])] = t
    stems = sorted({stem for stem, _ in experts})
    for stem in stems:
        parts = {kind: experts.get((stem, kind), {}) for kind in ("gate_proj", "up_proj", "down_proj")}
        count = max(len(p) for p in parts.values())
        for kind, held in parts.items():
            if sorted(held) != list(range(count)):
                raise ValueError(f"{stem}: {kind} of experts {sorted(set(range(count)) - set(held))} missing")
        out[f"{stem}.gate_up_proj"] = torch.stack(
            [torch.cat([parts["gate_proj"][e], parts["up_proj"][e]], dim=0) for e in range(count)])
        out[f"{stem}.down_proj"] = torch.stack([parts["down_proj"][e] for e in range(count)])
    return out
