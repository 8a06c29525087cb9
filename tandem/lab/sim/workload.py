"""A workload-driven agentic rollout for sizing studies (`rollout.function =
"tandem.lab.sim.workload:agentic_rollout"`, `rollout.reward = "tandem.lab.sim.workload:agentic_reward"`).

It reproduces the *shape* of a multi-turn coding-agent rollout without a sandbox or a real
model: per rollout it draws the number of turns (long-tailed), and per turn the tokens the
model generates, the tool's wall time and the observation tokens appended to the context,
all from a workload profile (`engine.sim.workload`, a TOML file under profiles/workload/).
Each turn is a real /generate call through the router, with the whole context as
`input_ids` (token-in, token-out, as the real agent does), `max_new_tokens` set to the drawn
length and `ignore_eos` so the engine produces exactly that many tokens. The sample is
built with `Sample.append_model_tokens` (model tokens, trained on, with the engine's
logprobs) and `Sample.append_context_tokens` (observations, masked), so the trainer and
the staleness/accounting code see the same structure as with the real agent.

With `engine.sim.token_scale` k > 1 every length is divided by k on the wire (the sim engines
multiply it back), so a 30k-token context costs 30k/k ids of JSON per turn.

Tool and grading time are slept divided by `engine.sim.time_scale`, the same factor that
speeds up the sim engines and the sim trainer, so one wall second is `time_scale` seconds of
the modelled run everywhere.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tandem.sample import Sample
from tandem.lab.sim.latency import LatencyModel
from tandem.lab.sim.profiles import (AgentParams, Dist, WorkloadProfile, load_engine_profile, load_workload_profile,
                                     resolve_profile_path)
from tandem.lab.sim.virtual_clock import unix_time  # the loop's clock: wall time, or a virtual run's simulated time

_calls = itertools.count()


@lru_cache(maxsize=8)
def _load(path: str) -> WorkloadProfile:
    return load_workload_profile(resolve_profile_path(path))


def workload_for(cfg: Any) -> WorkloadProfile:
    return _load(cfg.engine.sim.workload)


@lru_cache(maxsize=8)
def _latency(path: str) -> LatencyModel:
    return LatencyModel.from_profile(load_engine_profile(resolve_profile_path(path)))


def turn_alone_s(model: LatencyModel, new_tokens: int, cached_tokens: int, output_tokens: int) -> float:
    """Model seconds one turn needs on an engine serving nothing else, with everything before it
    in the prefix cache: one prefill of the new tokens (it yields the first output token), then
    a batch-1 decode step per further token. No schedule can serve the turn faster."""
    prefill = model.prefill_s([(new_tokens, cached_tokens)])
    return prefill + model.decode_steps_s(max(0, output_tokens - 1), 1, cached_tokens + new_tokens)


_pools: dict[int, tuple[int, ...]] = {}


def _token_pool(tokenizer: Any) -> tuple[int, ...]:
    """Ordinary (non-special) token ids to build prompts and observations from."""
    key = id(tokenizer)
    if key not in _pools:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        _pools[key] = tuple(i for i in range(min(len(tokenizer), 4096)) if i not in special)
    return _pools[key]


def _random_ids(rng: random.Random, pool: tuple[int, ...], n: int) -> list[int]:
    return rng.choices(pool, k=max(0, n))


def _wire(n: int, token_scale: int) -> int:
    """Modelled tokens -> tokens sent (the sim engines multiply them back by token_scale)."""
    return max(1, -(-n // token_scale))


@dataclass
class _Group:
    """What the G rollouts of one task share: the task (prompt, difficulty) and the run's scales."""

    ctx: Any
    row: dict
    agent: AgentParams
    call: int
    """This rollout call's number in the process: keeps the draws of repeated calls apart."""
    scale: float
    """engine.sim.time_scale: tool and grading time are slept divided by it."""
    k: int
    """engine.sim.token_scale: modelled tokens per wire token."""
    pool: tuple[int, ...]
    prompt_ids: list[int]
    solve_p: float
    sampling: dict
    latency: LatencyModel
    turns_factor: float
    """The workload's demand at the weight version this group starts on (demand.turns_scale)."""

    @classmethod
    def draw(cls, ctx: Any, row: dict) -> _Group:
        workload = workload_for(ctx.cfg)
        agent = workload.agent
        sim = ctx.cfg.engine.sim
        pool = _token_pool(ctx.tokenizer)
        call = next(_calls)
        group_rng = random.Random(f"{ctx.cfg.run.seed}:{row.get('_index', -1)}:{call}")
        # One task: the same prompt for the whole group (so the engines' prefix cache can share it),
        # and one difficulty, so some groups are all-fail or all-pass as with real tasks.
        prompt_ids = _random_ids(group_rng, pool, _wire(agent.prompt_tokens.sample_int(group_rng), sim.token_scale))
        solve_p = min(1.0, group_rng.uniform(0.0, 2.0 * agent.solve_rate))
        sampling = {key: v for key, v in dict(ctx.sampling_params).items() if key in ("temperature", "top_p", "top_k")}
        factor = workload.demand.turns_factor(float(getattr(ctx.engine, "weight_version", 0) or 0))
        return cls(ctx, row, agent, call, sim.time_scale, sim.token_scale, pool, prompt_ids, solve_p, sampling,
                   _latency(sim.profile), factor)

    def wire(self, n: int) -> int:
        return _wire(n, self.k)

    @property
    def max_context(self) -> int:
        return self.agent.max_context_tokens // self.k


