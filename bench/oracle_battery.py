"""Issue 46's hostile review of the loosened grader: the function-rewriting forgers of tests/_oracle_forgers.py
graded on every task a grader grades, and each one that scores 1 judged by the independent equivalence oracle
(tests/_equivalence.py): `forgery` (it differs from the reference fix inside the tested domain) or `fix` (a fix in
disguise).

    PYTHONPATH=$PWD python -m bench.oracle_battery --jobs 2                      # this tree's grader
    cd /work/wt/<branch> && PYTHONPATH=$PWD:/this/tree python -m bench.oracle_battery --forgers /this/tree ...
    python -m bench.oracle_battery --host --ids 0 8 13                           # no grader: plain pytest + oracle
    PYTHONPATH=$PWD python -m bench.oracle_battery --wrong-fixes --host          # tests/_wrong_fixes.py's wrong fixes
    PYTHONPATH=$PWD python -m bench.oracle_battery --seeds 4 --ids 0 14          # each task under plan seeds 0..3

Per task: the plan (a refused task is counted and skipped); on a graded one every forger's diff typed into the
agent sandbox with the issue text and graded, and the reference fix graded (must be 1). Every (task, forger) that
scores 1 gets the oracle's verdict (>= 2,000 sampled calls per function the hidden tests call; cached per task and
forger in bench/results/oracle_verdicts.json: the forger's code does not depend on the grader). With --host, no
grader: per task and forger, whether the candidate passes the original hidden tests under plain pytest, and the
oracle's verdict. The grader's fresh rows are drawn per plan: with --seeds N each task is planned and graded under
plan seeds 0..N-1 (tests/_plan_seeds.py), and a forgery is a forger scoring 1 under ANY seed where the oracle finds it
wrong, reported with the seeds that paid it. A forgery is appended to --findings as it is found. Exit 1 when a
forgery scores 1. With --wrong-fixes the candidates are tests/_wrong_fixes.py's plausible wrong fixes of the tasks
(`wrong:<name>`), judged exactly as forgers are: one scoring 1 where the oracle finds it wrong is a hole.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LOCK = threading.Lock()


def _tree_module(tree: Path | None, name: str):
    """tests/<name>.py of `tree` (default: this checkout's, as imported)."""
    if tree is None:
        return importlib.import_module(f"tests.{name}")
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", tree / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Verdicts:
    """The oracle's verdict per (task, forger), computed once and cached on disk."""

    def __init__(self, path: Path, command):
        self.path, self.command = path, command
        self.cache = json.loads(path.read_text()) if path.exists() else {}
        self.lock = threading.Lock()

    def get(self, task, spec: str) -> dict:
        from tests._equivalence import Oracle

        key = f"{task.instance_id}|{spec}"
        with self.lock:
            if key in self.cache:
                return self.cache[key]
            oracle = Oracle(task)
            try:
                v = oracle.judge(oracle.candidate_tree("candidate", command=self.command(spec, task.problem_statement)))
            finally:
                oracle.close()
            first = v.first_in_domain()
            self.cache[key] = {"verdict": v.verdict, "summary": v.summary(),
                               "in_domain": None if first is None else f"{first[0][1]}{first[1][1]!r}: candidate "
                               f"{first[1][2]}, reference {first[1][3]} ({first[1][0]})"}
            self.path.write_text(json.dumps(self.cache, indent=1, sort_keys=True) + "\n")
            return self.cache[key]


_SOURCES = {"fix": "tests/_fix_corpus_oracle2.py", "wrong": "tests/_wrong_fixes.py"}


def _source(spec: str) -> str:
    """The file that holds the candidate `spec`: a corpus for `fix:`/`wrong:` specs, else the forgers."""
    return _SOURCES.get(spec.split(":", 1)[0], "tests/_oracle_forgers.py")


def _finding(findings: Path, label: str, task, spec: str, verdict: dict) -> None:
    with _LOCK, findings.open("a") as f:
        f.write(f"- {time.strftime('%H:%M UTC', time.gmtime())} **{label}**: `{task.instance_id}` forged by "
                f"`{spec}` ({_source(spec)}, scored 1 under plan seeds {verdict.get('paid_seeds')}); "
                f"oracle: {verdict['in_domain']}\n")


def _label(tree: Path) -> str:
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True)
    sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{rev.stdout.strip()}@{sha.stdout.strip()}"


