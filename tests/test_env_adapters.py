"""The verifiers and OpenEnv adapters against the real packages (requirements-envs.txt).

verifiers: the same scripted replies go through tandem's token loop (VerifiersEnv) and through
verifiers' own MultiTurnEnv.rollout with a scripted client; stop condition, completion, reward and
metrics must be identical. The fixtures in tests/fixtures/vf_envs are written against verifiers'
public API in the shapes of its example environments; verifiers' own examples (reverse-text,
tool-test, alphabet-sort) live in its git repository, not in the PyPI package, so that test runs
when TANDEM_VERIFIERS_ENVIRONMENTS names a checkout's environments/ folder.

OpenEnv: real servers on 127.0.0.1 (uvicorn), OpenEnv's own `openenv init` echo environment and
an MCP environment, reached by URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

# requirements-envs.txt is installed with --no-deps beside the rest (README): without it, this file's
# tests skip and the rest of the suite (`pytest -m unit` among it) still collects.
vf = pytest.importorskip("verifiers", reason="needs requirements-envs.txt (verifiers)")
pytest.importorskip("openenv", reason="needs requirements-envs.txt (openenv-core)")
from verifiers.legacy.types import Response, ResponseMessage  # noqa: E402

from tandem.config import EnvironmentConfig
from tandem.env import ChatFormat, EnvRollout, load_environment_class, parse_hermes, run_episode
from tandem.envs.openenv_env import OpenEnvEnv
from tandem.envs.verifiers_env import VerifiersEnv, export_dataset, no_model_client_class
from tandem.model_source import build_byte_tokenizer
from tandem.rollout.data import load_dataset_rows
from tests._fakes import Router, ScriptedEngine, free_port, stop_process
from tests._swe import InProcessEngine, scripted

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def fixture_environments_importable(monkeypatch):
    """vf.load_environment(id) imports module id.replace('-', '_'): the fixtures' folder is on the path."""
    monkeypatch.syspath_prepend(str(FIXTURES / "vf_envs"))


