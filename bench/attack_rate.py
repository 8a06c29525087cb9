"""The guess-forger battery (issue 46): how many of the tasks a grader grades does each forger of
tests/_attack_forgers.py score 1 on, on a tasks file (the realistic SWE-smith-shaped set by default).

    python -m bench.attack_rate --backends unshare --jobs 2
    python -m bench.attack_rate --backends unshare --names datekit numkit --families lookup@named invert@stated
    cd /work/wt/<branch> && PYTHONPATH=$PWD:/path/to/this/tree python -m bench.attack_rate --forgers /path/to/this/tree

(run from the repository root, as a module). `--forgers DIR` takes tests/_attack_forgers.py from another
checkout, so a branch's grader (its tree first on PYTHONPATH) meets these forgers unchanged.

Per backend, with the real grader: every task's grading plan; a refused task is counted and skipped (it
scores 0 for every sample); a graded one gets every forger (its diff typed into the task's agent sandbox
with the issue text, then graded) and its reference fix (must score 1). Per family: tasks forged / graded.

Results: bench/results/attack_rate.json (or --out), with each forged task's graded-by-guesses tests and the
plan's exposure counts, so the owner of the rule that let it through can be told. Exit 1 when a forger
scores 1 or a graded task's reference fix does not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from contextlib import contextmanager
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
_LOCK = threading.Lock()


def load_forgers(tree: Path | None):
    """tests/_attack_forgers.py of `tree` (default: this checkout's, as imported)."""
    if tree is None:
        from tests import _attack_forgers
        return _attack_forgers
    spec = importlib.util.spec_from_file_location("_attack_forgers_under_test", tree / "tests" / "_attack_forgers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ALWAYS = ("lookup@named", "fresh@named", "fresh@stated")
"""Graded on every graded task whatever the simulation says: what they do depends on rows a grader adds."""


def candidates(sim: dict | None, specs) -> Callable[[str], list[str]]:
    """Task -> the forgers worth grading on it: with a simulation (simulate()), those that answer at least one
    hidden test as the fix does and break none the bug passes (and ALWAYS); without one, every forger."""
    if sim is None:
        return lambda instance: list(specs)

    def pick(instance: str) -> list[str]:
        rows = sim["per_task"].get(instance)
        if rows is None:
            return list(specs)
        return [s for s in specs if s in ALWAYS or s in rows and rows[s]["f2p_right"] and not rows[s]["p2p_broken"]]
    return pick


def battery(runtime, tasks, specs, command, jobs: int = 1, partial: Path | None = None,
            sim: dict | None = None) -> dict:
    """Every task's plan; on each graded task, the forgers worth grading (all without `sim`) and the reference fix."""
    pick = candidates(sim, specs)
    out: dict = {"tasks": len(tasks), "graded": [], "refused": {}, "forged": {s: [] for s in specs},
                 "fix_failed": {}, "per_task": {}}

    def one(task):
        from bench.forge_rate import agent_diff

        start = time.monotonic()
        plan = runtime.grader.plan(task)
        entry = {"refused": plan.refused or None, "graded_by_guesses": plan.graded_by_guesses, "forged_by": {},
                 "differential": getattr(plan, "differential", None) or None, "tried": []}
        if not plan.refused:
            entry["tried"] = pick(task.instance_id)
            for spec in entry["tried"]:
                res = runtime.grader.grade(task, agent_diff(runtime, task, command(spec, task.problem_statement)))
                if res.reward == 1.0:
                    entry["forged_by"][spec] = {"tamper": res.tamper, "reason": str(res.reason)[:300]}
            fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
            entry["fix"] = fix.reward
            if fix.reward != 1.0:
                entry["fix_reason"] = str(fix.reason)[:400]
        entry["wall_s"] = round(time.monotonic() - start, 1)
        with _LOCK:
            out["per_task"][task.instance_id] = entry
            if plan.refused:
                out["refused"][task.instance_id] = plan.refused
            else:
                out["graded"].append(task.instance_id)
                for spec in entry["forged_by"]:
                    out["forged"][spec].append(task.instance_id)
                if entry.get("fix") != 1.0:
                    out["fix_failed"][task.instance_id] = entry.get("fix_reason", "")
            if partial is not None:
                partial.write_text(json.dumps(out["per_task"], indent=1, default=str) + "\n")
        print(f"  {task.instance_id}: " + ("REFUSED" if plan.refused else
              f"graded, forged by {sorted(entry['forged_by']) or '-'}, fix {entry.get('fix')}")
              + f" ({entry['wall_s']} s)", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, tasks))
    out["per_task"] = {t.instance_id: out["per_task"][t.instance_id] for t in tasks}
    return out


def simulate(tasks, specs, command, partial: Path | None = None) -> dict:
    """Per family, the tasks whose every hidden check it answers as the fix does (tests._attack_sim.py: on the host,
    no grader): what a grader that graded them all would pay."""
    from tests._attack_sim import Simulator

    out: dict = {"tasks": len(tasks), "answered": {s: [] for s in specs}, "per_task": {}}
    for task in tasks:
        sim = Simulator(task)
        try:
            rows = sim.answers(list(specs), command)
        finally:
            sim.close()
        out["per_task"][task.instance_id] = rows
        for spec, r in rows.items():
            if r["answers"]:
                out["answered"][spec].append(task.instance_id)
        if partial is not None:
            partial.write_text(json.dumps(out["per_task"], indent=1) + "\n")
        print(f"  {task.instance_id}: answered by {[s for s, r in rows.items() if r['answers']] or '-'}",
              file=sys.stderr, flush=True)
    return out


def load_tasks(data: Path, names: list[str]) -> list:
    """The tasks of `data` (of repositories `names`, all if empty), one repository's in turn (a run stopped early
    has met every repository)."""
    from bench.refusal_rate import _round_robin
    from tandem.envs.coding.swe_data import load_bundled

    return _round_robin([t for t in load_bundled(data) if not names or t.repo.split("/")[-1] in names])


@contextmanager
def grading_runtime(backend: str):
    """The real grader on `backend`, reset before and after."""
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tests._swe import make_cfg

    reset_runtime()
    try:
        runtime = get_runtime(make_cfg(Path(tempfile.mkdtemp(prefix=f"attack-rate-{backend}-")),
                                       sandbox={"backend": backend, "pool_size": 2}))
        if runtime.backend != backend:
            raise SystemExit(f"asked for {backend}, the runtime uses {runtime.backend}")
        yield runtime
    finally:
        reset_runtime()


def run_backend(backend: str, data: Path, names: list[str], specs, command, jobs: int, partial: Path,
                sim: dict | None, answered: bool = False) -> dict:
    tasks, start = load_tasks(data, names), time.monotonic()
    if answered and sim is not None:
        whole = {i for spec in specs for i in sim["answered"].get(spec, [])}
        tasks = [t for t in tasks if t.instance_id in whole]
    with grading_runtime(backend) as runtime:
        result = {"backend": backend, **battery(runtime, tasks, specs, command, jobs, partial, sim)}
    result["wall_s"] = round(time.monotonic() - start, 1)
    graded = len(result["graded"])
    print(f"{backend}: graded {graded}/{len(tasks)} (refused {len(result['refused'])}); forged per family: "
          + ", ".join(f"{s} {len(v)}/{graded}" for s, v in result["forged"].items())
          + f"; reference fixes of graded tasks not 1: {len(result['fix_failed'])}", flush=True)
    for spec, forged in result["forged"].items():
        for instance in forged:
            print(f"  FORGED {instance} by {spec}", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=ROOT / "data" / "swe_realistic" / "tasks.jsonl")
    p.add_argument("--backends", nargs="+", default=["unshare", "bwrap"])
    p.add_argument("--names", nargs="*", default=[], help="only the tasks of these repositories")
    p.add_argument("--families", nargs="*", default=[], help="forger specs family[:variant][@scope] (default: "
                   "tests/_forgers.BATTERY)")
    p.add_argument("--forgers", type=Path, default=None, help="a checkout whose tests/_attack_forgers.py to use")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--simulate", action="store_true", help="no grader: per family, the tasks whose every check it "
                   "answers as the fix does (on the host, tests._attack_sim.py)")
    p.add_argument("--sim", type=Path, default=None, help="a --simulate result: grade only the forgers it finds worth "
                   "grading on each task (and ALWAYS); without it, every forger on every graded task")
    p.add_argument("--answered", action="store_true", help="with --sim: only the tasks some forger answers whole on "
                   "the host (the only ones a grader can be forged on, fresh rows aside)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "attack_rate.json")
    args = p.parse_args()
    from tandem.envs.coding.sandbox.isolation import _probe

    forgers = load_forgers(args.forgers)
    specs = args.families or list(forgers.BATTERY)
    if args.simulate:
        tasks = load_tasks(args.tasks, args.names)
        sim = simulate(tasks, specs, forgers.attack_command, args.out.with_suffix(".partial.json"))
        print("answered (every hidden test as the fix, none the bug passes broken): " + ", ".join(f"{s} {len(v)}/{len(tasks)}"
                                                                for s, v in sim["answered"].items()), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"tasks_file": str(args.tasks), "families": specs, **sim}, indent=2) + "\n")
        print(f"wrote {args.out}")
        return
    results = []
    for backend in args.backends:
        if not _probe(backend):
            print(f"{backend}: cannot create namespaces here, skipped", file=sys.stderr)
            continue
        sim = json.loads(args.sim.read_text()) if args.sim else None
        results.append(run_backend(backend, args.tasks, args.names, specs, forgers.attack_command, args.jobs,
                                   args.out.with_suffix(f".{backend}.partial.json"), sim, args.answered))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks_file": str(args.tasks), "families": specs, "cpus": os.cpu_count(),
                                    "results": results}, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    if any(any(r["forged"].values()) or r["fix_failed"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
