"""What a run.reproducible run promises: two runs of one seed write the same metrics rows, except
what a row measures of the clock and of the queue at one moment.

`row_differences` is the check (the test and bench/learning_under_load.py use it). Besides the
times it leaves out three kinds of keys, each for a reason that is not the learning (times: every *_time, *_s and *_s_* key):
- the queue at the moment a step is taken (groups buffered, running, finished in the window):
  which groups of the *next* step happen to be done already is timing, not data;
- the engines' load samples (engine_*_mean), the engine doctor's restarts (engine_restarts: an
  engine that answers /health too slowly on a busy machine is restarted; the rows matched through
  two such restarts in bench/results/learning_under_load_reproducible_slice.md) and publish_bytes (the version's manifest records
  when it was written, so its size moves with the clock's digits);
- logprob_mismatch is compared to a relative tolerance: the engines report each token's logprob
  from a forward over whatever batch it shared, and a CPU matmul's float sums depend on the batch
  shape in the last bits (the sampled tokens do not: each row's noise is its own,
  tandem.engine.sampling.seeded_noise). The trainer's loss does not read those logprobs unless
  trainer.loss.tis is on.
"""

from __future__ import annotations

import math

MOMENT_KEYS = frozenset({
    "step_time", "rollout_time", "train_time", "sync_time", "reload_time", "publish_time", "trainer_wait_time",
    "trainer_idle_ratio", "gen_tokens_per_s", "longest_group_s", "apply_time", "encode_time", "upload_time",
    "publish_bytes", "buffered_groups", "running_groups", "finished_in_window", "cancelled_in_window",
    "finished_tokens_mean", "finished_turns_mean", "length_bias_tokens", "length_bias_turns",
    "engine_detect_s_max", "engine_recover_s_max", "engine_restarts",
})
"""Keys that measure the clock or the queue at one moment (plus every engine_*_mean load sample)."""

TOLERANT_KEYS = {"logprob_mismatch": (1e-4, 1e-6)}
"""(relative, absolute) tolerance of keys computed from engine-reported logprobs: float32 noise
(measured: 1.76e-7 against 1.73e-7 on a step whose weights are the engines' own)."""


def compared(key: str) -> bool:
    """Whether `key` must be equal between two runs of one seed in reproducible mode."""
    return key not in MOMENT_KEYS and not (key.startswith("engine_") and key.endswith("_mean")) \
        and not key.endswith(("_s", "_time")) and "_s_" not in key  # seconds, e.g. env_act_s_mean


def row_differences(a: list[dict], b: list[dict]) -> list[str]:
    """'step N key: x != y' for every compared key that differs (and a line if the row counts do)."""
    out = [] if len(a) == len(b) else [f"{len(a)} rows != {len(b)} rows"]
    for x, y in zip(a, b):
        for key in sorted(set(x) | set(y)):
            if not compared(key):
                continue
            u, v = x.get(key), y.get(key)
            tol = TOLERANT_KEYS.get(key)
            same = (u == v) if tol is None or u is None or v is None else math.isclose(u, v, rel_tol=tol[0],
                                                                                       abs_tol=tol[1])
            if not same:
                out.append(f"step {x.get('step')} {key}: {u!r} != {v!r}")
    return out
