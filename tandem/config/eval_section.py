"""[eval] and [alarms]: held-out evaluation pinned to weight versions, and the alarms that say
when learning goes wrong.

[eval] picks the held-out prompts (a file, or a seeded fraction split off the training data),
when they are evaluated (every k steps, before the first and after the last) and how (samples
per prompt for pass@k, greedy or a temperature). [alarms] holds the thresholds of the learning
alarms (tandem.eval.alarms); run.stop_on_alarm decides whether one stops the run.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from tandem.config.base import Section, rule_broken


class EvalConfig(Section):
    enabled: bool = False
    """Evaluate the policy on held-out prompts during the run (eval.jsonl, eval/* metrics). Needs eval.data_path or eval.holdout_fraction."""
    data_path: str = ""
    """Held-out prompts: a local JSONL or parquet file with the training data's prompt field (data.prompt_key) and whatever the reward or environment reads. Empty: split eval.holdout_fraction of data.path off instead."""
    holdout_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    """With no eval.data_path: this fraction of data.path's rows (at least one) is held out for evaluation and never trained on; which rows is seeded by eval.split_seed, so two runs compare on the same held-out prompts."""
    split_seed: int = Field(0, ge=0)
    """Seed of the held-out split (eval.holdout_fraction), apart from run.seed: runs with different seeds hold out the same prompts."""
    every_k_steps: int = Field(10, ge=1)
    """Evaluate the weights of every k-th step (steps k, 2k, ...)."""
    before_first: bool = True
    """Also evaluate the starting weights, before the first step (version 0: the baseline every later figure is compared to)."""
    after_last: bool = True
    """Also evaluate the last step's weights, whatever every_k_steps says (the run's final figure)."""
    samples_per_prompt: int = Field(1, ge=1)
    """Samples per held-out prompt: k of pass@k (eval/pass@k: the fraction of prompts with at least one passing sample among k). 1 with greedy decoding."""
    temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature of evaluation requests; 0 = greedy (deterministic: the same weights give the same figure, in the run and in `tandem eval`). The other sampling settings are rollout.sampling's."""
    max_prompts: int = Field(0, ge=0)
    """Evaluate at most this many held-out prompts (the first ones of the held-out set); 0 = all of them."""
    pass_reward: float = 1.0
    """A sample passes (pass@1, pass@k) when its reward is at least this."""

    @model_validator(mode="after")
    def _eval_has_held_out_prompts(self) -> EvalConfig:
        if self.data_path and self.holdout_fraction > 0:
            raise rule_broken(f"eval.data_path = {self.data_path!r} and eval.holdout_fraction = "
                              f"{self.holdout_fraction}: held-out prompts come from one of them; set the other "
                              f"to its default")
        if self.enabled and not self.data_path and self.holdout_fraction == 0:
            raise rule_broken("eval.enabled = true needs held-out prompts: set eval.data_path (a file) or "
                              "eval.holdout_fraction > 0 (a seeded split of data.path)")
        return self

    @model_validator(mode="after")
    def _greedy_samples_once(self) -> EvalConfig:
        # Greedy decoding answers a prompt the same way every time: k samples would be one sample k times.
        if self.temperature == 0 and self.samples_per_prompt > 1:
            raise rule_broken(f"eval.samples_per_prompt = {self.samples_per_prompt} with eval.temperature = 0 "
                              f"(greedy): every sample of a prompt would be the same; set eval.temperature > 0 "
                              f"for pass@k, or eval.samples_per_prompt = 1")
        return self

    @property
    def sampled(self) -> bool:
        return self.temperature > 0


class AlarmsConfig(Section):
    window_steps: int = Field(5, ge=2)
    """Steps the alarms compare over: the latest step against the mean of the window before it (entropy, KL, response length), or the trend across it (training versus evaluation reward)."""
    entropy_collapse_ratio: float = Field(0.1, ge=0.0, le=1.0)
    """alarm/entropy_collapse fires when the policy entropy falls below this fraction of its value at the first step while the training reward is still below alarms.entropy_collapse_reward: a policy that became (near) deterministic before it learned the task stops exploring, and GRPO's advantages vanish with its reward spread. 0 turns it off."""
    entropy_collapse_reward: float = 0.5
    """alarm/entropy_collapse stays quiet once the mean training reward over the window reaches this: a policy that converged on a task with one right answer (the default echo job: reward ~1, entropy ~0.04 of its first value) is done, not collapsed. Rewards on another scale than 0-1 need it set."""
    kl_spike_factor: float = Field(10.0, ge=0.0)
    """alarm/kl_spike fires when the step's KL exceeds this multiple of the window's mean (and kl_spike_min): a sudden jump means the update left the trust region (a bad batch, a learning-rate spike). 0 turns it off."""
    kl_spike_min: float = Field(0.01, ge=0.0)
    """The smallest KL alarm/kl_spike considers: below it a relative jump is noise around zero."""
    length_collapse_ratio: float = Field(0.2, ge=0.0, le=1.0)
    """alarm/length_collapse fires when the mean response length falls below this fraction of the window's mean: a policy that learned to answer with (almost) nothing, typically to dodge a penalty. 0 turns it off."""
    length_blowup_ratio: float = Field(5.0, ge=0.0)
    """alarm/length_blowup fires when the mean response length exceeds this multiple of the window's mean: runaway generation (repetition, a verbose reward hack). 0 turns it off."""
    tamper_rate: float = Field(0.0, ge=0.0, le=1.0)
    """alarm/tamper fires when agent_tamper_rate (the coding agent's share of trajectories that tampered with the grader) exceeds this: any tampering is reward hacking, so the default is 0."""
    reward_divergence: float = Field(0.05, ge=0.0)
    """alarm/reward_divergence fires when, from one evaluation to the next, the training reward (the mean over the alarms.window_steps steps ending at each) rose and eval/reward_mean fell, each by more than this: the policy learns its training prompts, not the task (overfitting, or a reward hack the held-out set does not pay). 0 turns it off."""
