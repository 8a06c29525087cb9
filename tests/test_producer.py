"""The streaming producer with a fake rollout edge (no engine): admission, staleness, resume.

Every expected number below is derived by hand from the rules in producer.py's docstring:
room = (v + S + 1 - k) * B + slack - running - buffered, and step k trains a group only if
k - key_version <= S.
"""

import asyncio

import pytest

from tandem.config import TandemConfig
from tandem.config.rollout_sections import SignalConfig
from tandem.orchestrator.producer import RolloutProducer
from tandem.orchestrator.stream_stats import lag_histogram, turns_of
from tandem.rollout import PromptCursor, RolloutAborted, RolloutContext
from tandem.sample import Sample


def make(mode="async", staleness=1, prompts=2, group=2, oversample=1.0, steps=4, fn=None, version=0,
         staleness_by="oldest_token", start_step=0, cursor=None, in_flight=(), hold=False, signal=None):
    cfg = TandemConfig.model_validate({
        "run": {"mode": mode, "steps": steps},
        "rollout": {"prompts_per_step": prompts, "samples_per_prompt": group, "oversample": oversample,
                    "staleness": {"max": staleness, "measured_by": staleness_by, "admission_hold": hold},
                    "signal": signal or {}},
    })
    launches = []

    async def default_fn(ctx, row, g):
        launches.append((row["_index"], producer.version))
        await asyncio.sleep(0)
        return [one_token(producer.version) for _ in range(g)]

    rows = [{"prompt": str(i), "_index": i} for i in range(50)]
    ctx = RolloutContext(cfg, None, None, None, None)
    producer = RolloutProducer(ctx, rows, cursor or PromptCursor(len(rows), 0, False), fn or default_fn,
                               start_step=start_step, total_steps=steps, staleness=cfg.effective_staleness,
                               engine_version=version, in_flight_rows=in_flight)
    return producer, launches


def one_token(version):
    s = Sample(prompt_ids=[1], weight_version=version)
    s.append_model_tokens([7], [-0.5], version)
    return s


async def settle():
    for _ in range(5):
        await asyncio.sleep(0.01)


def in_use(producer):
    return len(producer._running) + len(producer._buffer)


def rows_of(batch):
    return sorted({s.prompt_index for s in batch.samples})


# ----------------------------------------------------------------------------- admission
def test_admission_rule_by_hand():
    """B = 3, S = 2, oversample 1.34 -> slack = ceil(4.02) - 3 = 2; groups never finish here."""
    async def never(ctx, row, g):
        await asyncio.Event().wait()

    async def go():
        producer, _ = make(staleness=2, prompts=3, oversample=1.34, steps=10, fn=never)
        assert producer.room() == (0 + 2 + 1 - 0) * 3 + 2 == 11
        producer.start()
        await settle()
        assert in_use(producer) == 11 and producer.room() == 0
        await producer.set_version(1)
        await settle()
        assert in_use(producer) == (1 + 2 + 1 - 0) * 3 + 2 == 14
        await producer.stop()
    asyncio.run(go())


def test_admission_stops_at_the_last_step():
    """steps = 2, S = 2: only (min(0 + 3, 2) - 0) * B groups are ever useful."""
    async def go():
        producer, launches = make(staleness=2, prompts=2, steps=2)
        producer.start()
        await settle()
        assert len(launches) == 4
        await producer.take(0)
        await producer.take(1)
        await producer.set_version(2)
        await settle()
        assert len(launches) == 4, "nothing is admitted past the last step"
        await producer.stop()
    asyncio.run(go())


def test_sync_mode_admits_a_step_only_on_its_own_weights():
    async def go():
        producer, launches = make(mode="sync")
        producer.start()
        batch0 = await producer.take(0)
        assert len(batch0.samples) == 4 and batch0.dropped_stale == 0
        await settle()
        assert [v for _, v in launches] == [0, 0], "sync mode must not roll out step 1 on version 0"
        await producer.set_version(1)
        batch1 = await producer.take(1)
        assert {s.weight_version for s in batch1.samples} == {1}
        assert [v for _, v in launches] == [0, 0, 1, 1]
        assert batch1.stats["token_lag_0"] == 1.0
        await producer.stop()
    asyncio.run(go())