def hermes(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedVfClient(no_model_client_class()):
    """verifiers' side of the comparison: a vf Client answering each turn with a scripted message."""

    def __init__(self, turns: list[tuple[str, list[tuple[str, dict]]]]):
        super().__init__(object())
        self.turns, self.n = list(turns), 0

    async def get_response(self, prompt, model, tools=None, sampling_args=None, state=None, **kwargs):
        content, calls = self.turns.pop(0)
        self.n += 1
        tool_calls = [vf.ToolCall(id=f"call_{self.n}_{i}", name=n, arguments=json.dumps(a))
                      for i, (n, a) in enumerate(calls)] or None
        message = ResponseMessage(content=content, tool_calls=tool_calls,
                                  finish_reason="tool_calls" if tool_calls else "stop", is_truncated=False)
        return Response(id="scripted", created=int(time.time()), model=model, message=message)


def vf_own_rollout(env_id: str, env_args: dict, row: dict, turns) -> dict:
    env = vf.load_environment(env_id, **env_args)

    async def main():
        state = await env.rollout(row, ScriptedVfClient(turns), "scripted")
        await env.rubric.score_rollout(state)
        return state

    return asyncio.run(main())


def tandem_rollout(env_id: str, env_args: dict, row: dict, texts: list[str], **limits):
    """The same episode on tandem's loop: token ids in and out, tool calls parsed from the text."""
    tok = build_byte_tokenizer()
    env = VerifiersEnv(env_id, env_args)

    async def main():
        episode = await run_episode(
            env, row, engine=InProcessEngine(tok, scripted(*texts)),
            chat=lambda tools: ChatFormat(tok, tools=tools), parse=parse_hermes,
            limits=EnvironmentConfig(**{"max_turns": 8, "max_context_tokens": 8192, **limits}),
            sampling_params={"temperature": 1.0, "max_new_tokens": 512})
        return episode, await env.reward()

    episode, (reward, info) = asyncio.run(main())
    return env, episode, reward, info


def completion_of(state) -> list[dict]:
    return [m.model_dump(exclude_none=True) for m in state["completion"]]


def assert_same_episode(env_id: str, env_args: dict, row: dict, script: list[tuple[str, str, list]]):
    """script: per turn (the reply text tandem's engine emits, its content, its tool calls)."""
    own = vf_own_rollout(env_id, env_args, row, [(content, calls) for _, content, calls in script])
    env, episode, reward, info = tandem_rollout(env_id, env_args, row, [text for text, _, _ in script])
    assert episode.end_reason == own["stop_condition"] == env.state["stop_condition"]
    assert completion_of(env.state) == completion_of(own)
    assert reward == pytest.approx(own["reward"]) and info["metrics"] == pytest.approx(own["metrics"])
    return own, episode, reward


def test_tool_env_on_tandems_loop_equals_verifiers_own_rollout():
    row = vf.load_environment("tandem-vf-tools").get_dataset()[2]  # "What is 2 + 3?"
    add = hermes("add", a=2, b=3)
    own, episode, reward = assert_same_episode("tandem-vf-tools", {}, row, [
        (add, "", [("add", {"a": 2, "b": 3})]), ("5", "5", [])])
    assert own["stop_condition"] == "no_tools_called" and reward == 1.5  # correct 1 + used_add 0.5
    # the tool's result reached the model as masked observation tokens
    tok = build_byte_tokenizer()
    observed = [t for t, m in zip(episode.sample.response_ids, episode.sample.loss_mask) if m == 0]
    assert "5" in tok.decode(observed) and episode.messages[2] == {"role": "tool", "content": "5",
                                                                  "tool_call_id": "call_1_0"}


def test_multi_turn_env_response_stop_condition_and_its_max_turns():
    row = vf.load_environment("tandem-vf-guess").get_dataset()[0]  # the number is 4
    own, episode, reward = assert_same_episode("tandem-vf-guess", {}, row, [
        ("<guess>2</guess>", "<guess>2</guess>", []), ("<guess>4</guess>", "<guess>4</guess>", [])])
    assert own["stop_condition"] == "guessed_it" and reward == pytest.approx(1.0 + 0.2 / 2)
    assert [m["content"] for m in episode.messages if m["role"] == "user"][-1] == "higher"
    wrong = [("<guess>1</guess>", "<guess>1</guess>", [])] * 3
    own, episode, reward = assert_same_episode("tandem-vf-guess", {"max_turns": 2}, row, wrong)
    assert episode.end_reason == "max_turns_reached" and len(episode.turns) == 2 and reward == 0.1


def test_tandems_own_limits_still_apply_and_are_named():
    row = vf.load_environment("tandem-vf-guess").get_dataset()[0]
    env, episode, reward, _ = tandem_rollout("tandem-vf-guess", {}, row, ["<guess>1</guess>"] * 5, max_turns=2)
    assert episode.end_reason == "turn_limit" and len(episode.turns) == 2 and reward == pytest.approx(0.1)


def test_export_writes_rows_tandem_loads(tmp_path):
    out = tmp_path / "guess.jsonl"
    assert export_dataset("tandem-vf-guess", out, {"num_examples": 3}) == 3
    rows = load_dataset_rows(str(out), "prompt").rows
    assert len(rows) == 3 and rows[0]["prompt"][0]["role"] == "system" and rows[0]["answer"] == "4"


def test_bad_environment_ids_fail_once_with_the_cause():
    from tandem.rollout import PluginError

    with pytest.raises(PluginError, match="env_id 'no-such-env'"):
        VerifiersEnv("no-such-env")
    cls = load_environment_class("tandem.envs.verifiers_env:VerifiersEnv")
    assert cls.tools() == [] and load_environment_class("tandem.envs.openenv_env:OpenEnvEnv").tools() == []


UPSTREAM = os.environ.get("TANDEM_VERIFIERS_ENVIRONMENTS", "")


@pytest.mark.skipif(not UPSTREAM, reason="set TANDEM_VERIFIERS_ENVIRONMENTS to verifiers' environments/ folder")
def test_verifiers_own_example_environments(tmp_path, monkeypatch):
    for name in ("reverse_text", "tool_test", "alphabet_sort"):
        monkeypatch.syspath_prepend(str(Path(UPSTREAM) / name))
    # reverse-text and alphabet-sort read a hub dataset; a local folder with the same columns stands in
    (tmp_path / "rev").mkdir()
    (tmp_path / "rev" / "train.jsonl").write_text(json.dumps({"prompt": "hello world"}) + "\n")
    (tmp_path / "names").mkdir()
    names = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "John McCarthy",
             "Donald Knuth", "Claude Shannon", "Tony Hoare", "Ken Thompson", "Dennis Ritchie", "Niklaus Wirth"]
    (tmp_path / "names" / "train.jsonl").write_text(json.dumps({"names": names}) + "\n")

    args = {"dataset_name": str(tmp_path / "rev")}
    row = vf.load_environment("reverse-text", **args).get_dataset()[0]
    answer = f"<reversed_text>\n{'hello world'[::-1]}\n</reversed_text>"
    _, _, reward = assert_same_episode("reverse-text", args, row, [(answer, answer, [])])
    assert reward == 1.0

    args = {"num_train_examples": 4, "num_eval_examples": 2}
    row = vf.load_environment("tool-test", **args).get_dataset()[0]
    values = {"tool_A": {"x": 1}, "tool_B": {"x": "a"}, "tool_C": {"x": 1.5}, "tool_D": {"x": True}}
    called = row["info"]["tool_names"]
    text = "".join(hermes(n, **values[n]) for n in called)
    _, _, reward = assert_same_episode("tool-test", args, row, [(text, "", [(n, values[n]) for n in called])])
    assert reward == 1.0

    args = {"dataset_name": str(tmp_path / "names"), "min_turns": 2, "max_turns": 2}
    row = vf.load_environment("alphabet-sort", **args).get_dataset()[0]
    first, second = row["info"]["ground_truths"][:2]
    replies = ["<alphabetical_sorted>\n" + "\n".join(first) + "\n</alphabetical_sorted>",
               "<combined_alphabetical_sorted>\n" + "\n".join(second) + "\n</combined_alphabetical_sorted>"]
    own, episode, reward = assert_same_episode("alphabet-sort", args, row, [(r, r, []) for r in replies])
    assert len(episode.turns) == 2 and reward == pytest.approx(own["reward"]) and reward > 0.9