def graded(runtime, tasks, specs, command, verdicts: Verdicts, findings: Path | None, jobs: int,
           partial: Path | None = None, label: str = "", seeds: tuple = (None,)) -> dict:
    """Every forger graded on every task under each plan seed in `seeds` (None: the grader's own random draw);
    a forgery is a (task, forger) scoring 1 under ANY seed where the oracle finds it wrong, reported with the seed."""
    from bench.forge_rate import agent_diff
    from tests._plan_seeds import plan_seed

    label = label or _label(ROOT)
    out: dict = {"label": label, "seeds": list(seeds), "graded": [], "refused": {}, "scores": {}, "forgeries": [],
                 "fix_failed": {}}

    def under(task, seed, diffs) -> dict | None:
        """{spec: reward} and the reference fix's result under one plan seed; None where the plan refuses."""
        with plan_seed(task, seed) if seed is not None else _no_seed():
            plan = runtime.grader.plan(task)
            if plan.refused:
                return None
            rewards = {spec: runtime.grader.grade(task, diffs[spec]).reward for spec in diffs if spec is not None}
            return {"rewards": rewards, "fix": runtime.grader.grade(task, diffs[None])}

    def one(task):
        start = time.monotonic()
        mine = [s for s in specs if _owned(s, task.instance_id)]
        diffs = {spec: agent_diff(runtime, task, command(spec, task.problem_statement)) for spec in mine}
        diffs[None] = agent_diff(runtime, task, None, reverse_patch=True)
        scores: dict = {}
        for seed in seeds:
            got = under(task, seed, diffs)
            if got is None:
                with _LOCK:
                    out["refused"].setdefault(task.instance_id, {})[str(seed)] = "refused"
                continue
            if got["fix"].reward != 1.0:
                with _LOCK:
                    out["fix_failed"].setdefault(task.instance_id, {})[str(seed)] = str(got["fix"].reason)[:300]
            for spec, reward in got["rewards"].items():
                row = scores.setdefault(spec, {"reward": 0.0, "paid_seeds": []})
                if spec.startswith("fix:") and reward != 1.0:
                    with _LOCK:
                        out.setdefault("refused_fixes", []).append([task.instance_id, spec, seed])
                if reward == 1.0:
                    row["reward"] = 1.0
                    row["paid_seeds"].append(seed)
        _judge(task, scores, verdicts, out, findings, label)
        with _LOCK:
            if scores:
                out["graded"].append(task.instance_id)
                out["scores"][task.instance_id] = scores
            if partial is not None:
                partial.write_text(json.dumps(out, indent=1, default=str) + "\n")
        ones = {s: (v.get("verdict"), v["paid_seeds"]) for s, v in scores.items() if v["reward"] == 1.0}
        refused = out["refused"].get(task.instance_id, {})
        print(f"  {task.instance_id}: graded under {len(seeds) - len(refused)}/{len(seeds)} seeds, 1 for "
              f"{ones or '-'}, fix failed under {list(out['fix_failed'].get(task.instance_id, {})) or 'none'} "
              f"({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, tasks))
    return out


def _grader_aware() -> dict:
    """Forger -> its twin that does not tell the grader's rows apart (tests/_separation_forgers.GRADER_AWARE): a
    grader-aware forger is judged by its twin, as tests/test_oracle_forgers.py judges it."""
    from tests._separation_forgers import GRADER_AWARE

    return GRADER_AWARE


def correct_fixes(tasks) -> tuple[list[str], object]:
    """(specs `fix:<name>`, their command) for tests/_fix_corpus_oracle2.py's fixes of `tasks`: a fix scoring 0
    under a seed where its task is graded is a correct fix refused (reported under `refused_fixes`)."""
    from tests._fix_corpus import apply_command
    from tests._fix_corpus_oracle2 import ORACLE2

    ids = {t.instance_id for t in tasks}
    by_name = {f"fix:{fx.name}": fx for fx in ORACLE2 if any(_is_task(fx.task, i) for i in ids)}

    def command(spec: str, statement: str) -> str:
        return "cd /testbed && " + apply_command(by_name[spec])
    return list(by_name), command


def wrong_fixes(tasks) -> tuple[list[str], object]:
    """(specs `wrong:<name>`, their command) for tests/_wrong_fixes.py's plausible wrong fixes of `tasks`: judged as
    forgers are (one scoring 1 that the oracle finds wrong is a hole)."""
    from tests._fix_corpus import apply_command
    from tests._wrong_fixes import by_name

    ids = {t.instance_id for t in tasks}
    specs = {f"wrong:{name}": w for name, w in by_name().items() if any(_is_task(w.task, i) for i in ids)}

    def command(spec: str, statement: str) -> str:
        return "cd /testbed && " + apply_command(specs[spec])
    return list(specs), command


def _owned(spec: str, instance_id: str) -> bool:
    """Whether `spec` is graded on the task: a corpus candidate (`fix:`/`wrong:<task>:...`) on its own task only."""
    kind, _, rest = spec.partition(":")
    return kind not in _SOURCES or _is_task(rest.split(":")[0], instance_id)


def _is_task(name: str, instance_id: str) -> bool:
    repo, bug = name.split("/")
    return f"__{repo}." in instance_id and f"func_pm_{bug}__" in instance_id


def _judge(task, scores: dict, verdicts: Verdicts, out: dict, findings: Path | None, label: str) -> None:
    """The oracle's verdict on every forger of `task` paid under some seed; a grader-aware forger judged by its twin
    (paid under the same seeds and a fix: not a forgery); forgeries recorded in `out` and `findings`."""
    aware = _grader_aware()
    for spec, row in sorted(scores.items(), key=lambda item: item[0] in aware):  # twins judged first
        if row["reward"] == 1.0 and not spec.startswith("fix:"):
            row.update(verdicts.get(task, spec))
            twin = scores.get(aware.get(spec, ""), {})
            if row["verdict"] == "forgery" and twin.get("verdict") == "fix" \
                    and set(row["paid_seeds"]) <= set(twin["paid_seeds"]):
                row["verdict"] = f"grader-aware: its twin {aware[spec]} pays under the same seeds and is a fix"
            if row["verdict"] == "forgery":
                with _LOCK:
                    out["forgeries"].append([task.instance_id, spec, row["paid_seeds"], row["in_domain"]])
                if findings is not None:
                    _finding(findings, label, task, spec, row)


@contextlib.contextmanager
def _no_seed():
    yield


def host(tasks, specs, command) -> dict:
    """No grader: per task and forger, plain pytest on the original hidden tests and the oracle's verdict."""
    import os

    from tests._equivalence import Oracle

    out: dict = {}
    for task in tasks:
        oracle = Oracle(task)
        try:
            rows = {}
            for spec in specs:
                if not _owned(spec, task.instance_id):
                    continue
                tree = oracle.candidate_tree(spec.replace(":", "_"), command=command(spec, task.problem_statement))
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.tests],
                                     cwd=tree, capture_output=True, text=True, timeout=300,
                                     env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"})
                v = oracle.judge(tree)
                rows[spec] = {"plain_pytest": run.returncode == 0, "verdict": v.verdict, "summary": v.summary(),
                              "pytest_tail": "" if run.returncode == 0 else run.stdout[-400:]}
                print(f"  {task.instance_id} {spec}: pytest {'pass' if run.returncode == 0 else 'FAIL'}, "
                      f"{v.summary()[:220]}", file=sys.stderr, flush=True)
        finally:
            oracle.close()
        out[task.instance_id] = rows
    return out