def test_async_runs_one_version_ahead_and_no_further():
    async def go():
        producer, launches = make(staleness=1)
        producer.start()
        await settle()
        assert len(launches) == (0 + 1 + 1) * 2 == 4
        await producer.take(0)
        await settle()
        assert len(launches) == 4, "(0 + 2 - 1) * 2 = 2 allowed, 2 already buffered"
        batch1 = await producer.take(1)
        assert [1 - s.weight_version for s in batch1.samples] == [1, 1, 1, 1]
        assert batch1.stats["token_lag_1"] == 1.0 and batch1.stats["token_lag_mean"] == 1.0
        await producer.set_version(1)
        await settle()
        assert len(launches) == 4 + 2, "v = 1, k = 2: (1 + 1 + 1 - 2) * 2 = 2, nothing running or buffered"
        await producer.stop()
    asyncio.run(go())


# ----------------------------------------------------------------------------- streaming
def test_a_straggler_does_not_hold_the_step_and_is_trained_first_when_it_finishes():
    release = asyncio.Event

    async def go():
        gate = release()

        async def fn(ctx, row, g):
            if row["_index"] == 0:
                await gate.wait()
            return [Sample(prompt_ids=[1], weight_version=0) for _ in range(g)]

        producer, _ = make(staleness=1, prompts=2, fn=fn)
        producer.start()
        batch0 = await asyncio.wait_for(producer.take(0), 2)
        assert rows_of(batch0) == [1, 2], "step 0 takes the first two to finish, not row 0"
        gate.set()
        await settle()
        batch1 = await producer.take(1)
        assert rows_of(batch1) == [0, 3], "the oldest admitted (row 0) goes first once it finished"
        await producer.stop()
    asyncio.run(go())


def test_oldest_token_and_admission_rules_differ_by_hand():
    """A group admitted under v0 whose tokens all came from v1, trained at step 2 with S = 1:
    oldest_token: 2 - 1 = 1 <= 1, trained; admission: 2 - 0 = 2 > 1, dropped."""
    async def run(rule):
        gate = asyncio.Event()

        async def fn(ctx, row, g):
            if row["_index"] == 0:
                await gate.wait()
                return [Sample(prompt_ids=[1], weight_version=1) for _ in range(g)]
            return [Sample(prompt_ids=[1], weight_version=producer.version) for _ in range(g)]

        producer, _ = make(staleness=1, prompts=1, group=1, steps=6, fn=fn, staleness_by=rule)
        producer.start()
        await producer.take(0)
        await producer.set_version(1)
        await producer.take(1)
        await producer.set_version(2)
        gate.set()
        await settle()
        batch = await producer.take(2)
        await producer.stop()
        return batch
    kept, dropped = asyncio.run(run("oldest_token")), asyncio.run(run("admission"))
    assert rows_of(kept) == [0] and kept.dropped_stale == 0
    assert 0 not in rows_of(dropped)
    # Under the admission rule row 0 is cancelled at take(1) already (admitted at 0, the next step
    # is 2, 2 - 0 > 1): it is counted as discarded, not dropped after it finished.
    assert dropped.dropped_stale == 0


def test_a_stale_finished_group_is_dropped_and_replaced():
    calls = {"n": 0}

    async def fn(ctx, row, g):
        calls["n"] += 1
        version = -5 if calls["n"] == 1 else 0  # the first group's tokens came from an old engine
        return [Sample(prompt_ids=[1], weight_version=version) for _ in range(g)]

    async def go():
        producer, _ = make(staleness=1, prompts=2, group=3, fn=fn)
        producer.start()
        batch = await producer.take(0)
        assert batch.dropped_stale == 3
        assert len(batch.samples) == 6 and all(0 - s.weight_version <= 1 for s in batch.samples)
        await producer.stop()
    asyncio.run(go())


def test_admission_hold_waits_for_the_tail():
    """S = 1, B = 1: after take(0), a running group admitted at v0 must make step 1; with the hold
    nothing new is admitted until it finished."""
    async def go():
        gate = asyncio.Event()

        async def fn(ctx, row, g):
            launches.append((row["_index"], producer.version))
            if row["_index"] == 1:
                await gate.wait()
            return [Sample(prompt_ids=[1], weight_version=producer.version) for _ in range(g)]

        launches = []
        producer, _ = make(staleness=1, prompts=1, group=1, steps=6, fn=fn, hold=True)
        producer.start()
        await producer.take(0)
        await producer.set_version(1)
        await settle()
        assert [r for r, _ in launches] == [0, 1], "row 1 (admitted at v0) holds admission"
        gate.set()
        await settle()
        # Then room = (1 + 2 - 1) * 1 - 1 buffered = 1: row 2, which fills it.
        assert [r for r, _ in launches] == [0, 1, 2]
        await producer.stop()
    asyncio.run(go())