class _Trajectory:
    """One rollout of a group: its own draws, the growing context and what its time went to."""

    def __init__(self, group: _Group, i: int):
        self.group, self.i = group, i
        self.rng = random.Random(f"{group.ctx.cfg.run.seed}:{group.row.get('_index', -1)}:{group.call}:{i}")
        self.turns = max(1, round(group.agent.turns.sample(self.rng) * group.turns_factor))
        self.sample = Sample(prompt_ids=list(group.prompt_ids))
        self.context = list(group.prompt_ids)
        self.versions: list[int] = []
        self.t_start = unix_time()
        self.gen_s = 0.0
        self.alone_s = 0.0       # the rollout's critical path on an idle fleet (model seconds)
        self.new_tokens = len(group.prompt_ids)
        self.slept: list[tuple[float, float]] = []   # (wall s slept, model s planned) per tool call / grading
        self.done_turns = 0
        self.truncated = False

    async def sandbox_time(self, dist: Dist) -> None:
        """A tool call or the grading run: its drawn time, slept at time_scale."""
        planned = dist.sample(self.rng)
        t0 = unix_time()
        await asyncio.sleep(planned / self.group.scale)
        self.slept.append((unix_time() - t0, planned))

    async def generate(self, n_out: int) -> None:
        """One model turn of exactly n_out wire tokens, appended as trained-on model tokens."""
        g = self.group
        t0 = unix_time()
        params = {**g.sampling, "max_new_tokens": n_out, "ignore_eos": True}
        # One routing key per trajectory: with router.policy 'manual' every turn returns to
        # the engine that holds this context in its prefix cache.
        out = await g.ctx.engine.generate(self.context, params, return_logprob=True,
                                          routing_key=f"sim-{g.call}-{self.i}")
        self.gen_s += unix_time() - t0
        meta = out.get("meta_info", {})
        ids = list(out["output_ids"])
        self.alone_s += turn_alone_s(g.latency, self.new_tokens * g.k, (len(self.context) - self.new_tokens) * g.k,
                                     len(ids) * g.k)
        lps = [float(t[0]) for t in meta.get("output_token_logprobs", [])]
        version = int(meta.get("weight_version", 0) or 0)
        self.sample.append_model_tokens(ids, lps, version)
        self.context += ids
        self.versions.append(version)
        self.done_turns += 1

    def observe(self) -> bool:
        """Append the tool's observation (masked context); False when it no longer fits."""
        g = self.group
        n_obs = min(g.wire(g.agent.observation_tokens.sample_int(self.rng)), g.max_context - len(self.context) - 1)
        if n_obs <= 0:
            self.truncated = True
            return False
        obs = _random_ids(self.rng, g.pool, n_obs)
        self.sample.append_context_tokens(obs)
        self.context += obs
        self.new_tokens = n_obs
        return True

    async def run_turns(self) -> None:
        g = self.group
        for turn in range(self.turns):
            room = g.max_context - len(self.context)
            if room < 1:
                self.truncated = True
                break
            want = g.wire(g.agent.output_tokens.sample_int(self.rng))
            n_out = min(want, room)
            self.truncated = n_out < want
            await self.generate(n_out)
            if self.truncated or turn == self.turns - 1:
                break
            await self.sandbox_time(g.agent.tool_time_s)
            if not self.observe():
                break

    def finish(self) -> Sample:
        """Weight version, finish reason and the `sim` metadata that step_metrics and the sweeps read."""
        g, sample = self.group, self.sample
        tool_s = sum(wall for wall, _ in self.slept)
        planned_wait = sum(planned for _, planned in self.slept)
        self.alone_s += planned_wait
        sample.weight_version = min(self.versions) if self.versions else 0
        sample.finish_reason = "length" if self.truncated else "stop"
        sample.metadata["sim"] = {
            "turns": self.done_turns, "planned_turns": self.turns, "context_tokens": len(self.context) * g.k,
            "t_start": self.t_start, "t_end": unix_time(), "gen_s": self.gen_s, "tool_s": tool_s,
            "solved": self.rng.random() < g.solve_p, "truncated": self.truncated,
            # How late the orchestrator's event loop woke from the tool sleeps (wall s per sleep):
            # a loop blocked by other work stalls every rollout by this much per turn.
            "loop_lag_s": (tool_s - planned_wait / g.scale) / len(self.slept),
            # Wall seconds (model / time_scale) like t_start/t_end: the lower bound of this rollout.
            "alone_s": self.alone_s / g.scale,
        }
        return sample


