"""The plug-in contract as code: every plug-in a shipped config, the README or docs/ names loads and
meets RolloutFn / RewardFn, and one that cannot is refused at start-up, naming it."""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from pathlib import Path

import pytest

from tandem.config import TandemConfig
from tandem.env import Environment, load_environment_class
from tandem.harness.run import load_harness_fn
from tandem.rollout import (CONTRACTS, PluginError, RolloutFn, check_rollout_result, load_reward_fn,
                            load_rollout_fn)
from tandem.sample import Sample

REPO = Path(__file__).resolve().parents[1]
SPEC = re.compile(r'[`"]((?:rollout|reward|tandem(?:\.\w+)*)):(\w+)[`"]')
"""A plug-in named in prose: `module:function`, for the project's own modules."""


def named_plugins() -> list[tuple[str, str]]:
    """(kind, spec) for every plug-in that config.toml, configs/*.toml, the README and docs/ name."""
    found = set()
    for path in [REPO / "config.toml", *sorted((REPO / "configs").glob("*.toml"))]:
        rollout = tomllib.loads(path.read_text()).get("rollout", {})
        found |= {("rollout", rollout["function"])} if "function" in rollout else set()
        found |= {("reward", rollout["reward"])} if "reward" in rollout else set()
        found |= {("environment", rollout["environment"])} if rollout.get("environment") else set()
        found |= {("harness", rollout["harness"])} if rollout.get("harness") else set()
    prose = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])
    for module, fn in SPEC.findall(prose):
        kind = "environment" if fn[:1].isupper() else "reward" if "reward" in fn else "rollout"
        found.add((kind, f"{module}:{fn}"))
    return sorted(found)


def test_the_shipped_configs_and_the_readme_name_plugins():
    kinds = {kind for kind, _ in named_plugins()}
    assert kinds == {"rollout", "reward", "environment", "harness"}, named_plugins()
    assert len(named_plugins()) >= 6


@pytest.mark.parametrize("kind,spec", named_plugins())
def test_every_named_plugin_meets_its_contract(kind, spec):
    if kind == "environment":
        assert issubclass(load_environment_class(spec), Environment)
        return
    if kind == "harness":
        assert inspect.iscoroutinefunction(load_harness_fn(spec))
        return
    fn = (load_rollout_fn if kind == "rollout" else load_reward_fn)(spec)
    assert isinstance(fn, CONTRACTS[kind][0])


@pytest.mark.parametrize("old,new", [("rollout:single_turn", "tandem.rollout"), ("reward:echo_reward", "tandem.envs.echo"),
                                     ("tandem.rewards:swe_reward", "tandem.envs.coding"),
                                     ("tandem.agent:swe_agent_rollout", "tandem.envs.coding")])
def test_an_old_plugin_name_fails_naming_the_new_one(old, new):
    """Renamed modules are errors, never aliases, even where the old module would import (the
    top-level scripts `rollout` and `reward` do from the repository root, and only from there)."""
    with pytest.raises(PluginError, match=f"module '{old.split(':')[0]}' was renamed: name .*{new}"):
        load_rollout_fn(old)


def test_the_entry_scripts_re_export_the_package():
    import reward
    import rollout
    import sync
    import tandem.envs.echo
    import tandem.rollout
    import tandem.weights

    for script, package in ((rollout, tandem.rollout), (reward, tandem.envs.echo), (sync, tandem.weights)):
        assert script.__all__ and all(getattr(script, n) is getattr(package, n) for n in script.__all__)


def write_plugin(tmp_path: Path, body: str) -> str:
    path = tmp_path / "plug.py"
    path.write_text(body)
    return str(path)


@pytest.mark.parametrize("body,needle", [
    ("def fn(ctx, row, group_size):\n    return []\n", "must be an async function"),
    ("async def fn(ctx, row):\n    return []\n", "must take (ctx, row, group_size)"),
    ("fn = 3\n", "has no function fn"),
])
def test_a_rollout_plugin_that_cannot_meet_the_contract_is_refused(tmp_path, body, needle):
    spec = f"{write_plugin(tmp_path, body)}:fn"
    with pytest.raises(PluginError, match=re.escape(needle)) as err:
        load_rollout_fn(spec)
    assert spec in str(err.value)


def test_a_reward_plugin_with_the_wrong_arity_is_refused(tmp_path):
    spec = write_plugin(tmp_path, "def fn(sample):\n    return 1.0\n") + ":fn"
    with pytest.raises(PluginError, match=re.escape("must take (sample, row)")):
        load_reward_fn(spec)


def test_a_reward_plugin_may_be_sync_or_async_and_take_defaults(tmp_path):
    spec = write_plugin(tmp_path, "def a(sample, row, scale=1.0):\n    return scale\n\n"
                                  "async def b(sample, row):\n    return 1.0, {}\n")
    assert load_reward_fn(f"{spec}:a") and load_reward_fn(f"{spec}:b")


@pytest.mark.parametrize("result", [None, [], Sample(prompt_ids=[1]), [Sample(prompt_ids=[1]), {"ids": [2]}]])
def test_a_rollout_result_that_is_not_a_list_of_samples_is_refused(result):
    with pytest.raises(PluginError, match="must return a non-empty list\\[Sample\\]"):
        check_rollout_result(result, "x.py:fn")


def test_the_producer_stops_the_run_on_a_rollout_result_that_breaks_the_contract():
    from tandem.orchestrator.producer import RolloutProducer
    from tandem.rollout import PromptCursor, RolloutContext

    async def bad_rollout(ctx, row, group_size):  # returns dicts, not Samples
        return [{"text": "x"}] * group_size

    async def run() -> None:
        cfg = TandemConfig()
        ctx = RolloutContext(cfg, None, None, None, None)
        producer = RolloutProducer(ctx, [{"prompt": "p"}], PromptCursor(1, 0, False), bad_rollout,
                                   start_step=0, total_steps=1, staleness=0, engine_version=0)
        producer.start()
        try:
            await asyncio.wait_for(producer.take(0), 30)
        finally:
            await producer.stop()

    assert isinstance(bad_rollout, RolloutFn)
    with pytest.raises(RuntimeError, match="must return a non-empty list\\[Sample\\]"):
        asyncio.run(run())
