"""Never lose a run, never fail silently: the run dir is never written over implicitly, a failing
reward stops the run loudly and resumably, and what a config needs is checked before anything starts.

The end-to-end tests run the real launcher (engines, router, trainer); the unit tests drive the
pieces (run_state, the failure guard, preflight) with their edges faked.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _faults import SMALL, Launch
from tandem.config import TandemConfig
from tandem.orchestrator import run_state
from tandem.orchestrator.failures import FailureGuard
from tandem.orchestrator.producer import FailedGroup, StepBatch
from tandem.sample import Sample

REPO = Path(__file__).resolve().parents[1]
QUICK = [*SMALL, "--steps", "2", "--mode", "sync", "--engines", "1", "--checkpoint.interval", "1"]
NOISE = ("Generating train split", "Writing model shards", "Loading weights", "torch_dtype", "it/s]")


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes: what "nothing changed" means."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def finish(launch: Launch, timeout_s: float = 400) -> int:
    rc = launch.wait(timeout_s)
    assert launch.shutdown_report(0)[1] == [], "a child outlived the launcher"
    return rc


# --------------------------------------------------------------------------- end to end
@pytest.mark.e2e
def test_a_second_run_loses_nothing_and_overwrite_starts_afresh(tmp_path):
    run = tmp_path / "run"
    first = Launch(run, QUICK, tag="first")
    assert finish(first) == 0, first.describe()
    # One step numbering everywhere: rows 1..N, handoff files step_000001.., checkpoint N after row N.
    assert [r["step"] for r in rows(run)] == [1, 2]
    assert sorted(p.name for p in (run / "rollouts").glob("step_*.json")) == ["step_000001.json", "step_000002.json"]
    assert (run / "checkpoints" / "step_000002").is_dir() and rows(run)[-1]["weight_version"] == 2
    assert "step 1/2" in first.stdout and "step 2/2" in first.stdout
    # Start-up says what loads, and nothing of other libraries' bars or warnings (no --verbose).
    assert "tandem: trainer ready after" in first.stdout and "children ready in" in first.stdout
    for noise in NOISE:
        assert noise not in first.stdout + first.stderr, noise
    for log in (run / "logs").glob("engine*.log"):
        assert "Invalid HTTP request" not in log.read_text(), log.name
    (run / "notes.txt").write_text("mine")
    before = tree_digest(run)

    second = Launch(run, QUICK, tag="second")
    assert finish(second, 120) == 2, second.describe()
    assert f"--resume {run}" in second.stderr and "--overwrite" in second.stderr, second.stderr
    assert "2 step(s) in metrics.jsonl" in second.stderr
    assert tree_digest(run) == before, "a refused run changed the run dir"
    assert not (run / "logs" / "router.log").read_text().count("$ ") > 1, "a refused run started a child"

    third = Launch(run, [*QUICK, "--overwrite", "--steps", "1", "--logging.tensorboard", "true"], tag="third")
    assert finish(third) == 0, third.describe()
    assert [r["step"] for r in rows(run)] == [1], "--overwrite starts the metrics afresh"
    assert (run / "notes.txt").read_text() == "mine", "--overwrite deleted a file tandem did not write"
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_000001"]
    assert len(list((run / "tensorboard").glob("events.*"))) == 1
    assert all(log.read_text().count("$ ") == 1 for log in (run / "logs").glob("*.log")), "logs were appended to"


BOOM = '''
import os
def reward(sample, row):
    if os.environ.get("REWARD_FIXED"):
        return float(len(sample.response_ids) % 2)
    raise ValueError("boom: the reward cannot read its label")
'''


@pytest.mark.e2e
def test_a_reward_that_always_raises_stops_the_run_and_resume_continues_after_the_fix(tmp_path):
    plugin = tmp_path / "my_reward.py"
    plugin.write_text(BOOM)
    run = tmp_path / "run"
    args = [*QUICK, "--steps", "3", "--rollout.reward", f"{plugin}:reward"]
    broken = Launch(run, args, tag="broken")
    assert finish(broken) == 1, broken.describe()
    err = broken.stderr
    assert "ValueError: boom: the reward cannot read its label" in err
    assert err.count("Traceback (most recent call last)") == 1, "the first failure, with its traceback, once"
    assert f"--resume {run}" in err.splitlines()[-1] and "every sample of step 1 failed" in err.splitlines()[-1]
    assert not (run / "metrics.jsonl").exists() or rows(run) == [], "nothing was trained on zeros"
    state = json.loads((run / "checkpoints" / "step_000000" / "orchestrator.json").read_text())
    failed = json.loads((run / "rollouts" / "step_000001.json").read_text())  # kept for inspection
    assert failed["step"] == 1 and failed["checkpoint_only"].startswith("every sample of step 1 failed")
    assert state["step"] == 0
    assert set(state["in_flight_rows"][:2]) == {s["prompt_index"] for s in failed["samples"]}, \
        "the failed step's prompts come first on resume"
    assert json.loads((run / "failures.json").read_text())["first"]["reward"]["step"] == 1

    fixed = Launch(run, [], resume=True, env={"REWARD_FIXED": "1"}, tag="fixed")
    assert finish(fixed) == 0, fixed.describe()
    assert [r["step"] for r in rows(run)] == [1, 2, 3]
    assert all(r["reward_errors"] == 0 for r in rows(run))


def hide_megatron(tmp_path: Path) -> dict[str, str]:
    """An interpreter on which megatron-core is not installed: a sitecustomize that refuses it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoMegatron:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'megatron' or name.startswith('megatron.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\")\n"
        "sys.meta_path.insert(0, _NoMegatron())\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.e2e
def test_a_missing_megatron_core_fails_before_any_child_starts(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "train.py", "--config", "configs/node_qwen3_4b.toml", "--rehearse",
                          "--run-dir", str(run)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, **hide_megatron(tmp_path)})
    assert out.returncode == 2, out.stderr
    assert "megatron-core" in out.stderr and "pip install -r requirements-gpu.txt" in out.stderr
    assert "Root Cause" not in out.stderr and not (tmp_path / "run-rehearsal" / "logs").exists(), \
        "a child was started"


