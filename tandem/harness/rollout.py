"""The rollout plug-in behind rollout.harness / rollout.harness_command: G harness trajectories per row.

Per trajectory: an endpoint of its own (tandem.harness.endpoint), the harness run against it
(tandem.harness.run), its recorded calls rebuilt into segments (tandem.harness.trajectory), each
segment a Sample carrying the trajectory's reward. A trajectory that fails (timeout, error, garbage,
no model call) fails its group with the reason: the group is dropped and counted in rollout_errors,
another replaces it, and the run's failure bound (run.max_failed_fraction) counts it. A call the
engines aborted for a weight update has the group regenerated, as for any rollout.
"""

from __future__ import annotations

import asyncio
import shlex
import statistics
from typing import Any, Callable

import httpx
import openai
from tandem.config import RolloutConfig
from tandem.env.parsers import pick_parser
from tandem.harness.endpoint import HarnessEndpoint, Trajectory
from tandem.harness.run import HarnessFailed, HarnessOutcome, load_harness_fn, run_function, run_program
from tandem.harness.trajectory import rebuild
from tandem.rollout.scoring import score_sample
from tandem.sample import Sample


class HarnessRollout:
    """`async (ctx, row, group_size) -> list[Sample]` for an outside harness; also reports per-step
    metrics (harness_prefix_breaks, ...) and closes its endpoint at the end of the run (aclose)."""

    def __init__(self, fn: Callable | None = None, command: list[str] | None = None):
        if (fn is None) == (not command):
            raise ValueError("a harness is a function or a command, exactly one")
        self.fn, self.command = fn, list(command or [])
        self.endpoint: HarnessEndpoint | None = None
        self._http: httpx.AsyncClient | None = None
        """The in-process harnesses' one HTTP client (their AsyncOpenAI clients share it)."""
        self._starting = asyncio.Lock()

    @classmethod
    def from_config(cls, cfg) -> HarnessRollout:
        r = cfg.rollout
        if r.harness:
            return cls(fn=load_harness_fn(r.harness))
        return cls(command=shlex.split(r.harness_command))

    async def _endpoint(self, ctx) -> HarnessEndpoint:
        async with self._starting:
            if self.endpoint is None:
                parse = pick_parser(ctx.cfg.rollout.harness_tool_parser, ctx.tokenizer)
                endpoint = HarnessEndpoint(ctx.engine, ctx.tokenizer, parse)
                await endpoint.start()
                self.endpoint = endpoint
                if self.fn is not None:
                    self._http = openai.DefaultAsyncHttpxClient(
                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        return self.endpoint

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self.endpoint is not None:
            await self.endpoint.close()
            self.endpoint = None

    async def __call__(self, ctx, row: dict, group_size: int) -> list[Sample]:
        endpoint = await self._endpoint(ctx)
        # A TaskGroup: one failed trajectory cancels its siblings (their programs are killed) at once.
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.one(ctx, endpoint, row, i)) for i in range(group_size)]
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0]  # the producer handles RolloutAborted, HarnessFailed & co by their type
        return [s for t in tasks for s in t.result()]

    async def one(self, ctx, endpoint: HarnessEndpoint, row: dict, index: int) -> list[Sample]:
        traj = endpoint.open(ctx.sampling_params, index)
        timeout = ctx.cfg.rollout.harness_timeout_s
        try:
            if self.fn is not None:
                outcome = await run_function(self.fn, endpoint.base_url(traj), traj.key, row, timeout, self._http)
            else:
                outcome = await run_program(self.command, endpoint.base_url(traj), traj.key, row, timeout)
        except HarnessFailed:
            if traj.aborted is not None:  # it failed because its call was aborted: regenerate the group
                raise traj.aborted from None
            raise
        finally:
            endpoint.finish(traj)
        if traj.aborted is not None:
            raise traj.aborted
        if not traj.calls:
            raise HarnessFailed(f"error: the harness made no model call (its endpoint errors: {traj.errors[:3]})")
        return await self._samples(ctx, row, traj, outcome, index)

    async def _samples(self, ctx, row: dict, traj: Trajectory, outcome: HarnessOutcome, index: int) -> list[Sample]:
        rebuilt = rebuild(traj.calls)
        samples = rebuilt.samples
        last = samples[rebuilt.segment_of_call[-1]]
        last.metadata["harness_transcript"] = transcript(traj)
        reward, info = outcome.reward, outcome.info
        if reward is None:
            if ctx.cfg.rollout.reward == RolloutConfig().reward:
                raise HarnessFailed("garbage: the harness gave no reward (a program prints a JSON line "
                                    "{\"reward\": ...} last) and no rollout.reward is set to score it")
            reward, info = await score_sample(ctx.reward_fn, last, row, ctx.cfg.rollout.reward_timeout_s,
                                              ctx.executor)
        for k, sample in enumerate(samples):
            sample.reward, sample.reward_info = reward, dict(info)
            sample.metadata["trajectory"] = index
            sample.metadata["harness"] = {
                "segment": k, "segments": len(samples), "prefix_breaks": rebuilt.prefix_breaks if k == 0 else 0,
                "branches": rebuilt.branches if k == 0 else 0,
                **({"calls": [c.summary() for c in traj.calls], "segment_of_call": rebuilt.segment_of_call,
                    "endpoint_errors": traj.errors[:10], **outcome.details} if k == 0 else {})}
        return samples

    @staticmethod
    def step_metrics(samples: list[Sample]) -> dict[str, float]:
        firsts = [s.metadata["harness"] for s in samples if s.metadata.get("harness", {}).get("segment") == 0]
        if not firsts:
            return {}
        return {"harness_prefix_breaks": float(sum(h["prefix_breaks"] for h in firsts)),
                "harness_branches": float(sum(h.get("branches", 0) for h in firsts)),
                "harness_segments_mean": statistics.fmean(h["segments"] for h in firsts),
                "harness_calls_mean": statistics.fmean(len(h["calls"]) for h in firsts),
                "harness_time_mean": statistics.fmean(float(h.get("elapsed_s", 0.0)) for h in firsts)}


def transcript(traj: Trajectory) -> list[dict[str, Any]]:
    """The last chat call's messages and the reply the harness got (what rollout.reward reads), or
    for completion calls the last prompt text and completion."""
    call = traj.calls[-1]
    if call.kind == "chat":
        return [*call.raw_messages, {"role": "assistant", "content": call.text}]
    return [{"role": "prompt", "content": call.prompt_text}, {"role": "completion", "content": call.text}]
