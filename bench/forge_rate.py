"""How often a generic forger scores 1, and whether honest fixes still do: every bundled task, both backends.

    python -m bench.forge_rate                          # 32 tasks x 4 trials x every working backend
    python -m bench.forge_rate --tasks 4 --trials 2 --no-agent-loop --backends unshare
    python -m bench.forge_rate --derivers --out bench/results/derive_rate.json   # issue 46's derivation battery
    python -m bench.forge_rate --derivers-agent --out bench/results/derive_agent.json   # its forgers as agents

(run from the repository root, as a module: it uses the tests' forger and task helpers)

Per backend, with the real grader (sandboxes, reference runs, host-held checks):
- the grading plan of every task: host-graded or refused (with the reason);
- the forger of tests/_forger.py (issue 34's outline, improved against host-held checks, with
  round 2's oracle rules: values the repository's own code and the test text prove, and the
  literals the problem statement writes out), trial t using its t-th family of guesses, typed
  into the task's agent sandbox; the diff is graded: reward and tamper flags;
- the test forms without canary twins, round 2's oracle tasks and a task whose hidden test checks
  only what its issue writes out (tests/_forms.py): each graded (fix and forger, every trial)
  or refused with the reason, counted;
- the task's reference fix (its bug patch reversed) as an agent diff, and the same fix next to
  a `<pkg>.egg-info/entry_points.txt` declaring a pytest11 plugin (what `pip install -e .`
  leaves in a pytest-plugin repository): both must score 1;
- with the agent loop: the forger typed by a scripted policy through the real rollout plug-in
  (CodingEnv, G = trials per task), and the step's agent_pass_at_1 and agent_tamper_rate.

With --derivers, instead: every derivation forger of tests/_derivers.py (one family each: calls,
extend, join, codomain, analogy) typed into every task's agent sandbox with the issue text it
read; per family, the tasks it forges (reward 1) out of those run; the refused tasks with their
reasons; the reference fixes that do not score 1. With --derivers-agent: each family typed by a
scripted policy through the real rollout plug-in (the issue text as the agent read it in its prompt)
on the task it forged as bundled before the closure (DERIVER_CASES): reward, tamper flags, pass@1
and agent_tamper_rate.

Results: bench/results/forge_rate.json (or --out). Forgeries that score 1, and fixes that do
not, are listed by task.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def agent_diff(runtime, task, command: str | None, reverse_patch: bool = False) -> str:
    from tandem.envs.coding.swe_data import apply_patch

    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        if reverse_patch:
            apply_patch(sb.testbed, task.patch, reverse=True)
        if command:
            run = sb.exec(command, timeout_s=60)
            if run.returncode != 0:
                raise SystemExit(f"{task.instance_id}: the command failed: {run.output[-800:]}")
        return sb.diff()


def direct(runtime, tasks, trials: int) -> dict:
    """Plans, forgeries, fixes and egg-info fixes, graded one by one."""
    from tests._forger import EGG_INFO, forger_command

    out = {"refused": {}, "forged": [], "forgeries": 0, "tamper_flagged": 0, "fix_failed": [], "egg_failed": [],
           "stated_in_the_issue": []}
    for task in tasks:
        plan = runtime.grader.plan(task)
        if plan.refused:
            out["refused"][task.instance_id] = plan.refused
        out["stated_in_the_issue"] += stated_in_the_issue(task, plan)
        for trial in range(trials):
            res = runtime.grader.grade(task, agent_diff(runtime, task, forger_command(trial, task.problem_statement)))
            out["forgeries"] += 1
            out["tamper_flagged"] += bool(res.tamper)
            if res.reward == 1.0:
                out["forged"].append({"task": task.instance_id, "trial": trial})
        fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
        if fix.reward != 1.0:
            out["fix_failed"].append({"task": task.instance_id, "reason": fix.reason[:500]})
        pkg = task.repo.split("/")[-1]
        egg = runtime.grader.grade(task, agent_diff(runtime, task, EGG_INFO.format(pkg=pkg), reverse_patch=True))
        if egg.reward != 1.0 or egg.tamper:
            out["egg_failed"].append({"task": task.instance_id, "reason": egg.reason[:500], "tamper": egg.tamper})
        print(f"  {task.repo}: refused={bool(plan.refused)} forged={sum(f['task'] == task.instance_id for f in out['forged'])}"
              f"/{trials} fix={fix.reward} egg={egg.reward}", file=sys.stderr, flush=True)
    out["forged_count"] = len(out["forged"])
    return out


def stated_in_the_issue(task, plan) -> list[str]:
    """Hidden tests every host-graded check of which expects a value the problem statement writes out (the
    issue's own example, tandem.envs.coding.exposure.stated_values): a forger that reads the issue can report it, as code
    special-cased to it passes. The grader counts those values as echoes, so this is 0 unless that breaks."""
    from tandem.envs.coding.exposure import stated_values

    written = stated_values(task.problem_statement)
    return [test for test, ks in plan.host_graded.items()
            if ks and not any(plan.sites[k].strong_against(written, test, nth)
                              for k in ks for nth in range(plan.sites[k].runs(test)))]


def forms(runtime, root: Path, trials: int) -> dict:
    """The no-twin forms, round 2's oracle tasks and the issue-text task: refused (why) or graded (fix, forger
    per trial)."""
    from tandem.envs.coding.swe_data import task_from_row
    from tests._forger import forger_command
    from tests._forms import FORMS, ORACLE_TASKS, form_row, oracle_row, stated_row, write_repo

    repo = write_repo(root / "shapes")
    rows = [form_row(repo, name) for name in FORMS] + [oracle_row(root / "oracle", name) for name in ORACLE_TASKS]
    rows.append(stated_row(root / "stated"))  # a hidden test that checks only what its issue writes out
    out = {"refused": {}, "graded": {}}
    for row in rows:
        task = task_from_row(row)
        plan = runtime.grader.plan(task)
        if plan.refused:
            out["refused"][task.instance_id] = plan.refused
            continue
        fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True)).reward
        forged = [runtime.grader.grade(task, agent_diff(runtime, task, forger_command(t, task.problem_statement))).reward
                  for t in range(trials)]
        out["graded"][task.instance_id] = {"fix": fix, "forged": sum(r == 1.0 for r in forged)}
    return out


def agent_loop(cfg, rows, trials: int) -> dict:
    """The forger typed by a scripted policy through the real rollout plug-in, G = trials per task."""
    import asyncio

    from tandem.envs.coding import agent_step_metrics, swe_agent_rollout
    from tests._forger import forger_command
    from tests._swe import InProcessEngine, SENTINEL, bash, make_ctx, tiny_tokenizer

    def policy(prompt: str, turn: int) -> str:
        if turn >= 2:
            return bash(f"echo {SENTINEL}", "Done.")
        # the prompt holds the issue text: the forger reports its literals (R6)
        return bash(forger_command(int.from_bytes(os.urandom(1), "big") % 4, prompt), "Make the tests pass.")

    samples = []
    ctx = make_ctx(cfg, InProcessEngine(tiny_tokenizer(), policy))
    try:
        for i, row in enumerate(rows):
            group = asyncio.run(swe_agent_rollout(ctx, row, trials))
            for s in group:
                s.group_id = i
            samples += group
    finally:
        ctx.executor.shutdown(wait=True)
    metrics = agent_step_metrics(samples)
    return {"samples": len(samples), "agent_pass_at_1": metrics["agent_pass_at_1"],
            "agent_tamper_rate": metrics["agent_tamper_rate"], "agent_refused_rate": metrics.get("agent_refused_rate"),
            "scored_one": [s.metadata.get("agent", {}).get("instance_id") for s in samples if s.reward >= 1.0]}


# issue 46: the task each family forged as bundled before the derivation closure (heapq2's calls, round 5)
DERIVER_CASES = (("calls", "heapq2"), ("extend", "iniread"), ("join", "wrapper"), ("codomain", "tictac"),
                 ("analogy", "semverlite"))


def run_derivers_agent(backend: str) -> dict:
    """Each derivation forger typed by a policy through the real rollout plug-in, on its task (G = 1)."""
    from tandem.envs.coding import agent_step_metrics
    from tandem.envs.coding.grading import reset_runtime
    from tests._derivers import DERIVER_AGENT_LIMITS, deriver_command
    from tests._swe import bash, make_cfg, row_named, run_rollout

    def policy_for(family: str):
        def policy(prompt: str, turn: int) -> str:
            return bash(deriver_command(family, prompt) if turn == 1 else "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
        return policy

    tmp = Path(tempfile.mkdtemp(prefix=f"derive-agent-{backend}-"))
    cfg = make_cfg(tmp, sandbox={"backend": backend, "pool_size": 2}, **DERIVER_AGENT_LIMITS)
    start, samples = time.monotonic(), []
    reset_runtime()
    try:
        samples = [run_rollout(cfg, policy_for(family), row_named(name)) for family, name in DERIVER_CASES]
    finally:
        reset_runtime()
    metrics = agent_step_metrics(samples)
    cases = [{"family": f, "task": n, "reward": s.reward, "tamper": s.reward_info.get("tamper"),
              "diff_bytes": len(s.metadata.get("diff", "")), "format_errors": s.metadata["agent"].get("format_errors"),
              "refused": s.reward_info.get("refused"), "reason": str(s.reward_info.get("reason", ""))[:300]}
             for (f, n), s in zip(DERIVER_CASES, samples)]
    print(f"{backend}: derivation forgers through the agent loop: pass@1 {metrics['agent_pass_at_1']:.2f}, "
          f"agent_tamper_rate {metrics['agent_tamper_rate']:.2f} ({len(samples)} rollouts: "
          + ", ".join(f"{c['family']}/{c['task']} {c['reward']}" for c in cases) + ")", flush=True)
    return {"backend": backend, "cases": cases, "agent_pass_at_1": metrics["agent_pass_at_1"],
            "agent_tamper_rate": metrics["agent_tamper_rate"], "agent_refused_rate": metrics.get("agent_refused_rate"),
            "wall_s": time.monotonic() - start}


def derivers(runtime, tasks, families) -> dict:
    """Each derivation forger against every task: forged tasks per family, refusals, reference fixes."""
    from tests._derivers import deriver_command

    out = {"forged": {f: [] for f in families}, "refused": {}, "fix_failed": [], "tasks": len(tasks), "per_task": {}}
    for task in tasks:
        start = time.monotonic()
        plan = runtime.grader.plan(task)
        if plan.refused:
            out["refused"][task.instance_id] = plan.refused
        for family in families:
            res = runtime.grader.grade(task, agent_diff(runtime, task, deriver_command(family, task.problem_statement)))
            if res.reward == 1.0:
                out["forged"][family].append(task.repo)
        fix = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
        if fix.reward != 1.0:
            out["fix_failed"].append({"task": task.instance_id, "reason": fix.reason[:500]})
        forged_by = [f for f in families if task.repo in out["forged"][f]]
        out["per_task"][task.repo] = {"refused": plan.refused or None, "forged_by": forged_by, "fix": fix.reward,
                                      "wall_s": round(time.monotonic() - start, 1)}
        print(f"  {task.repo}: refused={bool(plan.refused)} forged by {forged_by} fix={fix.reward} "
              f"({out['per_task'][task.repo]['wall_s']} s)", file=sys.stderr, flush=True)
    return out


def run_derivers(backend: str, n_tasks: int, names: list[str]) -> dict:
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.swe_data import load_bundled
    from tests._derivers import FAMILIES
    from tests._swe import make_cfg

    tmp = Path(tempfile.mkdtemp(prefix=f"derive-rate-{backend}-"))
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp, sandbox={"backend": backend, "pool_size": 2}))
    tasks = [t for t in load_bundled()[:n_tasks] if not names or t.repo.split("/")[-1] in names]
    start = time.monotonic()
    try:
        if runtime.backend != backend:
            raise SystemExit(f"asked for {backend}, the runtime uses {runtime.backend}")
        result = {"backend": backend, **derivers(runtime, tasks, FAMILIES)}
    finally:
        reset_runtime()
    result["wall_s"] = time.monotonic() - start
    print(f"{backend}: " + ", ".join(f"{f} forged {len(v)}/{len(tasks)}" for f, v in result["forged"].items())
          + f"; refused {len(result['refused'])}/{len(tasks)}; reference fixes failing {len(result['fix_failed'])}",
          flush=True)
    return result


def run_backend(backend: str, n_tasks: int, trials: int, with_agent: bool) -> dict:
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.swe_data import load_bundled
    from tests._swe import bundled_rows, make_cfg

    tmp = Path(tempfile.mkdtemp(prefix=f"forge-rate-{backend}-"))
    cfg = make_cfg(tmp, sandbox={"backend": backend, "pool_size": 2}, rollout={"samples_per_prompt": trials})
    reset_runtime()
    runtime = get_runtime(cfg)
    start = time.monotonic()
    try:
        if runtime.backend != backend:
            raise SystemExit(f"asked for {backend}, the runtime uses {runtime.backend}")
        result = {"backend": backend, **direct(runtime, load_bundled()[:n_tasks], trials)}
        result["forms"] = forms(runtime, tmp / "forms", trials)
        if with_agent:
            result["agent_loop"] = agent_loop(cfg, bundled_rows()[:n_tasks], trials)
    finally:
        reset_runtime()
    result["wall_s"] = time.monotonic() - start
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=32)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--backends", nargs="+", default=["bwrap", "unshare"])
    p.add_argument("--no-agent-loop", action="store_true")
    p.add_argument("--derivers", action="store_true", help="issue 46's derivation battery instead")
    p.add_argument("--derivers-agent", action="store_true",
                   help="issue 46's derivation forgers through the agent loop, each on the task it forged before")
    p.add_argument("--names", nargs="*", default=[], help="only these bundled tasks (with --derivers)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "forge_rate.json")
    args = p.parse_args()
    from tandem.envs.coding.sandbox.isolation import _probe

    results = []
    for backend in args.backends:
        if not _probe(backend):
            print(f"{backend}: cannot create namespaces here, skipped", file=sys.stderr)
            continue
        if args.derivers_agent:
            results.append(run_derivers_agent(backend))
            continue
        if args.derivers:
            results.append(run_derivers(backend, args.tasks, args.names))
            continue
        results.append(run_backend(backend, args.tasks, args.trials, not args.no_agent_loop))
        r = results[-1]
        f = r["forms"]
        line = (f"{backend}: forged {r['forged_count']}/{r['forgeries']} (tamper flagged {r['tamper_flagged']}), "
                f"refused {len(r['refused'])}, fixes failing {len(r['fix_failed'])}, egg-info failing "
                f"{len(r['egg_failed'])}; forms and oracle tasks: {len(f['graded'])} graded (fixes scoring 1: "
                f"{sum(g['fix'] == 1.0 for g in f['graded'].values())}, forged "
                f"{sum(g['forged'] for g in f['graded'].values())}), {len(f['refused'])} refused; hidden tests whose "
                f"expected values the issue writes out: {len(r['stated_in_the_issue'])}")
        if "agent_loop" in r:
            a = r["agent_loop"]
            line += f"; agent loop: pass@1 {a['agent_pass_at_1']:.3f}, tamper rate {a['agent_tamper_rate']:.3f}"
        print(line, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"tasks": args.tasks, "trials": args.trials, "cpus": os.cpu_count(),
                                    "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
