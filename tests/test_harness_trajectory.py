"""Harness trajectories rebuilt for training, by hand: segments, masks, log-probs, versions; the prompts
the endpoint builds; failures of an in-process harness; the config keys.

Tiny byte tokenizer ids: <|im_start|>=257, <|im_end|>=258 (the eos), "\\n"=198; every other
character is its byte's id (see tests/test_agent_tokens.py).
"""

from __future__ import annotations

import asyncio

import pytest

from tandem.config import ConfigError, build_config
from tandem.harness import CapturedCall, HarnessFailed, HarnessRollout, rebuild
from tandem.harness.capture import ChatPrompts, chat_prompt
from tandem.advantages import assign_advantages
from tests._harness import ScriptedClient, harness_cfg, harness_ctx
from tests._swe import tiny_tokenizer

IM_START, IM_END, NL = 257, 258, 198


def call(prompt, out, version, lps=None):
    return CapturedCall("completion", prompt, out, lps or [-0.1 * (k + 1) for k in range(len(out))], version,
                        "stop", "", False)


def test_segments_and_masks_by_hand():
    """A kept history extends one sequence; a rewrite opens a segment; a later call that extends the
    first segment again goes back to it (the longest prefix), not to the rewrite."""
    calls = [call([1, 2, 3], [10, 11], 3),
             call([1, 2, 3, 10, 11, 20, 21], [12], 4),          # kept history: 20, 21 are the tool result
             call([1, 2, 3, 99], [13, 14], 4),                  # rewritten: 10, 11 summarised away
             call([1, 2, 3, 10, 11, 20, 21, 12, 30], [15], 5)]  # back on the main thread
    rebuilt = rebuild(calls)
    main, side = rebuilt.samples
    assert rebuilt.segment_of_call == [0, 0, 1, 0] and rebuilt.prefix_breaks == 1
    assert main.prompt_ids == [1, 2, 3] and main.response_ids == [10, 11, 20, 21, 12, 30, 15]
    assert main.loss_mask == [1, 1, 0, 0, 1, 0, 1]
    assert main.rollout_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.1, 0.0, -0.1]
    assert main.token_versions == [3, 3, -1, -1, 4, -1, 5] and main.weight_version == 3
    assert side.prompt_ids == [1, 2, 3, 99] and side.response_ids == [13, 14] and side.loss_mask == [1, 1]
    assert side.weight_version == 4 and side.token_versions == [4, 4]


def test_a_call_that_extends_two_segments_goes_to_the_longer():
    # the harness truncated its history (a segment of [1, 2] + [3]), then went on from the full one
    rebuilt = rebuild([call([1, 2, 3], [10, 11], 0), call([1, 2], [3], 0), call([1, 2, 3, 10, 11, 20], [12], 0)])
    assert rebuilt.segment_of_call == [0, 1, 0]
    assert rebuilt.samples[0].loss_mask == [1, 1, 0, 1] and rebuilt.samples[1].loss_mask == [1]


def test_a_prompt_that_drops_the_sampled_ids_is_a_break_not_a_masked_guess():
    # the harness re-sent the reply as different ids (a re-tokenisation): the sampled 10, 11 are not in it
    rebuilt = rebuild([call([1, 2], [10, 11], 0), call([1, 2, 10, 12, 5], [6], 0)])
    assert rebuilt.prefix_breaks == 1 and [s.loss_mask for s in rebuilt.samples] == [[1, 1], [1]]
    assert rebuilt.samples[1].prompt_ids == [1, 2, 10, 12, 5]
    with pytest.raises(ValueError, match="no model call"):
        rebuild([])


def enc(text):
    return list(tiny_tokenizer().encode(text, add_special_tokens=False))


def test_a_kept_history_extends_the_sampled_ids_and_a_rewrite_renders_whole():
    tok = tiny_tokenizer()
    prompts = ChatPrompts(tok)
    user = [{"role": "user", "content": "hi"}]
    first = CapturedCall("chat", prompts.whole(user, None), enc("ok") + [IM_END], [-0.5] * 3, 1, "stop", "ok",
                         False, [("user", "hi", ())], ("assistant", "ok", ()), user, "[]")
    assert first.prompt_ids == [IM_START] + enc("user\nhi") + [IM_END, NL, IM_START] + enc("assistant\n")
    kept = [*user, {"role": "assistant", "content": "ok", "tool_calls": None, "refusal": None},
            {"role": "user", "content": "more"}]
    ids, extended = chat_prompt([first], prompts, kept, None)
    # the sampled ids, then the turn's close without the eos the model emitted, the message, the next prompt
    assert extended and ids == first.prompt_ids + enc("ok") + [IM_END, NL, IM_START] + enc("user\nmore") + \
        [IM_END, NL, IM_START] + enc("assistant\n")
    edited = [*user, {"role": "assistant", "content": "okay"}, {"role": "user", "content": "more"}]
    ids, extended = chat_prompt([first], prompts, edited, None)
    assert not extended and ids == tok.apply_chat_template(edited, add_generation_prompt=True, tokenize=True,
                                                           return_dict=False)