# --------------------------------------------------------------------------- run dir
def test_a_fresh_run_refuses_a_run_dir_that_holds_a_run_and_overwrite_removes_only_its_outputs(tmp_path):
    cfg = TandemConfig()
    run = tmp_path / "run"
    run_state.fresh(run, cfg)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    (run / "checkpoints" / "step_000001" / "orchestrator.json").write_text("{}")
    (run / "mine.txt").write_text("keep me")
    before = tree_digest(run)
    with pytest.raises(run_state.RunDirInUse, match="1 step.*checkpoints step_000001.*--resume.*--overwrite"):
        run_state.fresh(run, cfg)
    assert tree_digest(run) == before
    run_state.fresh(run, cfg, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "mine.txt"]
    # a directory with none of tandem's outputs is not a run: nothing to refuse
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.jsonl").write_text("{}")
    run_state.fresh(other, cfg)
    assert (other / "data.jsonl").read_text() == "{}"


# --------------------------------------------------------------------------- failure bound
def scored(n: int, failed: int) -> list[Sample]:
    out = []
    for i in range(n):
        s = Sample(prompt_ids=[1], response_ids=[2], rollout_logprobs=[0.0], loss_mask=[1])
        s.reward_info = {"reason": "error: ValueError: x", "traceback": "tb"} if i < failed else {}
        out.append(s)
    return out


def batch_of(samples: list[Sample], failed_groups: int = 0, group: int = 4) -> StepBatch:
    return StepBatch(step=0, samples=samples, rollout_time=0, dropped_stale=0, recycled=0, discarded=0,
                     longest_group_s=0,
                     failed_groups=[FailedGroup(9, group, "RuntimeError: x", "tb") for _ in range(failed_groups)])


