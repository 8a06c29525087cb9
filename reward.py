"""Entry point for reward plug-in authors: re-exports the bundled rewards.

A config names them by their package path: `tandem.envs.echo:echo_reward` (the default task),
`tandem.envs.echo:exact_match_reward`, `tandem.envs.coding:swe_reward` (the coding agent's hidden tests).
"""

from tandem.envs.echo import *  # noqa: F401,F403
from tandem.envs.echo import __all__  # noqa: F401
