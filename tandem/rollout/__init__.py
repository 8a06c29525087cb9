"""Rollout: data, the engine client, plug-in loading, and the default single-turn rollout.

Everything is token-in, token-out: prompts are tokenized once here, engines receive
`input_ids`, and samples keep exactly the `output_ids` and logprobs the engine returned,
so the trainer trains on the tokens that were sampled.

- plugins.py      RolloutFn / RewardFn (the plug-in contract as types), loading by name, scoring
- data.py         the dataset (JSONL or parquet, checked row by row) and the seeded prompt cursor
- client.py       EngineClient (/generate through the router), priorities, sticky sessions
- context.py      RolloutContext, what every rollout function receives
- single_turn.py  the default rollout
"""

from tandem.rollout.client import (
                                   GROUP_PROGRESS,
                                   REQUEST_PRIORITY,
                                   REQUEST_SEED,
                                   ROUTING_KEY_HEADER,
                                   EngineClient,
                                   GenerationError,
                                   GroupProgress,
                                   RolloutAborted,
                                   trajectory_seed,
)
from tandem.rollout.context import RolloutContext, sampling_params_from_config
from tandem.rollout.data import DataError, Dataset, PromptCursor, load_dataset_rows
from tandem.rollout.plugins import (
                                   CONTRACTS,
                                   PluginError,
                                   RewardFn,
                                   RewardResult,
                                   RolloutFn,
                                   check_contract,
                                   check_rollout_result,
                                   load_plugin,
                                   load_reward_fn,
                                   load_rollout_fn,
)
from tandem.rollout.scoring import score_sample
from tandem.rollout.single_turn import encode_prompt, sample_from_output, single_turn

__all__ = [
    "GROUP_PROGRESS", "GroupProgress", "REQUEST_PRIORITY", "REQUEST_SEED", "trajectory_seed", "ROUTING_KEY_HEADER", "DataError", "Dataset", "EngineClient",
    "GenerationError", "PluginError", "PromptCursor", "RewardFn", "RewardResult", "RolloutAborted",
    "RolloutContext", "RolloutFn", "CONTRACTS", "check_contract", "check_rollout_result", "load_reward_fn",
    "load_rollout_fn", "encode_prompt", "load_dataset_rows",
    "load_plugin", "sample_from_output", "sampling_params_from_config", "score_sample", "single_turn",
]
