"""LoRA across the run: what the trainer publishes, what engines load, and which adapters stay loaded.

Each weight version V of a LoRA run is a standard peft adapter (`adapter_model.safetensors` and
`adapter_config.json`) in the same `weights/step_V/` layout as whole versions. Every engine loads
it as `policy-vV` (SGLang's `/load_lora_adapter`, sent to each engine directly: the router would
reach only one), and each rollout request names the adapter of the version it runs on
(`"lora_path": "policy-vV"`). Version 0 is the base model itself: peft starts B at zero, so the
untrained adapter changes nothing and no adapter is requested.

Versioned adapters must be unloaded or engine memory creeps until the engine hangs (AReaL#1385):
an engine keeps the current adapter and the `max_staleness + 1` before it, the oldest a sample
in the staleness window (or a request still finishing under `partial_rollout = "continue"`) can
use; older ones are unloaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_PREFIX = "policy-v"
PEFT_KEY_PREFIX = "base_model.model."
"""peft's prefix on every adapter tensor name (a PeftModelForCausalLM wraps the HF model)."""
MEGATRON_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
"""The projections tandem.trainer.megatron_lora puts adapters on (the Llama/Qwen family's linear layers)."""


def adapter_name(version: int) -> str:
    return f"{ADAPTER_PREFIX}{version}"


def adapter_version(name: str) -> int | None:
    """The version in a `policy-vV` name; None for any other adapter."""
    tail = name.removeprefix(ADAPTER_PREFIX)
    return int(tail) if name.startswith(ADAPTER_PREFIX) and tail.isdigit() else None


def adapter_versions(names) -> set[int]:
    """The versions among adapter names (an engine's listing); other adapters are not this run's kind."""
    return {v for name in names if (v := adapter_version(name)) is not None}


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapters_kept(staleness: int) -> int:
    """Adapters an engine keeps loaded: the current one and `staleness + 1` before it."""
    return staleness + 2


def max_loaded_adapters(staleness: int) -> int:
    """The engines' limit (SGLang --max-loaded-loras): the kept ones, the next version's while it
    loads, and one old one still unloading (an unload waits for the requests that use its adapter)."""
    return adapters_kept(staleness) + 2


def doomed_adapters(loaded: list[int], current: int, staleness: int) -> list[int]:
    """Loaded versions to unload once `current` is loaded: older than the window plus one."""
    return sorted(v for v in loaded if v < current - (staleness + 1))


def peft_config_dict(lora: Any, base_model: str) -> dict[str, Any]:
    """adapter_config.json as peft writes it, for trainer.lora (a LoraConfig section)."""
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
        "r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
        "target_modules": sorted(lora.target_modules), "bias": "none", "fan_in_fan_out": False,
        "use_rslora": False, "use_dora": False, "init_lora_weights": True, "modules_to_save": None,
        "rank_pattern": {}, "alpha_pattern": {}, "inference_mode": True,
    }


class AdapterError(ValueError):
    """An adapter directory cannot be used; the message names the file and the field."""


def read_adapter_config(path: str | Path) -> dict[str, Any]:
    """adapter_config.json, checked for what tandem's engines apply: plain LoRA (no DoRA, no
    per-module ranks, no extra trained modules), scaled by alpha / r (or alpha / sqrt(r) with rsLoRA)."""
    file = Path(path) / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise AdapterError(f"cannot read {file}: {err}") from err
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{file}: peft_type {config.get('peft_type')!r} is not LORA")
    for key in ("use_dora", "rank_pattern", "alpha_pattern", "modules_to_save"):
        if config.get(key):
            raise AdapterError(f"{file}: {key} = {config[key]!r} is not supported (plain LoRA only)")
    if config.get("bias", "none") != "none":
        raise AdapterError(f"{file}: bias = {config['bias']!r} is not supported (bias = 'none' only)")
    if not isinstance(config.get("r"), int) or config["r"] < 1:
        raise AdapterError(f"{file}: r must be a positive integer (got {config.get('r')!r})")
    targets = config.get("target_modules")
    if isinstance(targets, str) or not targets:
        raise AdapterError(f"{file}: target_modules must list module names (got {targets!r})")
    return config


def adapter_scale(config: dict[str, Any]) -> float:
    r, alpha = config["r"], float(config.get("lora_alpha", config["r"]))
    return alpha / r ** 0.5 if config.get("use_rslora") else alpha / r
