"""The first hour as a new user meets it: refusals and config errors said before anything heavy loads,
every Quick-start line runnable as printed, and the Python API's README example run as printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "pandas", "megatron", "openai")  # openai: the harness, loaded only for one


def _launch_and_list_heavy_modules(args: list[str], cwd: Path, **env_vars: str) -> tuple[int, str, list[str]]:
    """Run the launcher's main(args) in a fresh interpreter: (exit status, stderr, heavy modules it imported)."""
    probe = ("import json, sys\nfrom tandem.orchestrator.launcher import main\n"
             f"rc = main({args!r})\n"
             f"print(json.dumps([rc, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})]))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), **env_vars}
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    rc, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    return rc, done.stderr, heavy


def test_a_used_run_dir_is_refused_before_torch_loads(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "metrics.jsonl").write_text('{"step": 1}\n')
    rc, err, heavy = _launch_and_list_heavy_modules(["--run-dir", str(used)], REPO)
    assert rc == 2 and "already holds a run" in err
    assert heavy == []


def test_a_bad_key_is_named_before_torch_loads(tmp_path):
    rc, err, heavy = _launch_and_list_heavy_modules(["--bogus.key", "1", "--run-dir", str(tmp_path / "r")], REPO)
    assert rc == 2 and "unknown config key 'bogus.key'" in err
    assert heavy == []


HELP_NEEDS_NONE_OF = ("tandem.orchestrator.launcher", "tandem.supervisor", "tandem.env", "tandem.rollout", "aiohttp", "numpy")
"""What `--help` printed before them took seconds to import: the launcher and what it pulls in."""


@pytest.mark.parametrize("command", [["train.py", "--help"], ["-m", "tandem.cli", "train", "--help"]])
def test_help_is_printed_without_importing_the_launcher(command):
    """`python train.py --help` and `tandem train --help`: the keys come from the config models alone."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", *command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--trainer.lr (" in done.stdout and "--environment.args.sandbox.python (" in done.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = {m for m in imported if m.split(".")[0] in HEAVY
             or any(m == name or m.startswith(name + ".") for name in HELP_NEEDS_NONE_OF)}
    assert heavy == set()


@pytest.mark.parametrize("config", ["configs/coding_agent.toml", "configs/lookup.toml"])
def test_an_environment_run_is_refused_before_transformers_loads(tmp_path, config):
    """An environment's tools are checked (their schemas written) before anything starts, by tandem itself:
    transformers' get_json_schema would import transformers and, through it, torch (seconds) first."""
    used = tmp_path / "used"
    used.mkdir()
    (used / "metrics.jsonl").write_text('{"step": 1}\n')
    rc, err, heavy = _launch_and_list_heavy_modules(["--config", config, "--run-dir", str(used)], REPO)
    assert rc == 2 and "already holds a run" in err
    assert heavy == []


def readme_block(heading: str) -> list[str]:
    """The command lines of the first ```bash block under README's `## heading`, comments cut."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def readme_node_commands() -> list[str]:
    """The `python train.py ...` commands quoted in README's "From laptop to node" steps."""
    section = (REPO / "README.md").read_text().split("## From laptop to node\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`(python train\.py [^`]+)`", section)


@pytest.mark.unit
def test_every_readme_run_has_its_own_run_dir(monkeypatch):
    """Run in order after the install line's `python train.py`, no Quick-start line nor step of "From laptop
    to node" is refused for a run dir an earlier line used (each --resume continues the run it names; a
    rehearsal replaces its own)."""
    import shlex

    from tandem.config import load_config

    monkeypatch.chdir(REPO)
    used = {"runs/default": "python train.py"}  # the install line's default run
    for line in readme_block("Quick start") + readme_node_commands():
        argv = shlex.split(line)
        if argv[:2] != ["python", "train.py"] or {"--help", "--resume", "--rehearse"} & set(argv):
            continue
        run_dir = load_config(argv[2:]).run.run_dir
        assert run_dir not in used, f"{line!r} writes into {run_dir}, which {used.get(run_dir)!r} used"
        used[run_dir] = line
    assert len(used) >= 7


@pytest.mark.unit
@pytest.mark.parametrize("typed,meant", [("trainer.learning_rate", "trainer.lr"), ("run.max_steps", "run.steps"),
                                         ("rollout.num_generations", "rollout.samples_per_prompt")])
def test_a_name_from_another_trainer_gets_tandems_name(typed, meant):
    from tandem.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=re.escape(f"unknown config key '{typed}' (did you mean '{meant}'?)")):
        load_config([f"--{typed}", "1"])


