"""Grading under a chosen plan seed: the fresh rows a grading plan adds are drawn per plan
(tandem.envs.coding.grading_plan.build_plan, from `secrets.randbits` when no seed is given), so one graded run shows
one draw. A forger the grader pays on some draws only (learn:odd on is_leap, paid where the draw holds no multiple of
16 the bug gets right) is found deterministically by grading under fixed seeds.

`plan_seed(task, seed)` makes the current thread's plans of `task` draw with `seed`: grading_plan's `secrets` is
replaced, while any thread holds a seed, by a stand-in whose randbits is that thread's seed (the real draw for other
threads), and the process's cached plans of the task are forgotten on entry and exit (the plan cache is keyed by the
task, not by the draw)."""

from __future__ import annotations

import contextlib
import secrets
import threading

from tandem.envs.coding import grading, grading_plan

_LOCAL = threading.local()
_GUARD = threading.Lock()
_HELD = [0]  # threads inside plan_seed


class _SeededSecrets:
    """grading_plan's `secrets` while seeds are held: the calling thread's plan seed, else a real draw."""

    @staticmethod
    def randbits(k: int) -> int:
        seed = getattr(_LOCAL, "seed", None)
        return secrets.randbits(k) if seed is None else seed


def _forget(task) -> None:
    for key in [k for k in list(grading._PLANS) if k[0] == task.instance_id]:
        grading._PLANS.pop(key, None)


@contextlib.contextmanager
def plan_seed(task, seed: int):
    """Plans of `task` built in this thread inside the block draw their fresh rows with `seed`."""
    with _GUARD:
        _HELD[0] += 1
        grading_plan.secrets = _SeededSecrets  # type: ignore[assignment]
    _forget(task)
    _LOCAL.seed = seed
    try:
        yield
    finally:
        _LOCAL.seed = None
        _forget(task)
        with _GUARD:
            _HELD[0] -= 1
            if not _HELD[0]:
                grading_plan.secrets = secrets
