"""What a rollout function receives: config, tokenizer, engine client, reward and a thread pool."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable

from tandem.config import TandemConfig
from tandem.rollout.client import EngineClient
from tandem.rollout.scoring import score_sample
from tandem.sample import Sample


@dataclass
class RolloutContext:
    cfg: TandemConfig
    tokenizer: Any
    engine: EngineClient
    executor: Executor
    reward_fn: Callable
    sampling_params: dict = field(default_factory=dict)

    async def score(self, sample: Sample, row: dict) -> None:
        """Run the reward plug-in with a timeout; a failure scores 0 with the reason, never raises."""
        sample.reward, sample.reward_info = await score_sample(
            self.reward_fn, sample, row, self.cfg.rollout.reward_timeout_s, self.executor)

    async def run_blocking(self, fn: Callable, *args) -> Any:
        """Blocking work (sandboxes, graders) runs on the rollout pool, never the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)




def sampling_params_from_config(cfg: TandemConfig) -> dict:
    r = cfg.rollout.sampling
    params: dict[str, Any] = {"temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k, "max_new_tokens": r.max_new_tokens}
    if r.stop:
        params["stop"] = list(r.stop)
    return params
