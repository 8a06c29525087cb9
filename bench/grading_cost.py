"""Cost of grading one coding task (the hidden-test reward): BEFORE vs AFTER a grader change.

    python bench/grading_cost.py --repeats 2                 # 8 bundled tasks, every working backend
    python bench/grading_cost.py --before-rev <rev>          # another baseline than the pre-rewrite grader
    python bench/grading_cost.py --before /path/to/old/tree --tasks 4 --per-task 1 --backends bwrap
    python bench/grading_cost.py --ids 0 10 15 19 21 31   # these task indexes (15 routes, 19 ciphers: own checks)
    git archive HEAD | tar -x -C /tmp/before && python bench/grading_cost.py --before /tmp/before   # vs HEAD

BEFORE is another checkout (default: a detached git worktree of --before-rev, by default the
commit before issue 10's grader rewrite, at .cache/bench-before, created if missing, kept for
reuse); AFTER is this working tree. For each
repeat and backend, each side gets a fresh worker process with cwd and PYTHONPATH set to its
tree, so it imports only its own `tandem`. The driver then asks the two workers for grades in turn (before, after,
after, before, ...): load from other processes on a small shared machine comes in bursts of
seconds, and alternating grade by grade puts each burst on both sides.

Not timed, in each worker: building the runtime (the AFTER tree's sandbox self-check is start-up
cost), each task's fix diff (its bug patch reversed in an agent sandbox, taken as `git diff`),
and one warm-up grade per task (it builds the graded template; AFTER's grading plan, its two
reference runs, is timed apart as plan_s: a one-time cost per task and process). Timed: wall clock of
`runtime.grader.grade(task, diff)`, --per-task times per task, next to the grader's test_time_s
(the sandboxed pytest run inside it). No CPU time: under bwrap the test processes are reaped in
its pid namespace, so os.times() never sees them. Any reward other than 1.0 fails the run.

Headline: after/before ratio of the median grade time, per backend and repeat, with its min and
max over repeats. Everything goes to bench/results/grading_cost.json (or --out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AFTER = Path(__file__).resolve().parents[1]
DEFAULT_BEFORE = AFTER / ".cache" / "bench-before"
PRE_REWRITE = "4e2f17b^"
"""The grader before issue 10 (canaries, out-of-band report, read-only graded tree, tmpfs slots)."""
MARK = "@@grading_cost "


# ----------------------------------------------------------------------------- worker (one side)
def tree_fingerprint(tree: Path) -> str:
    """Hash of the tree's tandem/*.py: shows if the AFTER tree was edited between runs."""
    digest = hashlib.sha256()
    for path in sorted((tree / "tandem").rglob("*.py")):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def fix_diff(runtime, task) -> str:
    """The agent's diff after a correct fix: bug patch reversed in an agent sandbox."""
    from tandem.envs.coding.swe_data import apply_patch

    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        apply_patch(sb.testbed, task.patch, reverse=True)
        return sb.diff()


def timed_grade(runtime, task, diff: str) -> dict:
    """One grade, wall clock, from the caller's side (what a rollout waits for)."""
    t0 = time.perf_counter()
    res = runtime.grader.grade(task, diff)
    wall = time.perf_counter() - t0
    if res.reward != 1.0:  # a benchmark of a grader that fails the fix would measure nothing useful
        raise SystemExit(f"{task.instance_id}: reward {res.reward} for the fix: {res.reason}")
    return {"task": task.instance_id, "wall_s": wall, "grade_time_s": res.grade_time_s,
            "test_time_s": res.test_time_s, "reward": res.reward}


def worker(args) -> None:
    """Runs inside one tree: set up, warm every task, then grade the task indexes read from stdin."""
    import tandem
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tandem.envs.coding.swe_data import load_bundled
    from tests._swe import make_cfg

    tree = Path.cwd().resolve()
    fingerprint = tree_fingerprint(tree)  # before anything else of the tree is imported
    if Path(tandem.__file__).resolve().parents[1] != tree:  # guard: the wrong side would be measured
        raise SystemExit(f"imported tandem from {tandem.__file__}, expected the tree {tree}")
    cfg = make_cfg(Path(args.run_dir), sandbox={"backend": args.backend, "pool_size": 2})
    t0 = time.perf_counter()
    runtime = get_runtime(cfg)
    startup_s = time.perf_counter() - t0
    try:
        if runtime.backend != args.backend:
            raise SystemExit(f"asked for backend {args.backend}, the runtime uses {runtime.backend}")
        tasks = load_bundled()
        diffs = {i: fix_diff(runtime, tasks[i]) for i in args.task_ids}
        plan_s = []
        for i in args.task_ids:  # warm-up: builds each graded template (and grading plan), checks the reward
            runtime.grader.graded_template(tasks[i])
            if hasattr(runtime.grader, "plan"):  # one-time per task: the two reference runs (issue 34)
                t0 = time.perf_counter()
                runtime.grader.plan(tasks[i])
                plan_s.append(time.perf_counter() - t0)
            timed_grade(runtime, tasks[i], diffs[i])
        reply({"tree": str(tree), "fingerprint": fingerprint, "startup_s": startup_s, "plan_s": plan_s})
        for line in sys.stdin:  # one task index per line, until the driver closes stdin
            reply(timed_grade(runtime, tasks[int(line)], diffs[int(line)]))
    finally:
        reset_runtime()


