"""The corpus of correct alternative fixes (tests/_fix_corpus*.py), each checked twice (issue 46).

    PYTHONPATH=$PWD python bench/fix_corpus.py               # every fix: plain pytest, then the grader per backend
    PYTHONPATH=$PWD python bench/fix_corpus.py --plain-only  # only (a), no sandbox
    PYTHONPATH=$PWD python bench/fix_corpus.py --only ratio romanum:latin1 --backends unshare
    PYTHONPATH=$PWD python bench/fix_corpus.py --tasks data/swe_realistic/tasks.jsonl --jobs 2   # the realistic set

The corpus of a task set is chosen by the set's folder (data/swe_tasks: tests/_fix_corpus_a.py and _b.py;
data/swe_realistic: tests/_fix_corpus_real.py). Everything comes from the tree PYTHONPATH names; the
template cache is that tree's own (another tree's grader may build its templates otherwise).

(a) plain pytest: the fix's edits are applied to the agent's starting repository (the bug in place) in an
    agent sandbox, as an agent's shell would, and the diff taken as CodingEnv takes it (bytes); that diff is
    applied to the task's graded state (every original test file present) and the task's FAIL_TO_PASS and
    PASS_TO_PASS tests run under plain pytest. A fix that fails one of them is not correct: it is reported
    as such and not graded (it would say nothing about the grader).
(b) the grader: the same bytes through `runtime.grader.grade` on every sandbox backend that works here.

Target: every correct fix scores 1 on every backend. Each refusal is listed with the grader's reason. A fix of a
task whose grading plan refuses it scores 0 like every sample of that task: those are counted apart (the refusal
rate's count, bench/refusal_rate.py), as are fixes marked `outside` (answers differing from the reference's on
inputs outside the hidden tests' domain, where a check on fresh inputs could judge them).
Results go to bench/results/fix_corpus.json (or --out); the exit status is 1 if a fix fails (a) or scores 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tandem
from tandem.envs.coding.swe_data import apply_patch, read_rows, task_from_row
from tandem.envs.coding.verdict import parse_pytest_report
from tests._fix_corpus import Fix, apply_command, corpus
from tests._fix_corpus_real import realistic_corpus
from tests._swe import make_cfg, sandbox_backends

ROOT = Path(__file__).resolve().parents[1]

GRADER_ROOT = Path(tandem.__file__).resolve().parents[1]
"""The tree whose grader is checked; its own template cache is used (another grader may build templates otherwise)."""
BUNDLED = ROOT / "data" / "swe_tasks" / "tasks.jsonl"
CORPORA = {"swe_tasks": corpus, "swe_realistic": realistic_corpus}
"""Each task set's corpus, by the folder of its tasks.jsonl."""


def task_resolver(tasks_file: Path):
    """fix -> its SweTask: a fix names `repo` (one task of that repository) or `repo/bug id` (func_pm_ dropped)."""
    rows = read_rows(tasks_file)
    cache: dict[str, object] = {}

    def task_of(fx: Fix):
        if fx.task not in cache:
            repo, _, bug = fx.task.partition("/")
            found = [r for r in rows if r["repo"] == f"tandem/{repo}" and (not bug or f".func_pm_{bug}__" in
                                                                            r["instance_id"])]
            if len(found) != 1:
                raise SystemExit(f"{fx.name}: {len(found)} tasks of {tasks_file} match")
            cache[fx.task] = task_from_row(found[0], tasks_file.parent)
        return cache[fx.task]

    return task_of


def take_diff(runtime, task, fx: Fix) -> bytes:
    """The fix typed into an agent sandbox; its diff as bytes (what CodingEnv hands the reward)."""
    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        run = sb.exec(apply_command(fx))
        if run.returncode != 0:
            raise RuntimeError(f"{fx.name}: the edits do not apply: {run.output[-800:]}")
        return sb.diff_bytes()


def host_diff(task, fx: Fix, work: Path) -> bytes:
    """The same diff without a sandbox (for --plain-only): the edits in a git copy of the agent's state."""
    repo = work / "agent"
    task.materialize_agent(repo)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    subprocess.run(["bash", "-c", apply_command(fx)], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    return subprocess.run([*git, "diff", "--cached", "--binary", "--no-renames", "HEAD"], check=True,
                          capture_output=True).stdout


def plain_pytest(task, diff: bytes, work: Path) -> dict[str, str]:
    """The original hidden tests, unmodified, on the graded state with the fix: {test: outcome}."""
    repo = work / "plain"
    task.materialize_graded(repo)
    apply_patch(repo, diff)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--tb=short", "-q",
                          "--no-header", "--color=no", *task.tests], cwd=repo, capture_output=True, text=True,
                         timeout=300, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    seen = parse_pytest_report(out.stdout)
    return {t: seen.get(t, "NOT_RUN") for t in task.tests}