# ----------------------------------------------------------------------------- straggler hooks
def test_sync_oversampling_keeps_the_first_to_finish():
    async def fn(ctx, row, g):
        await asyncio.sleep(5 if row["_index"] == 0 else 0.01)
        return [Sample(prompt_ids=[row["_index"]]) for _ in range(g)]

    async def go():
        producer, _ = make(mode="sync", prompts=2, oversample=1.5, fn=fn)
        producer.start()
        batch = await asyncio.wait_for(producer.take(0), 2)
        assert rows_of(batch) == [1, 2]
        assert batch.discarded == 1, "sync mode cancels the loser: it ran on this step's weights"
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


# ----------------------------------------------------------------------------- resume
async def _train(producer, steps, first_version):
    trained = []
    for k in steps:
        trained.append(rows_of(await producer.take(k)))
        await producer.set_version(first_version + len(trained))
        await settle()
    return trained


def test_resume_regenerates_the_in_flight_prompts_first_none_lost_none_twice():
    """B = 2, S = 1, instant rollouts in admission order. Uninterrupted: steps 0-3 train rows
    (0,1) (2,3) (4,5) (6,7). A checkpoint after step 1 (trained, version 2 served) holds rows 4, 5
    (admitted at v1) and 6, 7 (admitted at v2) in flight and the cursor at 8; the resumed run
    regenerates them first and trains the same rows."""
    async def uninterrupted():
        producer, _ = make(staleness=1, prompts=2, steps=4)
        producer.start()
        trained = await _train(producer, range(4), 0)
        await producer.stop()
        return trained

    async def interrupted():
        producer, _ = make(staleness=1, prompts=2, steps=4)
        producer.start()
        before = await _train(producer, range(2), 0)
        state = producer.checkpoint_state()
        await producer.stop()
        cursor = PromptCursor(50, 0, False, state["cursor"]["epoch"], state["cursor"]["position"])
        resumed, launches = make(staleness=1, prompts=2, steps=4, start_step=2, version=2, cursor=cursor,
                                 in_flight=state["in_flight_rows"])
        resumed.start()
        after = await _train(resumed, range(2, 4), 2)
        await resumed.stop()
        return before, state, after, launches

    full = asyncio.run(uninterrupted())
    before, state, after, launches = asyncio.run(interrupted())
    assert full == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert state["in_flight_rows"] == [4, 5, 6, 7] and state["cursor"]["position"] == 8
    assert [r for r, _ in launches] == [4, 5, 6, 7], "in-flight prompts are regenerated first"
    assert before + after == full


def test_a_checkpoint_taken_before_the_requeued_prompts_are_readmitted_still_holds_them():
    """A resumed run requeues the checkpoint's in-flight rows [4, 5, 6, 7] at version 1, step 2:
    room (1 + 1 + 1 - 2) * 2 = 2, so rows 4 and 5 run again and 6 and 7 wait in the queue. A
    checkpoint taken now must hold all four, ahead of the cursor, or a second crash loses 6 and 7."""
    async def never(ctx, row, g):
        await asyncio.Event().wait()

    async def go():
        cursor = PromptCursor(50, 0, False, 0, 8)
        producer, _ = make(staleness=1, prompts=2, steps=6, start_step=2, version=1, cursor=cursor,
                           in_flight=[4, 5, 6, 7], fn=never)
        producer.start()
        await settle()
        running = sorted(f.row_pos for f in producer._running.values())
        state = producer.checkpoint_state()
        await producer.stop()
        return running, state
    running, state = asyncio.run(go())
    assert running == [4, 5]
    assert sorted(state["in_flight_rows"]) == [4, 5, 6, 7] and state["cursor"]["position"] == 8


def test_staleness_at_its_edge_lag_s_plus_one_is_dropped():
    """S = 1, B = 1, G = 1, oldest_token. Rows 0 and 1 are admitted at v0 (room (0 + 1 + 1) * 1 = 2);
    row 1 finishes at once and feeds step 0; row 0 runs on, reporting no answer (so it is never
    doomed). Step 1 takes row 2 (v1). Row 3 is admitted at v2, then row 0 finishes with tokens of
    v0: at step 2 its lag is 2 - 0 = 2 = S + 1, one past the bound: dropped (1 sample), and step 2
    trains row 3 (lag 0)."""
    async def go():
        gate = asyncio.Event()

        async def fn(ctx, row, g):
            if row["_index"] == 0:
                await gate.wait()
                return [Sample(prompt_ids=[1], weight_version=0) for _ in range(g)]
            return [Sample(prompt_ids=[1], weight_version=producer.version) for _ in range(g)]

        producer, _ = make(staleness=1, prompts=1, group=1, steps=6, fn=fn)
        producer.start()
        assert rows_of(await producer.take(0)) == [1]
        await producer.set_version(1)
        assert rows_of(await producer.take(1)) == [2]
        await producer.set_version(2)
        await settle()
        gate.set()
        await settle()
        assert sorted(g.row_pos for g in producer._buffer) == [0, 3], "both finished before step 2 takes"
        batch = await producer.take(2)
        await producer.stop()
        return batch
    batch = asyncio.run(go())
    assert rows_of(batch) == [3] and batch.dropped_stale == 1


