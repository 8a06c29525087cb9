"""Containment: what a sandboxed command (or the code it leaves for grading) cannot do.

Every attack runs for real, on each backend available here (bubblewrap and the util-linux
`unshare` fallback): fork bomb, 10 GB allocation, infinite loop, network connection, writes
outside the workdir, oversized files and output, processes left behind, and the owner
process dying (SIGKILL, Ctrl-C). Each is stopped, the host is unharmed, and the sandbox
keeps working afterwards. The agent-level tests run the same attacks through the real
agent loop and grader: each gets reward 0 with a reason, and the run goes on.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.sandbox import Isolation, Limits, SandboxPool, TemplateCache
from tandem.envs.coding.sandbox.templates import DiffTooLarge
from tandem.envs.coding.swe_data import BUNDLED_TASKS
from tests._swe import bash, fix_command, make_cfg, row_named, run_rollout, sandbox_backends, scripted

AVAILABLE, BACKENDS = sandbox_backends()
LIMITS = Limits(cpu_time_s=5, memory_mb=512, max_processes=32, max_file_mb=8, max_open_files=128)


def marker_procs(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (works whatever uid the sandbox used)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            found.append(int(pid))
    return found


def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture(params=BACKENDS)
def sandbox(request, tmp_path):
    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", lambda d: (d / "app.py").write_text("print('hello')\n"))
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(request.param, LIMITS), templates,
                       name=request.param, command_timeout_s=3, max_output_bytes=20000, base_uid=61500)
    sb = pool.acquire(template)
    yield sb
    sb.close()
    pool.close()
    assert not (tmp_path / "pools" / pool.dir.name).exists()


def assert_still_works(sb) -> None:
    r = sb.exec("echo alive && python app.py")
    assert (r.returncode, r.output) == (0, "alive\nhello\n")


def test_backend_is_available():
    assert AVAILABLE, "neither bubblewrap nor unshare can create namespaces here"


def test_view_of_the_machine(sandbox):
    r = sandbox.exec("pwd; ls -A; echo $HOME; ls / | tr '\\n' ' '; echo; python -c 'import pytest; print(pytest.__name__)'")
    lines = r.output.splitlines()
    assert lines[0] == "/testbed" and ".git" in lines and "app.py" in lines and "/tmp" in lines
    top = lines[-2].split()
    assert {"usr", "etc", "tmp", "testbed"} <= set(top) and not {"work", "home", "mnt", "opt"} & set(top)
    assert lines[-1] == "pytest"
    # the task data (hidden tests) and the project are not visible at all
    hidden = sandbox.exec(f"ls {BUNDLED_TASKS.parent}; cat {BUNDLED_TASKS}")
    assert hidden.returncode != 0 and "No such file" in hidden.output


def test_cd_does_not_persist(sandbox):
    sandbox.exec("mkdir sub && cd sub && touch inside")
    assert sandbox.exec("pwd; ls sub").output == "/testbed\ninside\n"


def test_fork_bomb_is_stopped(sandbox):
    start = time.monotonic()
    r = sandbox.exec(":(){ :|:& };: ; sleep 2; echo survived-bomb")
    assert "Resource temporarily unavailable" in r.output  # RLIMIT_NPROC held
    assert time.monotonic() - start < 120  # stopped by RLIMIT_NPROC, not by the command timeout
    assert wait_for(lambda: not marker_procs("survived-bomb"), 60)
    assert_still_works(sandbox)


def test_ten_gigabyte_allocation_fails(sandbox):
    r = sandbox.exec("python -c 'b = bytearray(10 * 1024**3); print(len(b))'")
    assert r.returncode != 0 and "MemoryError" in r.output
    assert_still_works(sandbox)


def test_infinite_loop_is_killed_at_the_timeout(sandbox):
    r = sandbox.exec("python -c 'while True: pass'", timeout_s=1.5)
    assert r.timed_out and r.returncode == -9 and 1.4 < r.duration_s < 60  # never before the timeout
    assert_still_works(sandbox)


def test_cpu_time_limit_stops_a_busy_loop(sandbox, tmp_path):
    iso = Isolation.create(sandbox.pool.backend, dataclasses.replace(LIMITS, cpu_time_s=1))
    pool = SandboxPool(tmp_path / "cpu", 1, iso, sandbox.pool.templates, name="cpu", base_uid=61550)
    try:
        with pool.acquire(sandbox.template) as sb:
            r = sb.exec("python -c 'while True: pass'", timeout_s=60)
    finally:
        pool.close()
    # killed by RLIMIT_CPU (SIGXCPU, or SIGKILL at the hard limit), long before the 60 s wall timeout
    assert not r.timed_out and r.returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL) and r.duration_s < 30


def test_network_is_unreachable(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        r = sandbox.exec(f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); "
                         f"print('CONNECTED')\"; getent hosts example.com || echo no-dns")
        assert "CONNECTED" not in r.output and ("refused" in r.output or "unreachable" in r.output)
        assert r.output.rstrip().endswith("no-dns")
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing reached the host
    finally:
        listener.close()
    assert_still_works(sandbox)


def test_writes_outside_the_workdir_fail(sandbox, tmp_path):
    host_file = tmp_path / "host_canary.txt"
    r = sandbox.exec(f"touch /etc/pwned; touch /usr/pwned; touch /pwned; echo x > {host_file}; "
                     f"echo x > ../escape; touch /tmp/ok && touch /testbed/ok && echo wrote-inside")
    assert "wrote-inside" in r.output and r.output.count("Read-only file system") + r.output.count(
        "No such file") + r.output.count("Permission denied") >= 5
    assert not host_file.exists() and not Path("/etc/pwned").exists() and not Path("/pwned").exists()
    assert (sandbox.slot.dir / "testbed" / "ok").exists() and (sandbox.slot.dir / "tmp" / "ok").exists()


def test_file_size_limit(sandbox):
    r = sandbox.exec("head -c 50M /dev/zero > big; ls -l big | awk '{print $5}'")
    assert "File size limit exceeded" in r.output or "File too large" in r.output
    assert (sandbox.testbed / "big").stat().st_size <= LIMITS.max_file_mb * 1024 * 1024


def test_output_is_bounded_while_reading(sandbox):
    r = sandbox.exec("yes | head -c 3000000")
    assert r.output_bytes == 3000000 and len(r.output) < 20100 and "bytes of output dropped" in r.output


def test_background_processes_die_with_the_command(sandbox):
    r = sandbox.exec("(sleep 31337 &) ; nohup sleep 31337 >/dev/null 2>&1 & echo started")
    assert r.output == "started\n"
    assert wait_for(lambda: not marker_procs("sleep 31337"), 60)


def test_diff_is_taken_on_the_host_and_ignores_the_agents_git(sandbox, tmp_path):
    canary = tmp_path / "hook_ran"
    sandbox.exec("echo 'print(2)' > app.py && echo new > added.txt && ln -s /etc/passwd link && mkfifo pipe && "
                 f"git config core.fsmonitor 'touch {canary}' && rm -rf .git/objects")
    diff = sandbox.diff()
    assert "+print(2)" in diff and "+new" in diff and "root:" not in diff
    assert "diff --git a/link b/link" in diff and "+/etc/passwd" in diff  # the link itself, not its target
    assert not canary.exists()


def test_oversized_diff_is_refused_without_reading_it(sandbox):
    sandbox.exec("head -c 3000000 /dev/urandom | base64 > blob.txt")
    with pytest.raises(DiffTooLarge):
        sandbox.diff(max_bytes=1_000_000)


# ----------------------------------------------------------------------------- owner dies
OWNER = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops it, even from a job that ignores SIGINT
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from tandem.envs.coding.sandbox import Isolation, Limits, SandboxPool, TemplateCache
    root = Path(sys.argv[1])
    templates = TemplateCache.ephemeral(root)
    t = templates.get("t", lambda d: (d / "a").write_text("a"))
    pool = SandboxPool(root, 1, Isolation.create(sys.argv[2], Limits()), templates, name="x", command_timeout_s=300,
                       base_uid=61600)
    sb = pool.acquire(t)
    executor = ThreadPoolExecutor(2)  # like the orchestrator's: non-daemon worker threads
    executor.submit(sb.exec, "sleep 31338")
    print("ready", pool.dir, flush=True)
    while sys.argv[3] != "exit":
        time.sleep(0.1)
    time.sleep(1)  # the command is running in a worker thread when the interpreter exits
""")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "exit"])
def test_owner_death_kills_commands_and_cleans_up(tmp_path, backend, how):
    """Killed (SIGKILL), interrupted (Ctrl-C) or exiting normally with a command still running in a
    worker thread: the command dies with its owner, and exit does not wait out its 300 s timeout."""
    root = tmp_path / "sandboxes"
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(root), backend, how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready"), proc.stderr.read()
        pool_dir = Path(line.split()[1])
        assert wait_for(lambda: marker_procs("sleep 31338"), 60)
        if how != "exit":
            proc.send_signal(getattr(signal, how))
        proc.wait(20)
        assert wait_for(lambda: not marker_procs("sleep 31338"), 10), "sandboxed command outlived its owner"
        if how in ("SIGINT", "exit"):  # Ctrl-C / normal exit: atexit removed everything
            assert wait_for(lambda: not pool_dir.exists(), 5)
            assert not list(root.glob(f"pool-{proc.pid}-*"))
        else:  # SIGKILL: nothing ran; the next pool in the same root sweeps the leftovers
            assert pool_dir.exists()
            TemplateCache.ephemeral(root).close()
            assert not list(root.glob(f"pool-{proc.pid}-*"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- through the agent and grader
ATTACKS = {
    # name: (code planted in the package, after the correct fix, so only the attack can cost the reward)
    # (it naps when fork fails, so the test does not starve the shared CI cores; the limit is what stops it)
    "fork_bomb": "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.2)\n",
    "ten_gb": "_hog = bytearray(10 * 1024 ** 3)\n",
    "infinite_loop": "while True:\n    pass\n",
    "network": "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
    "write_outside": "open('{canary}', 'w').write('pwned')\n",
}


@pytest.fixture
def runtime_cfg(tmp_path):
    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"pool_size": 1, "test_timeout_s": 5, "command_timeout_s": 3,
                                      "max_processes": 32, "memory_mb": 512},
                   rollout={"samples_per_prompt": 1})
    yield cfg
    reset_runtime()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attacks_in_graded_code_score_zero_with_a_reason(runtime_cfg, tmp_path, attack):
    row = row_named("romanum")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    canary = tmp_path / "canary"
    code = ATTACKS[attack].format(port=listener.getsockname()[1], canary=canary)
    plant = f"cat >> romanum/__init__.py <<'TANDEM_EOF'\n{code}TANDEM_EOF"
    try:
        sample = run_rollout(runtime_cfg, scripted(bash(fix_command(row)), bash(plant)), row)
        assert sample.metadata["env"]["end_reason"] == "submitted"
        assert sample.reward == 0.0, sample.reward_info
        reason = sample.reward_info["reason"]
        assert reason.startswith(("tests failed", "test run timed out", "test run produced no results")), reason
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert not canary.exists()
    assert wait_for(lambda: not marker_procs("tandem_pytest.ini"), 10)  # no test process survived
    # the run goes on: the same runtime grades a clean fix with reward 1 right after
    good = run_rollout(runtime_cfg, scripted(bash(fix_command(row))), row)
    assert good.reward == 1.0, good.reward_info