def test_segments_of_one_trajectory_count_once_in_its_group():
    from tandem.sample import Sample

    # trajectory 0 (reward 1) split in two segments, trajectory 1 reward 0: the group is {1, 0}
    samples = [Sample([1], reward=r, group_id=0, metadata={"trajectory": t}) for r, t in [(1, 0), (1, 0), (0, 1)]]
    assign_advantages(samples)
    assert [round(s.advantage, 4) for s in samples] == [0.7071, 0.7071, -0.7071]


# --------------------------------------------------------------------------- in-process harness
def run_group(cfg, fn, engine, group=2, reward_fn=None, row=None):
    async def main():
        rollout = HarnessRollout(fn=fn)
        try:
            return await rollout(harness_ctx(cfg, engine, reward_fn), row or {"prompt": "q", "secret": "4"}, group)
        finally:
            await rollout.aclose()
    return asyncio.run(main())


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


def test_hermes_tool_calls_reach_the_harness_and_rollout_reward_scores_a_silent_one(tmp_path):
    replies = {1: '<tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>', 2: "4"}
    engine = ScriptedClient(lambda prompt, n: replies[(n - 1) % 2 + 1])
    seen = []

    async def harness(client, row):
        msgs = [{"role": "user", "content": row["prompt"]}]
        r = await client.chat.completions.create(model="m", messages=msgs, tools=[TOOL])
        seen.append(r.choices[0])
        msgs += [r.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "content": "4", "tool_call_id": "x"}]
        await client.chat.completions.create(model="m", messages=msgs, tools=[TOOL])
        return None  # leave scoring to rollout.reward

    def reward(sample, row):
        return float(sample.metadata["harness_transcript"][-1]["content"] == row["secret"]), {"read": True}

    cfg = harness_cfg(tmp_path, harness="x.py:run", harness_tool_parser="hermes", reward="r.py:reward")
    samples = run_group(cfg, harness, engine, group=1, reward_fn=reward)
    assert seen[0].finish_reason == "tool_calls" and seen[0].message.content is None
    assert seen[0].message.tool_calls[0].function.name == "lookup"
    assert seen[0].message.tool_calls[0].function.arguments == '{"key": "a"}'
    assert len(samples) == 1 and samples[0].reward == 1.0 and samples[0].reward_info["read"]
    assert samples[0].metadata["harness"]["calls"][1]["extended"]
    assert engine.requests[0]["key"] == engine.requests[1]["key"]  # one trajectory, one routing key
    # the second prompt carries the sampled tool-call ids (the template would drop them: content None)
    sampled = engine.tok.encode(replies[1], add_special_tokens=False) + [IM_END]
    assert engine.requests[1]["input_ids"][:len(engine.requests[0]["input_ids"]) + len(sampled)] == \
        engine.requests[0]["input_ids"] + sampled


async def hangs(client, row):
    await client.completions.create(model="m", prompt="a")
    await asyncio.sleep(3600)


async def raises(client, row):
    await client.completions.create(model="m", prompt="a")
    raise KeyError("no such file")


async def garbage(client, row):
    await client.completions.create(model="m", prompt="a")
    return "yes"


async def silent(client, row):
    return 1.0


@pytest.mark.parametrize("fn, reason", [(hangs, "timeout: the harness ran past rollout.harness_timeout_s = 0.5s"),
                                        (raises, "error: the harness raised KeyError: 'no such file'"),
                                        (garbage, "garbage: the harness function gave 'yes'"),
                                        (silent, "error: the harness made no model call")])
def test_a_failing_harness_fails_its_trajectory_with_the_reason(tmp_path, fn, reason):
    # only the one that hangs may meet the timeout (a loaded machine may take seconds for a call)
    cfg = harness_cfg(tmp_path, harness="x.py:run", harness_timeout_s=0.5 if fn is hangs else 300)
    with pytest.raises(HarnessFailed) as failed:
        run_group(cfg, fn, ScriptedClient(lambda p, n: "x"), group=2)
    assert str(failed.value).startswith(reason)


