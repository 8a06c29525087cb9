"""Entry point for weight sync: re-exports `tandem.weights` (publish on the trainer side,
reload on the orchestrator side). The implementation lives in tandem/weights/."""

from tandem.weights import *  # noqa: F401,F403
from tandem.weights import __all__  # noqa: F401