def reply(obj: dict) -> None:
    # marked lines: anything else the tree prints on stdout is skipped by the driver
    print(MARK + json.dumps(obj), flush=True)


# ----------------------------------------------------------------------------- driver
class Side:
    """A worker process rooted at one tree (its own cwd and PYTHONPATH), driven line by line."""

    def __init__(self, name: str, tree: Path, backend: str, task_ids: list[int], tmp: Path):
        self.name, self.log = name, tmp / f"{name}.log"
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--backend", backend,
                "--task-ids", *map(str, task_ids), "--run-dir", str(tmp / name)]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(argv, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self.ready = self.read()

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        self.proc.wait()
        raise SystemExit(f"{self.name} worker exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}")

    def grade(self, index: int) -> dict:
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # EOF: the worker closes its runtime and exits
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def ensure_before(path: Path | None, rev: str) -> Path:
    """The BEFORE tree: the given one, or a detached worktree of `rev` (reused if present)."""
    if path is None:
        path = DEFAULT_BEFORE
        if not path.exists():
            subprocess.run(["git", "-C", str(AFTER), "worktree", "add", "--detach", str(path), rev], check=True)
        else:  # reused: make sure it holds the requested revision, not whatever an earlier run left
            subprocess.run(["git", "-C", str(path), "checkout", "-q", "--detach", rev], check=True)
    if not (path / "tandem" / "envs" / "coding" / "grading.py").exists():
        raise SystemExit(f"--before {path}: not a tandem checkout")
    return path.resolve()


PROBE = "import sys\nfrom tandem.envs.coding.sandbox.isolation import _probe\nprint(*[b for b in sys.argv[1:] if _probe(b)])"


def working_backends(wanted: list[str]) -> list[str]:
    """The backends AFTER's own sandbox probe accepts here, asked in a child rooted at AFTER like a
    worker: the driver itself imports neither tree's `tandem`."""
    out = subprocess.run([sys.executable, "-c", PROBE, *wanted], cwd=AFTER, env={**os.environ, "PYTHONPATH": str(AFTER)},
                         capture_output=True, text=True, check=True).stdout.split()
    return [b for b in wanted if b in out]


def run_repeat(trees: dict[str, Path], backend: str, task_ids: list[int], per_task: int, tmp: Path,
               repeat: int) -> list[dict]:
    """One repeat on one backend: fresh workers for both sides, grades alternating between them."""
    work = tmp / f"r{repeat}-{backend}"
    work.mkdir()
    sides: dict[str, Side] = {}
    grades: dict[str, list] = {name: [] for name in trees}
    try:
        for name, tree in trees.items():  # started one after the other: set-up would disturb the other
            sides[name] = Side(name, tree, backend, task_ids, work)
        for n, index in enumerate(i for i in task_ids for _ in range(per_task)):
            # before-after, then after-before: going second (warmer caches) favours neither side
            for name in ("before", "after") if n % 2 == 0 else ("after", "before"):
                grades[name].append(sides[name].grade(index))
    finally:
        for side in sides.values():
            side.close()
    return [{"side": name, "backend_asked": backend, "repeat": repeat, **sides[name].ready,
             "grades": grades[name]} for name in trees]


def summarize(run: dict) -> dict:
    walls = sorted(g["wall_s"] for g in run["grades"])
    p90 = walls[min(len(walls) - 1, round(0.9 * (len(walls) - 1)))]  # nearest rank; few samples
    return {"median_s": statistics.median(walls), "p90_s": p90,
            "test_median_s": statistics.median(g["test_time_s"] for g in run["grades"]),
            # the grader's own cost around pytest: slot fill/wipe, patching, canaries, verdict
            "overhead_median_s": statistics.median(g["wall_s"] - g["test_time_s"] for g in run["grades"])}


def headline(runs: list[dict], backends: list[str], repeats: int) -> dict:
    """after/before ratio of the median grade time, per backend and repeat, with min/max."""
    by_key = {(r["side"], r["backend_asked"], r["repeat"]): r["summary"] for r in runs}
    out = {}
    for b in backends:
        ratios = [by_key["after", b, k]["median_s"] / by_key["before", b, k]["median_s"] for k in range(repeats)]
        out[b] = {"ratio_per_repeat": ratios, "min": min(ratios), "max": max(ratios)}
    return out


def print_table(runs: list[dict], heads: dict) -> None:
    print(f"{'backend':8} {'rep':>3} {'side':6} {'median_s':>9} {'p90_s':>7} {'test_med_s':>10} "
          f"{'overhead_s':>10} {'startup_s':>9}")
    for r in runs:
        s = r["summary"]
        print(f"{r['backend_asked']:8} {r['repeat']:>3} {r['side']:6} {s['median_s']:9.3f} {s['p90_s']:7.3f} "
              f"{s['test_median_s']:10.3f} {s['overhead_median_s']:10.3f} {r['startup_s']:9.3f}")
    for b, h in heads.items():
        per = ", ".join(f"{x:.3f}" for x in h["ratio_per_repeat"])
        print(f"after/before median grade time, {b}: {per}  (min {h['min']:.3f}, max {h['max']:.3f})")
    for r in runs:
        if r.get("plan_s"):
            print(f"{r['side']} {r['backend_asked']} r{r['repeat']}: grading plan once per task, median "
                  f"{statistics.median(r['plan_s']):.3f}s (min {min(r['plan_s']):.3f}, max {max(r['plan_s']):.3f})")


def git_state(tree: Path) -> dict:
    """The tree's commit and uncommitted files; a plain tree (e.g. `git archive HEAD` unpacked) has none."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True, check=True).stdout
    if not (tree / ".git").exists():
        return {"commit": "", "dirty_files": 0, "plain_tree": True}
    return {"commit": git("rev-parse", "HEAD").strip(), "dirty_files": len(git("status", "--porcelain").splitlines())}


def driver(args) -> None:
    before = ensure_before(args.before, args.before_rev)
    if tree_fingerprint(before) == tree_fingerprint(AFTER):  # e.g. the change is committed and HEAD has it
        raise SystemExit(f"BEFORE ({before}, {git_state(before)['commit'][:9]}) has the same tandem/ code as "
                         "AFTER: nothing to compare; pass --before-rev (or --before) for the old code")
    backends = working_backends(args.backends)
    if not backends:
        raise SystemExit(f"none of the backends {args.backends} can create namespaces here")
    # spread the picks over the whole bundled set, not just its first few repositories
    count = len((before / "data" / "swe_tasks" / "tasks.jsonl").read_text().splitlines())
    task_ids = args.ids or sorted({round(i * (count - 1) / max(1, args.tasks - 1)) for i in range(args.tasks)})
    tmp = Path(tempfile.mkdtemp(prefix="grading-cost-"))
    trees = {"before": before, "after": AFTER}
    runs, load_start = [], os.getloadavg()
    try:
        for rep in range(args.repeats):
            for b in backends:
                for run in run_repeat(trees, b, task_ids, args.per_task, tmp, rep):
                    run["summary"] = summarize(run)
                    print(f"  {run['side']}-{b}-r{rep}: median {run['summary']['median_s']:.3f}s", file=sys.stderr)
                    runs.append(run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    heads = headline(runs, backends, args.repeats)
    print_table(runs, heads)
    fingerprints = sorted({r["fingerprint"] for r in runs if r["side"] == "after"})
    if len(fingerprints) > 1:  # someone edited the AFTER tree mid-benchmark: say so, do not hide it
        print(f"WARNING: the AFTER tree changed during the run (fingerprints {fingerprints})", file=sys.stderr)
    result = {"headline_after_over_before_median": heads, "task_ids": task_ids, "per_task": args.per_task,
              "repeats": args.repeats, "backends": backends, "load_avg_start": load_start,
              "load_avg_end": os.getloadavg(), "before": {"path": str(before), **git_state(before)},
              "after": {"path": str(AFTER), **git_state(AFTER), "fingerprints": fingerprints},
              "cpus": os.cpu_count(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, default=None, help="BEFORE tree (default: a worktree of --before-rev)")
    p.add_argument("--before-rev", default=PRE_REWRITE, help="commit for the default BEFORE worktree")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--tasks", type=int, default=8, help="bundled tasks, spread over indexes 0..31")
    p.add_argument("--ids", type=int, nargs="+", help="these bundled task indexes instead of --tasks spread ones")
    p.add_argument("--per-task", type=int, default=3, help="timed grades per task, after one warm-up")
    p.add_argument("--backends", nargs="+", default=["bwrap", "unshare"])
    p.add_argument("--out", type=Path, default=AFTER / "bench" / "results" / "grading_cost.json")
    # worker mode: set by the driver only
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--task-ids", type=int, nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    main()
