"""A harness's streamed calls, token by token, through the real EngineClient to an engine at the edge
(tests/_harness.FakeSGLang speaks SGLang's streamed /generate on loopback): chunks reach the harness
while the engine still generates, the recorded call holds the engine's ids, log-probs and versions,
an abort in mid-stream is detected, a failure is retried before the first chunk only; and
run.reproducible seeds carried into harness calls (n = 1 and n > 1). Event-based: the engine holds
its stream after the first chunk until the test lets it go."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tandem.env.parsers import parse_hermes
from tandem.harness import HarnessRollout
from tandem.harness.endpoint import HarnessEndpoint
from tandem.rollout import REQUEST_SEED, EngineClient, RolloutAborted, trajectory_seed
from tests._fakes import fake_logprob
from tests._harness import FakeSGLang, harness_cfg, harness_ctx
from tests._swe import tiny_tokenizer

TOK = tiny_tokenizer()
IDS = list(TOK.encode("hello", add_special_tokens=False)) + [TOK.eos_token_id]
USER = [{"role": "user", "content": "hi"}]


def through_endpoint(engine: FakeSGLang, harness, version: int = 3):
    """Run `harness(openai client, engine client, trajectory)` against one open trajectory."""
    async def main():
        async with engine:
            client = EngineClient(engine.url, 4, 60, retries=2)
            client.weight_version = version
            endpoint = HarnessEndpoint(client, TOK, parse_hermes)
            await endpoint.start()
            traj = endpoint.open({"temperature": 1.0, "max_new_tokens": 16})
            api = openai.AsyncOpenAI(base_url=endpoint.base_url(traj), api_key=traj.key, max_retries=0)
            try:
                return await asyncio.wait_for(harness(api, client, traj), 120), client, traj
            finally:
                await api.close()
                await endpoint.close()
                await client.close()
    return asyncio.run(main())


def test_a_streamed_call_forwards_each_token_while_the_engine_generates_and_records_the_engines_ids():
    engine = FakeSGLang(IDS, version=5)

    async def harness(api, client, traj):
        stream = await api.chat.completions.create(model="m", messages=USER, stream=True, logprobs=True,
                                                   stream_options={"include_usage": True})
        chunks = []
        async for chunk in stream:
            if not chunks:  # the first token is here and the engine still holds the rest
                seen = {"held": not engine.release.is_set(), "in_flight": client.in_flight, "calls": len(traj.calls)}
                engine.release.set()
            chunks.append(chunk)
        return chunks, seen

    (chunks, seen), client, traj = through_endpoint(engine, harness)
    assert seen == {"held": True, "in_flight": 1, "calls": 0}
    first = chunks[0].choices[0]
    assert first.delta.role == "assistant" and first.delta.content == "h" and first.finish_reason is None
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == ["h", "e", "l", "l", "o"]  # one chunk per token, as the engine sent them
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    streamed_lps = [t.logprob for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    prompt = engine.requests[0]["input_ids"]
    lps = [fake_logprob(t, len(prompt) + j) for j, t in enumerate(IDS)]
    assert streamed_lps == lps and chunks[-1].usage.completion_tokens == len(IDS)
    assert engine.requests[0]["stream"] is True and len(engine.requests) == 1
    call, = traj.calls
    assert call.prompt_ids == prompt and call.output_ids == IDS and call.logprobs == lps
    assert (call.version, call.finished_on) == (3, 5)  # labelled: the oldest version its tokens may come from
    assert call.reply[1] == "hello" and client.in_flight == 0 and client.generated_tokens == len(IDS)


def test_a_streamed_completion_and_n_choices_stream_each_choice():
    engine = FakeSGLang(IDS)
    engine.release.set()

    async def harness(api, client, traj):
        texts: dict[int, str] = {}
        async for chunk in await api.chat.completions.create(model="m", messages=USER, stream=True, n=2):
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
        done = [c.choices[0].text async for c in await api.completions.create(model="m", prompt="2+2=", stream=True)]
        return texts, done

    (texts, done), _, traj = through_endpoint(engine, harness)
    assert texts == {0: "hello", 1: "hello"} and done == ["h", "e", "l", "l", "o", "", ""]
    assert [(c.kind, c.choice, c.output_ids) for c in traj.calls] == [("chat", 0, IDS), ("chat", 1, IDS),
                                                                       ("completion", 0, IDS)]


async def streamed_until_error(api, match: str) -> str:
    """The text a chat stream delivered before it failed with an APIError matching `match`."""
    got = ""
    with pytest.raises(openai.APIError, match=match):
        async for chunk in await api.chat.completions.create(model="m", messages=USER, stream=True):
            got += chunk.choices[0].delta.content or ""
    return got


def test_an_abort_in_mid_stream_is_detected_and_the_trajectory_goes_no_further():
    engine = FakeSGLang(IDS, plan=["abort"])
    engine.release.set()

    async def harness(api, client, traj):
        got = await streamed_until_error(api, "aborted for a weight update")
        with pytest.raises(openai.InternalServerError):  # refused without generating
            await api.chat.completions.create(model="m", messages=USER, stream=True)
        return got

    got, _, traj = through_endpoint(engine, harness)
    assert got == "h" and isinstance(traj.aborted, RolloutAborted) and traj.calls == []
    assert len(engine.requests) == 1


def test_a_stream_is_retried_before_its_first_chunk_and_never_after():
    down = (503, '{"error":{"code":"no_available_workers","message":"No available workers"}}')
    engine = FakeSGLang(IDS, plan=[down, (502, "bad gateway")])
    engine.release.set()

    async def harness(api, client, traj):
        stream = await api.chat.completions.create(model="m", messages=USER, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    text, client, traj = through_endpoint(engine, harness)
    assert text == "hello" and len(engine.requests) == 3 and client.retried == 1  # the fleet-down wait is no retry
    assert traj.calls[0].output_ids == IDS

    engine = FakeSGLang(IDS, plan=["break"])
    engine.release.set()

    async def broken(api, client, traj):
        return await streamed_until_error(api, "the engines failed")

    got, client, traj = through_endpoint(engine, broken)
    assert got == "h" and len(engine.requests) == 1 and client.retried == 0 and traj.calls == []
    assert traj.aborted is None and "stream" in traj.errors[0]


def test_reproducible_seeds_reach_every_harness_call_one_per_trajectory_and_choice(tmp_path):
    """run.reproducible: the producer sets the group's seed; trajectory t of the group samples with
    its child t, each call with that and its context length, choice c of an n call with child c."""
    async def harness(client, row):
        await client.chat.completions.create(model="m", messages=USER)
        await client.chat.completions.create(model="m", messages=USER, n=2)
        async for _ in await client.chat.completions.create(model="m", messages=USER, n=2, stream=True):
            pass
        return 1.0

    def seeds_by_trajectory(group_seed):
        engine = FakeSGLang(IDS)
        engine.release.set()

        async def main():
            async with engine:
                client = EngineClient(engine.url, 8, 60)
                rollout = HarnessRollout(fn=harness)
                REQUEST_SEED.set(group_seed)
                try:
                    await rollout(harness_ctx(harness_cfg(tmp_path, harness="x.py:run"), client), {"prompt": "q"}, 2)
                finally:
                    await rollout.aclose()
                    await client.close()
        asyncio.run(main())
        by_key: dict[str, list] = {}
        for body in engine.requests:
            by_key.setdefault(body["routing_key"], []).append(body["sampling_params"].get("sampling_seed"))
        return list(by_key.values()), len(engine.requests[0]["input_ids"])

    got, length = seeds_by_trajectory(7)
    got = sorted(sorted(seeds) for seeds in got)
    want = []
    for t in range(2):
        seed = trajectory_seed(7, t)
        choices = [trajectory_seed(trajectory_seed(seed, c), length) for c in range(2)]
        want.append(sorted([trajectory_seed(seed, length), *choices, *choices]))
    assert got == sorted(want) and len({s for seeds in got for s in seeds}) == 6
    assert seeds_by_trajectory(None)[0] == [[None] * 5] * 2


def test_streamed_tool_call_markup_is_held_back_and_the_calls_come_whole_in_the_closing_delta():
    text = 'ok <tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>'
    engine = FakeSGLang(list(TOK.encode(text, add_special_tokens=False)) + [TOK.eos_token_id], finish="stop")
    engine.release.set()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]

    async def harness(api, client, traj):
        content, calls, finish = "", [], None
        async for chunk in await api.chat.completions.create(model="m", messages=USER, tools=tools, stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            calls += delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
        reply = {"role": "assistant", "content": content,
                 "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                              "arguments": c.function.arguments}}
                                for c in calls]}
        await api.chat.completions.create(model="m", tools=tools, messages=[
            *USER, reply, {"role": "tool", "tool_call_id": calls[0].id, "content": "7"}])
        return content, calls, finish

    (content, calls, finish), _, traj = through_endpoint(engine, harness)
    assert content == "ok " and finish == "tool_calls"  # the markup never reached the harness as content
    assert [(c.function.name, c.function.arguments) for c in calls] == [("lookup", '{"key": "a"}')]
    assert traj.calls[1].extended  # the reply it put together from the stream is the one recorded


def test_a_long_reply_streams_whole_though_its_cumulative_chunks_outgrow_a_default_line_bound():
    """SGLang's chunks repeat every id and log-prob so far: 20000 tokens make a ~560 KB line, past
    the 512 KiB that aiohttp's line reader takes by default (LineTooLong)."""
    ids = list(TOK.encode("ab" * 10000, add_special_tokens=False))
    engine = FakeSGLang(ids, per_chunk=8000)
    engine.release.set()

    async def harness(api, client, traj):
        stream = await api.completions.create(model="m", prompt="x", stream=True)
        return "".join([c.choices[0].text async for c in stream])

    text, _, traj = through_endpoint(engine, harness)
    assert text == "ab" * 10000 and traj.calls[0].output_ids == ids and len(traj.calls[0].logprobs) == 20000
