"""Colocation (run.colocate), the loop's half: the engines and the trainer take turns on one device.

Each sync-mode step, in slime's order (train.py with --offload):
1. rollouts done, the engines idle: every engine releases its memory (SGLang's
   /release_memory_occupation, every region: weights, KV cache, CUDA graphs);
2. the trainer brings its state back from the host, trains, publishes, and moves it to the host
   again before it answers (tandem.trainer.offload);
3. every engine resumes its weights, loads the new version from disk (the ordinary weight sync),
   then resumes its KV cache and CUDA graphs: generation starts on the new weights.

What each engine holds is measured from outside, from the engine processes themselves (never from
an engine's own report): resident memory from /proc/PID/status (VmRSS, the process and its
children) for engines on the CPU, the GPU memory nvidia-smi lists for their PIDs for engines on a
GPU. The step's row gets the memory released and restored and the time each hand-over took.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx

from tandem.engine_api import error_message
from tandem.orchestrator.fleet import Fleet
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks

WEIGHTS = ["weights"]
CACHES = ["kv_cache", "cuda_graph"]
"""What is resumed after the new weights are loaded (SGLang's tags)."""


class HandOverError(RuntimeError):
    """An engine refused to release or resume its memory; the message names it and its answer."""


# --------------------------------------------------------------------------- measuring from outside
def process_tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pid` and every process below it (SGLang's scheduler is a child of the server it launches)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def resident_bytes(pid: int, proc: Path = Path("/proc")) -> int:
    """VmRSS of one process (0 once it is gone)."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def gpu_bytes_by_pid() -> dict[int, int]:
    """GPU memory per process, as nvidia-smi lists the compute processes ({} without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib) * 2**20
    return used


def engines_memory_bytes(pids: list[int], on_gpu: bool) -> int:
    """What the engine processes (with their children) hold: GPU memory on a GPU, else resident memory."""
    trees = [p for pid in pids for p in process_tree(pid)]
    if on_gpu:
        used = gpu_bytes_by_pid()
        return sum(used.get(p, 0) for p in trees)
    return sum(resident_bytes(p) for p in trees)


# --------------------------------------------------------------------------- the hand-over
async def post_memory(http: httpx.AsyncClient, url: str, route: str, tags: list[str] | None, timeout_s: float) -> None:
    """One engine's /release_memory_occupation or /resume_memory_occupation; HandOverError on a refusal."""
    try:
        resp = await http.post(f"{url}/{route}", json={"tags": tags}, timeout=timeout_s)
    except httpx.HTTPError as err:
        raise HandOverError(f"{url}/{route} failed: {err!r}") from err
    if resp.status_code != 200:
        raise HandOverError(f"{url}/{route} answered HTTP {resp.status_code}: {error_message(resp.text)[:300]}")


class Colocation:
    """Hands the device back and forth around each train step (module docstring)."""

    def __init__(self, fleet: Fleet, client, timeout_s: float, on_gpu: bool, hooks: RunHooks = NO_HOOKS):
        self.fleet, self.client, self.timeout_s, self.on_gpu, self.hooks = fleet, client, timeout_s, on_gpu, hooks
        self.row: dict[str, float] = {}

    def _pids(self) -> list[int]:
        children = self.fleet.sup.children
        procs = [children[n].proc for n in self.fleet.engines if n in children]
        return [proc.pid for proc in procs if proc is not None]

    def _memory_mb(self) -> float:
        return engines_memory_bytes(self._pids(), self.on_gpu) / 2**20

    async def _each(self, route: str, tags: list[str] | None) -> None:
        urls = [u for n, u in self.fleet.engines.items() if n not in self.fleet.recovering]
        await asyncio.gather(*(post_memory(self.fleet.http(), u, route, tags, self.timeout_s) for u in urls))

    async def release(self, step: int) -> None:
        """After the step's rollouts: wait until no request is left on any engine (cancelled leftovers
        are aborted by the engines as their clients go), then every engine releases everything."""
        t0 = time.perf_counter()
        await self.client.wait_idle()
        await asyncio.gather(*(self.fleet.drain(u, self.timeout_s) for u in self.fleet.engines.values()))
        before = await asyncio.to_thread(self._memory_mb)
        self.fleet.released = True  # the doctor stops probing: a released SGLang engine cannot generate
        await self._each("release_memory_occupation", None)
        after = await asyncio.to_thread(self._memory_mb)
        self.row = {"engine_memory_generate_mb": before, "engine_memory_train_mb": after,
                    "engine_memory_released_mb": before - after, "handover_release_time": time.perf_counter() - t0}
        await self.hooks.at_async("released", step + 1)

    async def sync(self, load) -> float:
        """Weights back, the new version loaded (`load()`, the weight sync; returns its seconds), then the
        caches: slime's order. Returns the load's seconds."""
        t0 = time.perf_counter()
        await self._each("resume_memory_occupation", WEIGHTS)
        t_load = time.perf_counter()
        seconds = await load()
        t_caches = time.perf_counter()
        await self._each("resume_memory_occupation", CACHES)
        self.fleet.released = False
        restored = await asyncio.to_thread(self._memory_mb)
        self.row.update(engine_memory_restored_mb=restored - self.row.get("engine_memory_train_mb", 0.0),
                        engine_memory_resumed_mb=restored,
                        handover_resume_time=(t_load - t0) + (time.perf_counter() - t_caches))
        return seconds

    def metrics(self, trainer_handover: dict[str, float]) -> dict[str, float]:
        """The step's hand-over metrics: the engines' (measured here) and the trainer's (its report,
        TrainResult.handover)."""
        trainer = {k: float(trainer_handover.get(k, 0.0)) for k in
                   ("trainer_offloaded_mb", "trainer_onloaded_mb", "trainer_offload_time", "trainer_onload_time", "trainer_device_memory_mb",
                    "trainer_train_peak_mb")}
        row = {**self.row, **trainer}
        row["handover_time"] = (row.get("handover_release_time", 0.0) + row.get("handover_resume_time", 0.0)
                                + trainer["trainer_offload_time"] + trainer["trainer_onload_time"])
        return row

