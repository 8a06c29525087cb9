"""SGLang's memory hand-over for colocation: /release_memory_occupation and /resume_memory_occupation.

A colocated engine shares its GPU with the trainer and takes turns with it: before a train step
it releases its memory (SGLang, launched with --enable-memory-saver: `tags` "weights", "kv_cache",
"cuda_graph"; none named means all), and before the next generation it resumes it, in slime's
order: the weights first, then the new weight version is loaded, then the KV cache. This mixin is
that contract for `EngineCore`: the gating (only an idle engine releases; requests wait at the
door while anything is released) is here, the freeing is the backend's (`EngineBackend.release_memory`).
"""

from __future__ import annotations

import asyncio

from tandem.engine.backend import EngineBackend
from tandem.engine.request import InvalidRequest

MEMORY_TAGS = ("kv_cache", "weights", "cuda_graph")
"""SGLang's memory regions (sglang.srt.constants.GPU_MEMORY_ALL_TYPES): what /release_memory_occupation
and /resume_memory_occupation name in `tags` (none given: all of them)."""


class MemoryOccupation:
    """EngineCore's memory hand-over (mixed into it: it uses the core's gate and update lock)."""

    engine_backend: "EngineBackend"
    model_path: str
    released: set[str]
    _admitted: int
    _gate: "asyncio.Condition | None"
    _update_lock: "asyncio.Lock | None"

    @staticmethod
    def memory_tags(tags: list[str] | None) -> list[str]:
        """The regions a request names (none: all, as in SGLang); an unknown one is refused."""
        if not tags:
            return list(MEMORY_TAGS)
        unknown = [t for t in tags if t not in MEMORY_TAGS]
        if unknown:
            raise InvalidRequest(f"unknown memory tag(s) {unknown}; the tags are {list(MEMORY_TAGS)}")
        return list(dict.fromkeys(tags))

    async def release_memory_occupation(self, tags: list[str] | None = None) -> None:
        """Hand the named regions' memory back until they are resumed. Like SGLang, only an idle engine
        may (a request it runs or queues needs its weights and KV); requests that arrive meanwhile wait
        at the door. Releasing the weights loses them: the next load, or the last resume, brings them back."""
        regions = self.memory_tags(tags)
        assert self._gate is not None, "EngineCore.start() was not awaited"
        async with self._gate:
            # Admitted = running or queued in the backend (a finished row the scheduler has not dropped
            # yet is gone by the time the release, queued behind that step, runs).
            if self._admitted:
                raise InvalidRequest(f"release_memory_occupation should be called only when the engine is idle: "
                                     f"{self._admitted} request(s) running or waiting")
            self.released.update(regions)  # the door closes before the memory goes
            await self.engine_backend.release_memory(regions)

    async def resume_memory_occupation(self, tags: list[str] | None = None) -> None:
        """Take the named regions' memory again (none named: every released one). Resumed weights hold
        no values until a weight update loads a version; if none has when the last region is resumed,
        the version served before the release is read back from its directory, so the engine never
        generates from weights it does not have."""
        regions = self.memory_tags(tags) if tags else sorted(self.released)
        assert self._gate is not None and self._update_lock is not None, "EngineCore.start() was not awaited"
        async with self._update_lock, self._gate:
            await self.engine_backend.resume_memory([r for r in regions if r in self.released])
            self.released.difference_update(regions)
            if not self.released:
                await self.engine_backend.restore_weights(self.model_path)
                self._gate.notify_all()
