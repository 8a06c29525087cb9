"""Held-out evaluation and the learning alarms, as units: the [eval] and [alarms] config, the
held-out split, the figures, when a run evaluates (and what a resume keeps), each alarm provoked
by rows built to set it off and silent on a normal run's, and the loop stopping on one."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from tandem import cli
from tandem.config import ConfigError, build_config
from tandem.eval.alarms import ALARMS, AlarmWatch
from tandem.eval.heldout import split_rows, with_held_out
from tandem.eval.in_run import InRunEval, is_due, keep_rows_before_resume, read_rows
from tandem.eval.measure import EVAL_PRIORITY, evaluate, figures, off_version
from tandem.handoff import TrainResult
from tandem.metric_groups import grouped_name, metric_group
from tandem.orchestrator.evaluation import Evaluation
from tandem.orchestrator.failures import RunStopped
from tandem.orchestrator.live_view import LiveView
from tandem.orchestrator.loop import run_loop
from tests.test_loop import loop_run
from tandem.orchestrator.metrics import MetricsLog
from tandem.rollout import REQUEST_PRIORITY, DataError, Dataset, RolloutContext
from tandem.sample import Sample
from tandem.weights.record import Published


def sample(reward: float, version: int = 0, tokens: int = 4) -> Sample:
    s = Sample(prompt_ids=[1, 2], weight_version=version)
    s.append_model_tokens(list(range(tokens)), [0.0] * tokens, version)
    s.reward = reward
    return s


# --------------------------------------------------------------------------- config
def test_eval_config_names_the_bad_key():
    for tree, words in [
        ({"eval": {"enabled": True}}, "eval.enabled = true needs held-out prompts"),
        ({"eval": {"data_path": "x.jsonl", "holdout_fraction": 0.1}}, "eval.data_path = 'x.jsonl' and eval.holdout_fraction"),
        ({"eval": {"samples_per_prompt": 4}}, "eval.samples_per_prompt = 4 with eval.temperature = 0"),
        ({"eval": {"holdout_fraction": 1.0}}, "eval.holdout_fraction"),
        ({"eval": {"every_k_steps": 0}}, "eval.every_k_steps"),
        ({"alarms": {"window_steps": 1}}, "alarms.window_steps"),
        ({"alarms": {"entropy_collapse_ratio": 2.0}}, "alarms.entropy_collapse_ratio"),
    ]:
        with pytest.raises(ConfigError) as err:
            build_config(tree)
        assert words in str(err.value), (tree, str(err.value))
    cfg = build_config({"eval": {"enabled": True, "holdout_fraction": 0.25, "split_seed": 3, "every_k_steps": 4,
                                 "before_first": False, "after_last": False, "samples_per_prompt": 8,
                                 "temperature": 0.7, "max_prompts": 2, "pass_reward": 0.5},
                        "run": {"stop_on_alarm": True}})
    assert cfg.eval.sampled and cfg.run.stop_on_alarm and cfg.eval.samples_per_prompt == 8


# --------------------------------------------------------------------------- held-out data
def test_the_split_is_seeded_disjoint_and_capped(tmp_path):
    rows = [{"prompt": f"p{i}", "_index": i} for i in range(20)]
    train, held = split_rows(rows, 0.25, seed=3)
    assert len(held) == 5 and len(train) == 15 and not {r["_index"] for r in train} & {r["_index"] for r in held}
    assert split_rows(rows, 0.25, seed=3) == (train, held)  # the same prompts for every run.seed
    assert split_rows(rows, 0.25, seed=4)[1] != held
    cfg = build_config({"eval": {"enabled": True, "holdout_fraction": 0.25, "split_seed": 3, "max_prompts": 2}})
    data = with_held_out(cfg, Dataset(rows, 0, []))
    assert data.rows == train and data.held_out == held[:2]
    assert with_held_out(build_config({}), Dataset(rows, 0, [])).held_out == []
    with pytest.raises(DataError, match="holds out all 1 row"):
        with_held_out(build_config({"eval": {"enabled": True, "holdout_fraction": 0.5}}), Dataset(rows[:1], 0, []))
    missing = build_config({"eval": {"enabled": True, "data_path": str(tmp_path / "none.jsonl")}})
    with pytest.raises(DataError, match=r"^eval.data_path: dataset file .*none.jsonl' does not exist$"):
        with_held_out(missing, Dataset(rows, 0, []))
    (tmp_path / "held.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    own = with_held_out(build_config({"eval": {"enabled": True, "data_path": str(tmp_path / "held.jsonl")}}),
                        Dataset(rows, 0, []))
    assert own.rows == rows and [r["prompt"] for r in own.held_out] == ["a", "b"]


# --------------------------------------------------------------------------- figures
def test_pass_at_1_and_pass_at_k_over_prompts():
    groups = [[sample(1.0), sample(0.0), sample(0.0), sample(0.0)], [sample(0.0)] * 4, [sample(1.0)] * 4]
    out = figures(groups, pass_reward=1.0)
    assert out["eval/pass@1"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert out["eval/pass@k"] == pytest.approx(2 / 3) and out["eval/k"] == 4
    assert out["eval/reward_mean"] == pytest.approx(5 / 12) and out["eval/prompts"] == 3
    assert figures(groups, pass_reward=0.0)["eval/pass@1"] == 1.0
    # a prompt that gave fewer samples (some failed) weighs as much as one that gave all of them
    assert figures([[sample(1.0)], [sample(0.0)] * 3], pass_reward=1.0)["eval/pass@1"] == 0.5


def test_a_sample_from_another_version_is_counted():
    assert off_version([sample(1.0, 2), sample(1.0, 2)], 2) == 0
    moved = sample(1.0, 2)
    moved.metadata["finish_weight_version"] = 3
    assert off_version([moved, sample(1.0, 1)], 2) == 2
    episode = sample(1.0, 2)
    episode.append_context_tokens([7, 8])  # an observation's tokens carry no version
    assert off_version([episode], 2) == 0


def test_evaluate_runs_the_rollout_function_greedily_below_training_priority():
    cfg = build_config({"eval": {"enabled": True, "holdout_fraction": 0.5, "pass_reward": 0.5}})
    seen = []

    async def rollout(ctx, row, n):
        seen.append((ctx.sampling_params["temperature"], REQUEST_PRIORITY.get(), n))
        if row["prompt"] == "bad":
            raise ValueError("no")
        return [sample(row["r"], version=5)]

    real = RolloutContext(cfg, None, None, None, None, {"temperature": 1.0, "top_p": 1.0})
    rows = [{"prompt": "a", "r": 1.0}, {"prompt": "bad", "r": 0.0}, {"prompt": "c", "r": 0.0}]
    outcome = asyncio.run(evaluate(real, rollout, rows, 4, 5))
    assert {t for t, _, _ in seen} == {0.0} and {p for _, p, _ in seen} == {EVAL_PRIORITY}
    assert outcome.row["eval/pass@1"] == 0.5 and outcome.row["eval/errors"] == 1 and not outcome.row["cut_short"]
    assert outcome.errors == ["prompt 1: ValueError: no"] and outcome.row["weight_version"] == 5
    assert asyncio.run(evaluate(real, rollout, rows[:1], 4, 6)).row["cut_short"]


# --------------------------------------------------------------------------- schedule and resume
def test_due_steps_and_resume_keeps_one_row_per_due_step(tmp_path):
    cfg = build_config({"run": {"steps": 7}, "eval": {"enabled": True, "holdout_fraction": 0.1, "every_k_steps": 3}})
    assert [n for n in range(8) if is_due(cfg, n)] == [0, 3, 6, 7]
    off = build_config({"run": {"steps": 7}, "eval": {"enabled": True, "holdout_fraction": 0.1, "every_k_steps": 3,
                                                      "before_first": False, "after_last": False}})
    assert [n for n in range(8) if is_due(off, n)] == [3, 6]
    # The interrupted run evaluated 0, 3 and 6, its checkpoint is at step 6 (due: re-fired) ...
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 3, 6)))
    keep_rows_before_resume(tmp_path, cfg, 6)
    assert [r["step"] for r in read_rows(tmp_path)] == [0, 3]
    # ... or at step 4 (not due: its rows up to 4 are kept, the later ones dropped)
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 3, 6)))
    keep_rows_before_resume(tmp_path, cfg, 4)
    assert [r["step"] for r in read_rows(tmp_path)] == [0, 3]


def test_eval_and_alarm_keys_carry_their_group():
    assert grouped_name("eval/pass@1") == "eval/pass@1" and metric_group("eval/pass@k") == "eval"
    assert grouped_name("alarm/kl_spike") == "alarm/kl_spike" and metric_group("alarm/tamper") == "alarm"
    assert grouped_name("eval_wait_time") == "train/eval_wait_time"


# --------------------------------------------------------------------------- alarms
def normal_rows(n: int = 12) -> list[dict]:
    """A run that learns: entropy easing down, KL small and noisy, lengths steady, reward rising."""
    return [{"step": i + 1, "entropy": 2.0 - 0.05 * i, "kl": 0.002 + 0.001 * (i % 3),
             "response_len_mean": 40.0 + (i % 4), "reward_mean": 0.2 + 0.03 * i} for i in range(n)]


def fired(rows: list[dict], evals: dict[int, float] | None = None, **thresholds) -> list[str]:
    watch = AlarmWatch(build_config({"alarms": thresholds}).alarms)
    names = []
    for row in rows:
        if evals and row["step"] in evals:
            watch.eval_done({"step": row["step"], "eval/reward_mean": evals[row["step"]]})
        alarms = watch.check(row)
        assert set(watch.metrics(alarms)) == {f"alarm/{a}" for a in ALARMS}
        names += [a.name for a in alarms]
    return names


def test_no_alarm_on_a_normal_run():
    assert fired(normal_rows(), evals={1: 0.2, 5: 0.3, 10: 0.35}) == []
    assert fired([{**r, "agent_tamper_rate": 0.0} for r in normal_rows()]) == []
    early = normal_rows()
    early[1]["response_len_mean"] = 5.0  # a random model's first steps swing: the length alarms wait for a full window
    assert fired(early) == []
    falling = [{**r, "reward_mean": 0.8 - 0.03 * i} for i, r in enumerate(normal_rows())]
    assert fired(falling, evals={1: 0.5, 11: 0.3}) == []  # eval fell with the training reward: no divergence


def test_each_alarm_fires_on_rows_built_to_set_it_off():
    rows = normal_rows()
    rows[-1]["entropy"] = 0.1  # < 0.1 x 2.0
    assert fired(rows) == ["entropy_collapse"]
    assert fired(rows, entropy_collapse_ratio=0.0) == []
    converged = [{**r, "reward_mean": 0.95} for r in rows]  # one right answer, found: done, not collapsed
    assert fired(converged) == []
    rows = normal_rows()
    rows[-1]["kl"] = 0.5
    assert fired(rows) == ["kl_spike"]
    assert fired(rows, kl_spike_min=1.0) == []
    rows = normal_rows()
    rows[-1]["response_len_mean"] = 2.0
    assert fired(rows) == ["length_collapse"]
    rows[-1]["response_len_mean"] = 400.0
    assert fired(rows) == ["length_blowup"]
    rows = normal_rows()
    rows[6]["agent_tamper_rate"] = 0.25
    assert fired(rows) == ["tamper"]
    assert fired(rows, tamper_rate=0.5) == []
    # training reward rises (0.2 -> 0.53) while eval falls 0.5 -> 0.3: fired when the second eval lands
    assert fired(normal_rows(), evals={1: 0.5, 11: 0.3}) == ["reward_divergence"]
    assert fired(normal_rows(), evals={1: 0.5, 11: 0.3}, reward_divergence=0.0) == []
    assert fired(normal_rows(), evals={1: 0.5, 11: 0.48}) == []  # within the gap



def fired_under(rows: list[dict], config: dict) -> list[str]:
    watch = AlarmWatch(build_config(config).alarms)
    return [a.name for row in rows for a in watch.check(row)]


def test_each_threshold_is_read_from_its_key():
    """The same rows with one threshold moved off its default: the alarm follows the key."""
    rows = normal_rows()
    rows[-1]["entropy"] = 0.1  # the window's training reward is 0.47: under the default 0.5, over 0.3
    assert fired_under(rows, {}) == ["entropy_collapse"]
    assert fired_under(rows, {"alarms": {"entropy_collapse_reward": 0.3}}) == []
    rows = normal_rows()
    rows[-1]["kl"] = 0.5  # 0.5 > 10 x 0.003, but not 1000 x
    assert fired_under(rows, {"alarms": {"kl_spike_factor": 1000.0}}) == []
    rows = normal_rows()
    rows[-1]["response_len_mean"] = 2.0  # < 0.2 x 41.5, not < 0.02 x 41.5
    assert fired_under(rows, {"alarms": {"length_collapse_ratio": 0.02}}) == []
    rows[-1]["response_len_mean"] = 400.0  # > 5 x 41.5, not > 20 x 41.5
    assert fired_under(rows, {"alarms": {"length_blowup_ratio": 20.0}}) == []
    assert fired_under(rows, {"alarms": {"length_blowup_ratio": 9.0}}) == ["length_blowup"]

# --------------------------------------------------------------------------- the loop stops on an alarm
class Producer:
    def __init__(self, rows: list[dict]):
        self.rows, self.version, self.rollout_fn = rows, 0, None

    async def take(self, step):
        s = sample(1.0, step)
        s.group_id = 0
        return SimpleNamespace(samples=[s], rollout_time=0.1, dropped_stale=0, recycled=0, discarded=0,
                               longest_group_s=0.1, stats={}, groups=[], failed_groups=[])


class Trainer:
    def __init__(self, rows):
        self.rows = rows

    async def submit(self, step, samples, cpu_threads=None):
        pass

    async def result(self, step):
        return TrainResult(step, {**self.rows[step], "train_time": 0.1})


def test_the_loop_logs_alarms_and_stops_on_one_when_asked(tmp_path, capsys):
    rows = normal_rows(8)
    rows[6]["kl"] = 0.9  # step 7
    loop_rows = [{"loss": 0.0, "kl": r["kl"], "entropy": r["entropy"]} for r in rows]
    cfg = build_config({"run": {"steps": 8, "stop_on_alarm": True}, "checkpoint": {"interval": 0}})
    fleet = SimpleNamespace(apply_s=0.0, metrics=dict)
    with pytest.raises(RunStopped, match=r"^run stopped: alarm/kl_spike: kl 0.9 > 10 x the mean .*\(run.stop_on_alarm = true\)"):
        asyncio.run(run_loop(loop_run(cfg, tmp_path, Producer(rows), Trainer(loop_rows), fleet)))
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["alarm/kl_spike"] for r in logged] == [0.0] * 6 + [1.0]  # it stopped after step 7
    assert "ALARM alarm/kl_spike" in capsys.readouterr().out
    cfg = build_config({"run": {"steps": 8}, "checkpoint": {"interval": 0}})  # off: logged, and the run goes on
    (tmp_path / "on").mkdir()
    asyncio.run(run_loop(loop_run(cfg, tmp_path / "on", Producer(rows), Trainer(loop_rows), fleet)))
    logged = [json.loads(line) for line in (tmp_path / "on" / "metrics.jsonl").read_text().splitlines()]
    assert [r["alarm/kl_spike"] for r in logged] == [0.0] * 6 + [1.0, 0.0]


# --------------------------------------------------------------------------- pinned versions
def test_an_evaluation_ends_on_its_version_before_the_next_sync(tmp_path):
    """Async mode: the evaluation of version 2 runs in the background, and the next sync waits for it
    to end (on version 2) instead of loading version 3 under it. Sync mode: the loop waits for it."""
    def setup(mode: str):
        cfg = build_config({"run": {"steps": 4, "mode": mode}, "eval": {"enabled": True, "holdout_fraction": 0.5,
                                                                          "every_k_steps": 2}})
        release = asyncio.Event()

        async def rollout(ctx, row, n):
            await release.wait()
            return [sample(1.0, version=2)]

        run_dir = tmp_path / mode
        run_dir.mkdir()
        ctx = RolloutContext(cfg, None, None, None, None, {"temperature": 1.0})
        metrics = MetricsLog(run_dir, False)
        evaluator = InRunEval(cfg, run_dir, ctx, rollout, [{"prompt": "a"}], metrics.log_eval)
        return Evaluation(cfg, run_dir, metrics, LiveView(4, 0, None, "off"), 0, evaluator), release, run_dir

    async def async_mode():
        evaluation, release, run_dir = setup("async")
        await evaluation.after_step(1, 1)  # not due
        await evaluation.after_step(2, 2)  # due: starts, and the loop goes on
        sync = asyncio.create_task(evaluation.before_sync(TrainResult(2, published=Published(3, "weights/step_000003"))))
        await asyncio.sleep(0.2)
        assert not sync.done(), "the sync to version 3 did not wait for version 2's evaluation"
        release.set()
        await sync
        assert [(r["step"], r["weight_version"], r["cut_short"]) for r in read_rows(run_dir)] == [(2, 2, False)]
        assert evaluation.take_wait() == 0.0 and evaluation.take_wait() > 0  # the wait is the next step's

    async def sync_mode():
        evaluation, release, run_dir = setup("sync")
        asyncio.get_running_loop().call_later(0.2, release.set)
        await evaluation.after_step(2, 2)
        assert [r["step"] for r in read_rows(run_dir)] == [2]  # done before the loop goes on

    asyncio.run(async_mode())
    asyncio.run(sync_mode())


# --------------------------------------------------------------------------- where the rows go
def test_eval_rows_reach_tensorboard_and_the_live_view(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = MetricsLog(tmp_path, tensorboard=True)
    row = {"step": 4, "weight_version": 4, "eval/pass@1": 0.25, "eval/reward_mean": 0.5, "eval_time": 2.0,
           "cut_short": False}
    metrics.log_eval(row)
    metrics.close()
    assert read_rows(tmp_path) == [row]
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"eval/pass@1", "eval/reward_mean", "eval/eval_time"}
    assert [(e.step, e.value) for e in events.Scalars("eval/pass@1")] == [(4, 0.25)]
    view = LiveView(8, 0, None, "on")
    view.close()  # the panel is rendered below, not shown
    view.eval_done({**row, "cut_short": True})
    view.alarm("alarm/tamper: agent_tamper_rate 0.5 > 0")
    console = Console(width=120, record=True)
    console.print(view.render(120))
    screen = console.export_text()
    assert "eval step 4 (weights v4): eval/reward_mean=0.5 eval/pass@1=0.25 in 2.0s (cut short)" in screen
    assert "alarm/tamper: agent_tamper_rate 0.5 > 0" in screen


def test_eval_rows_reach_wandb_at_their_step_beside_the_step_rows(tmp_path, monkeypatch):
    """W&B at the edge (the fake of tests/test_key_effects.py): an eval row is logged on the run's
    `step` axis with only its eval/ figures and eval_time (as eval/eval_time), after the step row of
    the same step; the step row keeps its own keys and no eval/ one."""
    from tandem.orchestrator import wandb_log
    from tandem.orchestrator.metrics import REQUIRED_KEYS
    from tests.test_key_effects import FakeWandb

    fake = FakeWandb()
    monkeypatch.setattr(wandb_log, "import_wandb", lambda: fake)
    cfg = build_config({"logging": {"wandb": {"mode": "offline", "table_samples": 0}}})
    metrics = MetricsLog(tmp_path, tensorboard=False, wandb=wandb_log.WandbLog(cfg, tmp_path, decode=str))
    step_row = {**dict.fromkeys(REQUIRED_KEYS, 0.0), "step": 4, "loss": 0.5, "reward_mean": 0.75, "step_time": 3.0,
                "eval_wait_time": 1.5, "alarm/tamper": 0, "weight_version": 4, "samples": 8}
    metrics.log(step_row)
    metrics.log_eval({"step": 4, "weight_version": 4, "eval/pass@1": 0.25, "eval/pass@k": 0.5, "eval/k": 2,
                      "eval/reward_mean": 0.5, "eval/env_success_rate": 0.125, "eval_time": 2.0, "cut_short": False})
    metrics.close()
    step_logged, eval_logged = fake.logged
    assert eval_logged == {"step": 4, "eval/pass@1": 0.25, "eval/pass@k": 0.5, "eval/k": 2, "eval/reward_mean": 0.5,
                           "eval/env_success_rate": 0.125, "eval/eval_time": 2.0}
    assert step_logged["step"] == 4 and step_logged[grouped_name("loss")] == 0.5
    assert step_logged[grouped_name("eval_wait_time")] == 1.5 and step_logged["alarm/tamper"] == 0
    assert not any(key.startswith("eval/") for key in step_logged), step_logged


def test_tandem_eval_names_what_it_cannot_evaluate(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(build_config({}).model_dump_json())
    assert cli.main(["eval", str(run_dir), "--all"]) == 2
    assert "the run had no held-out prompts (eval.enabled = false); pass --data PATH" in capsys.readouterr().err
    (tmp_path / "held.jsonl").write_text('{"prompt": "a"}\n')
    assert cli.main(["eval", str(run_dir), "--version", "3", "--data", str(tmp_path / "held.jsonl")]) == 2
    assert "--version 3: the run holds versions none (and 0, the starting model)" in capsys.readouterr().err
    assert cli.main(["eval", str(tmp_path / "nothing"), "--all"]) == 2
    assert "no config.json" in capsys.readouterr().err
