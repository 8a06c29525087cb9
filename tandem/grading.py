"""Grade an agent's diff against a task's hidden tests (the reward of a coding rollout).

Threat model. The policy is an adversary: RL reinforces any forged 1 on every task.
- It controls every byte of its diff, and so any code that runs inside the graded
  test process: the package the tests import, new files (a tests/__init__.py, a
  *.dist-info with entry points), anything that code does at import time or at exit.
  Anything that process prints, writes or reports is therefore not evidence on its own.
- It must never control: the verdict, the hidden tests, the host, other rollouts.

How the verdict is kept out of its reach:
 1. the diff is applied on the host to a clean copy of the task's graded state (bug +
    every test) in a fresh sandbox slot, minus any change to the graded test files and
    to conftest.py files;
 2. that copy stays owned by tandem and is mounted read-only inside the sandbox: the
    tests' process (an unprivileged uid, no capabilities, no_new_privs) can write /tmp
    only, so it cannot rewrite the tests, the grader's plugin or its ini;
 3. the graded copy has no .git, and whatever the diff did to the graded test files and
    conftest.py files is undone from the template (filter_diff only names them for the
    reason); canary tests, twins of real tests with one assert changed, are written into
    each graded test file, and every test there gets a fresh name (tandem.canaries); pytest
    runs as `python -P -m pytest -c <grader ini> -p tandem_report`,
    with plugin autoload off (allowed plugins are named one by one, from the sandbox
    interpreter's own environment, never from the repository);
 4. per-test results come out of band on a pipe (tandem_report) and are cross-checked
    against the canaries, the exit status the host saw and the printed summary
    (tandem.verdict). Any disagreement is tampering: reward 0, reward_info["tamper"]
    names it, and the step's agent_tamper_rate counts it.

Reward 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed, every canary failed
and nothing disagreed. A test absent from the stream (not collected, crashed run) counts
as failed. Per-test results and the reason for any 0 go into sample.reward_info.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.sandbox.isolation import SandboxUnavailable
from tandem.sandbox.pool import SandboxInfraError, SandboxPool
from tandem.sandbox.storage import remove_tree, walk_tree
from tandem.sandbox.templates import PrepareError, TemplateCache
from tandem.swe_data import SweTask, apply_patch, task_from_row
from tandem.canaries import insert_canaries
from tandem.verdict import judge, parse_stream, plugin_entry_points

log = logging.getLogger(__name__)

GRADER_DIR = Path(__file__).resolve().parent / "grader_plugin"
"""tandem_report.py and pytest.ini, bound read-only into every grading sandbox."""
SANDBOX_GRADER_DIR = "/.tandem/grader"
PROTECTED_NAMES = {"conftest.py"}
_DIFF_HEADER = re.compile(r'^diff --git (?:"?a/(.+?)"?) (?:"?b/(.+?)"?)$')


def restore_protected(testbed: Path, clean: Path, test_files: list[str]) -> list[str]:
    """Put every graded test file and conftest.py back as the clean template has it; return what changed."""
    changed = []
    protected = set(test_files)
    protected |= {str(Path(p).relative_to(testbed)) for p, st in walk_tree(testbed)
                  if os.path.basename(p) in PROTECTED_NAMES}
    protected |= {str(Path(p).relative_to(clean)) for p, st in walk_tree(clean)
                  if os.path.basename(p) in PROTECTED_NAMES}
    for rel in sorted(protected):
        ours, theirs = testbed / rel, clean / rel
        if _same_file(ours, theirs):
            continue
        changed.append(rel)
        if ours.is_symlink() or ours.exists():
            remove_tree(ours)
        if theirs.is_file() and not theirs.is_symlink():
            ours.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(theirs, ours)
    return changed


def _same_file(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return False
    if not (a.is_file() and b.is_file()):
        return not a.exists() and not b.exists()
    return a.read_bytes() == b.read_bytes()


def pytest_command(test_files: list[str], plugins: list[str] | None = None, report_fd: int | None = None,
                   protected: list[str] | None = None, ini: str = f"{SANDBOX_GRADER_DIR}/pytest.ini") -> str:
    """The graded pytest run: autoload off, only `plugins` (module names) and tandem's reporter."""
    files = " ".join(shlex.quote(f) for f in test_files)
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": SANDBOX_GRADER_DIR}
    if report_fd is not None:
        env["TANDEM_REPORT_FD"] = str(report_fd)
    if protected:
        env["TANDEM_PROTECTED"] = ":".join(protected)
    extra = "".join(f" -p {shlex.quote(m)}" for m in plugins or [])
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"{assignments} python -P -m pytest -c {shlex.quote(ini)} --rootdir=/testbed -p no:cacheprovider "
            f"-p tandem_report{extra} -rA --tb=no -q --no-header --color=no {files}")