async def _one_rollout(group: _Group, i: int) -> Sample:
    traj = _Trajectory(group, i)
    await traj.run_turns()
    await traj.sandbox_time(group.agent.eval_time_s)
    sample = traj.finish()
    await group.ctx.score(sample, group.row)
    return sample


async def agentic_rollout(ctx: Any, row: dict, group_size: int) -> list[Sample]:
    """G multi-turn rollouts of one task, shaped by the workload profile."""
    group = _Group.draw(ctx, row)
    return list(await asyncio.gather(*(_one_rollout(group, i) for i in range(group_size))))


def agentic_reward(sample: Sample, row: dict) -> tuple[float, dict]:
    """1 when the simulated grader passed the rollout (drawn in the rollout), else 0."""
    sim = sample.metadata.get("sim", {})
    if "solved" not in sim:
        raise ValueError("sample has no sim metadata: agentic_reward scores tandem.lab.sim.workload rollouts only")
    return (1.0 if sim["solved"] else 0.0), {"turns": sim.get("turns", 0)}


def step_metrics(samples: list[Sample]) -> dict[str, float]:
    """Per-step workload shape, merged into metrics.jsonl by the orchestrator."""
    sims = [s.metadata["sim"] for s in samples if "sim" in s.metadata]
    if not sims:
        return {}
    durations = [m["t_end"] - m["t_start"] for m in sims]
    return {
        "sim_turns_mean": statistics.fmean(m["turns"] for m in sims),
        "sim_turns_max": max(m["turns"] for m in sims),
        "sim_context_tokens_mean": statistics.fmean(m["context_tokens"] for m in sims),
        "sim_longest_rollout_s": max(durations),
        "sim_longest_alone_s": max(m.get("alone_s", 0.0) for m in sims),
        "sim_rollout_s_mean": statistics.fmean(durations),
        "sim_tool_s_mean": statistics.fmean(m["tool_s"] for m in sims),
        "sim_truncated": sum(1 for m in sims if m["truncated"]),
        "sim_loop_lag_ms": 1e3 * statistics.fmean(m.get("loop_lag_s", 0.0) for m in sims),
    }


agentic_rollout.step_metrics = step_metrics  # type: ignore[attr-defined]
