"""An outside harness through the per-trajectory endpoint, the real router and the embedded engine.

The harness is written only against the official openai client: chat completions with tools (plain
and streamed token by token, SGLang's streamed /generate through the router), its own history, one
rewrite of it, and completions. Every /generate the endpoint
sends is tapped on its way to the router; each recorded call must hold exactly the ids the engine
got and returned, and replaying its prompt on the engine greedily must give the same completion
ids and log-probs, token for token.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from engine_conformance import LOGPROB_TOL, start_engine, stop_process
from tandem.config import TandemConfig
from tandem.harness import HarnessRollout
from tandem.model_source import load_tokenizer
from tandem.rollout import EngineClient, RolloutContext, sampling_params_from_config
from tests._fakes import Router

LOOKUP_TOOL = {"type": "function", "function": {"name": "lookup", "description": "Return the secret digit.",
                                                  "parameters": {"type": "object", "properties": {}}}}
TINY = {"tiny": {"tool_tokens": 1}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    work = tmp_path_factory.mktemp("harness_engine")
    engine = start_engine(work, "embedded", model=TINY)
    tok = load_tokenizer(engine.model_path)
    try:
        with Router(engine.url, work / "router.log") as router:
            router.wait_routing(tok.encode("hi", add_special_tokens=False))
            yield engine, router, tok
    finally:
        stop_process(engine.proc)


async def outside_harness(client, row):
    """What a user's agent does: its own history, tools, a stream, a rewrite, completions."""
    messages = [{"role": "user", "content": row["prompt"]}]
    first = await client.chat.completions.create(model="policy", messages=messages, tools=[LOOKUP_TOOL],
                                                 max_tokens=6, logprobs=True)
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": "call_0", "content": "7777"}]
    await client.chat.completions.create(model="policy", messages=messages, tools=[LOOKUP_TOOL], max_tokens=5)
    summary = [{"role": "user", "content": "Summary: the secret is 7. Answer."}]  # the history rewritten
    stream = await client.chat.completions.create(model="policy", messages=summary, tools=[LOOKUP_TOOL],
                                                  max_tokens=4, stream=True)
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    done = await client.completions.create(model="policy", prompt="2+2=", max_tokens=3)
    return 1.0, {"streamed": streamed, "completion": done.choices[0].text}


def tapped_client(url: str, taps: list, chunks: list) -> EngineClient:
    """An engine client whose /generate answers are tapped; a streamed one's chunks too, in `chunks`."""
    client = EngineClient(url, 8, 120)
    post, stream_to = client._post, client._stream_to

    async def tap(payload, headers):
        status, body = await post(payload, headers)
        taps.append((payload, body))
        return status, body

    async def tap_stream(base_url, payload, headers, on_chunk):
        async def seen(chunk):
            chunks.append(chunk)
            await on_chunk(chunk)
        status, body = await stream_to(base_url, payload, headers, seen)
        taps.append((payload, body))
        return status, body

    client._post, client._stream_to = tap, tap_stream
    return client


def test_every_call_holds_the_engines_own_tokens(fleet, tmp_path):
    engine, router, tok = fleet
    cfg = TandemConfig.model_validate({"run": {"run_dir": str(tmp_path)}, "model": TINY, "rollout": {
        "harness": "tests/test_harness_capture.py:outside_harness", "harness_timeout_s": 300,
        "sampling": {"temperature": 0.0, "max_new_tokens": 5}}})
    taps: list = []
    chunks: list = []

    async def main():
        client = tapped_client(router.url, taps, chunks)
        ctx = RolloutContext(cfg, tok, client, ThreadPoolExecutor(4), None, sampling_params_from_config(cfg))
        rollout = HarnessRollout(fn=outside_harness)
        try:
            samples = await rollout(ctx, {"prompt": "What is the secret?"}, 1)
        finally:
            await rollout.aclose()
            await client.close()
        return samples

    samples = asyncio.run(main())
    meta = samples[0].metadata["harness"]
    calls = meta["calls"]
    assert [c["kind"] for c in calls] == ["chat", "chat", "chat", "completion"]
    assert len(taps) == 4 and [c["extended"] for c in calls][:3] == [False, True, False]
    assert samples[0].reward == 1.0 and meta["segments"] == len(samples) == 3 and meta["prefix_breaks"] == 2

    # max_tokens above rollout.sampling.max_new_tokens is capped; below it, kept
    assert [p["sampling_params"]["max_new_tokens"] for p, _ in taps] == [5, 5, 4, 3]
    # the first prompt is the engine tokenizer's own chat-template rendering, tools included
    assert taps[0][0]["input_ids"] == tok.apply_chat_template(
        [{"role": "user", "content": "What is the secret?"}], tools=[LOOKUP_TOOL], add_generation_prompt=True,
        tokenize=True, return_dict=False)
    # the second extends the first prompt + the sampled ids, never re-tokenising the reply
    first_out = taps[0][1]["output_ids"]
    assert taps[1][0]["input_ids"][:len(taps[0][0]["input_ids"]) + len(first_out)] == taps[0][0]["input_ids"] + first_out

    # each segment is exactly the tapped prompts and outputs: model ids mask 1 with the engine's logprobs
    seg = [samples[i] for i in meta["segment_of_call"]]
    for (payload, out), sample in zip(taps, seg):
        lps = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        tokens = sample.tokens
        start = len(payload["input_ids"])
        assert tokens[:start] == payload["input_ids"] and tokens[start:start + len(out["output_ids"])] == out["output_ids"]
        offset = start - len(sample.prompt_ids)
        assert sample.loss_mask[offset:offset + len(lps)] == [1] * len(lps)
        assert sample.rollout_logprobs[offset:offset + len(lps)] == lps
    first_seg = samples[0]
    context = len(taps[1][0]["input_ids"]) - len(taps[0][0]["input_ids"]) - len(first_out)
    assert first_seg.loss_mask == [1] * len(first_out) + [0] * context + [1] * len(taps[1][1]["output_ids"])

    # and they are the engine's: its greedy answer to the same ids, token for token
    for payload, out in taps:
        again = httpx.post(engine.url + "/generate", json={"input_ids": payload["input_ids"], "return_logprob": True,
                           "sampling_params": {**payload["sampling_params"], "temperature": 0.0}}, timeout=120).json()
        assert again["output_ids"] == out["output_ids"]
        for a, b in zip(again["meta_info"]["output_token_logprobs"], out["meta_info"]["output_token_logprobs"]):
            assert a[1] == b[1] and abs(a[0] - b[0]) < LOGPROB_TOL
    # the third call streamed through the router: SGLang's cumulative chunks, the last one the answer recorded, and
    # the text the harness put together is the decoded ids. How many chunks is timing: the engine wakes the stream
    # once per step from its own thread, and on a loaded machine several steps' tokens land in one chunk, as in SGLang
    assert taps[2][0]["stream"] is True and "stream" not in taps[0][0] and len(chunks) >= 1
    for a, b in zip(chunks, chunks[1:]):
        assert b["output_ids"][:len(a["output_ids"])] == a["output_ids"] and a["meta_info"]["finish_reason"] is None
    assert chunks[-1]["output_ids"] == taps[2][1]["output_ids"]
    assert samples[0].reward_info["streamed"] == tok.decode(taps[2][1]["output_ids"], skip_special_tokens=True)
    assert samples[0].reward_info["completion"] == tok.decode(taps[3][1]["output_ids"], skip_special_tokens=True)