def test_the_failure_bound_by_hand(tmp_path, capsys):
    """max_failed_fraction 0.5 over 3 steps; 8 samples a step. Step 1: 4 failed (not yet a full window);
    step 2: 1; step 3: 8 of 8 = every sample failed, whatever the window says."""
    guard = FailureGuard(tmp_path, max_fraction=0.5, window_steps=3, reward_spec="r.py:f")
    c1 = guard.observe(1, batch_of(scored(8, 4)))
    assert (c1.reward_errors, c1.rollout_errors, c1.samples) == (4, 0, 8)
    assert guard.stop_reason(1, c1) is None, "no verdict on a partial window"
    c2 = guard.observe(2, batch_of(scored(8, 1)))
    assert guard.stop_reason(2, c2) is None
    c3 = guard.observe(3, batch_of(scored(4, 2), failed_groups=1))  # 2 rewards + a group of 4 lost
    assert (c3.reward_errors, c3.rollout_errors, c3.samples) == (2, 4, 8)
    # window: (4 + 1 + 6) / 24 = 0.458 <= 0.5: runs on
    assert guard.stop_reason(3, c3) is None
    c4 = guard.observe(4, batch_of(scored(8, 7)))
    # window: steps 2..4: (1 + 6 + 7) / 24 = 0.583 > 0.5
    assert "14 of 24 samples failed over the last 3 steps" in guard.stop_reason(4, c4)
    c5 = guard.observe(5, batch_of(scored(8, 8)))
    assert "every sample of step 5 failed" in guard.stop_reason(5, c5)
    err = capsys.readouterr().err
    assert err.count("the reward (r.py:f) failed at step 1: ValueError: x") == 1
    assert err.count("a rollout failed at step 3: RuntimeError: x") == 1


# --------------------------------------------------------------------------- rollouts that raise
def test_a_rollout_that_raises_drops_its_group_and_a_step_of_them_in_a_row_stops_the_run():
    import asyncio

    from test_producer import make, one_token
    from tandem.orchestrator.producer import RolloutsFailing

    async def flaky(ctx, row, g):  # odd rows raise: the step still fills from even ones
        await asyncio.sleep(0)
        if row["_index"] % 2:
            raise ConnectionError(f"engine went away on row {row['_index']}")
        return [one_token(0) for _ in range(g)]

    async def always(ctx, row, g):
        raise KeyError("label")

    async def go():
        producer, _ = make(mode="sync", prompts=2, group=3, fn=flaky)
        producer.start()
        batch = await producer.take(0)
        assert sorted(s.prompt_index for s in batch.samples) == [0, 0, 0, 2, 2, 2]
        # rows 0 and 1 are admitted; row 1's failure frees its slot for row 2; row 3 is never needed
        assert [(g.row_pos, g.samples) for g in batch.failed_groups] == [(1, 3)]
        assert "ConnectionError: engine went away on row 1" == batch.failed_groups[0].error
        assert "Traceback" in batch.failed_groups[0].traceback
        await producer.stop()

        producer, _ = make(mode="sync", prompts=2, group=3, fn=always)
        producer.start()
        with pytest.raises(RolloutsFailing, match="2 rollout group.*KeyError: 'label'"):
            await asyncio.wait_for(producer.take(0), 30)
        assert sorted(g.row_pos for g in producer.take_failed()) == [0, 1]
        await producer.stop()
    asyncio.run(go())


# --------------------------------------------------------------------------- start-up
class FakeChild:
    def __init__(self, name: str, role: str, alive: bool = True):
        self.name, self.role, self.alive, self.log_path = name, role, alive, Path("/nonexistent.log")

    def describe_exit(self) -> str:
        return f"{self.name} died (exit code 1)"


class FakeSup:
    def check(self) -> None:
        pass


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now = round(self.now + s, 6)


def pending(child, ready_at, clock, timeout, key, after=()):
    from tandem.orchestrator.startup import Pending

    return Pending(child, lambda: clock.now >= ready_at, "ready", timeout, key, after=list(after))


