"""The default rollout: one prompt, G independent completions, token in and token out."""

from __future__ import annotations

import asyncio

from tandem.rollout.client import GenerationError
from tandem.rollout.context import RolloutContext
from tandem.sample import Sample


def encode_prompt(tokenizer, prompt: str | list[dict], apply_chat_template: bool) -> list[int]:
    if isinstance(prompt, list):
        return list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
    if apply_chat_template:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def read_output(out: dict) -> tuple[list[int], list[float], int, str, int]:
    """One /generate answer: its output ids, their logprobs, the weight version (the oldest its
    tokens may come from), the finish reason, and the version the engine finished on (newer when
    weights changed while it generated, partial_rollout = 'continue')."""
    meta = out.get("meta_info") or {}
    ids = [int(i) for i in out["output_ids"]]
    lps = [float(t[0]) for t in meta.get("output_token_logprobs") or []]
    if len(lps) != len(ids):
        raise GenerationError(f"engine returned {len(ids)} output ids but {len(lps)} logprobs")
    finish = meta.get("finish_reason") or {}
    version = int(meta.get("weight_version", 0) or 0)
    return (ids, lps, version, finish.get("type", "") if isinstance(finish, dict) else str(finish),
            int(meta.get("engine_weight_version") or version))


def sample_from_output(prompt_ids: list[int], out: dict, tokenizer) -> Sample:
    """Turn one /generate answer into a Sample, keeping the engine's ids and logprobs verbatim."""
    ids, lps, version, finish, finished_on = read_output(out)
    sample = Sample(prompt_ids=list(prompt_ids), weight_version=version)
    sample.append_model_tokens(ids, lps, version)
    sample.record_routing(out.get("meta_info") or {}, 0)
    sample.finish_reason = finish
    sample.response_text = out.get("text", "")
    # Above weight_version, the sample spans a weight update (partial_rollout = "continue");
    # "drain" and "abort" never produce such a sample.
    sample.metadata["finish_weight_version"] = finished_on
    return sample


async def single_turn(ctx: RolloutContext, row: dict, group_size: int) -> list[Sample]:
    """One prompt, G independent completions, each scored by the reward plug-in."""
    prompt_ids = encode_prompt(ctx.tokenizer, row[ctx.cfg.data.prompt_key], ctx.cfg.data.apply_chat_template)

    async def scored(out: dict) -> Sample:
        sample = sample_from_output(prompt_ids, out, ctx.tokenizer)
        await ctx.score(sample, row)
        return sample

    if ctx.cfg.rollout.client.group_request:
        outs = await ctx.engine.generate_many(prompt_ids, dict(ctx.sampling_params), group_size)
        return list(await asyncio.gather(*(scored(out) for out in outs)))

    async def one() -> Sample:
        return await scored(await ctx.engine.generate(prompt_ids, dict(ctx.sampling_params)))

    return list(await asyncio.gather(*(one() for _ in range(group_size))))