# ----------------------------------------------------------------------------- through the router
def _rollout_ctx(engine_client, tok, **environment):
    from concurrent.futures import ThreadPoolExecutor

    from tandem.config import load_config
    from tandem.rollout import RolloutContext

    cfg = load_config(["--rollout.reward_timeout_s", "30", "--environment.tool_parser", "hermes"]
                      + sum(([f"--environment.{k}", str(v)] for k, v in environment.items()), []))
    return RolloutContext(cfg, tok, engine_client, ThreadPoolExecutor(8), None, {"max_new_tokens": 256})


def run_through_router(tmp_path, policy, env_class, args, row, group: int):
    from tandem.rollout import EngineClient

    tok = build_byte_tokenizer()
    with ScriptedEngine(tok, policy, weight_version=2) as engine, Router(engine.url, tmp_path / "router.log") as router:
        router.wait_routing(tok.encode("hi", add_special_tokens=False))

        async def main():
            client = EngineClient(router.url, 8, 60)
            client.weight_version = 2  # what weight sync records once every engine serves version 2
            ctx = _rollout_ctx(client, tok)
            try:
                return await EnvRollout(env_class, args)(ctx, row, group)
            finally:
                await client.close()
                ctx.executor.shutdown(wait=True)

        return asyncio.run(main())


def test_verifiers_episodes_through_the_real_router(tmp_path):
    row = vf.load_environment("tandem-vf-tools").get_dataset()[2]

    def policy(prompt: str, turn: int) -> str:
        return hermes("add", a=2, b=3) if turn == 1 else "5"

    samples = run_through_router(tmp_path, policy, VerifiersEnv, {"env_id": "tandem-vf-tools"}, row, 2)
    assert [s.reward for s in samples] == [1.5, 1.5], [(s.weight_version, s.metadata) for s in samples]
    assert all(s.weight_version == 2 and s.metadata["env"]["end_reason"] == "no_tools_called" for s in samples)
    metrics = samples[0].reward_info["metrics"]  # the Rubric's functions and ToolEnv's own counters
    assert {k: metrics[k] for k in ("correct", "used_add", "add_calls", "num_turns")} == {
        "correct": 1.0, "used_add": 1.0, "add_calls": 1.0, "num_turns": 2.0}


