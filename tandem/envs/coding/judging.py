"""Judge a graded run's records in a child process, under CPU, memory and time limits.

What a graded run wrote on its report pipe is the agent's: up to 4 MB of records built to
be slow to read (a set of integers that all hash alike makes building it quadratic; an
exception message that makes the task's `match=` regex backtrack). Decoding and judging
them in the grader's own process would hold its GIL for minutes: every other grading's
timeout, every reference run of a plan, the whole orchestrator would stall behind one
sample. So the host hands the bytes, with the plan's sites, to a fresh Python process that
imports only tandem's verdict code, limits itself (RLIMIT_CPU, RLIMIT_AS) before reading
anything, and answers with the verdict as JSON. A child that runs out of time, CPU or
memory, or dies, leaves a verdict with every test failed and the cause as tampering: no
honest run writes records that take seconds to judge (they take milliseconds).

The reference runs of a grading plan are parsed in-process (tandem.envs.coding.grading_plan): they run
the task's own code, not the agent's.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from tandem.envs.coding.checks import Site
from tandem.envs.coding.verdict import Verdict, judge, parse_stream

ROOT = Path(__file__).resolve().parents[3]
JUDGE_CPU_S = 20
"""CPU seconds the judging child may use: honest streams take milliseconds, so this is never near."""
JUDGE_WALL_S = 180.0
"""Wall-clock bound on the child (a loaded machine slows it; the CPU limit is what bites)."""
JUDGE_MEMORY_BYTES = 3 << 30


def judge_isolated(expected: list[str], side: bytes, returncode: int, stdout: str, sites: dict[int, Site],
                   required: dict[str, set[int]], cpu_s: int | None = None,
                   wall_s: float = JUDGE_WALL_S, narrower: list[str] | tuple[str, ...] = (),
                   must_raise: dict[str, str] | None = None) -> Verdict:
    """tandem.envs.coding.verdict.judge of a graded run's stream, computed by a limited child process
    (`cpu_s` CPU seconds, JUDGE_CPU_S as it stands when called unless given)."""
    cpu_s = JUDGE_CPU_S if cpu_s is None else cpu_s
    payload = pickle.dumps((expected, side, returncode, stdout, sites, required, cpu_s, JUDGE_MEMORY_BYTES,
                            frozenset(narrower), dict(must_raise or {})))
    try:
        # only tandem's own tree on the path (no site-packages of the user, no environment of the caller)
        done = subprocess.run([sys.executable, "-s", "-m", "tandem.envs.coding.judging"], input=payload, capture_output=True,
                              timeout=wall_s, cwd="/", env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        return _refused(expected, f"judging the run's records took more than {wall_s:.0f}s")
    if done.returncode != 0:
        cause = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [
            f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"]
        return _refused(expected, f"judging the run's records ran out of its limits ({cpu_s}s CPU, "
                                  f"{JUDGE_MEMORY_BYTES >> 30} GiB): {cause[0][:200]}")
    return Verdict(**json.loads(done.stdout))


def _refused(expected: list[str], why: str) -> Verdict:
    return Verdict({t: "FAILED" for t in expected}, [f"{why}: records no honest run writes"], False,
                   {t: why for t in expected})


def child_main() -> None:
    """In the child: limit this process, then judge what stdin holds (the host's own pickle)."""
    import resource

    data = sys.stdin.buffer.read()
    expected, side, returncode, stdout, sites, required, cpu_s, memory, narrower, must_raise = pickle.loads(data)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    verdict = judge(expected, parse_stream(side, sites), returncode, stdout, sites, required, narrower, must_raise)
    sys.stdout.write(json.dumps(asdict(verdict)))


if __name__ == "__main__":
    child_main()
