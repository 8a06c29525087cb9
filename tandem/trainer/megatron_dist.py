"""Process groups of the Megatron backend: how its ranks are launched and how they find each other.

`trainer_launch_command` is the torchrun command line (one process per trainer GPU);
`init_parallel` joins (or creates) the default process group, lays Megatron's TP x PP x DP
groups (and, for a mixture of experts, the expert-parallel groups: EP ranks of the data-parallel
dimension split each MoE layer's experts) over it, seeds the RNGs and returns the rank's place in
that layout. Without
CUDA it first installs `megatron_cpu_shim` (gloo), which is how the tests run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tandem.config import MegatronSettings, TandemConfig
from tandem.ports import free_port
from tandem.trainer import megatron_cpu_shim as shim
from tandem.trainer.backend import configure_threads


def trainer_launch_command(cfg: TandemConfig, run_config_path: str | os.PathLike, nproc: int | None = None,
                           master_port: int | None = None, extra_args: list[str] | None = None) -> list[str]:
    """torchrun command for the Megatron trainer: one process per trainer GPU, rendezvous on loopback.

    `python -m torch.distributed.run` is torchrun without relying on PATH. The launcher sets
    CUDA_VISIBLE_DEVICES to the trainer's GPUs (tandem.placement), so local ranks 0..n-1
    map onto exactly those devices.
    """
    n = nproc if nproc is not None else cfg.trainer.gpus
    mp = cfg.trainer.megatron
    if n % (mp.tensor_parallel * mp.pipeline_parallel):
        raise ValueError(f"trainer.gpus={n} is not a multiple of trainer.megatron.tensor_parallel="
                         f"{mp.tensor_parallel} x pipeline_parallel={mp.pipeline_parallel}")
    port = master_port if master_port is not None else free_port()
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0",
            "--nproc-per-node", str(n), "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "tandem.trainer", "--run-config", str(run_config_path), *(extra_args or [])]


def init_process_group(cuda: bool) -> bool:
    """Join (or create) the default process group; returns True when this call created it."""
    if dist.is_initialized():
        return False
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world == 1 and "MASTER_ADDR" not in os.environ:  # started without torchrun: a group of one
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
    # One node: keep gloo's and NCCL's bootstrap sockets on loopback. (torchrun's TCPStore on
    # --master-port is torch's own and listens on every interface; clients reach it via 127.0.0.1.)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    return True


@dataclass(frozen=True)
class ParallelLayout:
    """This rank's place in the TP x PP x DP layout (Megatron's parallel_state holds the groups)."""

    cuda: bool
    device: torch.device
    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    ep: int
    ep_rank: int
    """Expert parallelism: this rank holds experts [ep_rank x E / ep, (ep_rank + 1) x E / ep) of each MoE layer."""
    rank: int  # global; the trainer loop names per-rank checkpoint files by it
    first_stage: bool  # owns the embedding (Megatron's pre_process)
    last_stage: bool  # owns the output layer and the loss (Megatron's post_process)
    owns_process_group: bool

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0


def check_layout(world: int, mcfg: MegatronSettings, cuda: bool) -> None:
    tp, pp, ep = mcfg.tensor_parallel, mcfg.pipeline_parallel, mcfg.expert_parallel
    if world % (tp * pp):
        raise ValueError(f"world size {world} is not a multiple of trainer.megatron.tensor_parallel={tp} "
                         f"x pipeline_parallel={pp}")
    if (world // pp) % ep:
        raise ValueError(f"trainer.megatron.expert_parallel={ep} does not divide the {world // pp} ranks of a "
                         f"pipeline stage (world size {world} / pipeline_parallel {pp}), which the experts are "
                         "split over")
    if pp > 1 and not cuda:
        raise RuntimeError("trainer.megatron.pipeline_parallel > 1 needs CUDA (Megatron's pipeline schedule "
                           "allocates on the GPU); the CPU shim supports TP and DP only")
    if mcfg.recompute and not cuda:
        raise RuntimeError("trainer.megatron.recompute needs CUDA (Megatron's activation checkpointing saves "
                           "and restores CUDA RNG states)")


def init_parallel(mcfg: MegatronSettings, seed: int) -> ParallelLayout:
    """Process group, Megatron's model-parallel groups and RNG seeds; see the module docstring."""
    from megatron.core import parallel_state as ps

    cuda = not shim.needed()
    if not cuda:
        shim.install()
        configure_threads()
    owns = init_process_group(cuda)
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    world = dist.get_world_size()
    check_layout(world, mcfg, cuda)
    tp, pp = mcfg.tensor_parallel, mcfg.pipeline_parallel
    # Experts are whole on each rank (expert tensor parallel 1): with an MoE model tp is 1 (megatron_convert).
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 expert_model_parallel_size=mcfg.expert_parallel, expert_tensor_parallel_size=1)
    if cuda:
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        torch.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
    else:
        shim.init_rng_tracker(seed)
    return ParallelLayout(
        cuda=cuda, device=device, tp=tp, pp=pp, dp=world // (tp * pp),
        tp_rank=ps.get_tensor_model_parallel_rank(), pp_rank=ps.get_pipeline_model_parallel_rank(),
        dp_rank=ps.get_data_parallel_rank(), ep=mcfg.expert_parallel, ep_rank=ps.get_expert_model_parallel_rank(),
        rank=dist.get_rank(), first_stage=ps.is_pipeline_first_stage(),
        last_stage=ps.is_pipeline_last_stage(), owns_process_group=owns)


def shutdown(layout: ParallelLayout) -> None:
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()
    if layout.owns_process_group and dist.is_initialized():
        dist.destroy_process_group()