# ----------------------------------------------------------------------------- OpenEnv servers
class Served:
    """`uvicorn app --host 127.0.0.1` in a subprocess, up when /health answers."""

    def __init__(self, app: str, pythonpath: Path, log: Path):
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "PYTHONPATH": f"{pythonpath}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "ENABLE_WEB_INTERFACE": "false", "MAX_CONCURRENT_ENVS": "8"}
        self.log = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1",
                                      "--port", self.url.rsplit(":", 1)[1], "--log-level", "warning"],
                                     env=env, cwd=pythonpath, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, Path(log).read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "OpenEnv server did not come up"
            time.sleep(0.2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.log.close()


def openenv_echo_template(tmp_path: Path) -> Path:
    """OpenEnv's own echo environment, as its CLI writes it (`openenv init`)."""
    subprocess.run([sys.executable, "-m", "openenv.cli", "init", "echo_tpl"], cwd=tmp_path, check=True,
                   capture_output=True)
    return tmp_path


def test_openenv_echo_environment_through_the_real_router(tmp_path):
    root = openenv_echo_template(tmp_path)
    with Served("echo_tpl.server.app:app", root, tmp_path / "echo.log") as server:
        tools = OpenEnvEnv(server.url).offered_tools()
        assert [t["function"]["name"] for t in tools] == ["step"]
        assert tools[0]["function"]["parameters"]["required"] == ["message"]

        def policy(prompt: str, turn: int) -> str:
            assert turn != 1 or "Echo Tpl environment ready!" in prompt  # the reset observation is shown
            return hermes("step", message="hello") if turn == 1 else "done"

        # the template serves one session at a time (max_concurrent_envs=1): episodes wait their turn
        samples = run_through_router(tmp_path, policy, OpenEnvEnv, {"url": server.url, "max_sessions": 1},
                                     {"prompt": "Say hello to the echo."}, 3)
    # the echo template's reward is 0.1 per character echoed, computed by the server
    assert [s.reward for s in samples] == [pytest.approx(0.5)] * 3
    assert all(s.metadata["openenv"]["steps"] == 1 and s.metadata["env"]["tool_calls"] == ["step"] for s in samples)


def test_openenv_mcp_environment_tools_come_from_the_server(tmp_path):
    with Served("vault_env:app", FIXTURES / "openenv_envs", tmp_path / "vault.log") as server:
        tools = OpenEnvEnv(server.url).offered_tools()
        assert sorted(t["function"]["name"] for t in tools) == ["fetch", "store"]
        tok = build_byte_tokenizer()
        env = OpenEnvEnv(server.url)
        policy = scripted(hermes("store", key="k", value="v1"), hermes("fetch", key="k"),
                          hermes("nope"), "v1")

        async def main():
            try:
                return await run_episode(
                    env, {"prompt": "Keep v1 under k."}, engine=InProcessEngine(tok, policy),
                    chat=lambda tools: ChatFormat(tok, tools=tools), parse=parse_hermes,
                    limits=EnvironmentConfig(max_turns=6, max_context_tokens=8192),
                    sampling_params={"max_new_tokens": 256})
            finally:
                await env.close()

        episode = asyncio.run(main())
    results = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert results[:2] == ["stored k", "v1"] and results[2].startswith("Error: no tool named 'nope'")
    assert episode.end_reason == "no_tool_call" and env.answer == "v1" and env.reward() == (0.0, {"steps": 2})


# ----------------------------------------------------------------------------- train.py, real engines
def run_job(tmp_path: Path, environment: str, args: str, data: list[dict]) -> tuple[list[dict], list[dict]]:
    """Two steps of train.py: real embedded engines (a random tiny model), sglang-router, trainer."""
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    config = tmp_path / "job.toml"
    config.write_text(f'[run]\nrun_dir = "{tmp_path / "run"}"\nsteps = 2\nmode = "sync"\n'
                      f'[engine]\ncount = 1\n[logging]\nlive = "off"\n'
                      f'[data]\npath = "{tmp_path / "data.jsonl"}"\n'
                      f'[rollout]\nprompts_per_step = 2\nsamples_per_prompt = 2\n[rollout.sampling]\nmax_new_tokens = 16\n'
                      f'[environment]\nname = "{environment}"\ntool_parser = "hermes"\nmax_turns = 3\nargs = {args}\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES / "vf_envs"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "train.py", "--config", str(config)], cwd=Path(__file__).parents[1],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    samples = [s for step in (1, 2) for s in
               json.loads((tmp_path / "run" / "rollouts" / f"step_{step:06d}.json").read_text())["samples"]]
    return rows, samples


def test_verifiers_environment_through_train_py(tmp_path):
    rows, samples = run_job(tmp_path, "tandem.envs.verifiers_env:VerifiersEnv", '{env_id = "tandem-vf-tools"}',
                            [dict(r) for r in vf.load_environment("tandem-vf-tools").get_dataset()])
    assert [r["step"] for r in rows] == [1, 2] and len(samples) == 8
    for s in samples:  # a random model writes no tool call: verifiers' own stop ends each episode
        assert s["metadata"]["verifiers"]["stop_condition"] == s["metadata"]["env"]["end_reason"]
        assert s["reward"] == pytest.approx(s["reward_info"]["metrics"]["correct"])
    assert sum(r.get(f"env_end_{s['metadata']['env']['end_reason']}", 0) for r in rows for s in samples[:1]) > 0


def test_openenv_environment_through_train_py(tmp_path):
    with Served("vault_env:app", FIXTURES / "openenv_envs", tmp_path / "vault.log") as server:
        rows, samples = run_job(tmp_path, "tandem.envs.openenv_env:OpenEnvEnv",
                                f'{{url = "{server.url}", max_sessions = 8}}',
                                [{"prompt": f"Store {w} under k."} for w in ("a", "b", "c", "d")])
    assert [r["step"] for r in rows] == [1, 2] and len(samples) == 8
    assert all("openenv" in s["metadata"] and s["reward"] == 0.0 for s in samples)  # the vault gives no reward