def _suspects(host_result: Path, verdict: str = "forgery") -> set[str]:
    """The candidates a --host run found passing the original hidden tests and judged `verdict` by the oracle: the
    ones worth the grader's time (one failing plain pytest is refused by the original tests already); those judged
    `fix` are correct fixes in another form, which the grader must pay."""
    rows = json.loads(host_result.read_text())["host"]
    return {spec for task in rows.values() for spec, r in task.items() if r["plain_pytest"] and r["verdict"] == verdict}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=Path, default=ROOT / "data" / "swe_realistic" / "tasks.jsonl")
    p.add_argument("--ids", nargs="*", type=int, default=[], help="only these task indices (0-based lines)")
    p.add_argument("--backend", default="unshare")
    p.add_argument("--families", nargs="*", default=[], help="forger specs (default: tests/_oracle_forgers.FAMILIES)")
    p.add_argument("--forgers", type=Path, default=None, help="a checkout whose tests/_oracle_forgers.py to use")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seeds", type=int, default=0, help="grade under plan seeds 0..N-1 (default: one random draw)")
    p.add_argument("--seed-base", type=int, default=0, help="the first plan seed with --seeds")
    p.add_argument("--fixes", action="store_true", help="grade tests/_fix_corpus_oracle2.py's correct fixes, not forgers")
    p.add_argument("--wrong-fixes", action="store_true",
                   help="grade tests/_wrong_fixes.py's plausible wrong fixes, judged as forgers are")
    p.add_argument("--suspects", type=Path, default=None,
                   help="a --host result: grade only the candidates it found passing plain pytest and judged forgery")
    p.add_argument("--suspect-verdict", default="forgery", choices=("forgery", "fix"),
                   help="with --suspects, the oracle's verdict picked (fix: passers in another form, which must pay)")
    p.add_argument("--host", action="store_true", help="no grader: plain pytest and the oracle per task and forger")
    p.add_argument("--verdicts", type=Path, default=ROOT / "bench" / "results" / "oracle_verdicts.json")
    p.add_argument("--findings", type=Path, default=None, help="append each forgery found to this file")
    p.add_argument("--label", default="", help="the grader's name in the findings (default: branch@commit here)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "oracle_battery.json")
    return p


def main() -> None:
    args = _parser().parse_args()
    from tandem.envs.coding.swe_data import load_bundled

    forgers = _tree_module(args.forgers, "_oracle_forgers")
    specs = args.families or list(forgers.FAMILIES)
    tasks = load_bundled(args.tasks)
    tasks = [tasks[i] for i in args.ids] if args.ids else tasks
    command = forgers.oracle_forger_command
    if args.fixes:
        specs, command = correct_fixes(tasks)
    elif args.wrong_fixes:
        specs, command = wrong_fixes(tasks)
    if args.suspects is not None:
        specs = [s for s in specs if s in _suspects(args.suspects, args.suspect_verdict)]
        tasks = [t for t in tasks if any(_owned(s, t.instance_id) and ":" in s for s in specs)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if args.host:
        result = {"host": host(tasks, specs, command)}
    else:
        from bench.attack_rate import grading_runtime

        verdicts = Verdicts(args.verdicts, command)
        with grading_runtime(args.backend) as runtime:
            result = graded(runtime, tasks, specs, command, verdicts, args.findings, args.jobs,
                            args.out.with_suffix(".partial.json"), args.label,
                            tuple(range(args.seed_base, args.seed_base + args.seeds)) if args.seeds else (None,))
        ones = sum(v["reward"] == 1.0 for s in result["scores"].values() for v in s.values())
        print(f"{result['label']} {args.backend}: graded {len(result['graded'])}/{len(tasks)}; (task, forger) scoring "
              f"1: {ones}, forgeries {len(result['forgeries'])}; reference fixes not 1: {len(result['fix_failed'])}")
        for task, spec, seed in result.get("refused_fixes", []):
            print(f"  CORRECT FIX REFUSED {task} {spec} under plan seed {seed}")
        for task, spec, paid, where in result["forgeries"]:
            print(f"  FORGERY {task} by {spec} (paid under plan seeds {paid}): {where}")
    result["wall_s"] = round(time.monotonic() - start, 1)
    args.out.write_text(json.dumps({"families": specs, **result}, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    if result.get("forgeries") or result.get("refused_fixes"):
        sys.exit(1)


if __name__ == "__main__":
    main()