@pytest.mark.unit
def test_the_environments_page_names_what_a_reward_reads():
    page = (REPO / "docs" / "environments.md").read_text()
    assert "sample.response_text" in page


NO_DEPS_EXTRAS = {"sky", "verifiers", "openenv", "prime_sandboxes", "renderers", "anthropic", "agents", "mcp", "fastmcp"}
"""Modules of requirements-deploy.txt and requirements-envs.txt, which the README installs with --no-deps."""


@pytest.mark.unit
def test_no_test_file_needs_the_no_deps_extras_to_be_collected():
    """`pytest -m unit` imports every test file: one that imports an extra at its top fails to collect
    (and stops the run) where the extras are not installed, instead of skipping (importorskip)."""
    import ast

    offenders = {}
    for path in sorted((REPO / "tests").glob("*.py")):
        skipped = set()  # modules an earlier pytest.importorskip(...) at the top level guards
        for node in ast.parse(path.read_text()).body:  # the module's own top level, not functions
            call = getattr(node, "value", None)
            if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "importorskip":
                skipped.add(call.args[0].value.split(".")[0])
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad = [n for n in names if n.split(".")[0] in NO_DEPS_EXTRAS - skipped]
            if bad:
                offenders[path.name] = bad
    assert offenders == {}


@pytest.mark.unit
def test_after_a_stop_the_message_and_the_next_start_agree(tmp_path):
    """What a failed or interrupted run says next is what the next start accepts: --resume only where
    a complete checkpoint is, else a fresh start that may replace the run (--overwrite)."""
    from tandem.orchestrator.run_state import next_start, refusal

    run_dir = tmp_path / "run"
    assert "nothing was kept" in next_start(run_dir, "tandem train")
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    said = next_start(run_dir, "tandem train")
    assert "no complete checkpoint" in said and "--overwrite" in said and "--resume" not in said
    assert refusal(run_dir, overwrite=True) is None  # the start it suggests is accepted
    ckpt = run_dir / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "orchestrator.json").write_text(json.dumps({"step": 1, "weight_version": 1}))
    assert f"`tandem train --resume {run_dir}`" in next_start(run_dir, "tandem train")


def test_the_readmes_python_example_runs_as_printed(tmp_path):
    """The README's Python block, verbatim, as a script in a fresh directory: it trains, returns the
    run's summary, and the run dir holds what `tandem train` writes (a config naming the reward)."""
    text = (REPO / "README.md").read_text()
    first_screen = text.split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", first_screen, re.S).group(1)
    (tmp_path / "example.py").write_text(example)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "python"
    printed_dir, printed_reward = done.stdout.strip().splitlines()[-1].split()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert Path(printed_dir) == run_dir.resolve() and float(printed_reward) == rows[-1]["reward_mean"]
    assert [r["step"] for r in rows] == [1, 2]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["rollout"]["reward"] == "__main__:reward" and config["engine"]["count"] == 1
    prompts = {json.loads(line)["prompt"] for line in Path(config["data"]["path"]).read_text().splitlines()}
    assert prompts == {f"Say {d}" for d in range(10)}


