"""Hand-derived checks of trainer.loss.advantage_baseline (tandem/advantages.py, tandem/orchestrator/
signal.py): "group" centres each reward on its group's mean (GRPO), "batch" on the mean over every kept
trajectory of the step. Every expected number is worked out in the comment beside it."""

import pytest

from tandem.advantages import assign_advantages
from tandem.config import ConfigError, build_config
from tandem.orchestrator.signal import GROUP_FAILED, REWARD_FAILED, prepare_step
from tandem.sample import Sample


def samples(groups: dict[int, list[float]]) -> list[Sample]:
    return [Sample(prompt_ids=[1], group_id=g, reward=r) for g, rewards in groups.items() for r in rewards]


def advantages(batch: list[Sample]) -> list[float]:
    return [s.advantage for s in batch]


def test_groups_that_are_each_all_equal_learn_only_against_the_batch():
    """The counter's trap: a target-1 group all right [1, 1], a target-3 group all wrong [0, 0].
    group: each centred on its own mean -> all 0 (no gradient). batch: mean 0.5 -> [+0.5, +0.5, -0.5, -0.5];
    with the std step, unbiased std of the centred = sqrt(4 * 0.25 / 3) = 0.577350 -> +-0.866025."""
    batch = samples({1: [1.0, 1.0], 2: [0.0, 0.0]})
    assign_advantages(batch, use_std_norm=True, baseline="group")
    assert advantages(batch) == [0.0, 0.0, 0.0, 0.0]
    assign_advantages(batch, use_std_norm=False, baseline="batch")
    assert advantages(batch) == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assign_advantages(batch, use_std_norm=True, baseline="batch")
    assert advantages(batch) == pytest.approx([0.866025, 0.866025, -0.866025, -0.866025], abs=1e-5)


def test_the_batch_mean_weighs_every_trajectory_not_every_group():
    """Groups of 3, 1 and 2 samples: [1, 1, 1], [0.5], [0, 0]. Batch mean = 3.5 / 6 = 0.583333 ->
    [0.416667 x 3, -0.083333, -0.583333 x 2] (a mean of group means, (1 + 0.5 + 0) / 3 = 0.5, would
    give [0.5 x 3, 0, -0.5 x 2])."""
    batch = samples({1: [1.0, 1.0, 1.0], 2: [0.5], 3: [0.0, 0.0]})
    assign_advantages(batch, use_std_norm=False, baseline="batch")
    assert advantages(batch) == pytest.approx([0.416667, 0.416667, 0.416667, -0.083333, -0.583333, -0.583333],
                                              abs=1e-5)


def test_a_harness_trajectorys_segments_count_once_in_the_batch():
    """Group 0: trajectory "t" in two segments (reward 1) and one plain sample (0); group 1: a sample that
    also says trajectory "t" (another group's, so another trajectory) with reward 0. Three trajectories
    [1, 0, 0]: mean 1/3 -> both segments +2/3, the others -1/3 (counting the segments twice would give
    mean 0.5: [+0.5, +0.5, -0.5, -0.5])."""
    batch = samples({0: [1.0, 1.0, 0.0], 1: [0.0]})
    for s in (batch[0], batch[1], batch[3]):
        s.metadata["trajectory"] = "t"
    assign_advantages(batch, use_std_norm=False, baseline="batch")
    assert advantages(batch) == pytest.approx([2 / 3, 2 / 3, -1 / 3, -1 / 3])


def test_prepare_step_takes_the_batch_mean_over_the_kept_samples_only():
    """Group 1 [1, failed]: dropped (one valid reward), so neither it nor its 1 enters the mean.
    Kept: group 2 [1, 0], group 3 [0, 0] -> batch mean 0.25 -> [+0.75, -0.25, -0.25, -0.25];
    the excluded samples get 0. (group baseline: group 2 [+0.5, -0.5], group 3 [0, 0].)"""
    cfg = build_config({"trainer": {"loss": {"advantage_baseline": "batch"}}})
    batch = samples({1: [1.0, 0.0], 2: [1.0, 0.0], 3: [0.0, 0.0]})
    batch[1].reward_info = {"reason": "error: ValueError: grader down"}
    for s in batch:
        s.append_model_tokens([7], [-1.0], 0)
    prepare_step(batch, cfg.rollout, use_std_norm=False, baseline=cfg.trainer.loss.advantage_baseline)
    assert [s.excluded for s in batch[:2]] == [GROUP_FAILED, REWARD_FAILED]
    assert advantages(batch) == pytest.approx([0.0, 0.0, 0.75, -0.25, -0.25, -0.25])
    prepare_step(batch, cfg.rollout, use_std_norm=False)
    assert advantages(batch) == pytest.approx([0.0, 0.0, 0.5, -0.5, 0.0, 0.0])


def test_an_unknown_baseline_is_refused_naming_the_key():
    assert build_config({}).trainer.loss.advantage_baseline == "group"
    with pytest.raises(ConfigError, match="advantage_baseline"):
        build_config({"trainer": {"loss": {"advantage_baseline": "rloo"}}})
    with pytest.raises(ValueError, match="rloo"):
        assign_advantages(samples({1: [1.0, 0.0]}), baseline="rloo")