def test_no_reward_and_no_rollout_reward_is_garbage(tmp_path):
    async def quiet(client, row):
        await client.completions.create(model="m", prompt="a")

    with pytest.raises(HarnessFailed, match="gave no reward"):
        run_group(harness_cfg(tmp_path, harness="x.py:run"), quiet, ScriptedClient(lambda p, n: "x"), group=1)


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("rollout, environment, message", [
    ({"harness": "a.py:run", "harness_command": "python a.py"}, "", "keep one"),
    ({"harness_command": "python a.py"}, "tandem.envs.lookup:Lookup", "remove environment.name"),
    ({"harness": "a.py:run", "function": "b.py:rollout"}, "", "remove rollout.function"),
])
def test_a_harness_beside_another_rollout_is_refused(rollout, environment, message):
    with pytest.raises(ConfigError, match=message):
        build_config({"rollout": rollout, "environment": {"name": environment}})


@pytest.mark.parametrize("body, needle", [("def run(client, row):\n    return 1.0\n", "must be an async function"),
                                          ("async def run(client):\n    return 1.0\n", r"must take \(client, row\)")])
def test_a_harness_function_that_cannot_be_called_so_is_refused_at_start(tmp_path, body, needle):
    from tandem.harness.run import load_harness_fn
    from tandem.rollout import PluginError

    (tmp_path / "agent.py").write_text(body)
    with pytest.raises(PluginError, match=needle):
        load_harness_fn(f"{tmp_path / 'agent.py'}:run")


def test_a_call_aborted_for_a_weight_update_regenerates_the_group(tmp_path):
    """partial_rollout = "abort": the harness sees an error (and may carry on or fail); either way the
    group is regenerated, as for any rollout, not counted as a failed trajectory. Once a call is
    aborted, the trajectory's later calls are refused without generating (it is discarded anyway)."""
    import openai

    from tandem.rollout import RolloutAborted

    class Aborting(ScriptedClient):
        attempts = 0

        async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None):
            self.attempts += 1
            if self.requests:
                raise RolloutAborted("weights changed")
            return await super().generate(input_ids, sampling_params, return_logprob, routing_key)

    async def carries_on(client, row):  # makes two more calls after the aborted one
        await client.completions.create(model="m", prompt="a")
        for prompt in ("b", "c"):
            try:
                await client.completions.create(model="m", prompt=prompt)
            except openai.InternalServerError:
                pass
        return 1.0

    async def fails_on_it(client, row):
        await client.completions.create(model="m", prompt="a")
        await client.completions.create(model="m", prompt="b")  # raises openai.InternalServerError

    for fn in (carries_on, fails_on_it):
        engine = Aborting(lambda p, n: "x")
        with pytest.raises(RolloutAborted, match="weights changed"):
            run_group(harness_cfg(tmp_path, harness="x.py:run"), fn, engine, group=1)
        # the trajectory's calls after the aborted one are refused at the endpoint: nothing more is generated
        assert engine.attempts == 2


# --------------------------------------------------------------------------- evaluation
def test_held_out_rows_are_evaluated_through_the_harness_greedily_at_their_version(tmp_path):
    """[eval] with rollout.harness: evaluate() runs the harness on each held-out row, its calls at
    eval.temperature and evaluation's priority (the endpoint the training groups share keeps
    training's sampling for them), its samples at the version evaluated, the harness metrics under eval/."""
    from tandem.eval.measure import EVAL_PRIORITY, evaluate

    async def answers(client, row):
        msgs = [{"role": "user", "content": row["prompt"]}]
        first = await client.chat.completions.create(model="m", messages=msgs)
        msgs += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "sure?"}]
        second = await client.chat.completions.create(model="m", messages=msgs)
        return float(second.choices[0].message.content == row["secret"])

    cfg = harness_cfg(tmp_path, harness="x.py:run", sampling={"temperature": 0.7})
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"enabled": True, "samples_per_prompt": 2})})
    engine = ScriptedClient(lambda prompt, n: "4", version=3)
    rows = [{"prompt": "q", "secret": "4"}, {"prompt": "r", "secret": "5"}]

    async def main():
        rollout = HarnessRollout(fn=answers)
        ctx = harness_ctx(cfg, engine)
        try:
            trained = await rollout(ctx, rows[0], 1)  # a training group first: the endpoint starts on its context
            return trained, await evaluate(ctx, rollout, rows, 5, 3)
        finally:
            await rollout.aclose()

    trained, outcome = asyncio.run(main())
    assert [r["params"]["temperature"] for r in engine.requests] == [0.7] * 2 + [0.0] * 8
    assert [r["priority"] for r in engine.requests] == [None] * 2 + [EVAL_PRIORITY] * 8
    assert len(trained) == 1 and len(outcome.samples) == 4 and not outcome.errors
    row = outcome.row
    assert row["eval/pass@1"] == 0.5 and row["eval/pass@k"] == 0.5 and row["eval/harness_calls_mean"] == 2.0
    assert row["eval/harness_prefix_breaks"] == 0 and row["weight_version"] == 3 and not row["cut_short"]
    assert all(s.metadata["harness"]["calls"][1]["extended"] for s in outcome.samples)


