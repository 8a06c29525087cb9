"""Which part of the run each metrics.jsonl key describes: the prefix it is shown under in
TensorBoard, Weights & Biases and the run inspector (`rollout/`, `train/`, `sync/`, `engine/`,
`env/`), and the evaluation's and the alarms' keys, which carry their group in their name
(`eval/pass@1`, `alarm/kl_spike`).

metrics.jsonl itself stays flat (its keys are what the docs and scripts name). The core's keys
form a closed set, listed here; what a rollout plug-in reports (an environment's `env_*`, the
coding agent's `agent_*`, or any name an environment's own step_metrics chooses) is the open
set, so an unknown key is the environment's.
"""

from __future__ import annotations

GROUPS = ("rollout", "train", "sync", "engine", "env", "eval", "alarm")
NAMED = ("eval/", "alarm/")
"""Prefixes of the keys named with their group (an eval.jsonl row's figures, a step's alarms)."""

TRAIN = frozenset({
    "loss", "pg_loss", "kl", "ppo_kl", "entropy", "clip_frac", "seq_clip_frac", "grad_norm", "logprob_mismatch", "lr",
    "train_time", "step_time", "trainer_wait_time", "trainer_idle_ratio", "trainer_cpu_threads", "eval_wait_time",
})
"""The trainer's step: its loss terms, and the step's cadence (timed at the trainer)."""

SYNC = frozenset({
    "weight_version", "sync_time", "reload_time", "publish_bytes", "changed_fraction", "encode_time",
    "upload_time", "apply_time",
})
"""Publishing a version and loading it into the engines."""

ENGINE = frozenset({"engines", "engines_alive", "gen_tokens_per_s", "requests_retried"})
"""Besides every `engine_*` key: the fleet's size (autoscaling), throughput and retries."""

ROLLOUT = frozenset({
    "samples", "reward_mean", "reward_std", "response_len_mean", "staleness_mean", "staleness_max",
    "truncated_ratio", "zero_std_groups", "rollout_time", "reward_errors", "rollout_errors", "dropped_stale",
    "recycled_groups", "oversample_discarded", "longest_group_s", "token_lag_mean", "token_lag_max",
    "trained_turns_mean", "finished_turns_mean", "trained_tokens_mean", "finished_tokens_mean",
    "length_bias_turns", "length_bias_tokens", "finished_in_window", "cancelled_in_window", "buffered_groups",
    "running_groups", "admission_lag_mean", "reward_failed", "groups_dropped_failed", "samples_trained",
    "overlong_masked", "overlong_penalized", "groups_filtered", "groups_forfeited", "groups_filtered_fraction",
    "filtered_reward_mean",
})
"""What the producer measured of the step's samples (besides every `token_lag_K`)."""


def metric_group(key: str) -> str:
    """The group of metrics.jsonl key `key` (one of GROUPS)."""
    if key.startswith(NAMED) or key in ("eval_time", "cut_short"):
        return "eval" if not key.startswith("alarm/") else "alarm"
    if key in TRAIN:
        return "train"
    if key in SYNC:
        return "sync"
    if key in ENGINE or key.startswith("engine_"):
        return "engine"
    if key in ROLLOUT or key.startswith("token_lag_"):
        return "rollout"
    return "env"  # env_*, agent_*, and whatever else a rollout plug-in reports


def grouped_name(key: str) -> str:
    """`key` under its group's prefix, e.g. 'train/loss' (`eval/pass@1` is already)."""
    return key if key.startswith(NAMED) else f"{metric_group(key)}/{key}"


def numeric(value: object) -> bool:
    """A value a chart can plot (bools are flags, not measurements)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