def check(fixes: list[Fix], backends: list[str], tmp: Path, base_uid: int, task_of, jobs: int = 1) -> list[dict]:
    """Every fix: its diff, plain pytest, then the grader per backend; the fixes of one task in one job, `jobs`
    tasks at a time (the grader serves concurrent rollouts)."""
    from tandem.envs.coding.grading import get_runtime, reset_runtime

    rows = [{"fix": fx.name, "task": fx.task, "form": fx.form, "why": fx.why, "outside": fx.outside, "scores": {},
             "refused": {}} for fx in fixes]
    diffs: dict[str, bytes] = {}
    by_task: dict[str, list[tuple[Fix, dict]]] = {}
    for fx, row in zip(fixes, rows):
        by_task.setdefault(fx.task, []).append((fx, row))
    for backend in backends or [None]:
        if backend is None:  # --plain-only: no runtime at all
            for fx, row in zip(fixes, rows):
                work = Path(tempfile.mkdtemp(dir=tmp))
                diffs[fx.name] = host_diff(task_of(fx), fx, work)
                row["plain"] = plain_pytest(task_of(fx), diffs[fx.name], work)
                row["correct"] = not _failed(row["plain"])
                print(f"  plain    {fx.name:44} {_failed(row['plain']) or 'pass'}", file=sys.stderr, flush=True)
            break
        reset_runtime()
        runtime = get_runtime(make_cfg(tmp / backend, sandbox={"backend": backend, "pool_size": max(2, jobs),
                                                               "base_uid": base_uid},
                                       run={"cache_dir": str(GRADER_ROOT / ".cache" / "tandem")}))
        try:
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(lambda pairs: _grade_task(runtime, backend, pairs, diffs, tmp, task_of),
                              by_task.values()))
        finally:
            reset_runtime()
    for fx, row in zip(fixes, rows):
        if row.get("plain") is None:
            row["plain"] = plain_pytest(task_of(fx), diffs[fx.name], Path(tempfile.mkdtemp(dir=tmp)))
            row["correct"] = not _failed(row["plain"])
        row["diff_bytes"] = len(diffs[fx.name])
        row["diff_utf8"] = _decodes(diffs[fx.name])
    return rows


def _grade_task(runtime, backend: str, pairs: list[tuple[Fix, dict]], diffs: dict, tmp: Path, task_of) -> None:
    """One task's fixes on one backend: is the task refused (its plan), then each correct fix graded."""
    task = task_of(pairs[0][0])
    refused = runtime.grader.plan(task).refused
    for fx, row in pairs:
        if fx.name not in diffs:
            diffs[fx.name] = take_diff(runtime, task, fx)
        if row.get("plain") is None:
            row["plain"] = plain_pytest(task, diffs[fx.name], Path(tempfile.mkdtemp(dir=tmp)))
            row["correct"] = not _failed(row["plain"])
        if not row["correct"]:
            print(f"  plain    {fx.name:44} {_failed(row['plain'])}", file=sys.stderr, flush=True)
            continue
        row["refused"][backend] = refused
        t0 = time.perf_counter()
        res = runtime.grader.grade(task, diffs[fx.name])
        row["scores"][backend] = {"reward": res.reward, "reason": res.reason, "tamper": res.tamper,
                                  "grade_s": round(time.perf_counter() - t0, 2)}
        print(f"  {backend:8} {fx.name:44} {res.reward:.0f} {'(task refused) ' if refused else ''}"
              f"{res.reason[:150]}", file=sys.stderr, flush=True)


