"""Errors that cross plug-in boundaries."""


class RunFatal(RuntimeError):
    """Raised by a rollout or reward plug-in to stop the run with its cause.

    Any other exception from a reward scores that sample 0 with the reason (one broken
    sample must not end a run); this one is for failures that repeat and would make every
    later sample worthless, such as a sandbox that keeps failing.
    """
