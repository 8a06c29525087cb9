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

from tandem.envs.coding.bash_env import BashAgentEnv, is_submission, observation_text, parse_actions
from tandem.envs.coding.coding_env import END_REASONS, CodingEnv, agent_step_metrics, swe_agent_rollout
from tandem.envs.coding.grading import swe_reward
from tandem.envs.coding.prompts import Prompts

__all__ = ["BashAgentEnv", "CodingEnv", "END_REASONS", "Prompts", "agent_step_metrics", "is_submission",
           "observation_text", "parse_actions", "swe_agent_rollout", "swe_reward"]
