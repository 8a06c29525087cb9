"""Multi-turn coding agent rollouts (mini-swe-agent style) over sandboxed repositories.

- chat.py     token bookkeeping: trajectories grow by appending ids
- prompts.py  the system / task / format-error / observation templates
- loop.py     one episode and its end reasons
- rollout.py  the rollout plug-in `swe_agent_rollout` and its per-step metrics
"""

from tandem.agent.chat import ChatFormat
from tandem.agent.loop import END_REASONS, Episode, parse_actions, run_episode
from tandem.agent.prompts import Prompts
from tandem.agent.rollout import agent_step_metrics, swe_agent_rollout

__all__ = ["ChatFormat", "END_REASONS", "Episode", "Prompts", "agent_step_metrics", "parse_actions", "run_episode",
           "swe_agent_rollout"]
