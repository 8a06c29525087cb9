"""What a guess forger would earn from a grader that graded every check (issue 46): on the host, no sandbox.

The task's graded state (the bug, every test file) is split as the grader splits it (grading_plan.split_files:
parametrized expectations taken out, each check a `__tandem_check__(k, E)`), the forger planted as the agent's
diff would plant it (its command run in the agent's state, the package copied over), and the graded tests run
under plain pytest with a recording stand-in for tandem_checks. The same files run against the reference fix.
The forger *answers* the task when every check of every hidden test records what the fix's run records: a
grader that grades all of them pays it. So these are the tasks whose checks the grader must hold some other way
(refuse them, or add checks a forger cannot answer); bench.attack_rate --simulate counts them per family, and
the sandbox battery then shows whether a grader lets any through. Only for the bundled repositories of
data/ (trusted code: it runs on the host).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from tandem.envs.coding.grading_plan import split_files
from tandem.envs.coding.instrument import rewrite
from tandem.envs.coding.swe_data import SweTask, apply_patch

PLUGIN = Path(split_files.__code__.co_filename).parent / "grader_plugin"
RECORDER = r'''
import contextlib, json, os

from tandem_checks_real import encode

_OUT = os.environ["TANDEM_GUESS_RECORD"]


def _write(site, value):
    with open(_OUT, "a", encoding="utf-8") as f:
        f.write(json.dumps([os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0], site, value]) + "\n")


def check(site, value, *rest):
    _write(site, encode(value))


def check_all(site, value, derived):
    """Every forger's value side by side (None: it keeps the computed one)."""
    _write(site, [encode(value), {s: None if d is None else encode(d) for s, d in derived.items()}])


@contextlib.contextmanager
def raises(site, *rest):
    try:
        yield
    except Exception as e:
        _write(site, "raised " + type(e).__name__)
    else:
        _write(site, "no exception")
'''


def _graded_tree(task: SweTask, dest: Path, fixed: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The graded state in `dest`, its test files split; (F2P, P2P) as the graded copies name them."""
    task.materialize_graded(dest)
    if fixed:
        apply_patch(dest, task.patch, reverse=True)
    sources, candidates, aliases = split_files(dest, task.test_files, task.tests)[:3]  # no fresh rows (rng None)
    for rel, text in sources.items():
        (dest / rel).write_text(rewrite(text, candidates[rel]), errors="surrogateescape")
    return (tuple(aliases.get(t, t) for t in task.fail_to_pass), tuple(aliases.get(t, t) for t in task.pass_to_pass))


def _record(dest: Path, tests: tuple[str, ...], plugin: Path) -> dict[str, list]:
    out = dest.parent / f"{dest.name}.record.jsonl"
    out.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{plugin}{os.pathsep}{dest}", "TANDEM_GUESS_RECORD": str(out),
           "TANDEM_GUESS_TESTBED": str(dest), "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests],
                   cwd=dest, env=env, capture_output=True, timeout=300)
    got: dict[str, list] = {t: [] for t in tests}
    if out.exists():
        for line in out.read_text().splitlines():
            test, site, value = json.loads(line)
            got.setdefault(test, []).append((site, value))
    return got


def plant(agent_state: Path, command: str, graded: Path, scratch: Path) -> None:
    """Run the forger's `command` (it `cd /testbed`s) in a copy of the agent's state and copy its package into
    `graded`."""
    agent = scratch / "agent"
    shutil.copytree(agent_state, agent)
    run = subprocess.run(["bash", "-c", command.replace("cd /testbed", f"cd {agent}", 1)],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"the forger's command failed: {run.stderr[-500:]}")
    for path in agent.rglob("*"):
        rel = path.relative_to(agent)
        if path.is_file() and rel.parts[0] != "tests" and "__pycache__" not in rel.parts:
            (graded / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, graded / rel)


def _as(spec: str, event):
    """One recorded check as forger `spec` reports it (a `raises` check is no value: as computed)."""
    if isinstance(event, list) and len(event) == 2 and isinstance(event[1], dict):
        return event[0] if event[1].get(spec) is None else event[1][spec]
    return event


class Simulator:
    """One task's reference record, then any number of forgers answered against it."""

    def __init__(self, task: SweTask, root: Path | None = None):
        self.task = task
        self.root = Path(tempfile.mkdtemp(prefix="guess-sim-", dir=root))
        self.plugin = self.root / "plugin"
        self.plugin.mkdir()
        (self.plugin / "tandem_checks.py").write_text(RECORDER)
        shutil.copy2(PLUGIN / "tandem_checks.py", self.plugin / "tandem_checks_real.py")  # its encode(): as the host
        shutil.copy2(PLUGIN / "tandem_report.py", self.plugin / "tandem_report.py")
        fixed = self.root / "fixed"
        self.f2p, self.p2p = _graded_tree(task, fixed, fixed=True)
        self.reference = _record(fixed, self.f2p + self.p2p, self.plugin)
        buggy = self.root / "buggy"
        _graded_tree(task, buggy, fixed=False)
        self.bug = _record(buggy, self.f2p + self.p2p, self.plugin)
        self.buggy, self.agent_state = buggy, self.root / "agent-state"
        task.materialize_agent(self.agent_state)

    def answers(self, specs: list[str], command: Callable[[list[str], str], str]) -> dict[str, dict]:
        """Per forger spec: {"answers": every hidden test records the fix's values and none the bug passes changes,
        "f2p_right": hidden F2P tests answered, "p2p_broken": P2P tests it changed}; `command(specs, issue)` plants
        them all at once (tests/_attack_forgers.attack_command), one pytest run for all."""
        graded = self.root / "forgers"
        shutil.copytree(self.buggy, graded, ignore=shutil.ignore_patterns("__pycache__"))
        plant(self.agent_state, command(specs, self.task.problem_statement), graded, self.root / "forgers-scratch")
        record = _record(graded, self.f2p + self.p2p, self.plugin)
        out = {}
        for spec in specs:
            got = {t: [(k, _as(spec, v)) for k, v in events] for t, events in record.items()}
            right = [t for t in self.f2p if got.get(t) and got.get(t) == self.reference.get(t)]
            broken = [t for t in self.p2p if got.get(t) != self.reference.get(t)]
            out[spec] = {"answers": len(right) == len(self.f2p) and not broken, "f2p_right": len(right),
                         "f2p": len(self.f2p), "p2p_broken": len(broken),
                         "tests_changed": sum(got.get(t) != self.bug.get(t) for t in self.f2p + self.p2p)}
        return out

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
