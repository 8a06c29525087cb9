"""Grade an agent's diff against a task's hidden tests (the reward of a coding rollout).

Threat model. The policy is an adversary: RL reinforces any forged 1 on every task.
- It controls every byte of its diff, and so any code that runs inside the graded
  test process: the package the tests import, new files (a tests/__init__.py, a
  *.dist-info with entry points), anything that code does at import time or at exit.
  Anything that process prints, writes or reports is therefore not evidence on its own.
- It must never control: the verdict, the hidden tests' expectations, the host, other
  rollouts.

How the verdict is kept out of its reach:
 1. the hidden checks are split (tandem.envs.coding.instrument, tandem.envs.coding.grading_plan): the graded copy
    of each test file holds only what a check computes, its expected value stays on the
    host, and the value the run writes back is compared there (tandem.envs.coding.checks). A task
    whose hidden tests the bug fails only through checks a forger could guess is refused
    (reward 0 with the reason, logged and counted), never graded on trust;
 2. the diff is applied on the host, bounded in size before git runs, to a clean copy of
    the task's graded state in a fresh sandbox slot, minus edits to the graded test files,
    conftest.py files, bytecode and build leftovers (tandem.envs.coding.graded_diff); the graded test
    files are then written from the plan, and no .git is left to compare them with;
 3. that copy is the slot's own and wiped after the run: writable by the tests' process (an
    unprivileged uid, no capabilities, no_new_privs, tandem's seccomp filter) as a repository
    is under plain pytest, but for the graded test files and conftest.py, which stay tandem's
    (Sandbox.open_graded; without root the whole copy stays a read-only mount); pytest runs
    as `python -P -B -m pytest -c <grader ini> -p tandem_report`: the repository holds no
    bytecode (scrubbed), so its code is compiled from source, and the run writes none; plugin
    autoload off (allowed plugins are named one by one, from the sandbox
    interpreter's own environment, never from the repository);
 4. per-test results and check values come out of band on a pipe (tandem_report) and are
    cross-checked with the exit status the host saw and the printed summary
    (tandem.envs.coding.verdict), in a child process under CPU, memory and time limits (tandem.envs.coding.judging:
    records built to be slow to read cost that child, not the host). A record no honest run
    writes is tampering: reward 0, reward_info["tamper"] names it, and the step's
    agent_tamper_rate counts it. Reasons and reward_info name what a check computes, never
    what it expects.

Reward 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed in the run, every
host-held check they reached held, they reached every check the reference fix reached,
and nothing disagreed. A test absent from the stream (not collected, crashed run) counts as
failed. Per-test results and the reason for any 0 go into sample.reward_info.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.envs.coding.graded_diff import (bounded_apply, diff_text, filter_diff, protected_paths,
                                            restore_protected, scrub_leftovers, write_inside)
from tandem.envs.coding.grading_plan import GradingPlan, PlanUnavailable, build_plan
from tandem.envs.coding.judging import judge_isolated
from tandem.envs.coding.settings import coding_args
from tandem.envs.coding.sandbox.isolation import SandboxUnavailable
from tandem.envs.coding.sandbox.pool import SandboxInfraError, SandboxPool
from tandem.envs.coding.sandbox.runner import ExecResult
from tandem.envs.coding.sandbox.storage import remove_tree
from tandem.envs.coding.sandbox.templates import PrepareError, TemplateCache
from tandem.envs.coding.swe_data import SweTask, apply_patch, task_from_row
from tandem.envs.coding.verdict import Stream, parse_stream

log = logging.getLogger(__name__)

GRADER_DIR = Path(__file__).resolve().parent / "grader_plugin"
"""tandem_report.py and pytest.ini, bound read-only into every grading sandbox."""
SANDBOX_GRADER_DIR = "/.tandem/grader"
_PLANS: dict[tuple, GradingPlan] = {}
"""Grading plans of this process (two reference runs each), shared by its graders."""
_PLAN_LOCKS: dict[tuple, threading.Lock] = {}
_PLANS_GUARD = threading.Lock()
REFERENCE_TIMEOUT_S = 120.0
"""Least time a reference run (the fix, the bug) gets, whatever environment.args.sandbox.test_timeout_s is."""


def pytest_command(test_files: list[str], plugins: list[str] | None = None, report_fd: int | None = None,
                   protected: list[str] | None = None, ini: str = f"{SANDBOX_GRADER_DIR}/pytest.ini") -> str:
    """The graded pytest run: autoload off, only `plugins` (module names) and tandem's reporter."""
    files = " ".join(shlex.quote(f) for f in test_files)
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": SANDBOX_GRADER_DIR, "PYTHONDONTWRITEBYTECODE": "1"}
    if report_fd is not None:
        env["TANDEM_REPORT_FD"] = str(report_fd)
    if protected:
        env["TANDEM_PROTECTED"] = ":".join(protected)
    extra = "".join(f" -p {shlex.quote(m)}" for m in plugins or [])
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"{assignments} python -P -B -m pytest -c {shlex.quote(ini)} --rootdir=/testbed -p no:cacheprovider "
            f"-p tandem_report{extra} -rA --tb=no -q --no-header --color=no {files}")


