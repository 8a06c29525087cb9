"""The multi-turn coding agent (mini-swe-agent style) over sandboxed repositories, as an
environment on tandem.env's shared loop.

- prompts.py     the system / task / format-error / observation templates
- bash_env.py    one bash action per reply, run in a shell; submission and disk limits
- coding_env.py  CodingEnv: the sandbox, the diff, the hidden-test reward, the per-step metrics
"""

from tandem.agent.bash_env import BashAgentEnv, is_submission, observation_text, parse_actions
from tandem.agent.coding_env import END_REASONS, CodingEnv, agent_step_metrics, swe_agent_rollout
from tandem.agent.prompts import Prompts

__all__ = ["BashAgentEnv", "CodingEnv", "END_REASONS", "Prompts", "agent_step_metrics", "is_submission",
           "observation_text", "parse_actions", "swe_agent_rollout"]
