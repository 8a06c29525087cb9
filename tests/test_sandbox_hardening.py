"""The sandbox holds without root, survives hostile trees, caps disk for real, and cannot hide Python.

Issue 10's faults, each attacked for real on every backend available here:
- E1: without root, the agent never holds a capability; PID 1 sits inside the sandbox
  root; no_new_privs is set; chroot, nested user namespaces, mount and setuid binaries
  give nothing. (The suite runs as root, so the unprivileged case runs the real argv
  under `setpriv` as uid 65534: a fake owner at the edge, the real backend inside.)
- D1: deep, wide and unreadable trees are wiped; a slot whose cleanup fails is retired
  and replaced; the start-up sweep removes the same trees; a sandbox failure costs one
  sample and only repeated failures stop the run.
- D2: the per-slot cap counts write-then-delete, inodes and sparse files.
- V1: a Python that lives under /tmp still runs inside; a Python without pytest is
  refused before the first rollout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime, swe_reward
from tandem.sample import Sample
from tandem.envs.coding.sandbox import Isolation, Limits, SandboxPool, SandboxUnavailable, TemplateCache, seccomp
from tandem.envs.coding.sandbox.runner import run_bounded
from tandem.envs.coding.sandbox.pool import SandboxInfraError
from tandem.envs.coding.sandbox.storage import chown_tree
from tandem.envs.coding.sandbox.storage import DiskCap, mounts_under, tmpfs_available
from tests._swe import bash, fix_command, make_cfg, row_named, run_rollout, sandbox_backends, scripted

_, BACKENDS = sandbox_backends()
LIMITS = Limits(cpu_time_s=20, memory_mb=1024, max_processes=32, max_file_mb=64, max_open_files=128)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: sets up an unprivileged owner and tmpfs slots")
NOBODY = 65534
DEEP_TREE = ("python -c \"import os\nfor _ in range(1200):\n    os.mkdir('x'); os.chdir('x')\nopen('leaf', 'w').close()\n"
             "os.chdir('/testbed')\nos.makedirs('wide')\nfor i in range(3000):\n    open(f'wide/f{i}', 'w').close()\n"
             "os.chmod('x/x/x', 0)\nos.chmod('wide', 0)\"")


def tiny_template(tmp_path: Path) -> tuple[TemplateCache, Path]:
    templates = TemplateCache(tmp_path / "templates")
    return templates, templates.get("t", lambda d: (d / "app.py").write_text("print('hello')\n"))


# ----------------------------------------------------------------------------- E1
KEYRING_PROBE = ("python3 -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                 f"r = libc.syscall({seccomp.syscall_number('add_key') if seccomp.supported() else -1}, "
                 "b'user', b'tandem-probe', b'hidden tests', 12, -4); print(f'addkey={r},{ctypes.get_errno()}')\"")
PRIVILEGE_PROBE = KEYRING_PROBE + r"""
echo "uid=$(id -u)"
grep -E '^(CapPrm|CapEff|CapAmb|CapBnd|NoNewPrivs)' /proc/self/status
echo "pid1root=$(readlink /proc/1/root)"
echo "pid1sees=$(ls /proc/1/root/ | tr '\n' ' ')"
mkdir -p /tmp/jail && (chroot /tmp/jail /bin/true 2>/dev/null && echo CHROOT_OK || echo chroot-refused)
(unshare -r true 2>/dev/null && echo USERNS_OK || echo userns-refused)
(mount -t tmpfs none /tmp/jail 2>/dev/null && echo MOUNT_OK || echo mount-refused)
echo "pid1caps=$(grep CapEff /proc/1/status | cut -f2) "
(ls /work >/dev/null 2>&1 && echo HOST_VISIBLE || echo host-hidden)
"""


def assert_unprivileged(output: str) -> None:
    lines = dict(line.split("=", 1) if "=" in line else line.split(":", 1) for line in output.splitlines()
                 if "=" in line or ":" in line)
    assert lines["uid"] != "0", output
    for cap in ("CapPrm", "CapEff", "CapAmb", "CapBnd"):  # bounding set too: nothing can ever regain one
        assert int(lines[cap].strip(), 16) == 0, output
    assert lines["NoNewPrivs"].strip() == "1", output
    # PID 1 lives inside the sandbox root; where it keeps privileges the agent cannot even look into it
    assert lines["pid1root"] in ("/", ""), output
    assert "work" not in lines["pid1sees"].split() and (lines["pid1root"] == "" or "testbed" in lines["pid1sees"])
    assert lines["pid1root"] == "" or int(lines["pid1caps"].split()[0], 16) == 0, output
    for refused in ("chroot-refused", "userns-refused", "mount-refused"):
        assert refused in output, output
    assert not {"CHROOT_OK", "USERNS_OK", "MOUNT_OK", "HOST_VISIBLE"} & set(output.split()), output
    assert "host-hidden" in output, output
    # no kernel keyring: a key outlives the sandbox and is readable from any other one (issue 10 review)
    assert lines["addkey"] == "-1,1", output


@needs_root
@pytest.mark.parametrize("backend", BACKENDS)
def test_without_root_the_agent_holds_no_capability(backend):
    slot = Path(tempfile.mkdtemp(prefix="tandem-e1-"))
    try:
        for sub in ("testbed", "tmp", "root"):
            (slot / sub).mkdir()
        chown_tree(slot, NOBODY)
        iso = Isolation(backend, LIMITS, "/usr/bin/python3", ())
        filter_fd = seccomp.program_fd() if iso.needs_seccomp_fd() else None  # as Sandbox.exec does
        argv = iso.argv(slot, PRIVILEGE_PROBE, uid=None, seccomp_fd=filter_fd)  # what a non-root tandem runs
        owner = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        run = run_bounded(owner + argv, 30, 100_000, give_fds=() if filter_fd is None else (filter_fd,))
        assert_unprivileged(run.output)
    finally:
        subprocess.run(["rm", "-rf", str(slot)], check=False)


@needs_root
@pytest.mark.parametrize("backend", BACKENDS)
def test_as_root_the_agent_runs_as_its_slot_uid_with_no_capability(tmp_path, backend):
    templates, template = tiny_template(tmp_path)
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61700)
    try:
        with pool.acquire(template) as sb:
            run = sb.exec(PRIVILEGE_PROBE)
    finally:
        pool.close()
    assert "uid=61700" in run.output
    assert_unprivileged(run.output)


# ----------------------------------------------------------------------------- D1
@pytest.mark.parametrize("capped", [True, False], ids=["tmpfs", "plain"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_trees_are_wiped_and_the_slot_is_reused(tmp_path, backend, capped):
    if capped and not tmpfs_available(tmp_path):
        pytest.skip("tmpfs slots need root")
    templates, template = tiny_template(tmp_path)
    cap = DiskCap(256 << 20, 20000) if capped else None
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61710,
                       disk_cap=cap)
    try:
        with pool.acquire(template) as sb:
            run = sb.exec(DEEP_TREE, timeout_s=60)
            assert run.returncode == 0, run.output
            assert sb.slot.capped is capped
        with pool.acquire(template) as sb:
            assert sorted(os.listdir(sb.testbed)) == [".git", "app.py"]
        assert pool.retired == []
    finally:
        pool.close()
    assert not pool.dir.exists()


@needs_root
def test_a_slot_whose_cleanup_fails_is_retired_and_replaced(tmp_path):
    """An immutable file (chattr +i on a tmpfs) makes the wipe fail for real: the slot never comes back."""
    fs = tmp_path / "fs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tandem-test", str(fs)], check=True)
    pinned = None
    try:
        templates, template = tiny_template(tmp_path)
        pool = SandboxPool(fs, 1, Isolation.create("auto", LIMITS), templates, base_uid=61720)  # plain dirs
        sb = pool.acquire(template)
        first = sb.slot.dir
        pinned = sb.testbed / "pinned"
        pinned.write_text("x")
        try:
            pinned_ok = subprocess.run(["chattr", "+i", str(pinned)], capture_output=True).returncode == 0
        except FileNotFoundError:
            pinned_ok = False
        if not pinned_ok:
            pytest.skip("chattr +i is not available or not supported on this tmpfs")
        sb.close()  # cleanup fails: retired, not returned
        assert len(pool.retired) == 1 and "cleanup failed" in pool.retired[0]
        with pool.acquire(template) as again:
            assert again.slot.dir != first and sorted(os.listdir(again.testbed)) == [".git", "app.py"]
            assert again.exec("python app.py").output == "hello\n"
        # a template that cannot be copied retires every slot it is tried on, then says why
        with pytest.raises(SandboxInfraError, match="could not be filled"):
            pool.acquire(tmp_path / "no-such-template")
        with pool.acquire(template) as third:  # replacements keep the pool serving
            assert third.exec("echo ok").output == "ok\n"
        assert len(pool.retired) == 1 + SandboxPool.FILL_ATTEMPTS
        pool.close()
    finally:
        if pinned is not None and pinned.exists():
            subprocess.run(["chattr", "-i", str(pinned)], capture_output=True)
        subprocess.run(["umount", "-l", str(fs)], check=False)


def test_startup_sweep_removes_hostile_leftovers(tmp_path):
    root = tmp_path / "sandboxes"
    stale = root / "pool-4194999-agent" / "slot-000" / "testbed"  # a pid no process can have
    stale.mkdir(parents=True)
    fd = os.open(stale, os.O_RDONLY)
    cur = fd
    for _ in range(1500):
        os.mkdir("x", dir_fd=cur)
        nxt = os.open("x", os.O_RDONLY, dir_fd=cur)
        if cur != fd:
            os.close(cur)
        cur = nxt
    os.close(cur)
    os.close(fd)
    os.chmod(stale / "x", 0)
    mounted = stale.parent / "scratch"
    mounted.mkdir()
    if ROOT:  # a slot tmpfs that a SIGKILLed run left mounted
        subprocess.run(["mount", "-t", "tmpfs", "tandem-slot", str(mounted)], check=True)
    TemplateCache.ephemeral(root).close()
    assert not (root / "pool-4194999-agent").exists() and mounts_under(root) == []


def test_a_sandbox_failure_costs_one_sample_and_repeats_stop_the_run(tmp_path):
    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"pool_size": 1, "max_infra_failures": 3, "prepare_retries": 0})
    row = {**row_named("romanum"), "instance_id": "gone__repo.0.x", "repo_path": str(tmp_path / "missing")}
    sample = Sample(prompt_ids=[1], metadata={"diff": "diff --git a/x b/x\n"})
    try:
        get_runtime(cfg)
        for _ in range(2):
            reward, info = swe_reward(sample, row)
            assert reward == 0.0 and info["infra_failure"] and info["reason"].startswith("sandbox failure")
        good = Sample(prompt_ids=[1], metadata={"diff": ""})
        swe_reward(good, row_named("romanum"))  # a normal grading resets the count
        for _ in range(2):
            swe_reward(sample, row)
        with pytest.raises(SandboxInfraError, match="3 times in a row"):
            swe_reward(sample, row)
    finally:
        reset_runtime()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_correct_fix_next_to_a_hostile_tree_still_scores_one(tmp_path, backend):

    row = row_named("romanum")
    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 1}, rollout={"samples_per_prompt": 1})

    try:
        first = run_rollout(cfg, scripted(bash(fix_command(row)), bash(DEEP_TREE)), row)
        second = run_rollout(cfg, scripted(bash(fix_command(row))), row)  # the same (only) slot, after the hostile tree
        runtime = get_runtime()
        assert runtime.agent_pool.retired == [] and runtime.grader.pool.retired == []
    finally:
        reset_runtime()
    assert first.reward == 1.0, first.reward_info
    assert second.reward == 1.0, second.reward_info


# ----------------------------------------------------------------------------- D2
@needs_root
@pytest.mark.parametrize("backend", BACKENDS)
def test_disk_cap_counts_transient_bytes_and_inodes(tmp_path, backend):
    templates, template = tiny_template(tmp_path)
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61730,
                       disk_cap=DiskCap(64 << 20, 2000))
    try:
        with pool.acquire(template) as sb:
            churn = sb.exec("for i in 1 2 3 4 5 6; do head -c 20M /dev/zero > f$i || echo FULL-$i; done; "
                            "rm -f f*; echo done")
            assert "No space left on device" in churn.output and "FULL-4" in churn.output, churn.output
            files = sb.exec("python -c \"import os\nn = 0\ntry:\n    for i in range(40000):\n"
                            "        open(f'e{i}', 'w').close(); n += 1\nexcept OSError as e:\n"
                            "    print('stopped', n, e.errno)\"")
            stopped = files.output.split()
            assert stopped[0] == "stopped" and int(stopped[1]) < 2000 and stopped[2] == "28", files.output
            assert sb.disk_usage()[0] <= 64 << 20 and sb.disk_usage()[1] <= 2000
    finally:
        pool.close()


@needs_root
@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_files_cannot_blow_up_the_diff_or_grading(tmp_path, backend):
    """300 MB of holes in 64 MB slots: whoever materializes them (git reading the agent's tree, or the
    grader applying the diff) hits the cap, and the sample scores 0 with the reason; the run goes on."""

    row = row_named("romanum")
    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 1, "max_workdir_mb": 64},
                   rollout={"samples_per_prompt": 1})
    sparse = bash("for i in 1 2 3 4 5; do truncate -s 60M sparse$i.bin; done; du -sk .")

    try:
        blown = run_rollout(cfg, scripted(bash(fix_command(row)), sparse), row)
        after = run_rollout(cfg, scripted(bash(fix_command(row))), row)
        runtime = get_runtime()
        assert runtime.agent_pool.retired == [] and runtime.grader.pool.retired == []
    finally:
        reset_runtime()
    reason = blown.reward_info["reason"]
    assert blown.reward == 0.0 and reason.startswith(("the agent's diff could not be taken",
                                                      "diff does not apply")), reason
    assert after.reward == 1.0, after.reward_info


# ----------------------------------------------------------------------------- V1
@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """Two interpreters under /tmp: one that sees the suite's packages (pytest), one bare."""
    base = tmp_path_factory.mktemp("venvs")
    assert str(base).startswith("/tmp/"), base  # the point of the test: the sandbox mounts its own /tmp
    for name, flags in (("full", ["--system-site-packages"]), ("bare", [])):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(base / name)], check=True)
    return base


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_python_under_tmp_is_not_hidden_by_the_sandboxes_tmp(tmp_path, backend, venvs):
    python = str(venvs / "full" / "bin" / "python")
    templates, template = tiny_template(tmp_path)
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS, python=python), templates,
                       base_uid=61740)
    try:
        with pool.acquire(template) as sb:
            run = sb.exec("python -c 'import sys, pytest; print(sys.prefix)'; touch /tmp/scratch && echo tmp-ok; "
                          f"touch {venvs}/full/pwned || echo venv-read-only")
    finally:
        pool.close()
    assert run.output.splitlines() == [str(venvs / "full"), "tmp-ok", "venv-read-only"] or (
        run.output.splitlines()[0] == str(venvs / "full") and "venv-read-only" in run.output), run.output


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_python_without_pytest_is_refused_before_the_first_rollout(tmp_path, backend, venvs):
    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 1,
                                      "python": str(venvs / "bare" / "bin" / "python")})
    try:
        with pytest.raises(SandboxUnavailable, match="cannot run Python with pytest") as err:
            get_runtime(cfg)
        assert "No module named 'pytest'" in str(err.value) and "environment.args.sandbox.python" in str(err.value)
        assert not list((tmp_path / "run" / "sandboxes").glob("pool-*"))  # nothing left behind
    finally:
        reset_runtime()


def test_a_backend_probe_that_fails_once_is_tried_again(monkeypatch):
    """A namespace the kernel is still tearing down can fail one probe: the backend is unavailable only after
    PROBE_TRIES failures in a row, and one success is enough."""
    import tandem.envs.coding.sandbox.isolation as isolation

    outcomes: list[int] = []

    def run(argv, **kw):
        return subprocess.CompletedProcess(argv, outcomes.pop(0))

    monkeypatch.setattr(isolation.subprocess, "run", run)
    monkeypatch.setattr(isolation.time, "sleep", lambda s: None)
    monkeypatch.setattr(isolation, "_PROBED", {})
    outcomes[:] = [1, 0]
    assert isolation._probe("bwrap") and outcomes == []
    monkeypatch.setattr(isolation, "_PROBED", {})
    outcomes[:] = [1] * isolation.PROBE_TRIES + [0]
    assert not isolation._probe("bwrap") and outcomes == [0]
