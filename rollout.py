"""Entry point for rollout plug-in authors: re-exports `tandem.rollout`.

The implementation lives in the package (tandem/rollout/); a config names it by its package
path, e.g. `rollout.function = "tandem.rollout:single_turn"`.
"""

from tandem.rollout import *  # noqa: F401,F403
from tandem.rollout import __all__  # noqa: F401
