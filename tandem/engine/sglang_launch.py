"""`engine.backend = "sglang"`: the `python -m sglang.launch_server` command for one engine.

Every flag emitted here - tandem's own and each `engine.sglang.args` entry - is checked
against SGLang's real argument list (sglang_server_args.txt beside this file, extracted from
the pinned SGLang wheel by scripts/extract_sglang_server_args.py), so a typo or a flag that
SGLang dropped fails before any process starts, with the config key named, not as a dead
engine on the GPU node.

Placement (tandem.placement) pins each engine to one GPU through CUDA_VISIBLE_DEVICES, so
the engine always runs `--tp-size 1` and sees its GPU as device 0. With engine.sglang.device = "cpu"
the engines run SGLang's CPU engine instead (`--device cpu` and SGLANG_USE_CPU_ENGINE=1, sglang_env)
with the torch threads placement gives every CPU engine, and no GPU is asked for. Weight sync goes through
SGLang's own `/update_weights_from_disk` with `weight_version`; `--weight-version` sets the
version a fresh engine reports before the first sync (0 = the base model, or the version it
was restarted on). With run.colocate the engine gets SGLang's memory saver (--enable-memory-saver),
so that /release_memory_occupation really frees its weights and KV cache for the trainer.

The interpreter: SGLang pins its own torch / transformers / openai versions, which differ
from requirements.txt, so on a GPU node it usually lives in its own virtualenv. Set
TANDEM_SGLANG_PYTHON to that interpreter (default: the current one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from tandem.config import ConfigError, TandemConfig
from tandem.lora import max_loaded_adapters

ARGS_FILE = Path(__file__).with_name("sglang_server_args.txt")
PYTHON_ENV = "TANDEM_SGLANG_PYTHON"

# Flags tandem sets itself, and the config key to change instead (None: fixed by placement).
RESERVED: dict[str, str | None] = {
    "--model-path": "model.path", "--model": "model.path", "--host": None, "--port": "engine.base_port",
    "--tp-size": None, "--tensor-parallel-size": None, "--pp-size": None, "--pipeline-parallel-size": None,
    "--dp-size": None, "--data-parallel-size": None, "--nnodes": None, "--node-rank": None,
    "--base-gpu-id": None, "--mem-fraction-static": "engine.sglang.mem_fraction_static",
    "--weight-version": None, "--dtype": "model.dtype", "--trust-remote-code": "model.trust_remote_code",
    "--max-running-requests": "engine.max_running_requests", "--random-seed": "run.seed",
    "--enable-priority-scheduling": "engine.priority_scheduling",
    "--enable-lora": "trainer.lora.rank", "--max-lora-rank": "trainer.lora.rank",
    "--lora-target-modules": "trainer.lora.target_modules", "--max-loaded-loras": "rollout.staleness.max",
    "--max-loras-per-batch": "rollout.staleness.max",
    "--enable-memory-saver": "run.colocate",
    "--enable-return-routed-experts": "trainer.moe.routing_replay",
    "--device": "engine.sglang.device", "--max-total-tokens": "engine.max_total_tokens",
}
CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"
"""SGLang picks its CPU platform only with this set to 1 (beside --device cpu)."""


@lru_cache(maxsize=4)
def load_server_args(path: str | os.PathLike = ARGS_FILE) -> tuple[str, dict[str, str]]:
    """(SGLang version the list came from, {flag: kind}) with kind value|flag|bool_optional|list."""
    version, flags = "unknown", {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            m = re.search(r"sglang-([0-9][^-]*)-", line)
            version = m.group(1) if m else version
            continue
        if line.strip():
            name, kind = line.split("\t")
            flags[name] = kind
    return version, flags


def _flag_name(key: str) -> str:
    return "--" + key.lstrip("-").replace("_", "-")


def _value_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value)  # SGLang's JSON-typed flags (e.g. --json-model-override-args)
    return str(value)


def extra_args(sglang_args: dict[str, Any]) -> list[str]:
    """`engine.sglang.args` as validated command-line arguments (see the module docstring)."""
    version, flags = load_server_args()
    out: list[str] = []
    for key, value in sglang_args.items():
        flag = _flag_name(key)
        where = f"engine.sglang.args.{key}"
        if flag in RESERVED:
            instead = RESERVED[flag]
            hint = f"set {instead} instead" if instead else "tandem sets it (one GPU per engine, loopback host)"
            raise ConfigError(f"config key '{where}': {flag} is managed by tandem; {hint}")
        kind = flags.get(flag)
        if kind is None:
            raise ConfigError(f"config key '{where}': SGLang {version} has no server argument {flag}")
        if value is None:
            raise ConfigError(f"config key '{where}': a value is required (omit the key for SGLang's default)")
        if kind in ("flag", "bool_optional"):
            if not isinstance(value, bool):
                raise ConfigError(f"config key '{where}': {flag} is an on/off flag; use true or false (got {value!r})")
            if value:
                out.append(flag)
            elif kind == "bool_optional":
                out.append("--no-" + flag[2:])
            # a plain store_true flag set to false is SGLang's default: nothing to pass
        elif kind == "list":
            items = value if isinstance(value, list) else [value]
            out += [flag, *(_value_text(v) for v in items)]
        else:
            if isinstance(value, bool):
                raise ConfigError(f"config key '{where}': {flag} takes a value, not true/false")
            out += [flag, _value_text(value)]
    return out


def sglang_python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def sglang_command(cfg: TandemConfig, port: int, model_path: str, weight_version: int = 0,
                   seed_offset: int = 0) -> list[str]:
    """The full launch command of one SGLang engine (run it with `Placement.engine_env(i)`)."""
    e = cfg.engine
    cmd = [
        sglang_python(), "-m", "sglang.launch_server",
        "--model-path", str(model_path),
        "--host", "127.0.0.1", "--port", str(port),
        "--tp-size", "1",  # placement gives each engine exactly one GPU
        "--mem-fraction-static", str(e.sglang.mem_fraction_static),
        "--weight-version", str(weight_version),
        "--dtype", cfg.model.dtype,
        "--max-running-requests", str(e.max_running_requests),
        "--random-seed", str(cfg.run.seed + seed_offset),
    ]
    if e.sglang.device == "cpu":
        # On a GPU SGLang sizes its KV pool from mem_fraction_static; on a CPU the fraction is of the
        # host's memory, so the pool is capped at tandem's own budget instead.
        cmd += ["--device", "cpu", "--max-total-tokens", str(e.max_total_tokens)]
    if cfg.model.trust_remote_code:
        cmd.append("--trust-remote-code")
    if e.priority_scheduling:
        # Order the queue by the rollout's step priority; no preemption, which tandem's sim
        # engine does not model either (the sweep would not predict it).
        cmd += ["--enable-priority-scheduling", "--disable-priority-preemption"]
    return cmd + colocation_args(cfg) + lora_args(cfg) + moe_args(cfg) + extra_args(e.sglang.args)


def sglang_env(cfg: TandemConfig) -> dict[str, str]:
    """The variables every SGLang server gets: the CPU engine switch with engine.sglang.device = "cpu", then
    engine.sglang.env."""
    own = {CPU_ENGINE_ENV: "1"} if cfg.engine.sglang.device == "cpu" else {}
    return {**own, **cfg.engine.sglang.env}


def _on_off_flag(flag: str, key: str) -> list[str]:
    """[flag], checked against SGLang's argument list like every flag tandem emits."""
    version, flags = load_server_args()
    if flags.get(flag) != "flag":
        raise ConfigError(f"config key '{key}': SGLang {version} has no on/off server argument {flag}")
    return [flag]


