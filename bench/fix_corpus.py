"""The corpus of correct alternative fixes (tests/_fix_corpus*.py), each checked twice (issue 46).

    PYTHONPATH=$PWD python bench/fix_corpus.py               # every fix: plain pytest, then the grader per backend
    PYTHONPATH=$PWD python bench/fix_corpus.py --plain-only  # only (a), no sandbox
    PYTHONPATH=$PWD python bench/fix_corpus.py --only ratio romanum:latin1 --backends unshare

(a) plain pytest: the fix's edits are applied to the agent's starting repository (the bug in place) in an
    agent sandbox, as an agent's shell would, and the diff taken as CodingEnv takes it (bytes); that diff is
    applied to the task's graded state (every original test file present) and the task's FAIL_TO_PASS and
    PASS_TO_PASS tests run under plain pytest. A fix that fails one of them is not correct: it is reported
    as such and not graded (it would say nothing about the grader).
(b) the grader: the same bytes through `runtime.grader.grade` on every sandbox backend that works here.

Target: every correct fix scores 1 on every backend. Each refusal is listed with the grader's reason.
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
from pathlib import Path

from tandem.envs.coding.swe_data import apply_patch, task_from_row
from tandem.envs.coding.verdict import parse_pytest_report
from tests._fix_corpus import Fix, apply_command, corpus
from tests._swe import make_cfg, row_named, sandbox_backends

ROOT = Path(__file__).resolve().parents[1]


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


def check(fixes: list[Fix], backends: list[str], tmp: Path, base_uid: int) -> list[dict]:
    from tandem.envs.coding.grading import get_runtime, reset_runtime

    rows = [{"fix": fx.name, "task": fx.task, "form": fx.form, "why": fx.why, "scores": {}} for fx in fixes]
    diffs: dict[str, bytes] = {}
    for backend in backends or [None]:
        if backend is None:  # --plain-only: no runtime at all
            for fx in fixes:
                work = Path(tempfile.mkdtemp(dir=tmp))
                diffs[fx.name] = host_diff(task_from_row(row_named(fx.task)), fx, work)
                plain = plain_pytest(task_from_row(row_named(fx.task)), diffs[fx.name], work)
                print(f"  plain    {fx.name:26} {_failed(plain) or 'pass'}", file=sys.stderr, flush=True)
                row = next(r for r in rows if r["fix"] == fx.name)
                row["plain"], row["correct"] = plain, not _failed(plain)
            break
        reset_runtime()
        runtime = get_runtime(make_cfg(tmp / backend, sandbox={"backend": backend, "pool_size": 2,
                                                               "base_uid": base_uid}))
        try:
            for fx, row in zip(fixes, rows):
                task = runtime.grader.task(row_named(fx.task))
                if fx.name not in diffs:
                    diffs[fx.name] = take_diff(runtime, task, fx)
                if row.get("plain") is None:
                    row["plain"] = plain_pytest(task, diffs[fx.name], Path(tempfile.mkdtemp(dir=tmp)))
                    row["correct"] = not _failed(row["plain"])
                if not row["correct"]:
                    print(f"  plain    {fx.name:26} {_failed(row['plain'])}", file=sys.stderr, flush=True)
                    continue
                t0 = time.perf_counter()
                res = runtime.grader.grade(task, diffs[fx.name])
                row["scores"][backend] = {"reward": res.reward, "reason": res.reason, "tamper": res.tamper,
                                          "grade_s": round(time.perf_counter() - t0, 2)}
                print(f"  {backend:8} {fx.name:26} {res.reward:.0f} {res.reason[:150]}", file=sys.stderr, flush=True)
        finally:
            reset_runtime()
    for fx, row in zip(fixes, rows):
        if row.get("plain") is None:
            row["plain"] = plain_pytest(task_from_row(row_named(fx.task)), diffs[fx.name],
                                        Path(tempfile.mkdtemp(dir=tmp)))
            row["correct"] = not _failed(row["plain"])
        row["diff_bytes"] = len(diffs[fx.name])
        row["diff_utf8"] = _decodes(diffs[fx.name])
    return rows


def _failed(outcomes: dict[str, str]) -> dict[str, str]:
    return {t: s for t, s in outcomes.items() if s != "PASSED"}


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def report(rows: list[dict], backends: list[str]) -> int:
    print(f"{'task':11} {'form':12} {'plain':6} " + " ".join(f"{b:8}" for b in backends) + "  fix")
    for r in rows:
        scores = [r["scores"].get(b, {}).get("reward") for b in backends]
        print(f"{r['task']:11} {r['form']:12} {'pass' if r['correct'] else 'FAIL':6} "
              + " ".join(f"{'-' if s is None else f'{s:.0f}':8}" for s in scores) + f"  {r['why']}")
    bad = 0
    incorrect = [r for r in rows if not r["correct"]]
    for r in incorrect:
        print(f"NOT CORRECT (fails the original tests): {r['fix']}: {_failed(r['plain'])}")
    bad += len(incorrect)
    for b in backends:
        graded = [r for r in rows if b in r["scores"]]
        ones = sum(r["scores"][b]["reward"] == 1.0 for r in graded)
        print(f"{b}: {ones} / {len(graded)} correct fixes score 1")
        for r in graded:
            if r["scores"][b]["reward"] != 1.0:
                bad += 1
                print(f"  REFUSED {r['fix']}: {r['scores'][b]['reason']}")
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
            rows.setdefault(row["fix"], {**row, "scores": {}})["scores"].update(row["scores"])
    return list(rows.values()), backends, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    fixes = [fx for fx in corpus() if not args.only or fx.task in args.only or fx.name in args.only]
    available, _ = sandbox_backends()
    backends = [] if args.plain_only else [b for b in args.backends if b in available]
    if not args.plain_only and not backends:
        raise SystemExit(f"none of the backends {args.backends} works here")
    tmp = Path(tempfile.mkdtemp(prefix="fix-corpus-"))
    try:
        t0 = time.perf_counter()
        rows = check(fixes, backends, tmp, args.base_uid)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = report(rows, backends)
    if not args.plain_only:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"backends": backends, "wall_s": round(wall, 1), "fixes": rows}, indent=2) + "\n")
        print(f"wrote {args.out} ({wall:.0f} s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