def _failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {t: s for t, s in outcomes.items() if s != "PASSED"}


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def report(rows: list[dict], backends: list[str]) -> int:
    """The table and per backend: fixes scoring 1 / fixes on graded tasks; fixes on refused tasks apart.
    Returns how many fixes are wrong (not correct, or a graded task's fix scoring 0)."""
    width = max([len(r["task"]) for r in rows] + [4])
    print(f"{'task':{width}} {'form':12} {'plain':6} " + " ".join(f"{b:8}" for b in backends) + "  fix")
    for r in rows:
        scores = [r["scores"].get(b, {}).get("reward") for b in backends]
        print(f"{r['task']:{width}} {r['form']:12} {'pass' if r['correct'] else 'FAIL':6} "
              + " ".join(f"{'-' if s is None else f'{s:.0f}':8}" for s in scores) + f"  {r['why']}"
              + (" [outside]" if r.get("outside") else ""))
    bad = 0
    incorrect = [r for r in rows if not r["correct"]]
    for r in incorrect:
        print(f"NOT CORRECT (fails the original tests): {r['fix']}: {_failed(r['plain'])}")
    bad += len(incorrect)
    for b in backends:
        graded = [r for r in rows if b in r["scores"] and not r.get("refused", {}).get(b)]
        on_refused = [r for r in rows if b in r["scores"] and r.get("refused", {}).get(b)]
        ones = sum(r["scores"][b]["reward"] == 1.0 for r in graded)
        outside = [r for r in graded if r.get("outside")]
        print(f"{b}: {ones} / {len(graded)} correct fixes of graded tasks score 1 "
              f"({sum(r['scores'][b]['reward'] == 1.0 for r in outside)} / {len(outside)} of those marked outside); "
              f"{len(on_refused)} fixes on {len({r['task'] for r in on_refused})} refused tasks (0 by refusal)")
        for r in graded:
            if r["scores"][b]["reward"] != 1.0:
                bad += 1
                print(f"  SCORED 0 {r['fix']}: {r['scores'][b]['reason']}")
    tasks = {r["task"] for r in rows}
    print(f"{len(rows)} fixes of {len(tasks)} tasks; forms: "
          + ", ".join(f"{f} {sum(r['form'] == f for r in rows)}" for f in sorted({r['form'] for r in rows})))
    return bad


def merge(paths: list[Path]) -> tuple[list[dict], list[str], float]:
    """Outputs of checkers run side by side (a split of the corpus or of the backends each) as one result."""
    rows: dict[str, dict] = {}
    backends: list[str] = []
    wall = 0.0
    for path in paths:
        part = json.loads(path.read_text())
        backends += [b for b in part["backends"] if b not in backends]
        wall = max(wall, part["wall_s"])
        for row in part["fixes"]:
            merged = rows.setdefault(row["fix"], {**row, "scores": {}, "refused": {}})
            merged["scores"].update(row["scores"])
            merged["refused"].update(row.get("refused", {}))
    return list(rows.values()), backends, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=BUNDLED, help="the task set (its folder picks the corpus)")
    p.add_argument("--jobs", type=int, default=1, help="tasks checked at a time")
    p.add_argument("--only", nargs="*", default=[], help="task names or task:form names")
    p.add_argument("--backends", nargs="+", default=["bwrap", "unshare"])
    p.add_argument("--base-uid", type=int, default=62000,
                   help="first sandbox uid (as root): give checkers that run at once disjoint ranges")
    p.add_argument("--plain-only", action="store_true", help="only the plain pytest check (no sandbox)")
    p.add_argument("--merge", nargs="+", type=Path, help="combine the JSON outputs of several checkers, run nothing")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fix_corpus.json")
    args = p.parse_args()
    if args.merge:
        rows, backends, wall = merge(args.merge)
        args.out.write_text(json.dumps({"backends": backends, "wall_s": wall, "merged": len(args.merge),
                                        "fixes": rows}, indent=2) + "\n")
        sys.exit(1 if report(rows, backends) else 0)
    tasks_file = args.tasks.resolve()
    if tasks_file.parent.name not in CORPORA:
        raise SystemExit(f"--tasks {args.tasks}: no corpus for task set {tasks_file.parent.name!r} "
                         f"(known: {', '.join(CORPORA)})")
    fixes = [fx for fx in CORPORA[tasks_file.parent.name]()
             if not args.only or fx.task in args.only or fx.name in args.only]
    available, _ = sandbox_backends()
    backends = [] if args.plain_only else [b for b in args.backends if b in available]
    if not args.plain_only and not backends:
        raise SystemExit(f"none of the backends {args.backends} works here")
    tmp = Path(tempfile.mkdtemp(prefix="fix-corpus-"))
    try:
        t0 = time.perf_counter()
        rows = check(fixes, backends, tmp, args.base_uid, task_resolver(tasks_file), args.jobs)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = report(rows, backends)
    if not args.plain_only:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"backends": backends, "wall_s": round(wall, 1), "tasks": str(args.tasks),
                                        "grader": str(GRADER_ROOT), "jobs": args.jobs,
                                        "load_avg": os.getloadavg(), "fixes": rows}, indent=2) + "\n")
        print(f"wrote {args.out} ({wall:.0f} s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