@pytest.mark.unit
def test_train_hands_its_functions_and_rows_to_the_launchers_checks(tmp_path, monkeypatch):
    """tandem.train's reward, rollout and rows are what preflight checks and the loop runs: the same
    contracts as a plug-in named in config (a reward that does not take (sample, row) is refused)."""
    import tandem
    from tandem import api
    from tandem.config import ConfigError

    seen = {}

    def fake_start_run(cfg, overwrite=False, hooks=None, load_inputs=None):
        seen["inputs"], seen["cfg"] = load_inputs(cfg), cfg
        Path(cfg.run.run_dir).mkdir(parents=True)
        (Path(cfg.run.run_dir) / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')

    async def rollout(ctx, row, group_size):
        return []

    def reward(sample, row):
        return 1.0

    monkeypatch.setattr(api, "start_run", fake_start_run)
    result = tandem.train(dataset=[{"prompt": "a", "answer": "1"}, {"prompt": "b"}], reward=reward, rollout=rollout,
                          run_dir=str(tmp_path / "r"), trainer={"lr": 2e-6})
    dataset, rollout_fn, reward_fn = seen["inputs"]
    assert reward_fn is reward and rollout_fn is rollout
    assert [(r["prompt"], r["answer"]) for r in dataset.rows] == [("a", "1"), ("b", None)]
    assert seen["cfg"].trainer.lr == 2e-6 and seen["cfg"].rollout.reward.endswith(":" + reward.__qualname__)
    assert result.steps == 1 and result.metrics["reward_mean"] == 0.5 and result.run_dir == (tmp_path / "r").resolve()

    def wrong(sample):
        return 0.0

    with pytest.raises(ValueError, match="must take"):
        tandem.train(dataset=[{"prompt": "a"}], reward=wrong, run_dir=str(tmp_path / "s"))
    with pytest.raises(ConfigError, match="trainer.learning_rate"):
        tandem.train(dataset=[{"prompt": "a"}], reward=reward, trainer={"learning_rate": 1e-6})


def test_the_coding_agent_without_pytest_in_its_sandbox_python_is_refused_before_anything_starts(tmp_path):
    """The README's coding-agent line on an interpreter without pytest: refused by preflight (exit 2,
    nothing started), naming pytest and the install, not 60 s in."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    rc, err, heavy = _launch_and_list_heavy_modules(
        ["--config", "configs/coding_agent.toml", "--steps", "2", "--engines", "2", "--run-dir", str(tmp_path / "r"),
         "--environment.args.sandbox.python", str(python)], REPO)
    assert rc == 2 and f"the sandbox's Python {python} has no pytest" in err and f"{python} -m pip install pytest" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.unit
def test_without_pytest_beside_tandem_the_coding_agent_names_the_install(monkeypatch):
    from tandem.envs.coding import settings

    real = settings.importlib.util.find_spec
    monkeypatch.setattr(settings.importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a))
    assert settings.pytest_problems("") == [
        f"the sandbox's Python {sys.executable} has no pytest, which grades every episode (every reward would be 0): "
        f"`{settings.PYTEST_INSTALL}`, or set environment.args.sandbox.python to an interpreter that has it"]
    monkeypatch.undo()
    assert settings.pytest_problems("") == []


@pytest.mark.parametrize("network", ["offline", "unreachable"])
def test_a_hub_model_with_no_hub_is_refused_before_anything_starts(tmp_path, network):
    """A hub id that is not cached, with HF_HUB_OFFLINE=1 or a hub that does not answer: one line naming
    the cause and how to point at a local copy, exit 2, before any child (not a trainer's
    FileNotFoundError a minute in)."""
    model = "tandem-first-hour/not-cached-anywhere"
    env = {"HF_HUB_OFFLINE": "1"} if network == "offline" else {"HF_ENDPOINT": "http://127.0.0.1:9"}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache
    rc, err, heavy = _launch_and_list_heavy_modules(["--model", model, "--run-dir", str(tmp_path / "r")], REPO, **env)
    assert rc == 2, err
    assert f"model.path '{model}' is not a local directory" in err and "--model DIR" in err
    assert ("HF_HUB_OFFLINE=1" if network == "offline" else "http://127.0.0.1:9) is unreachable") in err
    assert heavy == [] and not (tmp_path / "r").exists()


@pytest.mark.unit
def test_a_plug_in_file_resolves_like_data_path_from_the_toml_that_names_it(tmp_path, monkeypatch):
    """`reward = "my_reward.py:score"` in a TOML means the file beside that TOML, as data.path does; on the
    command line (or where the TOML's directory has no such file) it means the current directory."""
    from tandem.config import load_config
    from tandem.rollout import load_reward_fn

    task = tmp_path / "task"
    task.mkdir()
    (task / "my_reward.py").write_text("def score(sample, row):\n    return 1.0\n")
    (task / "train.jsonl").write_text('{"prompt": "a"}\n')
    (task / "task.toml").write_text('[rollout]\nreward = "my_reward.py:score"\n[data]\npath = "train.jsonl"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(["--config", "../task/task.toml"])
    assert cfg.rollout.reward == f"{task / 'my_reward.py'}:score" and cfg.data.path == str(task / "train.jsonl")
    assert load_reward_fn(cfg.rollout.reward).__name__ == "score"
    on_the_command_line = load_config(["--config", "../task/task.toml", "--rollout.reward", "my_reward.py:score"])
    assert on_the_command_line.rollout.reward == "my_reward.py:score"  # the current directory's, as before


@pytest.mark.unit
@pytest.mark.parametrize("argv0,command", [("/venv/bin/tandem", "tandem train"), ("train.py", "python train.py")])
def test_the_commands_suggested_are_in_the_form_the_user_typed(monkeypatch, argv0, command):
    from tandem.orchestrator import launcher

    monkeypatch.setattr(sys, "argv", [argv0, "train"])
    assert launcher.invoked_as() == command