def test_startup_gates_each_child_on_its_own_budget(tmp_path):
    """Engines and the trainer load together; the router's budget starts once the engines are up."""
    import io

    from tandem.orchestrator.startup import StartupStatus, wait_all
    from tandem.supervisor import ChildFailed

    clock, out = Clock(), io.StringIO()
    engines = [pending(FakeChild(f"engine{i}", "engine"), 10 + i, clock, 30, "engine.startup_timeout_s")
               for i in range(2)]
    trainer = pending(FakeChild("trainer", "trainer"), 25, clock, 60, "trainer.startup_timeout_s")
    router = pending(FakeChild("router", "router"), 14, clock, 5, "router.startup_timeout_s", after=engines)
    wait_all(FakeSup(), [*engines, trainer, router], StartupStatus(out), clock, clock.sleep)
    assert 25 <= clock.now < 25.5, "everything loads at once: the slowest child sets the time"
    assert router.started is not None and 11 <= router.started < 11.5, "the router's clock starts after the engines"
    text = out.getvalue()
    assert "tandem: engine0 ready after 10.0 s" in text and "tandem: trainer ready after 25.0 s" in text

    clock = Clock()
    slow = pending(FakeChild("trainer", "trainer"), 1e9, clock, 40, "trainer.startup_timeout_s")
    fast = pending(FakeChild("engine0", "engine"), 1, clock, 30, "engine.startup_timeout_s")
    with pytest.raises(ChildFailed, match=r"trainer was not ready after 40s \(trainer.startup_timeout_s\)"):
        wait_all(FakeSup(), [fast, slow], StartupStatus(io.StringIO()), clock, clock.sleep)
    dead = pending(FakeChild("engine1", "engine", alive=False), 5, clock, 30, "engine.startup_timeout_s")
    with pytest.raises(ChildFailed, match="engine1 exited before it was ready. engine1 died"):
        wait_all(FakeSup(), [dead], StartupStatus(io.StringIO()), Clock(), lambda s: None)


def test_startup_status_line():
    from tandem.orchestrator.startup import StartupStatus

    clock = Clock()
    engines = [pending(FakeChild(f"engine{i}", "engine"), 0, clock, 30, "k") for i in range(3)]
    engines[0].ready_after_s = engines[1].ready_after_s = 5.0
    for p in engines:
        p.started = 0.0
    trainer = pending(FakeChild("trainer", "trainer"), 0, clock, 60, "k")
    trainer.started = 0.0
    router = pending(FakeChild("router", "router"), 0, clock, 5, "k", after=engines)
    line = StartupStatus().line([*engines, trainer, router], 14.2, 0.0)
    assert line == "tandem: starting (14 s) · engines 2/3 healthy · trainer loading 14 s · router waiting for engines"


# --------------------------------------------------------------------------- preflight
def test_preflight_reports_every_problem_at_once_with_its_fix(tmp_path, monkeypatch):
    from tandem.config import build_config
    from tandem.orchestrator import preflight

    cfg = build_config({"trainer": {"backend": "megatron", "gpus": 2, "lora": {"rank": 4},
                                    "megatron": {"tensor_parallel": 1}},
                        "engine": {"backend": "sglang"}, "run": {"run_dir": str(tmp_path / "run")}})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPUs, and no nvidia-smi asked
    monkeypatch.setattr(preflight, "importable", lambda module: module not in ("megatron.core", "peft"))
    monkeypatch.setenv("TANDEM_SGLANG_PYTHON", str(tmp_path / "no-such-python"))
    monkeypatch.setattr(preflight, "_free_bytes", lambda path: 10**6)

    def inputs(cfg):
        raise ValueError("dataset file 'x.jsonl' does not exist (data.path)")

    with pytest.raises(preflight.PreflightFailed) as err:
        preflight.check(cfg, inputs, "run dir ... already holds a run")
    problems = err.value.problems
    assert problems[0] == "run dir ... already holds a run"
    text = "\n".join(problems)
    assert "megatron-core" in text and "pip install -r requirements-gpu.txt" in text
    assert "trainer.lora needs peft" in text
    assert "no-such-python" in text and "TANDEM_SGLANG_PYTHON" in text
    assert "not enough free disk" in text and "checkpoint.keep_last" in text
    assert "x.jsonl" in text
    assert str(err.value).startswith(f"the run cannot start ({len(problems)} problems)")


def test_wandb_is_needed_only_when_enabled_and_preflight_names_the_install(monkeypatch):
    from tandem.config import build_config
    from tandem.orchestrator import preflight

    monkeypatch.setattr(preflight, "importable", lambda module: module != "wandb")
    assert preflight.module_problems(build_config({})) == []  # disabled by default: not needed
    for mode in ("offline", "online"):
        [problem] = preflight.module_problems(build_config({"logging": {"wandb": {"mode": mode}}}))
        assert f"logging.wandb.mode = '{mode}' needs wandb" in problem
        assert problem.endswith("pip install -r requirements-wandb.txt")