def test_deleting_or_editing_hidden_tests_does_not_help(runtime_cfg):
    row = row_named("romanum")
    cheat = ("rm -rf tests && mkdir tests && printf 'def test_simple():\\n    pass\\n' > tests/test_romanum_parse.py && "
             "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
             "    out = yield\\n    out.get_result().outcome = \"passed\"\\n' > conftest.py")
    sample = run_rollout(runtime_cfg, scripted(bash(cheat)), row)
    assert sample.reward == 0.0
    info = sample.reward_info
    assert "edits to test files were not graded" in info["reason"]
    assert "conftest.py" in info["dropped_paths"] and "tests/test_romanum_parse.py" in info["dropped_paths"]
    assert all(info["tests"][t] == "FAILED" for t in row["FAIL_TO_PASS"])
    # deleting the tests *and* fixing the bug still earns the reward: grading uses its own clean tests
    fixed = run_rollout(runtime_cfg, scripted(bash(fix_command(row)), bash("rm -rf tests")), row)
    assert fixed.reward == 1.0, fixed.reward_info
    assert "tests/test_romanum_format.py" in fixed.reward_info["dropped_paths"]


def test_agent_commands_are_contained_and_reported(runtime_cfg, tmp_path):
    row = row_named("romanum")
    canary = tmp_path / "canary2"
    sample = run_rollout(runtime_cfg, scripted(
        bash(":(){ :|:& };: ; sleep 1"), bash("python -c 'while True: pass'"),
        bash("python -c 'bytearray(10 * 1024**3)'"), bash(f"touch {canary}")), row)
    agent, episode = sample.metadata["agent"], sample.metadata["env"]
    assert episode["end_reason"] == "submitted" and episode["turns"] == 5
    assert agent["returncodes"][1] == -9  # the loop hit the 3 s command timeout
    assert agent["returncodes"][2] != 0 and agent["returncodes"][3] != 0
    assert sample.reward == 0.0 and sample.reward_info["reason"] == "no changes: the agent's diff is empty"
    assert not canary.exists()
    assert get_runtime().agent_pool.backend in AVAILABLE
