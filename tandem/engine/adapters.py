"""The LoRA adapters an engine serves, with SGLang's semantics, for every engine backend.

`/load_lora_adapter {lora_name, lora_path}` checks the adapter against the engine's limits (SGLang
`--max-lora-rank`, `--lora-target-modules`, `--max-loaded-loras`) and has the backend load it;
a request names an adapter by `lora_path` and is refused (400) when none of that name is loaded;
`/unload_lora_adapter {lora_name}` stops new requests from naming it at once and frees it once
the requests that use it have finished. Both answer SGLang's LoRAUpdateOutput.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.config.views import EngineSide
from tandem.engine.backend import EngineBackend
from tandem.engine.request import InvalidRequest
from tandem.lora import ADAPTER_WEIGHTS, AdapterError, max_loaded_adapters, read_adapter_config


@dataclass
class LoraLimits:
    """What an engine started with LoRA accepts (SGLang --max-lora-rank, --lora-target-modules,
    --max-loaded-loras)."""

    max_rank: int
    target_modules: list[str]
    max_loaded: int

    @classmethod
    def from_config(cls, cfg: EngineSide) -> "LoraLimits | None":
        """What an engine of this run accepts: trainer.lora's rank and targets, and room for the
        adapters the staleness window keeps loaded (tandem.lora); None when LoRA is off."""
        lora = cfg.trainer.lora
        if not lora.enabled:
            return None
        return cls(lora.rank, list(lora.target_modules), max_loaded_adapters(cfg.effective_staleness))


@dataclass
class LoraUpdateResult:
    """SGLang's LoRAUpdateOutput: the answer of /load_lora_adapter and /unload_lora_adapter."""

    success: bool
    error_message: str | None
    loaded_adapters: dict[str, str]


def check_adapter_config(path: str | Path, limits: LoraLimits) -> dict[str, Any]:
    """adapter_config.json at `path`, within the engine's rank and target modules; else AdapterError."""
    config = read_adapter_config(path)
    if config["r"] > limits.max_rank:
        raise AdapterError(f"adapter rank {config['r']} exceeds the engine's max LoRA rank {limits.max_rank}")
    extra = set(config["target_modules"]) - set(limits.target_modules)
    if extra:
        raise AdapterError(f"adapter targets {sorted(extra)}, which the engine was not started for (its LoRA "
                           f"target modules: {sorted(limits.target_modules)})")
    return config


async def check_adapter_files(path: str | Path, limits: LoraLimits) -> tuple[bool, str]:
    """(ok, message) for an adapter directory whose config and weights file a backend need not read further."""
    try:
        await asyncio.to_thread(check_adapter_config, path, limits)
        if not (Path(path) / ADAPTER_WEIGHTS).is_file():
            raise AdapterError(f"{Path(path) / ADAPTER_WEIGHTS} is missing")
    except AdapterError as err:
        return False, str(err)
    return True, "Success"


NOT_STARTED_WITH_LORA = "this engine was not started with LoRA (SGLang: --enable-lora; tandem: trainer.lora.rank > 0)"


class Adapters:
    """The loaded adapters of one engine and how many requests use each."""

    def __init__(self, limits: LoraLimits | None, backend: "EngineBackend"):
        self.limits, self.backend = limits, backend
        self.loaded: dict[str, str] = {}
        """Adapters a request may name -> the path each was loaded from."""
        self._users: dict[str, int] = {}
        self._unused: dict[str, asyncio.Event] = {}
        """Adapters being unloaded -> set once no request uses them."""
        self._lock = asyncio.Lock()

    def check(self, name: str) -> None:
        """A request may run on adapter `name`; else InvalidRequest (HTTP 400), as SGLang answers."""
        if self.limits is None:
            raise InvalidRequest(f"the request names LoRA adapter {name!r}, but {NOT_STARTED_WITH_LORA}")
        if name not in self.loaded:
            raise InvalidRequest(f"The following requested LoRA adapters are not loaded: {name}\n"
                                 f"Loaded adapters: {sorted(self.loaded)}")

    def acquire(self, name: str) -> None:
        self.check(name)  # unloaded since the request was made
        self._users[name] = self._users.get(name, 0) + 1

    def release(self, name: str) -> None:
        left = self._users[name] = self._users.get(name, 1) - 1
        if not left and name in self._unused:
            self._unused[name].set()

    async def load(self, name: str, path: str) -> LoraUpdateResult:
        async with self._lock:
            if self.limits is None:
                return self._result(f"cannot load LoRA adapter {name!r}: {NOT_STARTED_WITH_LORA}")
            if name in self.loaded:
                return self._result(f"The LoRA adapter {name!r} is already loaded")
            if name in self._unused:
                return self._result(f"cannot load LoRA adapter {name!r}: an adapter of that name is still being "
                                    f"unloaded (requests still use it); load it again once that is done")
            held = len(self.loaded) + len(self._unused)
            if held >= self.limits.max_loaded:
                return self._result(f"cannot load LoRA adapter {name!r}: {held} adapters are loaded, the engine's "
                                    f"limit (--max-loaded-loras) is {self.limits.max_loaded}; unload one first")
            ok, message = await self.backend.load_lora(name, path, self.limits)
            if not ok:
                return self._result(f"cannot load LoRA adapter {name!r} from {path}: {message}")
            self.loaded[name] = path
            return self._result(None)

    async def unload(self, name: str) -> LoraUpdateResult:
        if name not in self.loaded:
            return self._result(f"LoRA adapter {name!r} is not loaded")
        del self.loaded[name]
        unused = self._unused[name] = asyncio.Event()
        try:
            if self._users.get(name):
                await unused.wait()
            await self.backend.unload_lora(name)
        finally:
            del self._unused[name]
            if not self._users.get(name):
                self._users.pop(name, None)
        return self._result(None)

    def _result(self, error: str | None) -> LoraUpdateResult:
        return LoraUpdateResult(error is None, error, dict(self.loaded))