def test_disk_need_by_hand():
    """The tiny model (64 hidden, 2 layers, 4 x 16 heads, 2 kv heads, ffn 256, 259 tokens, tied):
    per layer 4*64*... counted by the planner's shape; fp32 weights; the torch trainer's checkpoint
    holds weights + Adam's two moments = 3 x the weights."""
    from tandem.config import build_config
    from tandem.orchestrator.preflight import disk_need
    from tandem.lab.plan.shape import tiny_shape

    cfg = build_config({})
    params = tiny_shape(cfg.model.tiny).total_params()
    need = disk_need(cfg)
    assert need.weights == params * 4
    assert need.versions == cfg.sync.keep_last + 1 and need.checkpoints == cfg.checkpoint.keep_last + 1
    assert need.total == params * 4 * (cfg.sync.keep_last + 1) + params * 12 * (cfg.checkpoint.keep_last + 1)
    mega = disk_need(build_config({"trainer": {"backend": "megatron"}, "model": {"dtype": "bfloat16"},
                                   "checkpoint": {"interval": 0}}))
    assert mega.checkpoints == 0 and mega.weights == params * 2 and mega.checkpoint == params * 14


def test_an_environment_names_what_it_needs():
    from types import SimpleNamespace

    from tandem.config import build_config
    from tandem.envs.verifiers_env import VerifiersEnv
    from tandem.orchestrator import preflight

    cfg = build_config({})
    rollout = SimpleNamespace(env_class=VerifiersEnv)
    assert preflight.environment_problems(cfg, rollout) == []  # installed here (requirements-envs.txt)
    import tandem.envs.verifiers_env as venv
    original = venv.importable
    try:
        venv.importable = lambda module: False
        assert "pip install --no-deps -r requirements-envs.txt" in preflight.environment_problems(cfg, rollout)[0]
    finally:
        venv.importable = original


# --------------------------------------------------------------------------- retention
def test_keep_rollouts_keeps_the_last_n_steps_files(tmp_path):
    from tandem.handoff import TrainBatch, TrainResult, prune_step_files, result_path, write_batch, write_train_result

    for step in range(6):
        write_batch(tmp_path, TrainBatch(step, []))
        write_train_result(tmp_path, TrainResult(step))
        prune_step_files(tmp_path, step + 1, 2)
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step_000005.json", "step_000006.json"]
    assert sorted(p.name for p in (tmp_path / "trainer").iterdir()) == ["step_000005.json", "step_000006.json"]
    prune_step_files(tmp_path, 6, "all")
    assert result_path(tmp_path, 4).exists()


def test_a_fleet_with_no_routable_engine_is_waited_for_within_one_request_timeout():
    """sglang-router answers 503 no_available_workers while its only engine is being restarted: the
    client waits (the engine doctor brings one back or stops the run) instead of spending its
    retries, for at most one request timeout; any other failure spends them as before."""
    import asyncio

    from tandem.rollout.client import EngineClient, GenerationError

    down = (503, '{"error":{"code":"no_available_workers","message":"No available workers"}}')
    answers = [down] * 10 + [(200, {"text": "x", "output_ids": [1], "meta_info": {}})]

    async def post(payload, headers):
        return answers.pop(0)

    async def go():
        client = EngineClient("http://unused", 4, 60, retries=2, post=post)
        body, _ = await client._post_with_retry({})
        assert body["text"] == "x" and client.retried == 0

        client = EngineClient("http://unused", 4, 0.5, retries=2, post=lambda p, h: asyncio.sleep(0, down))
        with pytest.raises(GenerationError, match="no_available_workers"):
            await asyncio.wait_for(client._post_with_retry({}), 30)
        assert client.retried == 2, "past the timeout, the retries are spent as for any failure"

        client = EngineClient("http://unused", 4, 60, retries=2, post=lambda p, h: asyncio.sleep(0, (502, "bad")))
        with pytest.raises(GenerationError, match="HTTP 502"):
            await client._post_with_retry({})
        assert client.retried == 2
    asyncio.run(go())