# --------------------------------------------------------------------------- n > 1
def test_the_choices_of_an_n_call_are_branches_by_hand():
    """Choices 0 and 1 of one call share its prompt; the harness goes on from choice 1: that branch
    grows, choice 0's segment keeps only its own sampled ids. Branches are not prefix breaks."""
    c0, c1 = call([1, 2, 3], [10, 11], 2), call([1, 2, 3], [12], 2)
    c1.choice = 1
    rebuilt = rebuild([c0, c1, call([1, 2, 3, 12, 20], [13], 3)])
    first, branch = rebuilt.samples
    assert rebuilt.segment_of_call == [0, 1, 1] and rebuilt.branches == 1 and rebuilt.prefix_breaks == 0
    assert first.prompt_ids == [1, 2, 3] and first.response_ids == [10, 11] and first.loss_mask == [1, 1]
    assert branch.prompt_ids == [1, 2, 3] and branch.response_ids == [12, 20, 13] and branch.loss_mask == [1, 0, 1]
    assert branch.rollout_logprobs == [-0.1, 0.0, -0.1] and branch.token_versions == [2, -1, 3]


def test_a_harness_asking_n_choices_gets_each_recorded_and_trained_as_its_branch(tmp_path):
    import openai

    replies = {1: "ab", 2: "c", 3: "d", 4: "e", 5: "f"}
    engine = ScriptedClient(lambda prompt, n: replies[n])
    got = {}

    async def picks_the_second(client, row):
        msgs = [{"role": "user", "content": row["prompt"]}]
        both = await client.chat.completions.create(model="m", messages=msgs, n=2)
        got["texts"] = [c.message.content for c in both.choices]
        got["indexes"] = [c.index for c in both.choices]
        got["usage"] = both.usage.completion_tokens
        msgs += [both.choices[1].message.model_dump(exclude_none=True), {"role": "user", "content": "go"}]
        stream = await client.chat.completions.create(model="m", messages=msgs, n=2, stream=True)
        got["streamed"] = {}
        async for chunk in stream:
            for c in chunk.choices:
                got["streamed"][c.index] = got["streamed"].get(c.index, "") + (c.delta.content or "")
        for n in (0, 65, "2"):
            try:
                await client.chat.completions.create(model="m", messages=msgs, n=n)
            except openai.BadRequestError as err:
                got.setdefault("refused", []).append(err.message)
        return 1.0

    samples = run_group(harness_cfg(tmp_path, harness="x.py:run"), picks_the_second, engine, group=1)
    assert got["texts"] == ["ab", "c"] and got["indexes"] == [0, 1] and got["usage"] == 5  # "ab"+eos, "c"+eos
    assert got["streamed"] == {0: "d", 1: "e"} and len(got["refused"]) == 3
    assert all("n must be an integer from 1 to 64" in m for m in got["refused"])
    first, second, third, fourth = (r["input_ids"] for r in engine.requests)
    assert first == second and third == fourth == first + enc("c") + [IM_END] + third[len(first) + 2:]
    assert [s.response_ids for s in samples] == [enc("ab") + [IM_END], third[len(first):] + enc("d") + [IM_END],
                                                  enc("e") + [IM_END]]
    meta = samples[0].metadata["harness"]
    assert meta["segment_of_call"] == [0, 1, 1, 2] and meta["branches"] == 2 and meta["prefix_breaks"] == 0
    assert [c["choice"] for c in meta["calls"]] == [0, 1, 0, 1]
    assert HarnessRollout.step_metrics(samples)["harness_branches"] == 2.0