def trusted_pytest_plugins(python: str) -> list[str]:
    """Modules of the pytest11 entry points installed for `python`, read outside any repository."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps(sorted({e.value.split(':')[0] for e in m.entry_points(group='pytest11')})))")
    out = subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=True)
    return [str(m) for m in json.loads(out.stdout)]


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
    """Parts of the diff not graded (edits to test files / conftest.py, bytecode and build leftovers)."""
    tamper: list[str] = field(default_factory=list)
    """What gave a forgery away; non-empty means reward 0 whatever the tests said."""
    refused: str = ""
    """Why this task is not graded at all (tandem.envs.coding.grading_plan); reward 0 for every sample."""
    check_failures: dict[str, str] = field(default_factory=dict)
    """Test -> the host-held check it failed or never reached."""
    host_checks: int = 0
    """Checks of the graded files judged on the host."""
    test_time_s: float = 0.0
    grade_time_s: float = 0.0
    output_tail: str = ""

    def info(self) -> dict[str, Any]:
        return asdict(self)


class Grader:
    """Grades diffs in fresh sandboxes; thread-safe, one per process."""

    def __init__(self, cfg: TandemConfig, pool_size: int, templates: TemplateCache, data_base_dir: Path,
                 uid_offset: int):
        sc = coding_args(cfg).sandbox
        self.test_timeout_s = sc.test_timeout_s
        self.templates = templates
        self.data_base_dir = data_base_dir
        self.swesmith_cache = Path(cfg.run.cache_dir).resolve() / "swesmith"
        self.pool = SandboxPool.from_config(sc, templates.root.parent, pool_size, templates, name="grade",
                                            uid_offset=uid_offset, command_timeout_s=sc.test_timeout_s)
        self.plugins = trusted_pytest_plugins(self.pool.isolation.python_exe) if sc.test_plugin_autoload else []
        self.ro_binds = ((str(GRADER_DIR), SANDBOX_GRADER_DIR),)
        self.max_file_bytes, self.max_total_bytes = sc.max_file_mb << 20, sc.max_workdir_mb << 20
        self.refused: dict[str, str] = {}
        """Tasks refused from grading in this process -> why (each logged once)."""

    def task(self, row: dict) -> SweTask:
        return task_from_row(row, self.data_base_dir)

    def graded_template(self, task: SweTask) -> Path:
        return self.templates.get(f"{task.instance_id}::graded",
                                  lambda d: task.materialize_graded(d, self.swesmith_cache), "graded state")

    def plan(self, task: SweTask) -> GradingPlan:
        """The task's grading plan, from its two reference runs the first time it is asked for."""
        template = self.graded_template(task)
        # What a plan depends on: the graded files (the template's commit), the task's tests, bug patch and
        # problem statement (its literals are echoes), and the interpreter and plugins that run them; not
        # the sandbox backend.
        key = (task.instance_id, TemplateCache.commit_of(template), task.patch, task.tests, task.problem_statement,
               self.pool.isolation.python_exe, tuple(self.plugins))
        with _PLANS_GUARD:
            lock = _PLAN_LOCKS.setdefault(key, threading.Lock())
        with lock:
            if key not in _PLANS:
                plan = build_plan(task, template / "testbed", lambda clean, files, sites, references=False:
                                  self._reference_run(task, clean, files, sites, references))
                if plan.refused:
                    log.warning("task %s is refused from grading: %s", task.instance_id, plan.refused)
                _PLANS[key] = plan
            plan = _PLANS[key]
        if plan.refused:
            self.refused[task.instance_id] = plan.refused
        return plan

    def _reference_run(self, task: SweTask, clean: bool, files: dict[str, str], sites, references: bool
                       ) -> tuple[ExecResult, Stream]:
        with self.pool.acquire(self.graded_template(task), graded=True) as sb:
            if clean:
                try:
                    apply_patch(sb.testbed, task.patch, reverse=True)
                except ValueError as err:
                    raise PlanUnavailable(f"the reference fix (the bug patch reversed) does not apply: {err}") from err
            # tandem's own run of trusted code: a load spike must not decide the plan, so it gets room
            run = self._run_tests(sb, task, files, max(self.test_timeout_s, REFERENCE_TIMEOUT_S))
        # the task's own code wrote this stream (not the agent's): parsed here, its values kept
        return run, parse_stream(run.side, sites, references)

    def _run_tests(self, sb, task: SweTask, files: dict[str, str], timeout_s: float | None = None) -> ExecResult:
        """Write the graded test files, drop .git, run pytest with the report pipe."""
        # No .git in the graded copy: its HEAD would show the test files with their expectations.
        remove_tree(sb.testbed / ".git")
        for rel, text in files.items():
            write_inside(sb.testbed, rel, text)
        # writable as under plain pytest (a throw-away copy), but for the graded tests and conftest.py files
        sb.open_graded(protected_paths(task.test_files, sb.testbed))
        protected = [f"/testbed/{f}" for f in task.test_files] + [SANDBOX_GRADER_DIR]
        read_end, write_end = os.pipe()
        return sb.exec(pytest_command(task.test_files, self.plugins, write_end, protected),
                       timeout_s=timeout_s or self.test_timeout_s, ro_binds=self.ro_binds,
                       side_channel=(read_end, write_end))

    def grade(self, task: SweTask, diff: str | bytes) -> GradeResult:
        """The reward for `diff` (bytes as the sandbox took them, or text); an empty diff scores 0 without
        running anything."""
        if not diff.strip():
            return self._not_run(task, "no changes: the agent's diff is empty", [], time.monotonic())
        return self.evaluate(task, diff)

    def _not_run(self, task: SweTask, reason: str, dropped: list[str], start: float, refused: str = "") -> GradeResult:
        return GradeResult(0.0, reason, tests={t: "NOT_RUN" for t in task.tests}, dropped_paths=dropped,
                           f2p_total=len(task.fail_to_pass), p2p_total=len(task.pass_to_pass), refused=refused,
                           grade_time_s=time.monotonic() - start)

    def evaluate(self, task: SweTask, diff: str | bytes) -> GradeResult:
        """Apply the filtered diff to a clean graded copy, write the split test files, run them, judge."""
        start = time.monotonic()
        plan = self.plan(task)
        if plan.refused:
            return self._not_run(task, f"task refused from grading: {plan.refused}", [], start, plan.refused)
        graded, dropped = filter_diff(diff_text(diff), {os.path.normpath(f) for f in task.test_files})
        with self.pool.acquire(self.graded_template(task), graded=True) as sb:
            try:
                bounded_apply(sb.testbed, graded, self.max_file_bytes, self.max_total_bytes)
            except ValueError as err:  # DiffRefused too
                return self._not_run(task, f"diff does not apply to the clean repository: {err}", dropped, start)
            # What the diff did to the graded tests is undone from the template, whatever path spelling
            # (C-quoted names, a plain unified diff) got it past filter_diff: that parse is not the guard.
            template = sb.template / "testbed"
            try:
                restored = restore_protected(sb.testbed, template, task.test_files)
                dropped = sorted(set(dropped) | set(restored) | set(scrub_leftovers(sb.testbed, template)))
                run = self._run_tests(sb, task, plan.files)
            except ValueError as err:  # a graded file's directory made a link by the diff
                return self._not_run(task, f"the graded test files cannot be written: {err}", dropped, start)
        # judged in a child process: the records are the agent's, and may be built to be slow to read
        verdict = judge_isolated(plan.judged_ids(task.tests), run.side, run.returncode, run.output,
                                 plan.sites, plan.required, narrower=plan.narrower, must_raise=plan.must_raise)
        verdict = plan.in_task_ids(verdict, task.tests)
        tests, tamper = verdict.tests, verdict.tamper
        f2p_ok = sum(tests[t] == "PASSED" for t in task.fail_to_pass)
        p2p_ok = sum(tests[t] == "PASSED" for t in task.pass_to_pass)
        passed = (f2p_ok == len(task.fail_to_pass) and p2p_ok == len(task.pass_to_pass) and verdict.complete
                  and not tamper)
        reason = "" if passed else self._reason(task, verdict, run, f2p_ok, p2p_ok)
        if dropped and not passed:
            reason += f"; edits to test files were not graded (nor bytecode or build leftovers): {', '.join(dropped[:10])}"
        return GradeResult(1.0 if passed else 0.0, reason, tests, f2p_ok, len(task.fail_to_pass), p2p_ok,
                           len(task.pass_to_pass), dropped, tamper, "", verdict.check_failures, len(plan.sites),
                           run.duration_s, time.monotonic() - start, run.output[-2000:])

    def _reason(self, task: SweTask, verdict, run, f2p_ok: int, p2p_ok: int) -> str:
        tests = verdict.tests
        if verdict.tamper:
            return f"tampering detected: {verdict.tamper[0]}"
        if run.timed_out:
            return f"test run timed out after {self.test_timeout_s:.0f}s"
        failing = [f"{t} {s}" + (f" ({verdict.check_failures[t]})" if t in verdict.check_failures else "")
                   for t, s in tests.items() if s != "PASSED"]
        if not failing and not verdict.complete:
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
                f"{run.output.strip()[-600:]}. Every reward would be 0. Set environment.args.sandbox.python to an interpreter "
                "that has pytest, or environment.args.sandbox.extra_ro_paths to the directories it needs.")


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
        limit = coding_args(self.cfg).sandbox.max_infra_failures
        with self._lock:
            self.infra_failures += 1
            count = self.infra_failures
        log.warning("sandbox failure %d/%d in a row: %s: %s", count, limit, type(err).__name__, err)
        if count >= limit:
            raise SandboxInfraError(f"the sandbox failed {count} times in a row (environment.args.sandbox.max_infra_failures = "
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
    pool_size = coding_args(cfg).sandbox.pool_size
    if pool_size > 0:
        return pool_size
    groups = math.ceil(cfg.rollout.prompts_per_step * cfg.rollout.oversample)
    return groups * cfg.rollout.samples_per_prompt * (cfg.effective_staleness + 1)


def get_runtime(cfg: TandemConfig | None = None) -> SweRuntime:
    """The process's runtime, created on first use from `cfg` (later calls may omit it)."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is None:
            cfg = cfg or TandemConfig()
            sc = coding_args(cfg).sandbox
            root = Path(sc.root_dir or Path(cfg.run.run_dir) / "sandboxes").resolve()
            templates = TemplateCache.ephemeral(root, retries=sc.prepare_retries)
            size = auto_pool_size(cfg)
            agent_pool = SandboxPool.from_config(sc, root, size, templates, name="agent")
            data_dir = Path(cfg.data.path).resolve().parent
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
    diff = sample.metadata.get("diff", "")
    diff = diff if isinstance(diff, bytes) else str(diff)  # bytes from CodingEnv: any source encoding
    try:
        result = runtime.grader.grade(task, diff)
    except (SandboxInfraError, PrepareError, PlanUnavailable, OSError, subprocess.SubprocessError) as err:
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
