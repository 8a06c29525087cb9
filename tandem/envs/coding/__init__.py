"""The multi-turn coding agent (mini-swe-agent style) over sandboxed repositories, as an
environment on tandem.env's shared loop: environment.name = "tandem.envs.coding:CodingEnv".

The agent:
- prompts.py      the system / task / format-error / observation templates
- bash_env.py     one bash action per reply, run in a shell; submission and disk limits
- coding_env.py   CodingEnv: the sandbox, the diff, the hidden-test reward, the per-step metrics
Its reward, graded on the host from what the hidden tests computed:
- grading.py      swe_reward: the diff replayed in a fresh sandbox, the hidden tests run there
- grading_plan.py, instrument.py, checks.py, verdict.py, graded_diff.py   what is run, what is trusted
- grader_plugin/  the pytest plug-in bound read-only into every grading sandbox
- sandbox/        the isolated workspaces (bubblewrap or containers), their pool and limits
- swe_data.py     the task rows and their repositories
"""


import importlib
from typing import Any

_HOMES = {"BashAgentEnv": "bash_env", "is_submission": "bash_env", "observation_text": "bash_env",
          "parse_actions": "bash_env", "CodingEnv": "coding_env", "END_REASONS": "coding_env",
          "agent_step_metrics": "coding_env", "swe_agent_rollout": "coding_env", "swe_reward": "grading",
          "Prompts": "prompts"}
"""Each exported name's module, imported on first use: `--help` reads only settings.CodingArgs, and
importing the agent (tandem.env, the rollout client, aiohttp, numpy) would cost it seconds."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
