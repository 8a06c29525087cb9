"""Which device each child gets.

On a GPU node the trainer takes GPUs 0..trainer.gpus-1 and each engine one GPU after
them: `--engines 3` on 8 GPUs puts the trainer on 0-3 and engines on 4, 5 and 6. Pinning
is explicit: every child gets its own CUDA_VISIBLE_DEVICES. With no GPU (or backends that
need none) everything runs on the CPU, and each child gets explicit torch thread counts:

- run.cpu_split = "phase" (the default, for the torch trainer and local embedded engines): the
  side that runs gets the machine. Engines start with the cores divided between them and the
  trainer with every core; in sync mode the two never compute at once, so that is the whole
  plan. In async mode they overlap, and tandem.orchestrator.cpu_share splits the cores while
  both run, by each side's measured demand, and gives them back when one side goes idle.
- "even", and every other layout (a Megatron trainer's CPU ranks, sim or external engines):
  the cores divided evenly between all children, fixed for the run.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from tandem import registry
from tandem.config import ConfigError, TandemConfig


def visible_gpu_count() -> int:
    """GPUs this launcher may hand out (honours CUDA_VISIBLE_DEVICES), without initialising CUDA."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def visible_gpu_memory_bytes() -> int:
    """Memory of the first visible GPU as nvidia-smi reports it (0 without one)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = env.split(",")[0].strip() if env else "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", first],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return int(out[0]) * 2**20 if out and out[0].isdigit() else 0
    except (OSError, subprocess.TimeoutExpired):
        return 0


def resolve_colocation(cfg: TandemConfig, visible_gpus: int, gpu_bytes: int,
                       verdict: Callable[[TandemConfig, int], tuple[bool, str]]) -> tuple[TandemConfig, str | None]:
    """run.colocate = "auto" made true or false: colocated sync mode on a box with exactly one GPU that the
    trainer and local engines would both use, when `verdict` (the memory plan) says it fits. Returns the
    config to run and what to say at start-up (None: nothing to say)."""
    if cfg.run.colocate != "auto":
        return cfg, None
    apart = cfg.model_copy(update={"run": cfg.run.model_copy(update={"colocate": False})})
    trainer_gpu, engines_gpu = _needs_gpus(cfg, visible_gpus)
    wants_gpu = (trainer_gpu or cfg.trainer.device == "auto" and cfg.trainer.backend == "torch") and \
        (engines_gpu or cfg.engine.backend == "embedded" and cfg.engine.embedded.device == "auto")
    if visible_gpus != 1 or not wants_gpu or cfg.engine.autoscale.enabled or \
            (cfg.trainer.backend == "megatron" and cfg.trainer.gpus != 1):
        return apart, None
    tree = cfg.model_dump()
    tree["run"].update(colocate=True, mode="sync")
    try:
        together = type(cfg).model_validate(tree)
    except ValueError as err:
        return apart, f"tandem: one GPU, but colocated sync mode does not suit this config ({err}); the engines run apart"
    fits, summary = verdict(together, gpu_bytes)
    if not fits:
        return apart, (f"tandem: one GPU of {gpu_bytes / 2**30:.0f} GiB: colocating the trainer and the engines does "
                       f"not fit ({summary}); the engines run on the CPU (run.colocate = false to stop checking)")
    return together, (f"tandem: one GPU of {gpu_bytes / 2**30:.0f} GiB: the trainer and {cfg.engine.count} engine(s) "
                      f"share it, colocated in sync mode ({summary}; run.colocate = false runs them apart)")


def _physical_ids(count: int) -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in env.split(",") if d.strip()] if env else [str(i) for i in range(count)]
    return ids[:count]


@dataclass
class Placement:
    trainer_gpus: list[str] = field(default_factory=list)
    engine_gpus: list[str | None] = field(default_factory=list)
    cpu_threads: int = 1
    """Torch threads of each engine on the CPU."""
    trainer_cpu_threads: int = 1
    """Torch threads of the trainer (each rank) on the CPU."""
    phase_split: bool = False
    """The CPU is shared by phase (run.cpu_split = "phase" applies): see the module docstring."""
    cores: int = 1
    engine_extra_env: dict[str, str] = field(default_factory=dict)
    """What every engine process gets on top of its device's variables: its backend's own (its config model's launch_env)."""

    @staticmethod
    def _cpu_env(threads: int) -> dict[str, str]:
        n = str(threads)
        # OpenMP threads that spin at a barrier burn the time slice their parked sibling needs on a
        # busy machine: beside a CPU hog a 2-thread train step took 9-18 s against 0.5 s on one thread,
        # 1.0 s with PASSIVE (issue 49). A value the user exported is kept.
        return {"CUDA_VISIBLE_DEVICES": "", "TANDEM_TORCH_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
                "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}

    def trainer_env(self) -> dict[str, str]:
        if not self.trainer_gpus:
            return self._cpu_env(self.trainer_cpu_threads)
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.trainer_gpus)}

    def cpu_engine_env(self) -> dict[str, str]:
        return {**self._cpu_env(self.cpu_threads), **self.engine_extra_env}

    def engine_env(self, index: int) -> dict[str, str]:
        gpu = self.engine_gpus[index]
        return self.cpu_engine_env() if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu, **self.engine_extra_env}

    def engine_device(self, index: int) -> str:
        gpu = self.engine_gpus[index]
        return "cpu" if gpu is None else f"cuda:{gpu}"

    def trainer_devices(self) -> list[str]:
        return [f"cuda:{g}" for g in self.trainer_gpus] or ["cpu"]

    @property
    def engines_on_gpu(self) -> bool:
        return any(g is not None for g in self.engine_gpus)


