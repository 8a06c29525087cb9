"""The suite's tiers, and the rule that keeps them honest.

- unit: code in this process only, edges faked (no child process, no sandbox): `pytest -m unit`
  runs them all in about a minute.
- e2e: real engines, routers, trainers, launchers, sandboxes or torch.distributed workers.
- gpu: needs CUDA; skipped without it (the GPU checks themselves are scripts/gpu_check.py).

A test file is e2e or unit as a whole by E2E_FILES below; a test marked otherwise keeps its own
mark. A unit test that starts a process fails, naming the process, so a test cannot sit in the
fast tier while doing an end-to-end test's work. CI runs every tier (the README's command), on two
pytest-xdist workers: end-to-end tests leave a core idle about half of the time (measured: 1.13
cores busy on average over tests/test_launcher.py). Under --dist loadgroup a test that uses one of its
file's module fixtures runs on the same worker as the file's other such tests (the fixture is built
once), and end-to-end tests are handed out before unit tests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

# The suite's two pytest-xdist workers share the machine's cores, and so do the engines and trainers
# each test starts; a CPU child's torch threads are OpenMP threads that, by default, spin while they
# wait for each other, as if the cores were theirs alone. With another process on a core, a step
# then waits for a thread that is not running: measured on this 2-core box with one other busy
# process, the colocated learning run's train steps took 1-11 s each instead of 0.1-0.3 s (median
# 6.7 s vs 0.65 s a step). Waiting threads that sleep cost nothing when the cores are free. Set
# before torch is imported (OpenMP reads it once), here and in every child the tests start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

E2E_FILES = {
    "test_agent_e2e.py", "test_agent_loop.py", "test_agent_tokens.py", "test_deploy_skypilot.py",
    "test_engine_api.py", "test_engine_moe.py", "test_eval_run.py", "test_first_hour.py", "test_reproducible.py",
    "test_harness_capture.py", "test_harness_in_run.py", "test_harness_run.py", "test_supervisor_stop.py",
    "test_env_adapters.py", "test_external_engines.py", "test_faults.py", "test_host_checks.py", "test_reload_retry.py",
    "test_launcher.py", "test_lora.py", "test_megatron_cpu.py", "test_megatron_lora.py", "test_megatron_memory.py",
    "test_megatron_moe.py",
    "test_confined.py", "test_raising_rows.py", "test_call_rows.py", "test_differential.py", "test_expected_sides.py", "test_fix_corpus.py", "test_param_columns.py", "test_rehearse.py", "test_reward_derivation.py", "test_reward_fidelity.py", "test_reward_forgery.py",
    "test_routing.py", "test_run_views.py", "test_sandbox.py",
    "test_sandbox_hardening.py",
    "test_sandbox_shared_state.py", "test_sglang_cpu.py", "test_swe_tasks.py", "test_weight_sync.py",
    "test_attack_forgers.py",
    "test_guess_odds.py",
    "test_wide_rows.py",
    "test_blind_rows.py",
    "test_oracle_forgers.py",
    "test_structure_plans.py",
    "test_edge_plans.py",
    "test_hard_plans.py",
    "test_wrong_fixes.py",
    "test_raising_values.py",
}
"""Files whose tests start real processes; every other file's tests are unit tests."""
TIERS = ("unit", "e2e")
SANDBOX_FILES = {
    "test_agent_e2e.py", "test_agent_loop.py", "test_agent_tokens.py", "test_host_checks.py", "test_plugin_edges.py",
    "test_confined.py", "test_raising_rows.py", "test_call_rows.py", "test_differential.py", "test_expected_sides.py", "test_fix_corpus.py", "test_param_columns.py", "test_reward_derivation.py", "test_reward_fidelity.py",
    "test_reward_forgery.py", "test_sandbox.py",
    "test_sandbox_hardening.py",
    "test_sandbox_shared_state.py",
    "test_swe_tasks.py",
    "test_attack_forgers.py",
    "test_guess_odds.py",
    "test_wide_rows.py",
    "test_blind_rows.py",
    "test_oracle_forgers.py",
    "test_structure_plans.py",
    "test_edge_plans.py",
    "test_hard_plans.py",
    "test_wrong_fixes.py",
    "test_raising_values.py",
}
"""Files whose tests run sandboxes: they share the host's sandbox uids, cgroups and slot sweeps, so
under `-n 2` (pytest-xdist, --dist loadgroup) they run one after another on one worker."""
ORDERED_FILES = {"test_external_engines.py", "test_run_views.py"}
"""Files whose tests share a module fixture that carries state from one test to the next: each runs
whole, in order, on one worker. So do the tests of a file that use one of its module fixtures (built
once, then); every other test is scheduled on its own (the best balance)."""
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = Path(item.fspath).name
        if not any(item.get_closest_marker(t) for t in TIERS):
            item.add_marker(pytest.mark.e2e if name in E2E_FILES else pytest.mark.unit)
        group = "sandbox" if name in SANDBOX_FILES else name if name in ORDERED_FILES or _uses_a_module_fixture(item) \
            else None
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if item.get_closest_marker("gpu") and not _cuda():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
    # End-to-end tests first (a stable sort: each file's tests keep their order): the workers hand out
    # tests in this order, so the many short unit tests come last and fill in while the other worker
    # finishes its last long test, instead of one worker idling behind an end-to-end run started last.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


def _uses_a_module_fixture(item) -> bool:
    """The test uses a module-scoped fixture of the suite's own (engines, a router, a tiny model's build):
    the file's tests that do run on one worker, so that it is built once, not once on each worker."""
    info = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames if info else ():
        defs = info.name2fixturedefs.get(name) or ()
        if defs and defs[-1].scope == "module" and Path(defs[-1].func.__code__.co_filename).parent == TESTS:
            return True
    return False


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _traceback_limit_is_restored():
    """SkyPilot's YAML loader (tests/test_deploy_skypilot.py) sets sys.tracebacklimit = 0 and leaves it so
    when an exception passes through it: every later traceback in the process would be one line."""
    import sys

    before = getattr(sys, "tracebacklimit", None)
    yield
    if before is None:
        sys.__dict__.pop("tracebacklimit", None)
    else:
        sys.tracebacklimit = before


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """In a unit test, starting a process is an error naming it (mark the test e2e instead)."""
    if not request.node.get_closest_marker("unit"):
        yield
        return
    def refuse(what):
        def start(*args, **kwargs):
            shown = next((a for a in args if isinstance(a, (list, tuple, str, bytes))), "")
            raise AssertionError(f"a unit test started a process ({what}: {str(shown)[:200]}); "
                                 f"mark it @pytest.mark.e2e or fake the process")
        return start
    import multiprocessing.util

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess"))  # asyncio's too
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse("multiprocessing"))
    monkeypatch.setattr(os, "fork", refuse("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", refuse("os.posix_spawn"))
    yield
