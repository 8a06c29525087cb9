"""Hand-derived checks of a step's learning signal (tandem/orchestrator/signal.py): failed rewards
kept out of the loss and of their group's statistics, DAPO's overlong handling, and what dynamic
sampling calls a zero-variance group. Every expected number is worked out in the comment beside it."""

from types import SimpleNamespace

import pytest

from tandem.config import build_config
from tandem.orchestrator.signal import GROUP_FAILED, REWARD_FAILED, TRUNCATED, overlong_penalty, prepare_step, \
    zero_variance
from tandem.sample import Sample, trained

FAILED = {"reason": "error: ValueError: sandbox down"}


def sample(group_id: int, reward: float, tokens: int = 1, failed: bool = False, finish: str = "stop") -> Sample:
    s = Sample(prompt_ids=[1], group_id=group_id, reward=reward, finish_reason=finish,
               reward_info=dict(FAILED) if failed else {})
    s.append_model_tokens([7] * tokens, [-1.0] * tokens, 0)
    return s


def rollout(**signal):
    return build_config({"rollout": {"sampling": {"max_new_tokens": 10}, "signal": signal}}).rollout


def test_a_group_left_with_one_valid_reward_is_dropped_whole():
    """Group 1 [1, failed]: one valid reward, nothing to compare it with -> no loss weight for either.
    Group 2 [1, 0, failed]: valid [1, 0], mean 0.5 -> [+0.5, -0.5] (no std step)."""
    batch = [sample(1, 1.0), sample(1, 0.0, failed=True), sample(2, 1.0), sample(2, 0.0), sample(2, 0.0, failed=True)]
    counts = prepare_step(batch, rollout(), use_std_norm=False)
    assert [s.excluded for s in batch] == [GROUP_FAILED, REWARD_FAILED, "", "", REWARD_FAILED]
    assert [s.advantage for s in batch] == pytest.approx([0.0, 0.0, 0.5, -0.5, 0.0])
    assert trained(batch) == batch[2:4]
    assert (counts["reward_failed"], counts["groups_dropped_failed"], counts["samples_trained"]) == (2, 1, 2)


def test_a_group_of_one_is_not_dropped_as_failed():
    # samples_per_prompt = 1 by design: no failure, so it trains (advantage r - r = 0) and counts no drop.
    batch = [sample(1, 1.0), sample(2, 0.0)]
    counts = prepare_step(batch, rollout(), use_std_norm=True)
    assert trained(batch) == batch and counts["groups_dropped_failed"] == 0


def test_overlong_penalty_is_dapos_linear_band():
    # L_max = 10, L_cache = 4: no penalty up to 6 tokens; 7 -> -(1/4) * 2 = -0.5 with penalty 2;
    # 8 -> -2 * 2/4 = -1.0; 10 -> -2 * 4/4 = -2.0; past L_max (a multi-turn total) it stays -2.
    assert [overlong_penalty(n, 10, 4, 2.0) for n in (5, 6, 7, 8, 10, 13)] == pytest.approx(
        [0.0, 0.0, -0.5, -1.0, -2.0, -2.0])


def test_overlong_penalty_shapes_the_rewards_before_the_advantages():
    """max_new_tokens 10, buffer 4, penalty 2: lengths [3, 8, 10] -> penalties [0, -1, -2];
    rewards [1, 1, 1] -> [1, 0, -1], mean 0 -> advantages [1, 0, -1] (no std step). Without
    the penalty this group has zero variance; with it, it does not."""
    batch = [sample(1, 1.0, tokens=3), sample(1, 1.0, tokens=8), sample(1, 1.0, tokens=10, finish="length")]
    cfg = rollout(overlong="penalty", overlong_buffer_tokens=4, overlong_penalty=2.0)
    assert zero_variance(batch, rollout().signal, 10) and not zero_variance(batch, cfg.signal, 10)
    counts = prepare_step(batch, cfg, use_std_norm=False)
    assert [s.reward for s in batch] == pytest.approx([1.0, 0.0, -1.0])
    assert [s.advantage for s in batch] == pytest.approx([1.0, 0.0, -1.0])
    assert batch[2].reward_info["overlong_penalty"] == pytest.approx(-2.0)
    assert counts["overlong_penalized"] == 2


def test_overlong_mask_keeps_the_truncated_reward_in_the_statistics():
    """Rewards [1, 0, 0], the last truncated: advantages over all three, mean 1/3 -> [2/3, -1/3, -1/3];
    the truncated one then has no loss weight (advantage 0)."""
    batch = [sample(1, 1.0), sample(1, 0.0), sample(1, 0.0, tokens=10, finish="length")]
    counts = prepare_step(batch, rollout(overlong="mask"), use_std_norm=False)
    assert [s.excluded for s in batch] == ["", "", TRUNCATED]
    assert [s.advantage for s in batch] == pytest.approx([2 / 3, -1 / 3, 0.0])
    assert counts["overlong_masked"] == 1


def test_zero_variance_looks_at_valid_rewards_only():
    assert zero_variance([sample(1, 1.0), sample(1, 1.0), sample(1, 0.0, failed=True)], rollout().signal, 10)
    assert not zero_variance([sample(1, 1.0), sample(1, 0.0)], rollout().signal, 10)
    # One valid reward is no group to judge (the failure path drops it), not a zero-variance group.
    assert not zero_variance([sample(1, 1.0), sample(1, 0.0, failed=True)], rollout().signal, 10)


@pytest.mark.parametrize("signal, match", [
    ({"overlong": "penalty"}, "needs rollout.signal.overlong_buffer_tokens >= 1"),
    ({"overlong": "penalty", "overlong_buffer_tokens": 11}, r"overlong_buffer_tokens \(11\) must be at most"),
    ({"overlong_penalty": 0.0}, "overlong_penalty"),
])
def test_bad_signal_settings_are_refused_by_name(signal, match):
    from tandem.config import ConfigError
    with pytest.raises(ConfigError, match=match):
        rollout(**signal)


def test_the_trainer_trains_only_the_samples_with_a_loss_weight(tmp_path):
    """The batch file keeps every sample (the kept rollouts show the excluded ones); the trainer
    process hands its backend only those without an `excluded` reason."""
    from tandem import handoff
    from tandem.trainer.__main__ import run_loop
    from tandem.weights.record import Published

    given: list = []
    backend = SimpleNamespace(is_main_process=True, export_for_sync=lambda lora: {},
                              train_step=lambda samples: given.extend(samples) or {"train_time": 0.0})
    publisher = SimpleNamespace(publish=lambda state, version, force_full=False: Published(version, "weights"))
    batch = [sample(1, 1.0), sample(1, 0.0, failed=True), sample(1, 0.0)]
    prepare_step(batch, rollout(), use_std_norm=False)
    handoff.write_batch(tmp_path, handoff.TrainBatch(0, batch))
    cfg = build_config({"run": {"steps": 1}, "checkpoint": {"interval": 0}})
    run_loop(cfg, backend, str(tmp_path), publisher, log=lambda line: None)
    assert [(s.reward, s.advantage) for s in given] == [(1.0, 0.5), (0.0, -0.5)]
    kept = handoff.wait_batch(str(tmp_path), 0, timeout_s=1).samples
    assert [s.excluded for s in kept] == ["", REWARD_FAILED, ""]
