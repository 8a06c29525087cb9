"""Scoring one sample with a reward plug-in: its timeout, its failure as a reason, its number.

Shared by the single-turn rollout context and the environment loop, so every reward, a plug-in's
or an environment's reward(), has one timeout and one error path.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from concurrent.futures import Executor
from typing import Callable

from tandem.errors import RunFatal
from tandem.sample import Sample

FAILED_REASONS = ("error", "timeout")
"""How score_sample starts the reason of a reward that raised, ran out of time or returned no number."""

TRACEBACK_CHARS = 4000
"""The end of a failed reward's traceback kept with its sample (the run prints the first one)."""


async def score_sample(reward_fn: Callable, sample: Sample, row: dict, timeout_s: float,
                       executor: Executor | None) -> tuple[float, dict]:
    start = time.monotonic()
    try:
        if inspect.iscoroutinefunction(reward_fn):
            result = await asyncio.wait_for(reward_fn(sample, row), timeout_s)
        else:
            loop = asyncio.get_running_loop()
            result = await asyncio.wait_for(loop.run_in_executor(executor, reward_fn, sample, row), timeout_s)
    except asyncio.TimeoutError:
        return 0.0, {"reason": f"timeout: reward took longer than {timeout_s}s", "reward_time": timeout_s}
    except RunFatal:  # the plug-in asks to stop the run (e.g. a sandbox that keeps failing)
        raise
    except Exception as err:  # a broken reward must not crash the run (tandem.orchestrator.failures bounds it)
        return 0.0, {"reason": f"error: {type(err).__name__}: {err}", "reward_time": time.monotonic() - start,
                     "traceback": "".join(traceback.format_exception(err))[-TRACEBACK_CHARS:]}
    reward, info = (result if isinstance(result, tuple) else (result, {}))
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        return 0.0, {"reason": f"error: reward function returned {reward!r}, not a number"}
    return reward, {**dict(info), "reward_time": time.monotonic() - start}


def reward_failed(sample: Sample) -> bool:
    """The reward of `sample` failed (score_sample gave it 0 and a reason): its 0 is not a grade."""
    return str(sample.reward_info.get("reason", "")).startswith(FAILED_REASONS)
