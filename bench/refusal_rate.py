"""How many tasks of a realistic task set the grader refuses, each with its reason (issue 46's goal:
under 10%), and whether every reference fix still scores 1.

    python -m bench.refusal_rate                                   # data/swe_realistic, every working backend
    python -m bench.refusal_rate --backends unshare --names datekit numkit
    python -m bench.refusal_rate --tasks data/swe_tasks/tasks.jsonl --out /tmp/bundled_refusals.json

(run from the repository root, as a module: it uses the tests' config helper)

The task set (scripts/make_realistic_tasks.py) is SWE-smith-shaped: procedural bugs in small
repositories whose own parametrize-heavy tests are the hidden tests, many of functions that
return a bool, a small int or an enum. Per backend, with the real grader: every task's grading
plan (three reference runs), refused or host-graded, with the reason and the exposed sites'
reasons (how a forger would reach their values); then the task's reference fix (its bug patch
reversed, taken as an agent diff from the agent's sandbox) graded: it must score 1. A refused
task scores 0 for every sample, its reference fix included.

Results: bench/results/refusal_rate.json (or --out); exit 1 if a reference fix of a graded task
does not score 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REALISTIC = ROOT / "data" / "swe_realistic" / "tasks.jsonl"
_WRITING = threading.Lock()
PARTIAL: Path | None = None
"""Where each task's result is written as soon as it is measured (--out's name, .partial.json)."""


def rule_of(reason: str) -> str:
    """A short name for an exposure reason (what kind of derivation reached the value)."""
    for needle, name in (("codomain", "codomain"), ("by extension", "extension"), ("by joins", "joins"),
                         ("by analogy", "analogy"), ("transformation", "uniform transform"),
                         ("round trip", "round trip"), ("sandbox keeps", "kept equality")):
        if needle in reason:
            return name
    return "other"


def measure(runtime, tasks, jobs: int = 1) -> dict:
    """Every task's plan and reference fix, `jobs` tasks at a time (the grader serves concurrent rollouts)."""
    out: dict = {"tasks": len(tasks), "refused": {}, "fix_scores": {}, "exposed_rules": Counter(), "per_task": {}}
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda task: _one(runtime, task, out), tasks))
    out["exposed_rules"] = dict(out["exposed_rules"])
    out["per_task"] = {t.instance_id: out["per_task"][t.instance_id] for t in tasks}
    return out


def _one(runtime, task, out: dict) -> None:
    from bench.forge_rate import agent_diff

    start = time.monotonic()
    plan = runtime.grader.plan(task)
    fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
    rules = Counter(rule_of(r) for r in plan.exposed.values())
    entry = {
        "refused": plan.refused, "fix": fix.reward, "f2p": len(task.fail_to_pass),
        "host_graded_sites": {t: len(k) for t, k in plan.host_graded.items()}, "exposed": dict(rules),
        "graded_by_guesses": plan.graded_by_guesses,
        "graded_by_fresh_rows": {t: len(rows) for t, rows in plan.differential.items()},
        "fresh_rows": plan.fresh_kept, "fresh_rows_bug_fails": len(plan.fresh_failed),
        "fix_reason": "" if fix.reward == 1.0 else fix.reason[:400], "seconds": round(time.monotonic() - start, 1)}
    with _WRITING:
        out["exposed_rules"].update(rules)
        if plan.refused:
            out["refused"][task.instance_id] = plan.refused
        out["fix_scores"][task.instance_id] = fix.reward
        out["per_task"][task.instance_id] = entry
    if PARTIAL is not None:  # what is measured so far survives a run stopped early
        with _WRITING:
            PARTIAL.write_text(json.dumps(out["per_task"], indent=1, default=str) + "\n")
    print(f"  {task.instance_id}: {'REFUSED' if plan.refused else 'graded'}, fix {fix.reward}, fresh rows the bug "
          f"fails {len(plan.fresh_failed)}/{plan.fresh_kept}, exposed "
          f"{dict(rules) or '-'}" + (f": {plan.refused[:300]}" if plan.refused else ""), file=sys.stderr, flush=True)


def _round_robin(tasks: list) -> list:
    """One task of each repository in turn: a run stopped early has measured every repository."""
    by_repo: dict[str, list] = {}
    for t in tasks:
        by_repo.setdefault(t.repo, []).append(t)
    rounds = max((len(v) for v in by_repo.values()), default=0)
    return [v[i] for i in range(rounds) for v in by_repo.values() if i < len(v)]


def run_backend(backend: str, data: Path, names: list[str], jobs: int) -> dict:
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.swe_data import load_bundled
    from tests._swe import make_cfg

    tmp = Path(tempfile.mkdtemp(prefix=f"refusal-rate-{backend}-"))
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp, sandbox={"backend": backend, "pool_size": 2}))
    tasks = _round_robin([t for t in load_bundled(data) if not names or t.repo.split("/")[-1] in names])
    start = time.monotonic()
    try:
        if runtime.backend != backend:
            raise SystemExit(f"asked for {backend}, the runtime uses {runtime.backend}")
        result = {"backend": backend, **measure(runtime, tasks, jobs)}
    finally:
        reset_runtime()
    result["wall_s"] = round(time.monotonic() - start, 1)
    graded = [i for i in result["fix_scores"] if i not in result["refused"]]
    result["graded_fixes_not_one"] = [i for i in graded if result["fix_scores"][i] != 1.0]
    print(f"{backend}: refused {len(result['refused'])}/{len(tasks)} "
          f"({100 * len(result['refused']) / max(len(tasks), 1):.1f}%); reference fixes scoring 1: "
          f"{sum(v == 1.0 for v in result['fix_scores'].values())}/{len(tasks)}; exposed sites by rule "
          f"{result['exposed_rules']}", flush=True)
    for instance, reason in result["refused"].items():
        print(f"  refused {instance}: {reason}", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=REALISTIC, help="a tasks.jsonl (repo_path relative to its folder)")
    p.add_argument("--backends", nargs="+", default=["bwrap", "unshare"])
    p.add_argument("--names", nargs="*", default=[], help="only the tasks of these repositories")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "refusal_rate.json")
    p.add_argument("--jobs", type=int, default=2, help="tasks planned and graded at a time")
    args = p.parse_args()
    from tandem.envs.coding.sandbox.isolation import _probe

    global PARTIAL
    PARTIAL = args.out.with_suffix(".partial.json")

    results = []
    for backend in args.backends:
        if not _probe(backend):
            print(f"{backend}: cannot create namespaces here, skipped", file=sys.stderr)
            continue
        results.append(run_backend(backend, args.tasks, args.names, args.jobs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks_file": str(args.tasks.relative_to(ROOT) if args.tasks.is_absolute()
                                                       and ROOT in args.tasks.parents else args.tasks),
                                    "cpus": os.cpu_count(), "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")
    if any(r["graded_fixes_not_one"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
