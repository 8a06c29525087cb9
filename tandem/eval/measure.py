"""One evaluation: the run's own rollout function (single-turn, an environment's episodes, the
coding agent) on the held-out prompts, at one weight version, and the figures it gives.

Evaluation requests ride the training rollouts' engines and client, at EVAL_PRIORITY: below any
training request, so engines that schedule by priority (engine.priority_scheduling) serve
training first and evaluation in the gaps. At most half the client's concurrency is evaluation's.

pass@1 is the mean over prompts of the fraction of their samples that pass (reward >=
eval.pass_reward): the unbiased estimate from k samples. pass@k is the fraction of prompts with
at least one passing sample among their k (eval.samples_per_prompt). Each figure is tagged with
the weight version it measured; a sample with a token from another version (the engines moved on
under it) marks the evaluation `cut_short` instead of being mixed in silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Callable

from tandem.rollout import REQUEST_PRIORITY, RolloutContext, check_rollout_result
from tandem.sample import Sample

EVAL_PRIORITY = -(2**31 - 1)
"""SGLang serves larger priorities first; training requests carry minus their admission order or
version (tandem.orchestrator.producer), so the smallest int32 puts evaluation behind all of them."""


@dataclass
class EvalOutcome:
    step: int
    """Steps trained on the weights evaluated (0: the starting weights)."""
    version: int
    samples: list[Sample] = field(default_factory=list)
    """Per prompt, in held-out order, its samples one after another."""
    errors: list[str] = field(default_factory=list)
    """'prompt I: ExceptionType: message' of each prompt whose rollout raised (left out of the figures)."""
    seconds: float = 0.0
    row: dict = field(default_factory=dict)


def eval_context(ctx: RolloutContext) -> RolloutContext:
    """The training context with evaluation's sampling settings (eval.temperature; the rest rollout.sampling's)."""
    return dataclasses.replace(ctx, sampling_params={**ctx.sampling_params, "temperature": ctx.cfg.eval.temperature})


def off_version(samples: list[Sample], version: int) -> int:
    """Samples with a model token (or a label) from a version other than `version` (an environment's
    observation and template tokens carry no version: -1)."""
    return sum(1 for s in samples
               if s.weight_version != version or any(v not in (version, -1) for v in s.token_versions)
               or int(s.metadata.get("finish_weight_version", version)) != version)


def figures(per_prompt: list[list[Sample]], pass_reward: float) -> dict[str, float]:
    """eval/reward_mean, eval/pass@1, eval/pass@k and the shape of what was measured."""
    samples = [s for group in per_prompt for s in group]
    if not samples:
        return {"eval/prompts": 0, "eval/samples": 0}
    passed = [[s.reward >= pass_reward for s in group] for group in per_prompt]
    return {
        "eval/reward_mean": statistics.fmean(s.reward for s in samples),
        "eval/pass@1": statistics.fmean(statistics.fmean(p) for p in passed),
        "eval/pass@k": statistics.fmean(float(any(p)) for p in passed),
        "eval/k": max(len(g) for g in per_prompt),
        "eval/response_len_mean": statistics.fmean(s.num_model_tokens for s in samples),
        "eval/prompts": len(per_prompt), "eval/samples": len(samples),
    }


async def evaluate(ctx: RolloutContext, rollout_fn: Callable, rows: list[dict], step: int, version: int) -> EvalOutcome:
    """Evaluate the weights the engines serve (`version`, after `step` steps) on `rows`; the row of
    figures is in the outcome's `row` (eval/*, step, weight_version, eval_time, cut_short)."""
    REQUEST_PRIORITY.set(EVAL_PRIORITY)  # this task's context, and the prompts' tasks it starts
    ev, clock = ctx.cfg.eval, asyncio.get_running_loop().time
    started = clock()
    ectx = eval_context(ctx)
    limit = asyncio.Semaphore(max(1, ctx.cfg.rollout.client.concurrency // (2 * ev.samples_per_prompt)))
    outcome = EvalOutcome(step, version)

    async def one(index: int, row: dict) -> list[Sample]:
        async with limit:
            try:
                return check_rollout_result(await rollout_fn(ectx, row, ev.samples_per_prompt), ctx.cfg.rollout.function)
            except Exception as err:  # counted and named; the other prompts still count
                outcome.errors.append(f"prompt {index}: {type(err).__name__}: {err}")
                return []

    groups = [g for g in await asyncio.gather(*(one(i, r) for i, r in enumerate(rows))) if g]
    for index, group in enumerate(groups):
        for i, s in enumerate(group):
            s.group_id = index
            s.metadata.setdefault("sample_in_group", i)
    outcome.samples = [s for g in groups for s in g]
    outcome.seconds = clock() - started
    plugin = getattr(rollout_fn, "step_metrics", None)
    own = {f"eval/{k}": v for k, v in (plugin(outcome.samples) if plugin and outcome.samples else {}).items()}
    outcome.row = {"step": step, "weight_version": version, **figures(groups, ev.pass_reward), **own,
                   "eval/errors": len(outcome.errors), "eval_time": outcome.seconds,
                   "cut_short": off_version(outcome.samples, version) > 0}
    return outcome
