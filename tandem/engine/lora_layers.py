"""Several LoRA adapters served at once by the embedded engine, chosen per request (S-LoRA style).

Each target linear layer of the base model gets a forward hook that adds, for every row of the
batch, the low-rank update of that row's adapter: `y += scale * (x @ A.T) @ B.T`. Rows that name
no adapter get the base model. The base weights are never touched, so any number of versions
share one copy of the model, exactly as SGLang serves `--enable-lora`.

The scheduler thread owns this object: it sets `rows` (the adapter name of each batch row, or
None) before every forward, and adds or removes adapters only between two steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from tandem.engine.adapters import LoraLimits, check_adapter_config
from tandem.lora import ADAPTER_WEIGHTS, PEFT_KEY_PREFIX, AdapterError, adapter_scale


@dataclass
class LoadedAdapter:
    scale: float
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]
    """Module name -> (A [r, in], B [out, r]) in the model's dtype and device."""


def read_adapter(path: str | Path, model: torch.nn.Module, limits: LoraLimits, device: torch.device) -> LoadedAdapter:
    """Read and check a peft adapter directory against the served model: every tensor names a
    linear layer of it with matching shapes, within the engine's rank and target modules."""
    config = check_adapter_config(path, limits)
    file = Path(path) / ADAPTER_WEIGHTS
    try:
        tensors = load_file(str(file))
    except Exception as err:  # noqa: BLE001 - safetensors' own SafetensorError included: any undecodable file
        raise AdapterError(f"cannot read {file}: {err}") from err
    modules = dict(model.named_modules())
    dtype = next(model.parameters()).dtype
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        stem = key.removeprefix(PEFT_KEY_PREFIX)
        for part in ("lora_A", "lora_B"):
            suffix = f".{part}.weight"
            if stem.endswith(suffix):
                pairs.setdefault(stem.removesuffix(suffix), {})[part] = tensor
                break
        else:
            raise AdapterError(f"{file}: tensor {key!r} is not a lora_A/lora_B weight")
    weights = {}
    for name, pair in pairs.items():
        layer = modules.get(name)
        if not isinstance(layer, torch.nn.Linear):
            raise AdapterError(f"{file}: {name!r} is not a linear layer of the served model")
        if set(pair) != {"lora_A", "lora_B"}:
            raise AdapterError(f"{file}: {name!r} has {sorted(pair)} but needs both lora_A and lora_B")
        a, b = pair["lora_A"], pair["lora_B"]
        if a.shape != (config["r"], layer.in_features) or b.shape != (layer.out_features, config["r"]):
            raise AdapterError(f"{file}: {name!r} has lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)}; the "
                               f"layer is {layer.in_features} -> {layer.out_features} at rank {config['r']}")
        weights[name] = (a.to(device, dtype), b.to(device, dtype))
    if not weights:
        raise AdapterError(f"{file} holds no adapter tensors")
    return LoadedAdapter(adapter_scale(config), weights)


class LoraLayers:
    """The served adapters and the hooks that apply them to each batch row."""

    def __init__(self, model: torch.nn.Module, target_modules: list[str]):
        targets = set(target_modules)
        self.adapters: dict[str, LoadedAdapter] = {}
        self.rows: list[str | None] = []
        """Adapter of each row of the next forward (set by the scheduler before it)."""
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
                module.register_forward_hook(self._hook(name))

    def add(self, name: str, adapter: LoadedAdapter) -> None:
        self.adapters[name] = adapter

    def remove(self, name: str) -> None:
        self.adapters.pop(name, None)

    def _hook(self, module_name: str):
        def apply(_module: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor | None:
            rows = self.rows
            if not self.adapters or not any(rows):
                return None
            x = inputs[0]
            adapters = {r for r in rows if r is not None}
            if len(set(rows)) == 1:  # the common case: the whole batch on one adapter
                return out + self._delta(adapters.pop(), module_name, x)
            out = out.clone()
            for name in adapters:
                idx = torch.tensor([i for i, r in enumerate(rows) if r == name], device=x.device)
                delta = self._delta(name, module_name, x.index_select(0, idx))
                if isinstance(delta, torch.Tensor):
                    out.index_add_(0, idx, delta)
            return out
        return apply

    def _delta(self, name: str, module_name: str, x: torch.Tensor) -> torch.Tensor | int:
        adapter = self.adapters[name]
        pair = adapter.weights.get(module_name)
        if pair is None:
            return 0
        a, b = pair
        return (x @ a.T) @ b.T * adapter.scale
