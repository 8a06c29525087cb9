"""The environment API and its one agent loop: exact token layout of tool episodes, tool-call
parsing, tool failures, end reasons, loading errors, and the bundled environments' rewards.

The engine is the scripted fake at the edge (tests/_fakes.py, called in-process); the loop,
chat format, parsers and environments are the production code.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tandem.config import ConfigError, EnvironmentConfig, load_config
from tandem.env import (ChatFormat, Environment, EnvRollout, load_environment_class, parse_hermes,
                        parse_tool_tokens, run_episode)
from tandem.envs.counter import Counter
from tandem.envs.lookup import Lookup
from tandem.model_source import build_byte_tokenizer
from tandem.rollout import PluginError
from tests._fakes import expected_logprobs
from tests._swe import InProcessEngine, scripted

IM_START, IM_END, NL = 257, 258, 198


class Shop(Environment):
    """Three tools; prices come only from the tools."""

    def reset(self, row: dict) -> str:
        self.cart: list[str] = []
        return f"Buy {row['item']}."

    def price(self, item: str) -> str:
        """The price of an item.

        Args:
            item: the item's name
        """
        return {"apple": "3", "pear": "5"}.get(item, "unknown")

    def add(self, item: str, count: int = 1) -> str:
        """Put an item in the cart.

        Args:
            item: the item's name
            count: how many
        """
        self.cart += [item] * count
        return f"cart: {len(self.cart)}"

    def fail(self) -> str:
        """Always raises."""
        raise RuntimeError("out of stock")

    def reward(self) -> float:
        return float(self.cart == ["apple"] and self.answer == "done")


def hermes(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def play(env, policy, tok, row=None, **limits):
    engine = InProcessEngine(tok, policy)
    chat = ChatFormat(tok, tools=env.offered_tools())
    parse = parse_tool_tokens if "<|tool_0|>" in tok.get_vocab() else parse_hermes
    episode = asyncio.run(run_episode(
        env, row or {"item": "apple"}, engine=engine, chat=chat, parse=parse,
        limits=EnvironmentConfig(**{"max_turns": 5, "max_context_tokens": 4096, "tool_timeout_s": 2, **limits}),
        sampling_params={"temperature": 1.0, "max_new_tokens": 512}))
    return episode, engine, chat


def enc(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


# ----------------------------------------------------------------------------- the 3-turn token layout
@pytest.mark.parametrize("tool_tokens", [0, 3])
def test_three_turn_tool_episode_masks_logprobs_and_ids_equal_the_template(tool_tokens):
    tok = build_byte_tokenizer(tool_tokens)
    if tool_tokens:  # the tiny family's format: <|tool_k|> calls the k-th tool, JSON arguments after it
        r1, r2, r3 = '<|tool_0|>{"item": "apple"}', '<|tool_1|>{"item": "apple"}<|tool_0|>{"item": "kiwi"}', "done"
    else:
        r1, r2, r3 = hermes("price", item="apple"), hermes("add", item="apple") + hermes("price", item="kiwi"), "done"
    env = Shop()
    episode, engine, chat = play(env, scripted(r1, r2, r3), tok)
    s = episode.sample
    assert episode.end_reason == "no_tool_call" and len(episode.turns) == 3
    assert episode.summary()["tool_calls"] == ["price", "add", "price"] and env.reward() == 1.0
    assert [m["content"] for m in episode.messages if m["role"] == "tool"] == ["3", "cart: 1", "unknown"]

    # The model's ids: each reply as the engine returned it, ending with its eos.
    t1, t2, t3 = (enc(tok, r) + [IM_END] for r in (r1, r2, r3))
    # Observation + template ids, read off the tiny template: a tool turn per result.
    wrap = lambda *results: (  # noqa: E731
        [NL] + sum(([IM_START] + enc(tok, f"tool\n{r}") + [IM_END, NL] for r in results), [])
        + [IM_START] + enc(tok, "assistant\n"))
    w1, w2 = wrap("3"), wrap("cart: 1", "unknown")
    assert s.response_ids == t1 + w1 + t2 + w2 + t3
    assert s.loss_mask == [1] * len(t1) + [0] * len(w1) + [1] * len(t2) + [0] * len(w2) + [1] * len(t3)
    # every model token carries the engine's logprob at its absolute position; every other token 0.0
    assert s.rollout_logprobs == expected_logprobs(
        [(t1, True), (w1, False), (t2, True), (w2, False), (t3, True)], len(s.prompt_ids))
    assert s.token_versions == [0 if m else -1 for m in s.loss_mask]
    # Each request was the trajectory so far, and the whole trajectory equals the chat template's
    # tokenization of the conversation (tools included), except the template's final "\n".
    assert [r["input_ids"] for r in engine.requests] == [s.prompt_ids, s.prompt_ids + t1 + w1,
                                                         s.prompt_ids + t1 + w1 + t2 + w2]
    full = tok.apply_chat_template(episode.messages, tools=Shop.tool_schemas(), tokenize=True, return_dict=False)
    assert full[-2:] == [IM_END, NL] and s.tokens == full[:-1]


MERGING_TEMPLATE = (  # Qwen3's layout for tool results: one user turn holding every <tool_response>
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_results_merged_into_one_user_turn_follow_the_template():
    tok = build_byte_tokenizer()
    tok.chat_template = MERGING_TEMPLATE
    chat = ChatFormat(tok)
    assert chat.wrappers("tool") == ("<|im_end|>\n<|im_start|>user\n<tool_response>\n",
                                     "\n</tool_response>\n<tool_response>\n",
                                     "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    episode, _, _ = play(Shop(), scripted(hermes("add", item="apple") + hermes("fail"), "done"), tok)
    full = tok.apply_chat_template(episode.messages, tokenize=True, return_dict=False)
    assert episode.sample.tokens == full[:-1]
    assert episode.messages[3]["content"] == "Error: fail raised RuntimeError: out of stock"


# ----------------------------------------------------------------------------- parsing
def test_hermes_parser_reads_calls_and_reports_each_malformed_one():
    text = (hermes("price", item="apple") + ' <tool_call>{"name": "add", "arguments": "{\\"item\\": \\"x\\"}"}'
            '</tool_call><tool_call>{not json}</tool_call> tail <tool_call>{"name": "add"')
    reply = parse_hermes(text, [])
    assert [(c.name, c.arguments) for c in reply.calls] == [("price", {"item": "apple"}), ("add", {"item": "x"})]
    assert len(reply.errors) == 2 and "invalid tool call" in reply.errors[0] and "not closed" in reply.errors[1]
    assert parse_hermes("The answer is 4.", []).content == "The answer is 4." and not parse_hermes("4", []).calls


def test_tool_token_parser_maps_tokens_to_tools_in_order():
    reply = parse_tool_tokens('x<|tool_1|>{"item": "a"} junk<|tool_0|><|tool_7|>', ["price", "add"])
    assert [(c.name, c.arguments) for c in reply.calls] == [("add", {"item": "a"}), ("price", {})]
    assert reply.errors == ["<|tool_7|> calls no tool: there are 2"] and reply.content == 'x{"item": "a"} junk'


# ----------------------------------------------------------------------------- tools and their failures
def test_schemas_come_from_type_hints_and_docstrings():
    assert Shop.tools() == ["price", "add", "fail"]
    add = Shop.tool_schemas()[1]["function"]
    assert add["name"] == "add" and add["description"] == "Put an item in the cart."
    assert add["parameters"]["properties"] == {"item": {"type": "string", "description": "the item's name"},
                                               "count": {"type": "integer", "description": "how many"}}
    assert add["parameters"]["required"] == ["item"]


def test_tool_failures_are_observations_and_the_episode_goes_on():
    class Slow(Shop):
        def wait(self) -> str:
            """Sleeps past the tool timeout."""
            time.sleep(3)
            return "late"

    tok = build_byte_tokenizer()
    reply = (hermes("nope") + hermes("add", item="x", colour="red") + hermes("fail") + hermes("wait") + "<tool_call>{bad}"
             "</tool_call>")
    episode, _, _ = play(Slow(), scripted(reply, "done"), tok, tool_timeout_s=0.5)
    results = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert results[0].startswith("Error: no tool named 'nope'; the tools are price, add, fail, wait")
    assert results[1].startswith("Error: bad arguments for add") and "colour" in results[1]
    assert results[2] == "Error: fail raised RuntimeError: out of stock"
    assert results[3] == "Error: wait timed out after 0.5s"
    assert results[4].startswith("Error: invalid tool call")
    assert episode.end_reason == "no_tool_call" and episode.summary()["format_errors"] == 1


def test_too_many_calls_in_one_reply_are_refused_not_run():
    env = Shop()
    episode, _, _ = play(env, scripted(hermes("add", item="apple") * 3, "done"), build_byte_tokenizer(),
                         max_tool_calls_per_turn=2)
    assert env.cart == ["apple", "apple"]
    assert [m["content"] for m in episode.messages if m["role"] == "tool"][2].startswith("Error: too many tool calls")


# ----------------------------------------------------------------------------- end reasons
def test_end_reasons_done_and_turn_limit():
    class Submits(Shop):
        def submit(self) -> str:
            """Hand the cart in."""
            self.done, self.end_reason = True, "submitted"
            return "ok"

    tok = build_byte_tokenizer()
    episode, _, _ = play(Submits(), scripted(hermes("add", item="pear"), hermes("submit")), tok)
    assert episode.end_reason == "submitted" and len(episode.turns) == 2
    assert episode.sample.loss_mask[-1] == 1  # no observation after the last turn
    looping, _, _ = play(Shop(), lambda prompt, turn: hermes("price", item="apple"), tok, max_turns=3)
    assert looping.end_reason == "turn_limit" and len(looping.turns) == 3


def test_a_text_environment_reads_replies_through_step():
    class Guess(Environment):
        def reset(self, row):
            self.tries = 0
            return "Guess my number."

        def step(self, text: str):
            self.tries += 1
            return None if text.strip() == "7" else "higher"

        def reward(self):
            return 1.0 / self.tries

    env = Guess()
    episode, _, _ = play(env, scripted("3", "5", "7"), build_byte_tokenizer())
    assert [m["content"] for m in episode.messages if m["role"] == "user"][1:] == ["higher", "higher"]
    assert episode.end_reason == "no_tool_call" and env.reward() == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- loading and config
def test_loading_refuses_what_cannot_run(tmp_path):
    bad = tmp_path / "bad_env.py"
    bad.write_text("from tandem.env import Environment\n"
                   "class NoDoc(Environment):\n    def reset(self, row): return 'x'\n"
                   "    def reward(self): return 0.0\n    def tool(self, n: int) -> str:\n        return str(n)\n"
                   "class Both(NoDoc):\n    def step(self, text): return None\n"
                   "class NoReward(Environment):\n    def reset(self, row): return 'x'\n"
                   "def not_a_class(): pass\n")
    cases = {"NoDoc": "tool NoDoc.tool", "Both": "either free text", "NoReward": "must define reward()",
             "not_a_class": "subclass of tandem.env.Environment"}
    for name, message in cases.items():
        with pytest.raises(PluginError, match=message):
            load_environment_class(f"{bad}:{name}")
    assert load_environment_class("tandem.envs.lookup:Lookup") is Lookup


def test_config_names_the_key_that_conflicts_with_an_environment():
    with pytest.raises(ConfigError, match="rollout.reward = 'tandem.envs.echo:exact_match_reward' with environment.name"):
        load_config(["--environment.name", "tandem.envs.lookup:Lookup", "--rollout.reward",
                     "tandem.envs.echo:exact_match_reward"])
    with pytest.raises(ConfigError, match="agent.max_turns' was removed.*environment.max_turns"):
        load_config(["--agent.max_turns", "3"])


# ----------------------------------------------------------------------------- the plug-in and the bundled envs
class _Ctx:
    def __init__(self, tok, policy, **environment):
        from concurrent.futures import ThreadPoolExecutor

        self.cfg = load_config(["--environment.max_turns", "4", "--rollout.reward_timeout_s", "1"]
                               + sum(([f"--environment.{k}", str(v)] for k, v in environment.items()), []))
        self.tokenizer, self.engine = tok, InProcessEngine(tok, policy)
        self.executor = ThreadPoolExecutor(4)
        self.sampling_params = {"max_new_tokens": 64}


def test_rollout_scores_each_episode_by_its_reward_and_always_closes():
    closed: list[int] = []

    class Flaky(Shop):
        def reward(self):
            if self.cart:
                raise ValueError("grader down")
            return 0.5, {"why": "empty"}

        def close(self):
            closed.append(1)

    tok = build_byte_tokenizer(3)
    buys = _Ctx(tok, scripted('<|tool_1|>{"item": "apple"}', "done"))
    samples = asyncio.run(EnvRollout(Flaky)(buys, {"item": "apple"}, 2))
    assert [(s.reward, s.reward_info["reason"]) for s in samples] == [(0.0, "error: ValueError: grader down")] * 2
    assert len(closed) == 2 and all(s.metadata["env"]["tool_calls"] == ["add"] for s in samples)
    idle = _Ctx(tok, scripted("done"))
    [sample] = asyncio.run(EnvRollout(Flaky)(idle, {"item": "apple"}, 1))
    assert (sample.reward, sample.reward_info["why"]) == (0.5, "empty") and len(closed) == 3
    metrics = EnvRollout(Flaky).step_metrics(samples + [sample])
    assert metrics["env_end_no_tool_call"] == 3 and metrics["env_end_turn_limit"] == 0
    assert metrics["env_tool_calls_mean"] == pytest.approx(2 / 3)


def test_bundled_rewards_by_hand():
    lookup = Lookup(answer_chars=4)
    lookup.reset({"secret": "7", "prompt": "secret?"})
    lookup.answer = "7777"
    assert lookup.reward() == (0.0, {"hits": 4, "looked_up": 0, "reason": "answered without looking the secret up"})
    assert lookup.lookup() == "7" * 8  # repeat = 8: the digit written 8 times
    lookup.answer = "77x7z"  # 3 digits, all the secret, out of the first 4 characters
    assert lookup.reward()[0] == pytest.approx(0.2 + (0.1 * 3 + 0.7 * 3) / 4)
    one = Lookup()  # the shipped config: one character
    one.reset({"secret": "1", "prompt": "secret?"})
    one.lookup()
    scores = []
    for answer in ("1", "0", "x"):
        one.answer = answer
        scores.append(one.reward()[0])
    assert scores == [pytest.approx(1.0), pytest.approx(0.3), pytest.approx(0.2)]
    for partial, short_by_one in ((False, 0.0), (True, 2 / 3)):
        counter = Counter(partial_credit=partial)
        counter.reset({"target": 3, "prompt": "count to 3"})
        assert [counter.increment() for _ in range(2)] == ["2", "1"]
        assert counter.reward()[0] == pytest.approx(short_by_one)
        assert counter.increment() == "0" and counter.reward()[0] == 1.0
        assert [counter.increment() for _ in range(3)] == ["0", "0", "0"] and counter.reward()[0] == 0.0


def test_counter_episode_through_the_plug_in_with_tool_tokens():
    tok = build_byte_tokenizer(1)

    def policy(prompt: str, turn: int) -> str:  # call until the tool says 0 are missing
        return "ok" if prompt.rstrip().endswith("0<|im_end|>\n<|im_start|>assistant") else "<|tool_0|>"

    ctx = _Ctx(tok, policy)
    [sample] = asyncio.run(EnvRollout(Counter)(ctx, {"target": 2, "prompt": "count to 2"}, 1))
    assert sample.reward == 1.0 and sample.metadata["counter"] == {"count": 2, "target": 2}
    assert sample.metadata["env"]["tool_calls"] == ["increment", "increment"]


def test_the_documented_environment_runs_as_printed(tmp_path):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "environments.md").read_text()
    section = page[page.index("## Bring your environment"):]
    code = section[section.index("```python\n") + 10: section.index("```\n", section.index("```python\n"))]
    assert len(code.strip().splitlines()) <= 32  # "a complete 30-line environment"
    (tmp_path / "my_env.py").write_text(code)
    cls = load_environment_class(f"{tmp_path / 'my_env.py'}:Inventory")
    env = cls(max_queries=3)
    episode, _, _ = play(env, scripted(hermes("count", item="pear"), hermes("count", item="apple"), "3"),
                         build_byte_tokenizer(), row={"item": "apple", "stock": {"apple": 3}})
    assert episode.end_reason == "no_tool_call" and env.reward() == 1.0
    capped = cls(max_queries=1)
    episode, _, _ = play(capped, scripted(hermes("count", item="apple"), "3"), build_byte_tokenizer(),
                         row={"item": "apple", "stock": {"apple": 3}})
    assert episode.end_reason == "out_of_queries" and capped.reward() == 0.0
