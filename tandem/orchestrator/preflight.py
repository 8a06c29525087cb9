"""Preflight: everything a config needs, checked before any process starts, reported all at once.

A run that cannot start should say so in a second, not after three engines loaded: the
backends and plug-ins the config names are importable (megatron-core, peft, SGLang in its own
interpreter, an environment's packages and sandbox), the dataset and plug-ins load, pinned
ports are free, the GPUs placement needs are visible, and the disk holds the weight versions
and checkpoints the run keeps. Each problem is one line naming its fix; all of them are shown
together (PreflightFailed, exit 2), and nothing was started or written.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

import httpx

from tandem import registry
from tandem.config import ConfigError, TandemConfig
from tandem.orchestrator.cluster import check_configured_ports
from tandem.placement import plan_placement, visible_gpu_count
from tandem.registry import importable

GPU_INSTALL = "pip install -r requirements-gpu.txt"
WANDB_INSTALL = "pip install -r requirements-wandb.txt"


class PreflightFailed(ConfigError):
    """Everything that stops this config from running, one problem per line."""

    def __init__(self, problems: list[str]):
        super().__init__(problems[0] if len(problems) == 1 else
                         f"the run cannot start ({len(problems)} problems):\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


def module_problems(cfg: TandemConfig) -> list[str]:
    needs = []
    if cfg.trainer.backend == "megatron":
        needs.append(("megatron.core", "trainer.backend = 'megatron' needs megatron-core", GPU_INSTALL))
    if cfg.trainer.lora.enabled:
        needs.append(("peft", "trainer.lora needs peft", "pip install -r requirements.txt"))
    if cfg.sync.encoding == "delta":
        needs.append(("zstandard", "sync.encoding = 'delta' needs zstandard", "pip install -r requirements.txt"))
    if cfg.logging.wandb.mode != "disabled":
        needs.append(("wandb", f"logging.wandb.mode = '{cfg.logging.wandb.mode}' needs wandb", WANDB_INSTALL))
    return [f"{what}, which is not installed for {sys.executable}: {fix}" for module, what, fix in needs
            if not importable(module)]


def engine_problems(cfg: TandemConfig) -> list[str]:
    """What the engine backend checks before it starts (sglang: its interpreter has SGLang)."""
    check = type(cfg.engine).preflight
    return [] if check is None else registry.load(check, "engine.backend")(cfg)


def placement_problems(cfg: TandemConfig) -> list[str]:
    problems = []
    for check in (check_configured_ports, lambda c: plan_placement(c, visible_gpu_count())):
        try:
            check(cfg)
        except ConfigError as err:
            problems.append(str(err))
    return problems


def disk_problems(cfg: TandemConfig, free_bytes: Callable[[Path], int] | None = None) -> list[str]:
    """The weight versions (sync.keep_last + the one being written) and checkpoints (checkpoint.keep_last
    + the one being written) the run keeps at once, against the free space where they go."""
    need = disk_need(cfg)
    if need is None:
        return []
    free_of = free_bytes or _free_bytes
    where = Path(cfg.run.run_dir)
    free = free_of(where)
    if free >= need.total:
        return []
    return [f"not enough free disk under {_existing(where)}: this run keeps about {need.describe()}, "
            f"{free / 1e9:.2f} GB are free; lower sync.keep_last or checkpoint.keep_last, or set run.run_dir on a "
            f"larger disk"]


class DiskNeed:
    def __init__(self, weights: int, versions: int, checkpoint: int, checkpoints: int):
        self.weights, self.versions, self.checkpoint, self.checkpoints = weights, versions, checkpoint, checkpoints
        self.total = weights * versions + checkpoint * checkpoints

    def describe(self) -> str:
        return (f"{self.total / 1e9:.2f} GB ({self.versions} weight versions of {self.weights / 1e9:.3f} GB, "
                f"{self.checkpoints} checkpoints of {self.checkpoint / 1e9:.3f} GB)")


def disk_need(cfg: TandemConfig) -> DiskNeed | None:
    """What the run's kept weight versions and checkpoints take, from the model's parameter count
    (None when the model's config cannot be read here, e.g. a hub id with no network)."""
    try:
        params = registry.load(registry.LAB["model_shape"])(cfg.model).total_params()
    except (OSError, ValueError):  # the planner's PlanError is a ValueError
        return None
    dtype_bytes = 4 if cfg.model.dtype == "float32" else 2
    weights = params * dtype_bytes
    if cfg.trainer.lora.enabled or cfg.trainer.backend == "sim":
        per_checkpoint = weights  # adapters and their moments are a sliver of the weights
    elif cfg.trainer.backend == "megatron" and cfg.trainer.megatron.bf16:
        per_checkpoint = params * (2 + 4 + 4 + 4)  # bf16 weights, fp32 master weights, Adam's two moments
    else:
        per_checkpoint = weights * 3  # weights and Adam's two moments, in the model's dtype
    checkpoints = cfg.checkpoint.keep_last + 1 if cfg.checkpoint.interval else 0
    return DiskNeed(weights, cfg.sync.keep_last + 1, per_checkpoint, checkpoints)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(_existing(path)).free


HUB_PROBE_TIMEOUT_S = 5.0
"""How long preflight waits for the hub to answer whether a model id exists (transformers would retry
for about a minute, then fail in a child with a FileNotFoundError)."""


def model_problems(cfg: TandemConfig, timeout_s: float = HUB_PROBE_TIMEOUT_S) -> list[str]:
    """model.path as a hub id (not "tiny", not a local directory): it is in the local Hugging Face
    cache, or the hub answers for it. Offline (HF_HUB_OFFLINE=1) or with the hub unreachable, an
    uncached id is refused here, naming how to point at a local copy."""
    path = cfg.model.path
    if path == "tiny" or Path(path).expanduser().is_dir():
        return []
    from huggingface_hub import constants, try_to_load_from_cache  # third-party, and only for a hub id
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        return [f"model.path '{path}' is no directory (from {Path.cwd()}) and no hub id (namespace/name): "
                f"give a directory with the model's config.json and weights, or a Hugging Face model id"]
    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return []
    local_copy = (f"download it where there is network (`hf download {path} --local-dir DIR`) and pass "
                  f"`--model DIR` (model.path = DIR)")
    where = f"model.path '{path}' is not a local directory (from {Path.cwd()}) nor in the Hugging Face cache"
    if constants.HF_HUB_OFFLINE:
        return [f"{where}, and the hub is off (HF_HUB_OFFLINE=1): {local_copy}"]
    url = f"{constants.ENDPOINT}/api/models/{path}"
    try:
        status = httpx.get(url, timeout=timeout_s, follow_redirects=True).status_code
    except httpx.HTTPError as err:
        return [f"{where}, and the hub ({constants.ENDPOINT}) is unreachable ({type(err).__name__}: {err}): "
                f"{local_copy}"]
    if status in (401, 404):
        return [f"{where}, and the hub has no model '{path}' this machine may read (HTTP {status}; a private or "
                f"gated one needs HF_TOKEN): check the id, or {local_copy}"]
    return []


def check(cfg: TandemConfig, load_inputs: Callable[[TandemConfig], tuple], run_dir_refusal: str | None = None):
    """Run every check; return `load_inputs(cfg)` (dataset and plug-ins), or raise PreflightFailed
    listing every problem found."""
    problems = [run_dir_refusal] if run_dir_refusal else []
    model = model_problems(cfg)
    # The disk check reads the model's config: with no model to read, it would only wait on the hub.
    for checker in (module_problems, engine_problems, placement_problems, *([] if model else [disk_problems])):
        problems += checker(cfg)
    problems += model
    inputs = None
    try:
        inputs = load_inputs(cfg)
    except ValueError as err:  # ConfigError, DataError, PluginError
        problems.append(str(err))
    if inputs is not None:
        problems += environment_problems(cfg, inputs[1])
    if problems:
        raise PreflightFailed(problems)
    return inputs


def environment_problems(cfg: TandemConfig, rollout_fn) -> list[str]:
    """An environment class may name what it needs (packages, a sandbox) through `requirements(cfg)`."""
    env_class = getattr(rollout_fn, "env_class", None)
    requirements = getattr(env_class, "requirements", None)
    return list(requirements(cfg)) if requirements else []
