"""The config tree's shape: sections by backend, [rollout] by concern, typed environment
arguments, each child's view, and the migration of a file in the earlier layout."""

from __future__ import annotations

import json

import pytest

from tandem.config import (ENGINE_VIEW, TRAINER_VIEW, ConfigError, build_config, child_view,
                           load_config, read_view, write_views)
from tandem.config.migrate import migrate


# --------------------------------------------------------------------------- sections by backend
def test_a_backends_own_settings_exist_only_for_it():
    sim = build_config({"engine": {"backend": "sim", "sim": {"time_scale": 5.0}}})
    assert sim.engine.sim.time_scale == 5.0
    embedded = build_config({})
    assert embedded.engine.embedded.device == "auto" and not hasattr(embedded.engine, "sim")
    assert not hasattr(embedded.engine, "sglang") and not hasattr(embedded.trainer, "megatron")
    megatron = build_config({"trainer": {"backend": "megatron", "gpus": 2, "megatron": {"tensor_parallel": 2}}})
    assert megatron.trainer.megatron.tensor_parallel == 2
    for tree, key, owner, chosen in [
        ({"engine": {"sglang": {"args": {}}}}, "engine.sglang", "sglang", "embedded"),
        ({"engine": {"backend": "sim", "embedded": {"device": "cpu"}}}, "engine.embedded", "embedded", "sim"),
        ({"trainer": {"sim": {"train_time_s": 1.0}}}, "trainer.sim", "sim", "torch"),
        ({"trainer": {"backend": "sim", "megatron": {"bf16": False}}}, "trainer.megatron", "megatron", "sim"),
    ]:
        with pytest.raises(ConfigError) as err:
            build_config(tree)
        section = key.split(".")[0]
        assert str(err.value) == (f"config key '{key}' is read only with {section}.backend = '{owner}' "
                                  f"({section}.backend is '{chosen}'): set {section}.backend or remove [{key}]")


def test_switching_backend_on_the_command_line_works_with_the_shipped_config_toml():
    """config.toml carries no backend's own table, so any backend can be chosen over it."""
    for backend, extra in [("sglang", []), ("sim", ["--engine.sim.time_scale", "3"]),
                           ("external", ["--engine.external.urls", '["http://h:1", "http://h:2", "http://h:3"]'])]:
        cfg = load_config(["--engine.backend", backend, *extra], config_file="config.toml")
        assert cfg.engine.backend == backend
    assert cfg.engine.count == 3  # external: the listed engines, whatever engine.count says
    cfg = load_config(["--trainer.backend", "megatron", "--trainer.gpus", "2"], config_file="config.toml")
    assert cfg.trainer.megatron.tensor_parallel == 2


def test_every_error_is_still_reported_at_once_across_backends():
    with pytest.raises(ConfigError) as err:
        build_config({"engine": {"backend": "sim", "sim": {"time_scale": 0}, "sglang": {}},
                      "rollout": {"max_staleness": 2}})
    lines = str(err.value).splitlines()
    assert lines[0] == "3 problems in the config:"
    assert set(lines[1:]) == {
        "  - config key 'engine.sglang' is read only with engine.backend = 'sglang' (engine.backend is 'sim'): "
        "set engine.backend or remove [engine.sglang]",
        "  - config key 'rollout.max_staleness' moved: it is 'rollout.staleness.max' now",
        "  - config key 'engine.sim.time_scale': Input should be greater than 0 (got 0)",
    }


# --------------------------------------------------------------------------- typed environment arguments
def test_the_coding_environments_arguments_are_typed_and_named_when_wrong():
    from tandem.env.base import environment_args
    from tandem.envs.coding import CodingEnv
    from tandem.envs.coding.settings import CodingArgs, coding_args

    args = environment_args(CodingEnv, {"sandbox": {"memory_mb": 4096}, "agent": {"output_max_chars": 50}})
    assert isinstance(args["args"], CodingArgs) and args["args"].sandbox.memory_mb == 4096
    assert CodingEnv(**args).settings.agent.output_max_chars == 50
    with pytest.raises(ConfigError) as err:
        environment_args(CodingEnv, {"sandbox": {"memry_mb": 1, "cpu_time_s": "60"}, "agnt": {}})
    assert set(str(err.value).splitlines()[1:]) == {
        "  - unknown config key 'environment.args.sandbox.memry_mb'",
        "  - unknown config key 'environment.args.agnt'",
        "  - config key 'environment.args.sandbox.cpu_time_s': Input should be a valid integer (got '60')",
    }
    cfg = build_config({"environment": {"args": {"sandbox": {"pool_size": 3}}}})
    assert coding_args(cfg).sandbox.pool_size == 3  # the grader reads the same settings