def colocation_args(cfg: TandemConfig) -> list[str]:
    """run.colocate: SGLang's memory saver, without which /release_memory_occupation frees nothing (its
    weights and KV cache are allocated through torch_memory_saver so they can be unmapped and mapped
    again)."""
    return _on_off_flag("--enable-memory-saver", "run.colocate") if cfg.colocated else []


def moe_args(cfg: TandemConfig) -> list[str]:
    """trainer.moe.routing_replay / record_routing: SGLang records the experts each token is routed to (its
    capture buffers cost memory, so only when asked); requests then set return_routed_experts."""
    moe = cfg.trainer.moe
    if not moe.wants_routing:
        return []
    return _on_off_flag("--enable-return-routed-experts",
                        "trainer.moe.routing_replay" if moe.routing_replay else "trainer.moe.record_routing")


def lora_args(cfg: TandemConfig) -> list[str]:
    """With trainer.lora: serve adapters of its rank and targets, as many as tandem.lora's
    max_loaded_adapters, any of them in one batch."""
    lora = cfg.trainer.lora
    if not lora.enabled:
        return []
    loaded = str(max_loaded_adapters(cfg.effective_staleness))
    return ["--enable-lora", "--max-lora-rank", str(lora.rank), "--lora-target-modules", *lora.target_modules,
            "--max-loaded-loras", loaded, "--max-loras-per-batch", loaded]


def interpreter_problems(cfg: TandemConfig, run: Callable = subprocess.run) -> list[str]:
    """engine.backend = 'sglang': SGLang importable by the interpreter that will start the engines."""
    if cfg.engine.backend != "sglang":
        return []
    python = sglang_python()
    fix = (f"install it there (requirements-sglang.txt), or point ${PYTHON_ENV} at the interpreter of the "
           f"virtualenv that has it")
    if not shutil.which(python) and not Path(python).is_file():
        return [f"engine.backend = 'sglang': the interpreter {python} (${PYTHON_ENV}) does not exist; {fix}"]
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        found = run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as err:
        return [f"engine.backend = 'sglang': cannot run {python} ({err}); {fix}"]
    return [] if found else [f"engine.backend = 'sglang': SGLang is not installed for {python}; {fix}"]
