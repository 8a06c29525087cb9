"""Named points of a run where a caller may step in: the seam fault-injection tests use to hold
the launcher exactly where they want to interrupt it, passed in (never read from the environment).

    class Hold(RunHooks):
        def at(self, phase, n): ...          # "checkpoint": on the launcher's thread
        async def at_async(self, phase, n): ...  # "sync": on the event loop

    launcher.main(argv, hooks=Hold())

Phases:
- "checkpoint", n = the checkpoint's step: every part of checkpoint n is written, nothing is
  fsynced or renamed yet.
- "sync", n = the weight version: every engine serves version n, the step is not yet recorded.
- "released", n = the step (run.colocate): every engine has released its memory, the trainer is
  about to get step n's batch.
"""

from __future__ import annotations


class RunHooks:
    """The default does nothing."""

    def at(self, phase: str, n: int) -> None:
        """Called on the launcher's thread, which waits for it."""

    async def at_async(self, phase: str, n: int) -> None:
        """Called on the event loop. Override it to wait there: a thread would hold Ctrl-C up,
        since asyncio.run joins its threads before it returns."""
        self.at(phase, n)


NO_HOOKS = RunHooks()