def trusted_pytest_plugins(python: str) -> list[str]:
    """Modules of the pytest11 entry points installed for `python`, read outside any repository."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps(sorted({e.value.split(':')[0] for e in m.entry_points(group='pytest11')})))")
    out = subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=True)
    return [str(m) for m in json.loads(out.stdout)]


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
    tamper: list[str] = field(default_factory=list)
    """What gave a forgery away; non-empty means reward 0 whatever the tests said."""
    canaries: int = 0
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
        self.templates = templates
        self.data_base_dir = data_base_dir
        self.swesmith_cache = Path(cfg.run.cache_dir).resolve() / "swesmith"
        self.pool = SandboxPool.from_config(sc, templates.root.parent, pool_size, templates, name="grade",
                                            uid_offset=uid_offset, command_timeout_s=sc.test_timeout_s)
        self.plugins = trusted_pytest_plugins(self.pool.isolation.python_exe) if sc.test_plugin_autoload else []
        self.ro_binds = ((str(GRADER_DIR), SANDBOX_GRADER_DIR),)

    def task(self, row: dict) -> SweTask:
        return task_from_row(row, self.data_base_dir)

    def graded_template(self, task: SweTask) -> Path:
        return self.templates.get(f"{task.instance_id}::graded",
                                  lambda d: task.materialize_graded(d, self.swesmith_cache), "graded state")

    def grade(self, task: SweTask, diff: str) -> GradeResult:
        """The reward for `diff`; an empty diff scores 0 without running anything."""
        if not diff.strip():
            return self._not_run(task, "no changes: the agent's diff is empty", [], time.monotonic())
        return self.evaluate(task, diff)

    def _not_run(self, task: SweTask, reason: str, dropped: list[str], start: float) -> GradeResult:
        return GradeResult(0.0, reason, tests={t: "NOT_RUN" for t in task.tests}, dropped_paths=dropped,
                           f2p_total=len(task.fail_to_pass), p2p_total=len(task.pass_to_pass),
                           grade_time_s=time.monotonic() - start)

    def evaluate(self, task: SweTask, diff: str) -> GradeResult:
        """Apply the filtered diff to a clean graded copy, add canaries, run the tests, judge."""
        start = time.monotonic()
        graded, dropped = filter_diff(diff, {os.path.normpath(f) for f in task.test_files})
        with self.pool.acquire(self.graded_template(task), graded=True) as sb:
            try:
                apply_patch(sb.testbed, graded)
            except ValueError as err:
                return self._not_run(task, f"diff does not apply to the clean repository: {err}", dropped, start)
            # What the diff did to the graded tests is undone from the template, whatever path spelling
            # (C-quoted names, a plain unified diff) got it past filter_diff: that parse is not the guard.
            restored = restore_protected(sb.testbed, sb.template / "testbed", task.test_files)
            dropped = sorted(set(dropped) | set(restored))
            # No .git in the graded copy: its HEAD would show the test files as they were before the canaries.
            remove_tree(sb.testbed / ".git")
            disguise = insert_canaries(sb.testbed, task.test_files, task.fail_to_pass)
            planted = plugin_entry_points(sb.testbed)
            protected = [f"/testbed/{f}" for f in task.test_files] + [SANDBOX_GRADER_DIR]
            read_end, write_end = os.pipe()
            run = sb.exec(pytest_command(task.test_files, self.plugins, write_end, protected),
                          timeout_s=self.test_timeout_s, ro_binds=self.ro_binds, side_channel=(read_end, write_end))
        verdict = judge(list(task.tests), disguise.canaries, parse_stream(run.side), run.returncode, run.output,
                        disguise.unmask, disguise.twin_of)
        tamper = verdict.tamper + [f"the repository declares a pytest plugin entry point ({p})" for p in planted]
        tests = verdict.tests
        f2p_ok = sum(tests[t] == "PASSED" for t in task.fail_to_pass)
        p2p_ok = sum(tests[t] == "PASSED" for t in task.pass_to_pass)
        passed = (f2p_ok == len(task.fail_to_pass) and p2p_ok == len(task.pass_to_pass) and verdict.complete
                  and not tamper)
        reason = "" if passed else self._reason(task, tests, tamper, run, verdict.complete, f2p_ok, p2p_ok)
        if dropped and not passed:
            reason += f"; edits to test files were not graded: {', '.join(dropped)}"
        return GradeResult(1.0 if passed else 0.0, reason, tests, f2p_ok, len(task.fail_to_pass), p2p_ok,
                           len(task.pass_to_pass), dropped, tamper, len(disguise.canaries), run.duration_s,
                           time.monotonic() - start, run.output[-2000:])

    def _reason(self, task: SweTask, tests: dict[str, str], tamper: list[str], run, complete: bool,
                f2p_ok: int, p2p_ok: int) -> str:
        if tamper:
            return f"tampering detected: {tamper[0]}"
        if run.timed_out:
            return f"test run timed out after {self.test_timeout_s:.0f}s"
        failing = [f"{t} {s}" for t, s in tests.items() if s != "PASSED"]
        if not failing and not complete:
            return f"the test run did not finish normally (exit {run.returncode})"
        if all(s == "MISSING" for s in tests.values()):
            return f"test run produced no results (exit {run.returncode})"
        return (f"tests failed: {len(task.fail_to_pass) - f2p_ok}/{len(task.fail_to_pass)} FAIL_TO_PASS and "
                f"{len(task.pass_to_pass) - p2p_ok}/{len(task.pass_to_pass)} PASS_TO_PASS not passing "
                f"(e.g. {failing[0]})")

    def self_check(self) -> None:
        """Before the first rollout: can a graded sandbox import pytest and tandem's reporter?"""
        template = self.templates.get("tandem-self-check", lambda d: (d / "README").write_text("self-check\n"))
        probe = f"PYTHONPATH={SANDBOX_GRADER_DIR} python -P -c 'import pytest, tandem_report'"
        with self.pool.acquire(template, graded=True) as sb:
            run = sb.exec(probe, timeout_s=120, ro_binds=self.ro_binds)
        if run.returncode != 0:
            raise SandboxUnavailable(
                f"the sandbox cannot run Python with pytest ({self.pool.isolation.python_exe}, backend "
                f"{self.pool.backend}): `python -c 'import pytest'` exited {run.returncode}: "
                f"{run.output.strip()[-600:]}. Every reward would be 0. Set sandbox.python to an interpreter "
                "that has pytest, or sandbox.extra_ro_paths to the directories it needs.")


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
    infra_failures: int = 0
    """Sandbox failures in a row (reset by any sample graded normally)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def backend(self) -> str:
        return self.agent_pool.backend

    def infra_failed(self, err: BaseException) -> None:
        """Count one sample lost to the sandbox itself; stop the run when it keeps happening."""
        limit = self.cfg.sandbox.max_infra_failures
        with self._lock:
            self.infra_failures += 1
            count = self.infra_failures
        log.warning("sandbox failure %d/%d in a row: %s: %s", count, limit, type(err).__name__, err)
        if count >= limit:
            raise SandboxInfraError(f"the sandbox failed {count} times in a row (sandbox.max_infra_failures = "
                                    f"{limit}); last: {type(err).__name__}: {err}") from err

    def infra_ok(self) -> None:
        with self._lock:
            self.infra_failures = 0

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
            runtime = SweRuntime(cfg, templates, agent_pool, grader)
            try:
                grader.self_check()
            except BaseException:
                runtime.close()
                raise
            _RUNTIME = runtime
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
    try:
        result = runtime.grader.grade(task, diff)
    except (SandboxInfraError, PrepareError, OSError, subprocess.SubprocessError) as err:
        runtime.infra_failed(err)  # raises once failures repeat
        return 0.0, {"reason": f"sandbox failure while grading: {type(err).__name__}: {err}"[:800],
                     "infra_failure": True, "tamper": [], "sandbox_backend": runtime.backend}
    runtime.infra_ok()
    info = result.info()
    info.pop("reward")
    info["reason"] = result.reason if result.reward == 0 else ""
    info["sandbox_backend"] = runtime.backend
    info.pop("output_tail", None) if result.reward == 1 else None
    return result.reward, info
