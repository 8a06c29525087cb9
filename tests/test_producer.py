"""The staleness-gated producer with a fake rollout edge (no engine): the gate is the mode."""

import asyncio

import pytest

from tandem.rollout import PromptCursor, RolloutAborted, RolloutContext
from tandem.config import TandemConfig
from tandem.orchestrator.producer import RolloutProducer
from tandem.sample import Sample


def make(mode="async", staleness=1, prompts=2, group=2, oversample=1.0, steps=4, fn=None, version=0):
    cfg = TandemConfig.model_validate({
        "run": {"mode": mode, "steps": steps},
        "rollout": {"max_staleness": staleness, "prompts_per_step": prompts, "samples_per_prompt": group,
                    "oversample": oversample},
    })
    launches = []

    async def default_fn(ctx, row, g):
        launches.append((row["_index"], producer.version))
        await asyncio.sleep(0)
        return [Sample(prompt_ids=[1], weight_version=producer.version) for _ in range(g)]

    rows = [{"prompt": str(i), "_index": i} for i in range(50)]
    ctx = RolloutContext(cfg, None, None, None, None)
    producer = RolloutProducer(ctx, rows, PromptCursor(len(rows), 0, False), fn or default_fn, start_step=0,
                               total_steps=steps, staleness=cfg.effective_staleness, engine_version=version)
    return producer, launches


async def _launched_for(producer, step):
    await asyncio.sleep(0.05)
    return step in producer._first_launch


def test_sync_mode_waits_for_the_weights_of_the_step():
    async def go():
        producer, _ = make(mode="sync")
        producer.start()
        batch0 = await producer.take(0)
        assert len(batch0.samples) == 4 and batch0.dropped_stale == 0
        assert not await _launched_for(producer, 1), "sync mode must not roll out step 1 on version 0"
        await producer.set_version(1)
        batch1 = await producer.take(1)
        assert {s.weight_version for s in batch1.samples} == {1}
        await producer.stop()
    asyncio.run(go())


def test_async_mode_runs_one_version_ahead_and_no_further():
    async def go():
        producer, _ = make(mode="async", staleness=1)
        producer.start()
        await producer.take(0)
        assert await _launched_for(producer, 1), "step 1 may start on version 0 with staleness 1"
        assert not await _launched_for(producer, 2), "step 2 needs version >= 1"
        batch1 = await producer.take(1)
        assert [1 - s.weight_version for s in batch1.samples] == [1, 1, 1, 1]
        await producer.set_version(1)
        assert await _launched_for(producer, 2)
        await producer.stop()
    asyncio.run(go())


def test_samples_older_than_the_bound_are_dropped_and_replaced():
    calls = {"n": 0}

    async def fn(ctx, row, g):
        calls["n"] += 1
        # The first group pretends its tokens came from an old engine (version -5).
        version = -5 if calls["n"] == 1 else 0
        return [Sample(prompt_ids=[1], weight_version=version) for _ in range(g)]

    async def go():
        producer, _ = make(mode="async", staleness=1, prompts=2, group=3, fn=fn)
        producer.start()
        batch = await producer.take(0)
        assert batch.dropped_stale == 3
        assert len(batch.samples) == 6 and all(0 - s.weight_version <= 1 for s in batch.samples)
        await producer.stop()
    asyncio.run(go())


def test_oversampling_keeps_the_first_to_finish():
    async def fn(ctx, row, g):
        # Row 0 is a straggler; the rest finish at once.
        await asyncio.sleep(5 if row["_index"] == 0 else 0.01)
        return [Sample(prompt_ids=[row["_index"]]) for _ in range(g)]

    async def go():
        producer, _ = make(prompts=2, oversample=1.5, fn=fn)
        producer.start()
        batch = await asyncio.wait_for(producer.take(0), 2)
        assert sorted({s.prompt_index for s in batch.samples}) == [1, 2]
        assert batch.discarded == 1
        await producer.stop()
    asyncio.run(go())


def test_aborted_groups_are_recycled():
    seen = {"n": 0}

    async def fn(ctx, row, g):
        seen["n"] += 1
        if seen["n"] == 1:
            raise RolloutAborted("weight update")
        return [Sample(prompt_ids=[1]) for _ in range(g)]

    async def go():
        producer, _ = make(prompts=1, fn=fn)
        producer.start()
        batch = await producer.take(0)
        assert batch.recycled == 1 and len(batch.samples) == 2
        await producer.stop()
    asyncio.run(go())


def test_a_failing_rollout_stops_the_step_loudly():
    async def fn(ctx, row, g):
        raise ValueError("boom")

    async def go():
        producer, _ = make(prompts=1, fn=fn)
        producer.start()
        with pytest.raises(RuntimeError, match="boom"):
            await producer.take(0)
        await producer.stop()
    asyncio.run(go())