def _needs_gpus(cfg: TandemConfig, visible_gpus: int) -> tuple[bool, bool]:
    """(trainer needs GPUs, engines need GPUs) for this config. A Megatron trainer on 'auto' needs
    them where there are any; without GPUs it runs trainer.gpus ranks on the CPU (gloo), so a
    node's TOML runs unchanged on a laptop."""
    megatron_on_gpus = cfg.trainer.backend == "megatron" and cfg.trainer.device == "auto" and visible_gpus > 0
    trainer = cfg.trainer.device == "cuda" and cfg.trainer.backend in ("torch", "megatron") or megatron_on_gpus
    engines = (cfg.engine.backend == "sglang" and cfg.engine.sglang.device == "cuda") or \
        (cfg.engine.backend == "embedded" and cfg.engine.embedded.device == "cuda")
    return trainer, engines


def backend_env(cfg: TandemConfig) -> dict[str, str]:
    """The variables engine.backend sets for its own processes (its config model's launch_env; none for most)."""
    launch_env = type(cfg.engine).launch_env
    return {} if launch_env is None else registry.load(launch_env, "engine.backend")(cfg)


def plan_placement(cfg: TandemConfig, visible_gpus: int) -> Placement:
    """Devices for every engine the run may hold: engine.count, or engine.autoscale.max when the
    fleet scales (the engines past engine.count start later, on the devices reserved here)."""
    scale = cfg.engine.autoscale
    n = scale.max if scale.enabled and cfg.engine.backend != "external" else cfg.engine.count
    trainer_needs, engines_need = _needs_gpus(cfg, visible_gpus)
    auto_gpu = visible_gpus > 0
    use_trainer_gpu = trainer_needs or (auto_gpu and cfg.trainer.backend == "torch" and cfg.trainer.device == "auto")
    use_engine_gpu = engines_need or (auto_gpu and cfg.engine.backend == "embedded" and cfg.engine.embedded.device == "auto")
    trainer_count = (cfg.trainer.gpus if cfg.trainer.backend == "megatron" else 1) if use_trainer_gpu else 0
    if cfg.colocated and trainer_count and use_engine_gpu:
        return colocated_placement(cfg, n, trainer_count, visible_gpus)
    engine_count = n if use_engine_gpu else 0
    wanted = trainer_count + engine_count
    if wanted > visible_gpus:
        if trainer_needs or engines_need:
            raise ConfigError(
                f"engine.count={n} and trainer.gpus={trainer_count} need {wanted} GPU(s) "
                f"(trainer {trainer_count} + one per engine), but {visible_gpus} are visible")
        # 'auto' devices degrade to the CPU rather than fail.
        trainer_count, engine_count = (trainer_count, 0) if trainer_count <= visible_gpus else (0, 0)
    ids = _physical_ids(trainer_count + engine_count)
    engine_gpus: list[str | None] = list(ids[trainer_count:trainer_count + engine_count]) or [None] * n
    cpus = os.cpu_count() or 1
    placement = Placement(trainer_gpus=ids[:trainer_count], engine_gpus=engine_gpus, cores=cpus,
                          engine_extra_env=backend_env(cfg))
    if cfg.run.cpu_split == "phase" and not trainer_count and not engine_count and not scale.enabled and \
            cfg.trainer.backend == "torch" and cfg.engine.backend == "embedded":
        placement.phase_split = True
        placement.cpu_threads, placement.trainer_cpu_threads = max(1, cpus // n), cpus
        return placement
    local_engines = 0 if cfg.engine.backend == "external" else n  # external engines use other hosts' cores
    trainer_procs = cfg.trainer.gpus if cfg.trainer.backend == "megatron" and not trainer_count else 1
    placement.cpu_threads = placement.trainer_cpu_threads = max(1, cpus // (local_engines + trainer_procs))
    return placement


def colocated_placement(cfg: TandemConfig, n: int, trainer_count: int, visible_gpus: int) -> Placement:
    """run.colocate: the engines share the trainer's GPUs, engine i on trainer GPU i mod their count."""
    if trainer_count > visible_gpus:
        raise ConfigError(f"trainer.gpus = {trainer_count} with run.colocate: {visible_gpus} GPU(s) are visible")
    if cfg.engine.backend == "sglang" and n > trainer_count:
        # Each SGLang engine reserves engine.sglang.mem_fraction_static of its whole GPU for its KV pool.
        raise ConfigError(f"engine.count = {n} with run.colocate and engine.backend = 'sglang': one SGLang engine "
                          f"per trainer GPU ({trainer_count}), since each reserves engine.sglang.mem_fraction_static of "
                          f"its whole GPU; set engine.count = {trainer_count}")
    ids = _physical_ids(trainer_count)
    cpus = os.cpu_count() or 1
    threads = max(1, cpus // (n + trainer_count))
    return Placement(trainer_gpus=ids, engine_gpus=[ids[i % trainer_count] for i in range(n)], cores=cpus,
                     cpu_threads=threads, trainer_cpu_threads=threads, engine_extra_env=backend_env(cfg))
