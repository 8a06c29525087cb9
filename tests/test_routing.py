"""Sticky sessions and step priority, end to end through the real sglang-router.

Two scripted engines on loopback sockets sit behind a real `sglang_router.launch_router`
started with tandem's own router command (policy 'manual', as config.toml sets it). The code
under test is tandem's EngineClient and rollout producer: every turn of one trajectory must
reach the same engine (so its prefix cache holds the conversation), and every request must
carry the priority of the training step it was generated for.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tandem.rollout import REQUEST_PRIORITY, EngineClient, PromptCursor, RolloutContext
from tandem.orchestrator.cluster import router_command, router_ready
from tandem.config import TandemConfig
from tandem.orchestrator.producer import RolloutProducer
from tandem.sample import Sample
from tests._fakes import Router, ScriptedEngine, fake_logprob
from tests._swe import tiny_tokenizer


def wait_for(probe, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise TimeoutError("router never registered both engines")


def router_workers(url: str) -> list[dict]:
    import httpx

    body = httpx.get(f"{url}/workers", timeout=5).json()
    return body.get("workers", body) if isinstance(body, dict) else body


def test_manual_policy_is_the_default_and_passes_the_assignment_mode():
    cmd = router_command(TandemConfig(), 30000, ["http://127.0.0.1:1", "http://127.0.0.1:2"], 30001)
    assert cmd[cmd.index("--policy") + 1] == "manual"
    assert cmd[cmd.index("--assignment-mode") + 1] == "min_load"
    rr = TandemConfig.model_validate({"router": {"policy": "round_robin"}})
    assert "--assignment-mode" not in router_command(rr, 30000, ["http://127.0.0.1:1"], 30001)


def test_each_trajectory_sticks_to_one_engine_and_carries_its_step_priority(tmp_path):
    tok = tiny_tokenizer()
    reply = "ok"
    with ScriptedEngine(tok, lambda prompt, turn: reply) as e0, ScriptedEngine(tok, lambda p, t: reply) as e1, \
            Router([e0.url, e1.url], tmp_path / "router.log") as router:
        wait_for(router_ready(router.url, 2))

        async def trajectory(client: EngineClient, key: str, turns: int) -> None:
            ids = tok.encode(f"task {key}", add_special_tokens=False)
            for _ in range(turns):
                out = await client.generate(ids, {"max_new_tokens": 4}, routing_key=key)
                ids = ids + out["output_ids"]

        async def main() -> None:
            client = EngineClient(router.url, concurrency=16, timeout_s=30)
            try:
                REQUEST_PRIORITY.set(-7)  # what the producer sets in the task of a step-7 group
                await asyncio.gather(*(trajectory(client, f"traj-{i}", 5) for i in range(8)))
            finally:
                await client.close()

        asyncio.run(main())
        served = {0: e0.requests, 1: e1.requests}

    by_key: dict[str, set[int]] = {}
    for engine, reqs in served.items():
        for r in reqs:
            if r["routing_key"]:
                by_key.setdefault(r["routing_key"], set()).add(engine)
    assert set(by_key) == {f"traj-{i}" for i in range(8)}
    assert all(len(engines) == 1 for engines in by_key.values()), by_key      # sticky
    assert {e for engines in by_key.values() for e in engines} == {0, 1}      # and spread over both
    keyed = [r for reqs in served.values() for r in reqs if r["routing_key"]]
    assert len(keyed) == 40 and {r["priority"] for r in keyed} == {-7}


@pytest.mark.parametrize("order, expected", [
    # admission: -(version served at admission). B = 2, S = 1: rows 0-3 are admitted under v0;
    # after step 0 trained and v1 is served, (1 + 1 + 1 - 1) * 2 - 2 buffered = 2 more: rows 4, 5.
    ("admission", [(0, 0), (1, 0), (2, 0), (3, 0), (4, -1), (5, -1)]),
    # age: -(admission order), the oldest trajectory first.
    ("age", [(0, 0), (1, -1), (2, -2), (3, -3), (4, -4), (5, -5)]),
])
def test_the_producer_gives_every_group_its_priority(order, expected):
    assert TandemConfig().rollout.staleness.request_priority == "age"
    cfg = TandemConfig.model_validate({"run": {"mode": "async", "steps": 3},
                                       "rollout": {"prompts_per_step": 2, "samples_per_prompt": 1,
                                                   "staleness": {"request_priority": order}}})
    seen: list[tuple[int, int | None]] = []

    async def fn(ctx, row, g):
        async def child() -> int | None:  # a task the rollout starts inherits the group's priority
            return REQUEST_PRIORITY.get()
        seen.append((row["_index"], await asyncio.create_task(child())))
        return [Sample(prompt_ids=[1], weight_version=producer.version) for _ in range(g)]

    rows = [{"prompt": str(i), "_index": i} for i in range(6)]
    producer = RolloutProducer(RolloutContext(cfg, None, None, None, None), rows, PromptCursor(6, 0, False), fn,
                               start_step=0, total_steps=3, staleness=1, engine_version=0)

    outside: list[int | None] = []

    async def go() -> None:  # the training loop's own context: it must never see a group's priority
        producer.start()
        for step in range(3):
            await producer.take(step)
            outside.append(REQUEST_PRIORITY.get())
            await producer.set_version(step + 1)
            await asyncio.sleep(0.01)  # the admission task runs before the next take, as in a run
        await producer.stop()

    asyncio.run(go())
    assert sorted(seen) == expected
    assert outside == [None, None, None]  # set only inside each group's task, never in the caller's context


@pytest.mark.parametrize("group_request", [True, False])
def test_a_single_turn_group_is_one_request_through_the_real_router(tmp_path, group_request):
    """rollout.client.group_request: the default single-turn rollout asks for a group's G samples in one
    batched /generate, which sglang-router forwards whole to one engine; each sample keeps its own
    tokens, logprobs and weight version. Off, the same group is G requests."""
    from tandem.rollout.single_turn import single_turn

    tok = tiny_tokenizer()
    words, lock = ["alpha", "beta", "gamma", "delta"], threading.Lock()

    def reply(prompt: str, turn: int) -> str:
        with lock:  # engines answer on several threads
            return words.pop()
    cfg = TandemConfig.model_validate({"rollout": {"client": {"group_request": group_request}, "sampling": {"max_new_tokens": 8}}})
    with ScriptedEngine(tok, reply) as e0, ScriptedEngine(tok, reply) as e1, \
            Router([e0.url, e1.url], tmp_path / "router.log") as router:
        wait_for(router_ready(router.url, 2))
        e0.weight_version = e1.weight_version = 3

        async def main() -> list[Sample]:
            client = EngineClient(router.url, concurrency=16, timeout_s=30)
            client.weight_version = 3
            ctx = RolloutContext(cfg, tok, client, None, lambda sample, row: len(sample.response_text),
                                 {"max_new_tokens": 8, "temperature": 1.0})
            try:
                return await single_turn(ctx, {"prompt": "say a word"}, 4)
            finally:
                await client.close()

        samples = asyncio.run(main())
        requests = e0.requests + e1.requests

    assert len(requests) == 4 and len({r["routing_key"] for r in requests}) == 1
    assert [r["batch"] for r in requests] == [4 if group_request else 1] * 4
    if group_request:  # one HTTP request: the four prompts reached a single engine together
        assert {len(e0.requests), len(e1.requests)} == {0, 4}
    prompt = tok.encode("say a word", add_special_tokens=False)
    assert all(r["input_ids"] == prompt for r in requests)
    assert sorted(s.response_text for s in samples) == ["alpha", "beta", "delta", "gamma"]
    for s in samples:
        ids = tok.encode(s.response_text, add_special_tokens=False) + [tok.eos_token_id]
        assert s.prompt_ids == prompt and s.response_ids == ids and s.weight_version == 3
        assert s.rollout_logprobs == [fake_logprob(t, len(prompt) + k) for k, t in enumerate(ids)]
        assert s.reward == len(s.response_text)


def test_streaming_through_the_real_router_passes_the_straggler_and_keeps_the_bound(tmp_path):
    """B = 2, S = 1, 5 steps, weights synced to both engines after every step with the real sync
    code. Row 0's trajectory takes 15 turns, every other one 1: step 0 must not wait for it,
    no trained token may lag more than S versions, and no prompt is trained twice."""
    from tandem.weights import sync_engines

    tok = tiny_tokenizer()
    cfg = TandemConfig.model_validate({"run": {"mode": "async", "steps": 5},
                                       "rollout": {"prompts_per_step": 2, "samples_per_prompt": 2}})
    with ScriptedEngine(tok, lambda p, t: "ok") as e0, ScriptedEngine(tok, lambda p, t: "ok") as e1, \
            Router([e0.url, e1.url], tmp_path / "router.log") as router:
        wait_for(router_ready(router.url, 2))

        async def rollout(ctx, row, g):
            async def one(i: int) -> Sample:
                ids = tok.encode(f"task {row['_index']}", add_special_tokens=False)
                sample = Sample(prompt_ids=list(ids))
                for _ in range(15 if row["_index"] == 0 else 1):
                    out = await ctx.engine.generate(sample.tokens, {"max_new_tokens": 2},
                                                    routing_key=f"{row['_index']}-{i}")
                    version = int(out["meta_info"]["weight_version"])
                    sample.weight_version = min(sample.weight_version, version) if sample.response_ids else version
                    sample.append_model_tokens(out["output_ids"], [t[0] for t in out["meta_info"]["output_token_logprobs"]],
                                               version)
                    await asyncio.sleep(0.05)  # the tool call
                return sample
            return list(await asyncio.gather(*(one(i) for i in range(g))))

        async def main():
            client = EngineClient(router.url, concurrency=16, timeout_s=30)
            ctx = RolloutContext(cfg, tok, client, None, None)
            producer = RolloutProducer(ctx, [{"prompt": str(i), "_index": i} for i in range(40)],
                                       PromptCursor(40, 0, False), rollout, start_step=0, total_steps=5,
                                       staleness=1, engine_version=0)
            producer.start()
            batches = []
            try:
                for step in range(5):
                    batches.append(await producer.take(step))
                    await sync_engines(client, [e0.url, e1.url], tmp_path, step + 1, "continue", 10)
                    await producer.set_version(step + 1)
            finally:
                await producer.stop()
                await client.close()
            return batches

        batches = asyncio.run(main())
        served = e0.requests + e1.requests
        priorities = {r["priority"] for r in served}
        straggler = {r["priority"] for r in served if r["routing_key"].startswith("0-")}

    assert 0 not in {s.prompt_index for s in batches[0].samples}, "step 0 waited for the straggler"
    trained = [s.prompt_index for b in batches for s in b.samples[::2]]
    assert len(trained) == len(set(trained)) == 10
    for b in batches:
        assert b.stats["token_lag_max"] <= 1 and b.stats["token_lag_0"] + b.stats["token_lag_1"] == pytest.approx(1)
        assert all(b.step - s.weight_version <= 1 for s in b.samples)
    # request_priority "age": each group's requests carry -(its admission order); row 0 came first.
    assert straggler == {0} and priorities <= {-k for k in range(40)} and len(priorities) > 10


def test_a_session_moves_to_another_engine_when_its_engine_leaves_the_router(tmp_path):
    """What the engine doctor does to a dead engine (DELETE /workers/{id}) must not strand the
    trajectories pinned to it: their next turn goes to an engine that is still there."""
    import httpx

    tok = tiny_tokenizer()
    engines = [ScriptedEngine(tok, lambda p, t: "ok").__enter__() for _ in range(2)]
    try:
        with Router([e.url for e in engines], tmp_path / "router.log") as router:
            wait_for(router_ready(router.url, 2))
            ids = tok.encode("task", add_special_tokens=False)

            async def turn(client: EngineClient) -> None:
                await client.generate(ids, {"max_new_tokens": 2}, routing_key="traj-0")

            async def main(turns: int) -> None:
                client = EngineClient(router.url, concurrency=4, timeout_s=30, retries=2)
                try:
                    for _ in range(turns):
                        await turn(client)
                finally:
                    await client.close()

            asyncio.run(main(2))
            home = next(i for i, e in enumerate(engines) if e.requests)
            assert len(engines[home].requests) == 2        # both turns on one engine
            gone = next(w for w in router_workers(router.url) if w["url"] == engines[home].url)
            assert httpx.delete(f"{router.url}/workers/{gone['id']}", timeout=5).status_code < 300
            wait_for(lambda: len(router_workers(router.url)) == 1)
            engines[home].__exit__(None, None, None)
            asyncio.run(main(2))
            other = engines[1 - home]
            assert [r["routing_key"] for r in other.requests] == ["traj-0", "traj-0"]
    finally:
        for e in engines:
            try:
                e.__exit__(None, None, None)
            except Exception:
                pass
