"""Grade an agent's diff against a task's hidden tests (the reward of a coding rollout).

The reference run's recipe, kept exactly:
 1. take the agent's diff (captured on the host from its sandbox, see Sandbox.diff);
 2. check out a *clean* copy of the task's graded state (bug + every test), in a fresh
    sandbox slot, so nothing the agent did to its own copy (deleted or edited tests, a
    broken .git) matters;
 3. apply the diff, minus any change to the files that hold the tests we run and to
    conftest.py files (an agent cannot grade itself by rewriting the tests);
 4. run the FAIL_TO_PASS and PASS_TO_PASS tests with pytest, sandboxed, with a timeout.

Reward 1 only if every F2P and every P2P test passed; a test that does not show up in
the report (not collected, crashed run) counts as failed. The per-test results and the
reason for any 0 go into sample.reward_info.

pytest runs as `python -P -m pytest -c <grader's ini>`: -P keeps /testbed off sys.path
while pytest itself is imported (a pytest.py or sitecustomize.py in the repo cannot
replace it) and the grader's ini replaces the repo's pytest configuration (addopts,
plugins). What remains trusted is the report of a pytest process that imports the
agent's code; code that rewrites pytest internals at import time could forge it.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.sandbox.pool import SandboxPool, TemplateCache, chown_tree
from tandem.swe_data import SweTask, apply_patch, task_from_row


PYTEST_INI = "[pytest]\npythonpath = /testbed\naddopts =\n"
_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_DIFF_HEADER = re.compile(r'^diff --git (?:"?a/(.+?)"?) (?:"?b/(.+?)"?)$')
PROTECTED_NAMES = {"conftest.py"}


# ----------------------------------------------------------------------------- pytest report
def parse_pytest_report(output: str) -> dict[str, str]:
    """Node id -> status from the `-rA` short test summary of a pytest run."""
    marker = output.rfind("short test summary info")
    section = output[marker:] if marker >= 0 else output
    results: dict[str, str] = {}
    for line in section.splitlines():
        status, _, rest = line.partition(" ")
        if status not in _STATUSES or not rest:
            continue
        node = rest.split(" - ", 1)[0].strip()
        if status == "SKIPPED" or not node:  # "SKIPPED [1] file.py:3: reason" names no node id
            continue
        results[node] = status
    return results


def pytest_command(test_files: list[str], plugin_autoload: bool = False) -> str:
    files = " ".join(shlex.quote(f) for f in test_files)
    # Installed plugins (hypothesis, anyio, ...) cost ~1 s of CPU per run and are not needed
    # by most tasks; sandbox.test_plugin_autoload turns them back on.
    env = "" if plugin_autoload else "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
    return (f"{env}python -P -m pytest -c /tmp/.tandem_pytest.ini --rootdir=/testbed -p no:cacheprovider "
            f"-rA --tb=no -q --no-header --color=no {files}")


# ----------------------------------------------------------------------------- diff filtering
def split_diff(diff: str) -> list[tuple[list[str], str]]:
    """[(paths touched, text of that file's section)] of a git diff."""
    sections: list[tuple[list[str], str]] = []
    current: list[str] = []
    paths: list[str] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            if current:
                sections.append((paths, "".join(current)))
            m = _DIFF_HEADER.match(line.rstrip("\n"))
            paths = [p for p in (m.groups() if m else ()) if p]
            current = [line]
        elif current:
            current.append(line)
            if line.startswith(("--- a/", "+++ b/", "rename from ", "rename to ")):
                p = line.rstrip("\n").split(" ", 2)[-1]
                paths.append(p[2:] if p.startswith(("a/", "b/")) else p)
    if current:
        sections.append((paths, "".join(current)))
    return sections


def filter_diff(diff: str, protected: set[str]) -> tuple[str, list[str]]:
    """Drop file sections that touch protected test files or any conftest.py."""
    kept, dropped = [], []
    for paths, text in split_diff(diff):
        norm = {os.path.normpath(p) for p in paths}
        if norm & protected or any(os.path.basename(p) in PROTECTED_NAMES for p in norm):
            dropped.extend(sorted(norm))
        else:
            kept.append(text)
    return "".join(kept), sorted(set(dropped))


# ----------------------------------------------------------------------------- grader
@dataclass
class GradeResult:
    reward: float
    reason: str
    tests: dict[str, str] = field(default_factory=dict)
    """Every F2P/P2P node id -> PASSED / FAILED / ERROR / MISSING / ..."""
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    dropped_paths: list[str] = field(default_factory=list)
    """Parts of the diff not graded (edits to test files / conftest.py)."""
    test_time_s: float = 0.0
    grade_time_s: float = 0.0
    output_tail: str = ""

    def info(self) -> dict[str, Any]:
        return asdict(self)


class Grader:
    """Grades diffs in fresh sandboxes; thread-safe, one per process."""

    def __init__(self, cfg: TandemConfig, pool_size: int, templates: TemplateCache, data_base_dir: Path,
                 uid_offset: int):
        sc = cfg.sandbox
        self.test_timeout_s = sc.test_timeout_s
        self.plugin_autoload = sc.test_plugin_autoload
        self.templates = templates
        self.data_base_dir = data_base_dir
        self.swesmith_cache = Path(cfg.run.cache_dir).resolve() / "swesmith"
        self.pool = SandboxPool.from_config(sc, templates.root.parent, pool_size, templates, name="grade",
                                            uid_offset=uid_offset, command_timeout_s=sc.test_timeout_s)

    def task(self, row: dict) -> SweTask:
        return task_from_row(row, self.data_base_dir)

    def graded_template(self, task: SweTask) -> Path:
        return self.templates.get(f"{task.instance_id}::graded",
                                  lambda d: task.materialize_graded(d, self.swesmith_cache), "graded state")

    def grade(self, task: SweTask, diff: str) -> GradeResult:
        """The reward for `diff`; an empty diff scores 0 without running anything."""
        if not diff.strip():
            total = len(task.fail_to_pass) + len(task.pass_to_pass)
            return GradeResult(0.0, "no changes: the agent's diff is empty",
                               tests={t: "NOT_RUN" for t in task.tests}, f2p_total=len(task.fail_to_pass),
                               p2p_total=total - len(task.fail_to_pass))
        return self.evaluate(task, diff)

    def evaluate(self, task: SweTask, diff: str) -> GradeResult:
        """Apply the filtered diff to a clean graded copy and run the tests (always runs them)."""
        start = time.monotonic()
        graded, dropped = filter_diff(diff, {os.path.normpath(f) for f in task.test_files})
        template = self.graded_template(task)
        with self.pool.acquire(template) as sb:
            try:
                apply_patch(sb.testbed, graded)
            except ValueError as err:
                return GradeResult(0.0, f"diff does not apply to the clean repository: {err}",
                                   tests={t: "NOT_RUN" for t in task.tests}, dropped_paths=dropped,
                                   f2p_total=len(task.fail_to_pass), p2p_total=len(task.pass_to_pass),
                                   grade_time_s=time.monotonic() - start)
            if sb.slot.uid is not None:
                chown_tree(sb.testbed, sb.slot.uid)
            (sb.slot.dir / "tmp" / ".tandem_pytest.ini").write_text(PYTEST_INI)
            run = sb.exec(pytest_command(task.test_files, self.plugin_autoload), timeout_s=self.test_timeout_s)
        report = parse_pytest_report(run.output)
        tests = {t: report.get(t, "MISSING") for t in task.tests}
        f2p_ok = sum(tests[t] == "PASSED" for t in task.fail_to_pass)
        p2p_ok = sum(tests[t] == "PASSED" for t in task.pass_to_pass)
        passed = f2p_ok == len(task.fail_to_pass) and p2p_ok == len(task.pass_to_pass)
        if passed:
            reason = ""
        elif run.timed_out:
            reason = f"test run timed out after {self.test_timeout_s:.0f}s"
        elif not report:
            reason = f"test run produced no results (exit {run.returncode})"
        else:
            failing = [f"{t} {s}" for t, s in tests.items() if s != "PASSED"]
            reason = (f"tests failed: {len(task.fail_to_pass) - f2p_ok}/{len(task.fail_to_pass)} FAIL_TO_PASS and "
                      f"{len(task.pass_to_pass) - p2p_ok}/{len(task.pass_to_pass)} PASS_TO_PASS not passing "
                      f"(e.g. {failing[0]})")
        if dropped and not passed:
            reason += f"; edits to test files were not graded: {', '.join(dropped)}"
        return GradeResult(1.0 if passed else 0.0, reason, tests, f2p_ok, len(task.fail_to_pass), p2p_ok,
                           len(task.pass_to_pass), dropped, run.duration_s, time.monotonic() - start,
                           run.output[-2000:])


# ----------------------------------------------------------------------------- process-wide runtime
_RUNTIME_LOCK = threading.Lock()
_RUNTIME: "SweRuntime | None" = None


@dataclass
class SweRuntime:
    """The sandboxes of one orchestrator process: templates, the agent pool, the grader."""

    cfg: TandemConfig
    templates: TemplateCache
    agent_pool: SandboxPool
    grader: Grader

    @property
    def backend(self) -> str:
        return self.agent_pool.backend

    def close(self) -> None:
        self.agent_pool.close()
        self.grader.pool.close()
        self.templates.close()


def auto_pool_size(cfg: TandemConfig) -> int:
    """Rollouts that can be in flight: groups launched per step x G x (staleness + 1)."""
    if cfg.sandbox.pool_size > 0:
        return cfg.sandbox.pool_size
    groups = math.ceil(cfg.rollout.prompts_per_step * cfg.rollout.oversample)
    return groups * cfg.rollout.samples_per_prompt * (cfg.effective_staleness + 1)


def get_runtime(cfg: TandemConfig | None = None) -> SweRuntime:
    """The process's runtime, created on first use from `cfg` (later calls may omit it)."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is None:
            cfg = cfg or TandemConfig()
            sc = cfg.sandbox
            root = Path(sc.root_dir or Path(cfg.run.run_dir) / "sandboxes").resolve()
            templates = TemplateCache.ephemeral(root, retries=sc.prepare_retries)
            size = auto_pool_size(cfg)
            agent_pool = SandboxPool.from_config(sc, root, size, templates, name="agent")
            data_dir = Path(cfg.rollout.data_path).resolve().parent
            grader = Grader(cfg, size, templates, data_dir, uid_offset=size)
            _RUNTIME = SweRuntime(cfg, templates, agent_pool, grader)
        return _RUNTIME


def reset_runtime() -> None:
    """Close and forget the process runtime (tests build several configurations in one process)."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is not None:
            _RUNTIME.close()
        _RUNTIME = None


# ----------------------------------------------------------------------------- reward plug-in
def swe_reward(sample, row: dict) -> tuple[float, dict]:
    """Reward plug-in: 1.0 iff the diff in sample.metadata['diff'] makes every hidden test pass.

    Blocking (sandboxes, pytest); the orchestrator runs it on the rollout executor. The
    agent rollout configures the process runtime; used alone it falls back to defaults.
    """
    runtime = get_runtime()
    task = runtime.grader.task(row)
    if sample.metadata.get("diff_error"):
        return 0.0, {"reason": f"the agent's diff could not be taken: {sample.metadata['diff_error']}",
                     "sandbox_backend": runtime.backend}
    diff = str(sample.metadata.get("diff", ""))
    result = runtime.grader.grade(task, diff)
    info = result.info()
    info.pop("reward")
    info["reason"] = result.reason if result.reward == 0 else ""
    info["sandbox_backend"] = runtime.backend
    info.pop("output_tail", None) if result.reward == 1 else None
    return result.reward, info
