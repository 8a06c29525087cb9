"""Entry point for reward plug-in authors: re-exports `tandem.rewards`.

`reward:echo_reward` in a config means `tandem.rewards:echo_reward`; both spellings work.
"""

from tandem.rewards import *  # noqa: F401,F403
from tandem.rewards import __all__  # noqa: F401
