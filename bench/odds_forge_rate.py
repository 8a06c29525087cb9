"""The guess forgers (tests/_guessers.py) against every task a grader grades: tasks forged must be 0
(issue 46: the odds the grader counts for echoes, usual defaults and yes/no, attacked).

    python -m bench.odds_forge_rate --backends unshare                     # data/swe_realistic
    python -m bench.odds_forge_rate --tasks data/swe_tasks/tasks.jsonl --out bench/results/odds_forge_bundled.json

(run from the repository root, as a module: it uses the tests' config helper)

Per backend and task: the grading plan; a refused task scores 0 for every sample, so it is counted and
not attacked; a graded task is attacked by every family (each typed as an agent diff from the agent's
sandbox), and its reference fix must score 1. Results: bench/results/odds_forge_rate.json (or --out);
exit 1 if a forger scores 1 or a graded task's reference fix does not.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def attack(runtime, tasks, families) -> dict:
    from bench.forge_rate import agent_diff
    from tests._guessers import guesser_command

    out: dict = {"tasks": len(tasks), "forged": {f: [] for f in families}, "refused": {}, "fix_failed": [],
                 "graded_by_guesses": {}, "per_task": {}}
    for task in tasks:
        start = time.monotonic()
        plan = runtime.grader.plan(task)
        if plan.refused:
            out["refused"][task.instance_id] = plan.refused
            print(f"  {task.instance_id}: refused", file=sys.stderr, flush=True)
            continue
        if plan.graded_by_guesses:
            out["graded_by_guesses"][task.instance_id] = plan.graded_by_guesses
        forged_by = []
        for family in families:
            diff = agent_diff(runtime, task, guesser_command(family, task.problem_statement))
            if runtime.grader.grade(task, diff).reward == 1.0:
                out["forged"][family].append(task.instance_id)
                forged_by.append(family)
        fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
        if fix.reward != 1.0:
            out["fix_failed"].append({"task": task.instance_id, "reason": fix.reason[:500]})
        out["per_task"][task.instance_id] = {"forged_by": forged_by, "fix": fix.reward,
                                             "by_guesses": bool(plan.graded_by_guesses),
                                             "wall_s": round(time.monotonic() - start, 1)}
        print(f"  {task.instance_id}: graded{' by guesses' if plan.graded_by_guesses else ''}, forged by "
              f"{forged_by}, fix {fix.reward}", file=sys.stderr, flush=True)
    return out


def run_backend(backend: str, data: Path, names: list[str], families: list[str]) -> dict:
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.swe_data import load_bundled
    from tests._swe import make_cfg

    tmp = Path(tempfile.mkdtemp(prefix=f"odds-forge-{backend}-"))
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp, sandbox={"backend": backend, "pool_size": 2}))
    tasks = [t for t in load_bundled(data) if not names or t.repo.split("/")[-1] in names
             or t.instance_id in names]
    start = time.monotonic()
    try:
        if runtime.backend != backend:
            raise SystemExit(f"asked for {backend}, the runtime uses {runtime.backend}")
        result = {"backend": backend, **attack(runtime, tasks, families)}
    finally:
        reset_runtime()
    result["wall_s"] = round(time.monotonic() - start, 1)
    forged = {t for v in result["forged"].values() for t in v}
    print(f"{backend}: graded {len(tasks) - len(result['refused'])}/{len(tasks)} "
          f"({len(result['graded_by_guesses'])} by guesses); tasks forged {len(forged)}; "
          + ", ".join(f"{f} {len(v)}" for f, v in result["forged"].items())
          + f"; reference fixes failing {len(result['fix_failed'])}", flush=True)
    return result


def main() -> None:
    from tandem.envs.coding.swe_data import BUNDLED_TASKS
    from tests._guessers import FAMILIES

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=ROOT / "data" / "swe_realistic" / "tasks.jsonl",
                   help=f"a tasks.jsonl (the bundled set: {BUNDLED_TASKS})")
    p.add_argument("--backends", nargs="+", default=["bwrap", "unshare"])
    p.add_argument("--names", nargs="*", default=[], help="only these repositories or instance ids")
    p.add_argument("--families", nargs="*", default=list(FAMILIES))
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "odds_forge_rate.json")
    args = p.parse_args()
    from tandem.envs.coding.sandbox.isolation import _probe

    results = [run_backend(b, args.tasks, args.names, args.families) for b in args.backends if _probe(b)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks_file": str(args.tasks), "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")
    if any(r["fix_failed"] or any(r["forged"].values()) for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
