"""Entry point for rollout plug-in authors: re-exports `tandem.rollout`.

The implementation lives in the package (tandem/rollout/); this file keeps the names users
and configs already know. `rollout:single_turn` in a config means `tandem.rollout:single_turn`.
"""

from tandem.rollout import *  # noqa: F401,F403
from tandem.rollout import __all__  # noqa: F401