def test_every_group_of_a_step_has_its_own_group_id():
    """Advantages are normalised per group: the producer gives each group one id of its own."""
    async def go():
        producer, _ = make(mode="sync", prompts=3, group=4)
        producer.start()
        batch = await producer.take(0)
        await producer.stop()
        return batch
    batch = asyncio.run(go())
    ids = {}
    for s in batch.samples:
        ids.setdefault(s.prompt_index, set()).add(s.group_id)
    assert all(len(v) == 1 for v in ids.values()) and len(set().union(*ids.values())) == 3, ids


# ----------------------------------------------------------------------------- stats
def test_turns_and_lag_histogram_by_hand():
    s = Sample(prompt_ids=[1], weight_version=3)
    s.append_model_tokens([1, 2], [0.0, 0.0], version=3)
    s.append_context_tokens([9])
    s.append_model_tokens([3], [0.0], version=4)
    s.append_context_tokens([9, 9])
    s.append_model_tokens([5, 6, 7], [0.0] * 3, version=5)
    assert turns_of(s) == 3
    assert s.model_token_versions() == [3, 3, 4, 5, 5, 5]
    # Step 5, S = 2: lags 2,2,1,0,0,0.
    hist = lag_histogram([5 - v for v in s.model_token_versions()], 2)
    assert hist == {"token_lag_0": 0.5, "token_lag_1": 1 / 6, "token_lag_2": 1 / 3,
                    "token_lag_mean": 5 / 6, "token_lag_max": 2.0}


def test_length_bias_is_trained_over_finished_in_the_window():
    """After step 0, row 2 (3 turns) finishes, then row 1 (1 turn, admitted earlier). Step 1
    trains the older row 1: trained 1 turn, finished in the window (3 + 1) / 2 = 2, ratio 0.5."""
    def sample(turns):
        s = Sample(prompt_ids=[1])
        for _ in range(turns):
            s.append_model_tokens([1], [0.0])
            s.append_context_tokens([2])
        return s

    async def go():
        gate = asyncio.Event()

        async def fn(ctx, row, g):
            if row["_index"] == 1:
                await gate.wait()
            return [sample(1 if row["_index"] < 2 else 3) for _ in range(g)]

        producer, _ = make(staleness=1, prompts=1, group=1, steps=6, fn=fn)
        producer.start()
        await producer.take(0)  # row 0 (1 turn)
        await producer.set_version(1)
        gate.set()
        await settle()
        batch = await producer.take(1)
        await producer.stop()
        return batch
    batch = asyncio.run(go())
    assert rows_of(batch) == [1]
    assert batch.stats["trained_turns_mean"] == 1.0 and batch.stats["finished_turns_mean"] == 2.0
    assert batch.stats["length_bias_turns"] == 0.5 and batch.stats["finished_in_window"] == 2.0


def test_a_running_group_whose_answers_are_already_too_old_is_cancelled():
    """oldest_token, S = 1, B = 1, slack 1: rows 0-2 are admitted under v0, row 3 under v1. Row 1
    got an answer under v0 and keeps running: at take(1) the next step is 2 and 2 - 0 > 1, so it
    can never be trained: cancelled (discarded), not finished. Row 2, admitted under v0 too but
    with no answer yet, may still produce only newer tokens: it runs on."""
    from tandem.rollout import GROUP_PROGRESS

    async def go():
        forever = asyncio.Event()

        async def fn(ctx, row, g):
            if row["_index"] == 1:
                GROUP_PROGRESS.get().saw(0, 5)  # what EngineClient.generate records per answer
                await forever.wait()
            if row["_index"] == 2:
                await forever.wait()
            return [one_token(producer.version) for _ in range(g)]

        producer, _ = make(staleness=1, prompts=1, group=1, steps=6, fn=fn, oversample=2.0)
        producer.start()
        assert rows_of(await producer.take(0)) == [0]
        await producer.set_version(1)
        await settle()
        batch = await producer.take(1)
        assert rows_of(batch) == [3]
        running = sorted(producer.rows[f.row_pos]["_index"] for f in producer._running.values())
        await producer.stop()
        return batch, running
    batch, running = asyncio.run(go())
    assert batch.discarded == 1
    assert 1 not in running and 2 in running
    # The window: row 3 finished (1 turn, 1 token) and row 1 was cancelled after 1 answer of 5
    # tokens. Trained: row 3. Tokens: 1 / ((1 + 5) / 2) = 1/3; turns: 1 / 1.
    assert batch.stats["cancelled_in_window"] == 1 and batch.stats["finished_in_window"] == 1
    assert batch.stats["length_bias_tokens"] == pytest.approx(1 / 3) and batch.stats["length_bias_turns"] == 1.0


