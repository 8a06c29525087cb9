"""The RL loop itself (tandem.orchestrator.loop.run_loop) with its edges faked: a producer that hands
out fixed batches, a trainer link that records what it was given, a fleet that syncs nothing.
What is checked is what the loop adds between them: advantages computed per group as configured,
the metrics row, and where a failing step stops the run."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from tandem.config import build_config
from tandem.handoff import TrainResult
from tandem.orchestrator.cpu_share import FIXED
from tandem.orchestrator.evaluation import Evaluation
from tandem.orchestrator.live_view import LiveView
from tandem.orchestrator.loop import run_loop
from tandem.orchestrator.metrics import MetricsLog
from tandem.orchestrator.producer import StepBatch
from tandem.orchestrator.run import Run
from tandem.sample import Sample


def group(group_id: int, rewards: list[float]) -> list[Sample]:
    out = []
    for i, r in enumerate(rewards):
        s = Sample(prompt_ids=[1], group_id=group_id, prompt_index=group_id, reward=r)
        s.append_model_tokens([5 + i], [-1.0], 0)
        out.append(s)
    return out


class Producer:
    def __init__(self, batches: list[list[Sample]]):
        self.batches, self.version, self.rollout_fn = batches, 0, None

    async def take(self, step: int) -> StepBatch:
        return StepBatch(step=step, samples=self.batches[step], rollout_time=1.0, dropped_stale=0, recycled=0,
                         discarded=0, longest_group_s=1.0)

    async def set_version(self, version: int) -> None:
        self.version = version


class Trainer:
    def __init__(self):
        self.given: dict[int, list[Sample]] = {}

    async def submit(self, step, samples, cpu_threads=None):
        self.given[step] = samples

    async def result(self, step):
        return TrainResult(step, {"loss": 0.0, "train_time": 0.1})


class Fleet:
    apply_s = 0.0

    def metrics(self):
        return {}


def loop_run(cfg, run_dir, producer, trainer, fleet) -> Run:
    """A Run of faked edges (producer, trainer link, fleet, engine client) around the real metrics log,
    live view (off) and evaluation (the alarms)."""
    ctx = SimpleNamespace(engine=SimpleNamespace(retried=0, load=SimpleNamespace(take=dict)))
    metrics, view = MetricsLog(run_dir, False), LiveView(cfg.run.steps, 0, None, "off")
    return Run(cfg, run_dir, 0, ctx, producer, trainer, fleet, metrics, view,
               Evaluation(cfg, run_dir, metrics, view, 0), FIXED)


def run(tmp_path, batches, **loss) -> Trainer:
    tmp_path.mkdir(exist_ok=True)
    cfg = build_config({"run": {"steps": len(batches)}, "trainer": {"loss": loss}, "checkpoint": {"interval": 0}})
    trainer = Trainer()
    asyncio.run(run_loop(loop_run(cfg, tmp_path, Producer(batches), trainer, Fleet())))
    return trainer


def test_the_loop_gives_each_group_its_own_advantages_as_configured(tmp_path, capsys):
    """Group 1 rewards [1, 0, 0, 0]: mean 0.25, centred [0.75, -0.25 x 3], unbiased std
    sqrt(0.75 / 3) = 0.5 -> [1.5, -0.5 x 3]. Group 2 [1, 1, 0, 0]: centred [0.5 x 2, -0.5 x 2],
    std sqrt(1 / 3) -> +-0.8660. Without the std step the centred rewards themselves. (One group
    id for the whole step would centre on 0.375 instead.)"""
    batch = group(1, [1, 0, 0, 0]) + group(2, [1, 1, 0, 0])
    normed = [s.advantage for s in run(tmp_path / "a", [batch]).given[0]]
    assert normed == pytest.approx([1.5, -0.5, -0.5, -0.5, 0.8660254, 0.8660254, -0.8660254, -0.8660254], abs=1e-5)
    batch = group(1, [1, 0, 0, 0]) + group(2, [1, 1, 0, 0])
    plain = [s.advantage for s in run(tmp_path / "b", [batch], use_std_norm=False).given[0]]
    assert plain == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5], abs=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 1 and rows[0]["reward_mean"] == pytest.approx(0.375)
    assert "step 1/1" in capsys.readouterr().out


def test_the_loop_centres_on_the_batch_when_configured(tmp_path):
    """trainer.loss.advantage_baseline = "batch": group 1 [1, 0, 0, 0] and group 2 [1, 1, 0, 0] share one
    mean, 3 / 8 = 0.375 -> [0.625, -0.375 x 3, 0.625 x 2, -0.375 x 2]. With the std step: the centred
    squares sum to 3 * 0.390625 + 5 * 0.140625 = 1.875, unbiased std sqrt(1.875 / 7) = 0.517549 ->
    0.625 / 0.517549 = 1.207615 and -0.375 / 0.517549 = -0.724569."""
    batch = group(1, [1, 0, 0, 0]) + group(2, [1, 1, 0, 0])
    plain = [s.advantage for s in run(tmp_path / "a", [batch], advantage_baseline="batch", use_std_norm=False).given[0]]
    assert plain == pytest.approx([0.625, -0.375, -0.375, -0.375, 0.625, 0.625, -0.375, -0.375], abs=1e-6)
    batch = group(1, [1, 0, 0, 0]) + group(2, [1, 1, 0, 0])
    normed = [s.advantage for s in run(tmp_path / "b", [batch], advantage_baseline="batch").given[0]]
    up, down = 1.207615, -0.724569
    assert normed == pytest.approx([up, down, down, down, up, up, down, down], abs=1e-5)


def test_the_loop_stops_before_training_a_step_whose_every_reward_failed(tmp_path):
    from tandem.orchestrator.failures import RunStopped

    good = group(1, [1, 0])
    bad = group(2, [0, 0])
    for s in bad:
        s.reward_info = {"reason": "error: KeyError: 'label'", "traceback": "Traceback ...\nKeyError: 'label'"}
    with pytest.raises(RunStopped, match="every sample of step 2 failed.*KeyError: 'label'.*nothing to resume"):
        run(tmp_path, [good, bad])
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1], "the failing step was not trained"
    assert json.loads((tmp_path / "failures.json").read_text())["stopped"].startswith("every sample of step 2")


def test_a_reward_that_raises_on_a_quarter_of_samples_trains_only_the_others(tmp_path):
    """The reward raises for the last sample of each group of 4 (a quarter). Those samples reach the
    batch with no loss weight (excluded, advantage 0) and the others' advantages come from the valid
    rewards only. Group 1 valid [1, 0, 1]: mean 2/3, centred [1/3, -2/3, 1/3], unbiased var
    (1/9 + 4/9 + 1/9) / 2 = 1/3, std 0.577350 -> [0.577350, -1.154701, 0.577350]. Group 2 valid
    [1, 0, 0]: centred [2/3, -1/3, -1/3] / 0.577350 -> [1.154701, -0.577350, -0.577350]. (Scored as
    0 and kept, the failed ones would have made group 1 [1, 0, 1, 0] -> +-0.866025.)"""
    from tandem.rollout.scoring import score_sample

    def reward(sample, row):
        if sample.metadata["i"] == 3:
            raise KeyError("label")
        return row["rewards"][sample.metadata["i"]]

    batch = group(1, [0, 0, 0, 0]) + group(2, [0, 0, 0, 0])
    for k, s in enumerate(batch):
        s.metadata["i"] = k % 4
        row = {"rewards": [1.0, 0.0, 1.0] if s.group_id == 1 else [1.0, 0.0, 0.0]}
        s.reward, s.reward_info = asyncio.run(score_sample(reward, s, row, 5.0, None))
    given = run(tmp_path, [batch]).given[0]
    assert [s.excluded for s in given] == ["", "", "", "reward failed"] * 2, "the batch keeps every sample"
    assert [s.advantage for s in given] == pytest.approx(
        [0.577350, -1.154701, 0.577350, 0.0, 1.154701, -0.577350, -0.577350, 0.0], abs=1e-5)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert (row["reward_failed"], row["reward_errors"], row["groups_dropped_failed"], row["samples_trained"]) == \
        (2, 2, 0, 6)


def test_a_step_whose_failures_leave_no_group_two_valid_rewards_stops_the_run(tmp_path):
    """Groups of two, one reward failed in each: half the samples failed (not all, so the old rule
    would train), but no group has two valid rewards to compare, so nothing is left to train."""
    from tandem.orchestrator.failures import RunStopped

    batch = group(1, [1, 0]) + group(2, [0, 1])
    for s in (batch[0], batch[3]):
        s.reward_info = {"reason": "timeout: reward took longer than 30s"}
    with pytest.raises(RunStopped, match="no sample of step 1 is left to train"):
        run(tmp_path, [batch])
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_train_result_crosses_the_file_as_it_was_written(tmp_path):
    """trainer/step_N.json: every typed field of the trainer's answer comes back as written (numbered
    from 1 in the file, as its name), a publish record and routing replay's agreement included."""
    from tandem.handoff import RoutingAgreement, result_path, wait_train_result, write_train_result
    from tandem.weights.record import Published

    sent = TrainResult(4, {"loss": 0.5, "train_time": 1.5}, RoutingAgreement(12.0, 0.75), {"trainer_offloaded_mb": 3.0},
                       0.25, Published(5, "w/step_000005", "delta", 123, 0.1, 0.2), 0.5, "ckpt/tmp", 0.75)
    write_train_result(tmp_path, sent)
    assert json.loads(result_path(tmp_path, 4).read_text())["step"] == 5
    assert wait_train_result(tmp_path, 4, timeout_s=1) == sent
    assert sent.routing is not None and sent.routing.row() == {"routing_agreement": 0.75, "routing_recorded_tokens": 12.0}
    assert sent.sync_metrics() == {"publish_bytes": 123, "changed_fraction": 0.1, "encode_time": 0.2, "upload_time": 0.0}
    step_metrics = {"loss": 1.0, "routing_agreement": 0.5, "routing_recorded_tokens": 3.0}  # a backend's train_step
    assert RoutingAgreement.take(step_metrics) == RoutingAgreement(3.0, 0.5) and step_metrics == {"loss": 1.0}


def test_a_sigterm_whose_exception_python_dropped_still_stops_the_run_at_the_next_step(tmp_path, monkeypatch):
    """The SIGTERM handler's Stop raised inside a weakref callback is dropped by Python ("Exception ignored");
    the request it recorded stops the loop before step 2 starts, so step 2's batch is never trained."""
    import weakref

    from tandem.orchestrator import stop_signal

    monkeypatch.setattr(stop_signal, "_requested", [])

    class Signalled(Trainer):
        async def result(self, step):
            class Target:
                pass
            target = Target()
            ref = weakref.ref(target, lambda _ref: stop_signal.on_sigterm(15, None))
            del target  # the callback runs here and its Stop is dropped
            assert ref() is None and stop_signal._requested == [15]
            return await super().result(step)

    cfg = build_config({"run": {"steps": 3}, "checkpoint": {"interval": 0}})
    trainer = Signalled()
    batches = [group(1, [1, 0]), group(1, [0, 1]), group(1, [1, 1])]
    with pytest.raises(stop_signal.Stop):
        asyncio.run(run_loop(loop_run(cfg, tmp_path, Producer(batches), trainer, Fleet())))
    assert sorted(trainer.given) == [0]