def test_an_untyped_environment_gets_its_arguments_as_written():
    from tandem.env.base import environment_args
    from tandem.envs.lookup import Lookup

    assert environment_args(Lookup, {"max_queries": 3}) == {"max_queries": 3}


def test_preflight_names_a_bad_environment_argument_before_anything_starts(tmp_path, monkeypatch):
    from tandem.orchestrator import launcher, preflight

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPUs, and no nvidia-smi asked
    cfg = build_config({"environment": {"name": "tandem.envs.coding:CodingEnv",
                                        "args": {"sandbox": {"memory_mb": -1}}},
                        "run": {"run_dir": str(tmp_path / "run")}})
    with pytest.raises(preflight.PreflightFailed) as err:
        preflight.check(cfg, launcher.check_inputs)
    assert "config key 'environment.args.sandbox.memory_mb': Input should be greater than or equal to 1" \
        in str(err.value)


# --------------------------------------------------------------------------- each child's view
def test_each_child_receives_only_its_view(tmp_path):
    cfg = build_config({"environment": {"name": "tandem.envs.lookup:Lookup"},
                        "rollout": {"sampling": {"temperature": 0.7}, "staleness": {"max": 2}},
                        "run": {"run_dir": str(tmp_path)}})
    paths = write_views(cfg, tmp_path)
    trainer = json.loads(paths["trainer"].read_text())
    assert set(trainer) == {"run", "model", "trainer", "sync", "checkpoint", "rollout", "engine"}
    assert set(trainer["rollout"]) == {"sampling", "staleness"}  # not the plug-ins, the data, the client
    engine = json.loads(paths["engine"].read_text())
    assert set(engine) == {"run", "model", "engine", "trainer", "rollout"}
    assert set(engine["trainer"]) == {"lora"} and set(engine["rollout"]) == {"staleness"}
    view = read_view(paths["trainer"], TRAINER_VIEW)
    assert view.rollout.sampling.temperature == 0.7 and view.effective_staleness == 2
    assert not hasattr(view, "environment") and not hasattr(view.rollout, "reward")
    assert read_view(paths["engine"], ENGINE_VIEW).effective_staleness == 2
    sync = child_view(build_config({"run": {"mode": "sync", "colocate": True}}), ENGINE_VIEW)
    assert sync.effective_staleness == 0 and sync.colocated
    assert child_view(build_config({"run": {"mode": "sync", "colocate": True}}), TRAINER_VIEW).colocated
    assert not view.colocated


def test_the_launcher_hands_each_child_its_view(tmp_path):
    from tandem.orchestrator.cluster import engine_command, trainer_command

    cfg = build_config({"run": {"run_dir": str(tmp_path)}})
    write_views(cfg, tmp_path)
    argv = trainer_command(cfg, tmp_path)
    assert argv[argv.index("--run-config") + 1] == str(tmp_path / "views" / "trainer.json")
    argv = engine_command(cfg, "engine0", 1, tmp_path, "m")
    assert argv[argv.index("--run-config") + 1] == str(tmp_path / "views" / "engine.json")


# --------------------------------------------------------------------------- a file in the earlier layout
OLD = """\
# a node
[engine]
backend = "sglang"
mem_fraction_static = 0.8   # leave room
sglang_args = {context_length = 8192}

[rollout]
environment = "tandem.envs.coding:CodingEnv"
data_path = "tasks.jsonl"
max_new_tokens = 512
max_staleness = 2
prompts_per_step = 4

[sandbox]
# more memory for big repos
memory_mb = 4096
"""


def test_a_file_in_the_earlier_layout_fails_naming_every_new_key_and_migrates(tmp_path):
    old = tmp_path / "node.toml"
    old.write_text(OLD)
    with pytest.raises(ConfigError) as err:
        load_config(["--config", str(old)])
    assert str(err.value).startswith("7 problems in the config:")
    assert "config key 'sandbox.memory_mb' moved: it is 'environment.args.sandbox.memory_mb' now" in str(err.value)
    new = migrate(OLD)
    assert "# more memory for big repos\nmemory_mb = 4096" in new and "mem_fraction_static = 0.8   # leave room" in new
    (tmp_path / "new.toml").write_text(new)
    cfg = load_config(["--config", str(tmp_path / "new.toml")])
    assert (cfg.engine.sglang.mem_fraction_static, cfg.engine.sglang.args) == (0.8, {"context_length": 8192})
    assert (cfg.environment.name, cfg.rollout.sampling.max_new_tokens, cfg.rollout.staleness.max) == \
        ("tandem.envs.coding:CodingEnv", 512, 2)
    assert cfg.environment.args == {"sandbox": {"memory_mb": 4096}} and cfg.rollout.prompts_per_step == 4
    assert cfg.data.path.endswith("tasks.jsonl") and "[sandbox]" not in new
