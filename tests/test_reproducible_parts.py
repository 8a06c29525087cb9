"""run.reproducible, part by part (no processes): the engine's per-request sampling noise, the seeds
the client derives, the config rule, the fixed CPU split, and the row comparison the end-to-end
test (tests/test_reproducible.py) and bench/learning_under_load.py use."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from tandem.config import ConfigError, load_config
from tandem.engine.request import SamplingParams
from tandem.engine.sampling import RowParams, sample
from tandem.orchestrator.cpu_share import CpuShare
from tandem.orchestrator.reproducibility import row_differences
from tandem.rollout.client import REQUEST_SEED, EngineClient, trajectory_seed

VOCAB = 50


def batch(seeds: list[int | None], positions: list[int]) -> SimpleNamespace:
    """A running batch as sample() reads it at temperature 1 without filters: only its requests."""
    reqs = [SimpleNamespace(sampling=SamplingParams(seed=s), output_ids=[0] * n) for s, n in zip(seeds, positions)]
    return SimpleNamespace(reqs=reqs, greedy=torch.zeros(len(reqs), dtype=torch.bool))


def draw(logits: torch.Tensor, seeds: list[int | None], positions: list[int], stream_seed: int) -> list[int]:
    b = batch(seeds, positions)
    params = RowParams(all_greedy=False, any_greedy=False, uniform_temp=1.0, need_filter=False, top_n=0)
    tok, _, _ = sample(logits, b, params, torch.Generator().manual_seed(stream_seed))
    return tok.tolist()


def test_a_seeded_row_samples_the_same_token_whatever_shares_its_batch():
    torch.manual_seed(0)
    flat = torch.zeros(VOCAB)  # uniform: the noise alone decides the token
    alone = [draw(flat[None], [seed], [pos], 1)[0] for seed in range(20) for pos in (0, 3)]
    crowded = [draw(torch.stack([torch.randn(VOCAB), flat, torch.randn(VOCAB)]), [None, seed, 99], [5, pos, 1],
                    stream_seed)[1]
               for stream_seed, (seed, pos) in enumerate((s, p) for s in range(20) for p in (0, 3))]
    assert alone == crowded
    assert len(set(alone)) > 10  # seeds and positions spread over the vocabulary
    # each output position draws afresh: one seed does not repeat its first token
    assert sum(draw(flat[None], [seed], [0], 1) != draw(flat[None], [seed], [1], 1) for seed in range(20)) > 10
    # an unseeded row follows the engine's stream
    assert len({draw(flat[None], [None], [0], stream_seed)[0] for stream_seed in range(20)}) > 5


def test_seeds_are_derived_per_sample_and_turn():
    seeds = {trajectory_seed(trajectory_seed(0, group), i) for group in range(8) for i in range(16)}
    assert len(seeds) == 128 and all(0 <= s < 1 << 63 for s in seeds)
    assert trajectory_seed(3, 1) == trajectory_seed(3, 1) != trajectory_seed(1, 3)


def test_a_seeded_group_request_sends_one_seeded_call_per_sample():
    client = EngineClient("http://unused", concurrency=4, timeout_s=1.0)
    sent: list[dict] = []

    async def post(payload: dict, routing_key=None, _post=None):
        sent.append(payload)
        return {"output_ids": [1], "meta_info": {"weight_version": "0"}}, None
    client._post_with_retry = post

    async def run() -> None:
        REQUEST_SEED.set(7)
        await client.generate_many([1, 2, 3], {"max_new_tokens": 1}, 3)
    asyncio.run(run())
    assert [p["input_ids"] for p in sent] == [[1, 2, 3]] * 3
    assert sorted(p["sampling_params"]["sampling_seed"] for p in sent) == sorted(
        trajectory_seed(trajectory_seed(7, i), 3) for i in range(3))


def test_reproducible_refuses_oversampling_and_is_read():
    with pytest.raises(ConfigError, match="rollout.oversample"):
        load_config(["--run.reproducible", "true", "--rollout.oversample", "1.5"])
    assert load_config(["--run.reproducible", "true"]).run.reproducible


def test_a_fixed_split_does_not_follow_the_measurements():
    async def set_engines(threads: int) -> None:
        pass
    for adapt, expected in ((True, 2), (False, 4)):
        share = CpuShare(8, 1, True, set_engines, adapt=adapt)
        share.training_done(train_s=1.0, rollout_s=3.0)  # the engine wants 3x the trainer's core-seconds
        assert asyncio.run(share.training_starts()) == expected


def test_row_differences_skip_times_and_the_queue_but_not_learning():
    a = [{"step": 1, "reward_mean": 0.5, "step_time": 1.0, "running_groups": 3, "logprob_mismatch": 1.7e-7}]
    b = [{"step": 1, "reward_mean": 0.5, "step_time": 9.0, "running_groups": 0, "logprob_mismatch": 1.8e-7}]
    assert row_differences(a, b) == []
    assert row_differences(a, [{**b[0], "reward_mean": 0.25}]) == ["step 1 reward_mean: 0.5 != 0.25"]
    assert row_differences(a, [{**b[0], "logprob_mismatch": 0.01}])
    assert row_differences(a, a + a) == ["1 rows != 2 rows"]


def test_a_reproducible_step_waits_for_its_oldest_groups_and_a_sync_for_every_running_one():
    """B = 2, S = 1: four groups admitted under version 0 (rows 0-3); row 0 finishes last. The
    step takes rows 0 and 1 (not the first two to finish, 1 and 2), and `settled` returns only once
    rows 2 and 3 have finished too."""
    from tandem.config import TandemConfig
    from tandem.orchestrator.producer import RolloutProducer
    from tandem.rollout import PromptCursor, RolloutContext
    from tandem.sample import Sample

    cfg = TandemConfig.model_validate({"run": {"steps": 4, "reproducible": True},
                                       "rollout": {"prompts_per_step": 2, "samples_per_prompt": 1}})

    async def go() -> None:
        release = {i: asyncio.Event() for i in range(4)}

        async def rollout(ctx, row, g):
            await release[row["_index"]].wait()
            sample = Sample(prompt_ids=[1], weight_version=0)
            sample.append_model_tokens([7], [-0.5], 0)
            return [sample]

        rows = [{"prompt": str(i), "_index": i} for i in range(8)]
        producer = RolloutProducer(RolloutContext(cfg, None, None, None, None), rows, PromptCursor(8, 0, False), rollout,
                                   start_step=0, total_steps=4, staleness=1, engine_version=0)
        producer.start()
        for i in (1, 2):
            release[i].set()
        take = asyncio.create_task(producer.take(0))
        await asyncio.sleep(0.05)
        assert not take.done()  # rows 1 and 2 are done, but row 0 is older than row 2
        release[0].set()
        assert sorted(s.prompt_index for s in (await take).samples) == [0, 1]
        settled = asyncio.create_task(producer.settled())
        await asyncio.sleep(0.05)
        assert not settled.done()  # row 3 still runs
        release[3].set()
        await asyncio.wait_for(settled, 5)
        await producer.stop()
    asyncio.run(go())
