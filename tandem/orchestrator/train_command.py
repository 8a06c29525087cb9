"""`python train.py` and `tandem train`: `--help` printed from the config's typed models alone, anything
else handed to the launcher.

The launcher's imports (the supervisor, the rollout client and aiohttp, the environments, the checkpoint
code) cost more than the whole help text; a user who asked only for the keys should not wait for them.
"""

from __future__ import annotations

import sys

from tandem import registry
from tandem.config import help_text

LAUNCHER = "tandem.orchestrator.launcher:command"
"""main() then exit_now: imported only once the command is not a request for help."""


def wants_help(argv: list[str]) -> bool:
    return "-h" in argv or "--help" in argv


def print_help() -> None:
    """Every config key of the core with its docstring and range, and the bundled environments' typed arguments."""
    print(help_text({name: registry.load(env.args) for name, env in registry.ENVIRONMENTS.items() if env.args}))


def command(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if wants_help(argv):
        print_help()
        return 0
    return registry.load(LAUNCHER)(argv)