# ----------------------------------------------------------------------------- dynamic sampling
def rewarded_producer(rewards_by_row: dict[int, list[float]], steps: int, **signal):
    """Sync, B = 2, G = 2: a producer whose group for row i has the rewards rewards_by_row[i]
    (default [1, 0]), generated under the version it serves; and the rows it launched, in order."""
    launches: list = []

    async def fn(ctx, row, g):
        launches.append(row["_index"])
        await asyncio.sleep(0)
        out = []
        for r in rewards_by_row.get(row["_index"], [1.0, 0.0]):
            s = one_token(producer.version)
            s.reward = r
            out.append(s)
        return out

    # through the section's model, so a test's keywords are [rollout.signal] keys (tests/_config_keys.py sees them)
    producer, _ = make(mode="sync", prompts=2, group=2, steps=steps, fn=fn, signal=SignalConfig(**signal).model_dump())
    return producer, launches


def take_one(producer):
    async def go():
        producer.start()
        batch = await producer.take(0)
        await producer.stop()
        return batch
    return asyncio.run(go())


def test_dynamic_sampling_replaces_zero_variance_groups_up_to_the_bound_then_trains_fewer():
    """Sync, B = 2, G = 2, max_refills_per_step = 1. Rows 0, 2 and 4 give equal rewards (no signal).
    Step 0: rows 0, 1 admitted; row 0 is dropped and replaced (the one refill) by row 2; row 2 is
    dropped too, past the bound: it gives up its slot (room = 2 - 1 forfeited - 1 buffered = 0), so
    the step trains row 1 alone; filtered fraction 2 / (2 + 1). Step 1: rows 3, 4; row 4 dropped and
    replaced by row 5 -> rows 3 and 5, fraction 1 / 3."""
    zero = {0: [1.0, 1.0], 2: [0.0, 0.0], 4: [1.0, 1.0]}
    producer, launches = rewarded_producer(zero, 2, dynamic_sampling=True, max_refills_per_step=1)

    async def go():
        producer.start()
        await settle()
        assert launches == [0, 1, 2] and producer.room() == 0, "the forfeited slot stays empty"
        first = await producer.take(0)
        await producer.set_version(1)
        second = await producer.take(1)
        await producer.stop()
        return first, second

    first, second = asyncio.run(go())
    assert rows_of(first) == [1] and rows_of(second) == [3, 5]
    assert (first.stats["groups_filtered"], first.stats["groups_forfeited"]) == (2, 1)
    assert first.stats["groups_filtered_fraction"] == pytest.approx(2 / 3)
    assert first.stats["filtered_reward_mean"] == pytest.approx(0.5)  # rows 0 (all 1) and 2 (all 0)
    assert (second.stats["groups_filtered"], second.stats["groups_forfeited"]) == (1, 0)
    assert second.stats["groups_filtered_fraction"] == pytest.approx(1 / 3)
    assert launches == [0, 1, 2, 3, 4, 5], "no prompt beyond the refills was drawn"


def test_dynamic_sampling_keeps_the_last_slot_whatever_comes():
    """B = 2, no refills allowed, every group zero-variance: the first gives up its slot, the
    second is the step's last slot and is trained although it has no signal."""
    producer, launches = rewarded_producer({i: [1.0, 1.0] for i in range(9)}, 1, dynamic_sampling=True,
                                           max_refills_per_step=0)
    batch = take_one(producer)
    assert len(batch.groups) == 1 and launches == [0, 1]
    assert (batch.stats["groups_filtered"], batch.stats["groups_forfeited"]) == (1, 1)


def test_without_dynamic_sampling_zero_variance_groups_are_trained():
    batch = take_one(rewarded_producer({0: [1.0, 1.0]}, 1)[0])
    assert rows_of(batch) == [0, 1] and batch.stats["groups_filtered"] == 0
