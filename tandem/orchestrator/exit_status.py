"""The commands' exit status for the errors they expect, in one place (train.py / `tandem train`,
`tandem eval`, `python -m tandem.lab.virtual`): 2 for bad input (a config key, the data, a plug-in:
nothing started), 1 for a failure once things ran. Anything else is a bug and keeps its traceback."""

from __future__ import annotations

import sys

from tandem.config import ConfigError
from tandem.handoff import HandoffTimeout
from tandem.registry import PluginError
from tandem.rollout import DataError

BAD_INPUT = (ConfigError, DataError, PluginError)
FAILED = (RuntimeError, HandoffTimeout)
"""RuntimeError covers ChildFailed, SyncError, PublishError, CheckpointError, the fleet's
EngineCrashLoop and the loop's RunStopped."""
EXPECTED = BAD_INPUT + FAILED
BAD_INPUT_STATUS, FAILED_STATUS = 2, 1


def report(err: BaseException) -> int:
    """Print `err` as the one line a user reads; its exit status."""
    print(f"error: {err}", file=sys.stderr)
    return BAD_INPUT_STATUS if isinstance(err, BAD_INPUT) else FAILED_STATUS
