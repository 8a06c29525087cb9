"""The learning signal of a step: which samples the trainer learns from, and their advantages.

Between the producer's batch and the trainer (tandem.orchestrator.loop), in this order:

1. rollout.signal.overlong = "penalty" (DAPO's soft overlong punishment): a response of L model
   tokens, with L_max = rollout.sampling.max_new_tokens and L_cache = overlong_buffer_tokens, gets
   reward + p(L), p(L) = -overlong_penalty * min(L - (L_max - L_cache), L_cache) / L_cache when
   L > L_max - L_cache, else 0 (kept in reward_info["overlong_penalty"]).
2. A sample whose reward failed (raised, timed out, returned no number: tandem.rollout.scoring.
   reward_failed) is a grader's failure, not a wrong answer: it gets no loss weight, and its
   group's statistics are taken over the valid samples only. A group that failures left with
   fewer than two valid samples has nothing to compare against and gets no loss weight at all.
3. GRPO advantages (tandem.advantages.assign_advantages) over the valid samples of each kept group
   (or, with trainer.loss.advantage_baseline = "batch", over all of them at once); every excluded
   sample gets advantage 0.
4. rollout.signal.overlong = "mask": a truncated sample (finish_reason "length") gets no loss
   weight; its reward still counts in its group's statistics (DAPO's overlong filtering masks
   the loss, not the grade).

An excluded sample carries the reason in `Sample.excluded`; it stays in the step's batch file, so
the kept rollouts show it, and the trainer skips it (`trained`). The failure bound
(tandem.orchestrator.failures) counts failed rewards before any of this, as it always has.
"""

from __future__ import annotations

from typing import Any


from tandem.advantages import assign_advantages
from tandem.rollout.scoring import reward_failed
from tandem.sample import Sample, trained

REWARD_FAILED = "reward failed"
GROUP_FAILED = "group has fewer than two valid rewards"
TRUNCATED = "truncated (rollout.signal.overlong = mask)"


def overlong_penalty(length: int, max_tokens: int, buffer: int, penalty: float) -> float:
    """DAPO's soft overlong punishment of a response of `length` tokens (0 below the buffer band)."""
    start = max_tokens - buffer
    if length <= start:
        return 0.0
    return -penalty * min(length - start, buffer) / buffer


def shaped_reward(sample: Sample, signal: Any, max_tokens: int) -> float:
    """The reward the advantages see: the plug-in's, plus the overlong penalty when configured."""
    if signal.overlong != "penalty":
        return float(sample.reward)
    return float(sample.reward) + overlong_penalty(sample.num_model_tokens, max_tokens,
                                                   signal.overlong_buffer_tokens, signal.overlong_penalty)


def zero_variance(samples: list[Sample], signal: Any, max_tokens: int) -> bool:
    """At least two valid rewards, all equal: GRPO gives every sample advantage 0 (dynamic sampling)."""
    rewards = {shaped_reward(s, signal, max_tokens) for s in samples if not reward_failed(s)}
    return len(rewards) == 1 and sum(not reward_failed(s) for s in samples) >= 2


def prepare_step(samples: list[Sample], rollout_cfg: Any, use_std_norm: bool,
                 baseline: str = "group") -> dict[str, float]:
    """Shape rewards, exclude what carries no signal and fill `advantage` in place (module docstring).
    Returns the step's counts for metrics.jsonl."""
    signal, max_tokens = rollout_cfg.signal, rollout_cfg.sampling.max_new_tokens
    penalized = 0
    if signal.overlong == "penalty":
        for s in samples:
            shaped = shaped_reward(s, signal, max_tokens)
            if shaped != s.reward and not reward_failed(s):
                s.reward_info["overlong_penalty"] = shaped - s.reward
                s.reward, penalized = shaped, penalized + 1
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        s.advantage, s.excluded = 0.0, (REWARD_FAILED if reward_failed(s) else "")
        groups.setdefault(s.group_id, []).append(s)
    valid: list[Sample] = []
    dropped = 0
    for members in groups.values():
        ok = [s for s in members if not s.excluded]
        if len(ok) < min(2, len(members)):  # failures left it alone (a G = 1 group is alone by design)
            dropped += 1
            for s in ok:
                s.excluded = GROUP_FAILED
        else:
            valid += ok
    assign_advantages(valid, use_std_norm, baseline=baseline)  # a harness trajectory's segments count once
    masked = 0
    if signal.overlong == "mask":
        for s in valid:
            if s.finish_reason == "length":
                s.excluded, s.advantage, masked = TRUNCATED, 0.0, masked + 1
    return {"reward_failed": sum(s.excluded == REWARD_FAILED for s in samples), "groups_dropped_failed": dropped,
            "samples_trained": len(trained(samples)), "overlong_masked": masked, "overlong_penalized": penalized}
