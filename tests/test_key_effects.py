"""Config keys set to a non-default value, each checked to take effect where the code reads it.

These are the keys tests/test_config_coverage.py found that no test had set off its default (issue 45).
Each test builds the config with the key set, hands it to the real code that reads it (the trainer, the
policy loss, the router's command, the tiny model's config, the engine, the sandbox's limits, ...) and
checks the effect; scripts/mutants_tests3.py breaks each reading once.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from types import SimpleNamespace

import pytest
import torch

from tandem.config import ConfigError, build_config, load_config
from tandem.sample import Sample


def _batch(advantages: list[float]) -> list[Sample]:
    g = torch.Generator().manual_seed(5)
    return [Sample(prompt_ids=torch.randint(0, 256, (3,), generator=g).tolist(),
                   response_ids=torch.randint(0, 256, (4,), generator=g).tolist(), loss_mask=[1] * 4,
                   rollout_logprobs=[-1.0] * 4, advantage=a, group_id=0) for a in advantages]


def _trainer(tmp_path, **trainer):
    from tandem.trainer.torch_backend import TorchTrainer

    return TorchTrainer(build_config({"run": {"cache_dir": str(tmp_path), "seed": 0},
                                      "trainer": {"device": "cpu", **trainer}}))


# --------------------------------------------------------------------------- the trainer
def test_weight_decay_shrinks_every_weight_by_lr_times_decay(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_TORCH_THREADS", "1")
    trainer = _trainer(tmp_path, weight_decay=0.25, lr=0.01)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train_step(_batch([0.0] * 4))  # no advantage, no gradient: AdamW's step is the decay alone
    for name, p in trainer.model.named_parameters():
        torch.testing.assert_close(p.detach(), before[name] * (1 - 0.01 * 0.25), msg=name)


def test_grad_clip_bounds_the_norm_each_minibatch_steps_with(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_TORCH_THREADS", "1")
    trainer = _trainer(tmp_path, grad_clip=1e-3, minibatches=2)
    norms = []

    def seen(optimizer, args, kwargs):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
    trainer.optimizer.register_step_pre_hook(seen)
    metrics = trainer.train_step(_batch([1.0, -1.0, 2.0, -2.0]))
    assert len(norms) == 2, "trainer.minibatches = 2: two optimizer steps a train step"
    assert metrics["grad_norm"] > 1e-2  # the raw gradient is far above the bound...
    assert all(n == pytest.approx(1e-3, rel=1e-3) for n in norms), norms  # ...and each step used the clipped one


def test_eps_clip_is_the_lower_trust_region_bound():
    from tandem.losses import PolicyLoss

    def clipped(eps_clip: float) -> float:
        loss = PolicyLoss.from_config(build_config({"trainer": {"loss": {"eps_clip": eps_clip}}}).trainer.loss)
        logp = torch.log(torch.full((1, 2), 0.85)).requires_grad_()  # ratio 0.85 against an old policy of 1
        batch = SimpleNamespace(mask=torch.ones(1, 2), advantages=torch.tensor([[-1.0, 1.0]]),
                                old_logp=torch.zeros(1, 2), ref_logp=None, rollout_logp=torch.zeros(1, 2))
        _, sums = loss(logp, lambda: torch.zeros(1, 2), batch, num_samples=1, num_tokens=2.0)
        return sums["clip_frac"].item()

    assert clipped(0.2) == 0.0  # 0.85 is inside [0.8, 1.28]
    assert clipped(0.1) == 1.0  # outside [0.9, 1.28]: the negative advantage's token is clipped


# --------------------------------------------------------------------------- the model, the engine, the router
def test_the_tiny_models_shape_keys_reach_the_model_it_writes(tmp_path):
    from tandem.model_source import build_byte_tokenizer, build_tiny_model

    cfg = build_config({"model": {"tiny": {"max_position_embeddings": 512, "tie_word_embeddings": False,
                                           "tool_tokens": 3}}})
    written = json.loads((build_tiny_model(cfg.model, tmp_path / "tiny", seed=0) / "config.json").read_text())
    assert written["max_position_embeddings"] == 512 and written["tie_word_embeddings"] is False
    assert written["vocab_size"] == len(build_byte_tokenizer(0)) + 3


def test_the_embedded_engine_takes_its_limits_from_the_config(tmp_path):
    from tandem.engine.embedded import EmbeddedCore
    from tandem.model_source import resolve_model_path

    cfg = build_config({"run": {"cache_dir": str(tmp_path)},
                        "engine": {"max_running_requests": 3, "max_total_tokens": 999, "priority_scheduling": False,
                                   "embedded": {"device": "cpu", "admission_window_ms": 7.0}}})
    core = EmbeddedCore.from_config(cfg, model_path=str(resolve_model_path(cfg)))
    scheduler = core.engine_backend.scheduler
    assert scheduler.max_running_requests == 3 and scheduler.max_total_tokens == 999
    assert scheduler.priority_scheduling is False
    assert core.engine_backend.admission_window_s == pytest.approx(0.007)


def test_the_routers_command_carries_its_keys():
    from tandem.orchestrator.cluster import router_command

    cfg = build_config({"router": {"assignment_mode": "min_group", "health_check_interval_s": 7},
                        "rollout": {"client": {"request_timeout_s": 42.0}}})
    argv = router_command(cfg, 1, ["http://127.0.0.1:2"], 3)
    assert argv[argv.index("--assignment-mode") + 1] == "min_group"
    assert argv[argv.index("--health-check-interval-secs") + 1] == "7"
    assert argv[argv.index("--request-timeout-secs") + 1] == "42"


def test_a_pinned_engine_port_that_is_taken_is_named_before_anything_starts():
    from tandem.orchestrator.cluster import check_configured_ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match="engine.base_port"):
            check_configured_ports(build_config({"engine": {"base_port": port, "count": 1}}))


def test_the_disk_preflight_counts_the_checkpoints_kept():
    from tandem.orchestrator.preflight import disk_need

    default, kept = disk_need(build_config({})), disk_need(build_config({"checkpoint": {"keep_last": 5}}))
    assert kept.checkpoints == 5 + 1  # the kept ones and the one being written
    assert kept.total - default.total == (5 - build_config({}).checkpoint.keep_last) * kept.checkpoint


# --------------------------------------------------------------------------- data
def test_data_shuffle_off_serves_the_prompts_in_file_order():
    from tandem.rollout import PromptCursor

    def first(shuffle: bool) -> list[int]:
        cfg = build_config({"data": {"shuffle": shuffle}})
        cursor = PromptCursor(20, cfg.run.seed, cfg.data.shuffle)
        return [cursor.next() for _ in range(20)]

    assert first(False) == list(range(20))
    assert first(True) != list(range(20)) and sorted(first(True)) == list(range(20))


@pytest.mark.parametrize("option", [("--trainer.megatron.exp_avg_dtype", "bfloat16"),
                                    ("--trainer.megatron.exp_avg_sq_dtype", "float16"),
                                    ("--trainer.megatron.context_parallel", "2")])
def test_megatron_settings_this_stack_cannot_run_are_refused_by_name(option):
    with pytest.raises(ConfigError, match=option[0][2:]):
        load_config(["--trainer.backend", "megatron", "--trainer.gpus", "2", *option])


def test_the_cpu_optimizer_needs_the_distributed_one():
    with pytest.raises(ConfigError, match="trainer.megatron.use_distributed_optimizer = true"):
        build_config({"trainer": {"backend": "megatron", "gpus": 2, "megatron": {
            "use_distributed_optimizer": False, "optimizer_cpu_offload": True, "precision_aware_optimizer": True}}})


def test_a_plain_prompt_goes_through_the_chat_template_when_asked(tmp_path):
    from tandem.model_source import build_byte_tokenizer
    from tandem.rollout.single_turn import single_turn

    tok = build_byte_tokenizer(0)
    sent = []

    async def generate_many(prompt_ids, sampling_params, n):
        sent.append(prompt_ids)
        return []

    def prompt_ids(apply: bool) -> list[int]:
        cfg = build_config({"data": {"apply_chat_template": apply}})
        ctx = SimpleNamespace(cfg=cfg, tokenizer=tok, sampling_params={},
                              engine=SimpleNamespace(generate_many=generate_many))
        asyncio.run(single_turn(ctx, {"prompt": "hello"}, 2))
        return sent[-1]

    assert prompt_ids(False) == tok("hello", add_special_tokens=False)["input_ids"]
    assert prompt_ids(True) == list(tok.apply_chat_template([{"role": "user", "content": "hello"}],
                                                            add_generation_prompt=True, tokenize=True,
                                                            return_dict=False))
    assert len(sent[-1]) > len(sent[0])


# --------------------------------------------------------------------------- the coding environment's sandbox
def test_the_sandboxs_resource_keys_become_its_limits():
    from tandem.envs.coding.settings import coding_args
    from tandem.envs.coding.sandbox.isolation import Limits
    from tandem.envs.coding.sandbox.storage import DiskCap

    cfg = build_config({"environment": {"name": "tandem.envs.coding:CodingEnv",
                                        "args": {"sandbox": {"max_file_mb": 3, "max_open_files": 77}}}})
    argv = Limits.from_config(coding_args(cfg).sandbox).prlimit_args()
    assert f"--fsize={3 * 2**20}" in argv and "--nofile=77" in argv
    cfg = build_config({"environment": {"name": "tandem.envs.coding:CodingEnv",
                                        "args": {"sandbox": {"max_inodes": 1234}}}})
    assert DiskCap.from_config(coding_args(cfg).sandbox).max_inodes == 1234


# --------------------------------------------------------------------------- the run's failure bound
def test_the_failure_bound_and_its_window_are_the_configured_ones(tmp_path):
    from tandem.orchestrator.failures import RunStopped
    from tandem.orchestrator.loop import run_loop
    from tests.test_loop import Fleet, Producer, Trainer, group, loop_run

    def step(failed: int) -> list[Sample]:  # 8 samples, `failed` of them with a reward that raised
        samples = group(0, [1.0, 0.0] * 4)
        for s in samples[:failed]:
            s.reward_info = {"reason": "error: ValueError: x", "traceback": "tb"}
        return samples

    def run(name: str, **bound) -> str | None:
        batches = [step(2), step(2), step(0)]  # 25% failed twice: over a 0.2 bound, under the default 0.5
        cfg = build_config({"run": {"steps": 3, **bound}, "checkpoint": {"interval": 0}})
        (tmp_path / name).mkdir()
        try:
            asyncio.run(run_loop(loop_run(cfg, tmp_path / name, Producer(batches), Trainer(), Fleet())))
        except RunStopped as stop:
            return str(stop)
        return None

    assert run("default") is None
    assert "run.max_failed_fraction = 0.2" in run("one-step-window", max_failed_fraction=0.2, failed_window_steps=1)
    # over a window of two steps nothing is judged before step 2, and then 4 of 16 failed: 0.25 > 0.2
    assert "4 of 16 samples failed over the last 2 steps" in run("two-step-window", max_failed_fraction=0.2,
                                                                   failed_window_steps=2)


# --------------------------------------------------------------------------- logging
def test_verbose_leaves_the_libraries_environment_alone(monkeypatch):
    from tandem.quiet import QUIET_ENV, quiet_libraries

    for name in QUIET_ENV:  # absent for the test, and as they were after it
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    quiet_libraries(build_config({"logging": {"verbose": True}}).logging.verbose)
    assert not any(name in os.environ for name in QUIET_ENV)
    quiet_libraries(build_config({}).logging.verbose)
    assert all(os.environ[name] == value for name, value in QUIET_ENV.items())


class FakeWandb:
    """wandb at the edge: what the run was started with and what each step logged."""

    def __init__(self):
        self.started: dict = {}
        self.logged: list[dict] = []
        self.util = SimpleNamespace(generate_id=lambda: "run-id")
        self.Settings = dict
        self.Table = lambda columns, data: SimpleNamespace(columns=columns, data=data)

    def init(self, **kwargs):
        self.started = kwargs
        return SimpleNamespace(define_metric=lambda *a, **k: None, log=self.logged.append, finish=lambda: None)


def test_wandb_gets_the_configured_project_entity_and_trajectory_count(tmp_path, monkeypatch):
    from tandem.orchestrator import wandb_log
    from tests.test_loop import group

    fake = FakeWandb()
    monkeypatch.setattr(wandb_log, "import_wandb", lambda: fake)
    cfg = build_config({"logging": {"wandb": {"mode": "offline", "project": "mine", "entity": "team",
                                              "table_samples": 2}}})
    log = wandb_log.WandbLog(cfg, tmp_path, decode=str)
    assert fake.started["project"] == "mine" and fake.started["entity"] == "team"
    log.log({"step": 1, "loss": 0.5}, group(0, [1.0, 0.0, 1.0]))
    assert len(fake.logged[0][wandb_log.TABLE_KEY].data) == 2


# --------------------------------------------------------------------------- the coding environment's agent
def test_the_bash_agents_reply_format_and_prompts_are_the_configured_ones(tmp_path):
    from tandem.env.parsers import ParsedReply
    from tandem.envs.coding.bash_env import BashAgentEnv
    from tandem.envs.coding.coding_env import _prompts
    from tandem.envs.coding.sandbox.runner import ExecResult
    from tandem.envs.coding.settings import coding_args

    (tmp_path / "prompts.toml").write_text('system_template = "Submit with {{ sentinel }}, our way."\n')
    cfg = build_config({"environment": {"name": "tandem.envs.coding:CodingEnv", "args": {"agent": {
        "action_regex": "<cmd>(.*?)</cmd>", "submit_sentinel": "ALL_DONE", "prompt_file": str(tmp_path / "prompts.toml")}}}})
    agent = coding_args(cfg).agent
    ran = []

    async def execute(command: str, timeout_s: float) -> ExecResult:  # the sandbox, at the edge
        ran.append(command)
        return ExecResult(output="ALL_DONE\n", returncode=0, timed_out=False, duration_s=0.0, output_bytes=9)

    env = BashAgentEnv(execute=execute, agent=agent, prompts=_prompts(agent.prompt_file))
    system, _ = env.reset({"problem_statement": "fix it"})
    assert system["content"] == "Submit with ALL_DONE, our way."
    assert asyncio.run(env.respond(ParsedReply(text="```bash\nls\n```"), 5.0, 1))  # the default format: an error
    assert ran == [] and env.format_errors == 1
    assert asyncio.run(env.respond(ParsedReply(text="<cmd>echo ALL_DONE</cmd>"), 5.0, 1)) == []
    assert ran == ["echo ALL_DONE"] and env.done and env.end_reason == "submitted"
