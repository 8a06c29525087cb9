"""Issue 34's sandbox findings, each attacked for real on both backends: nothing shared between
concurrent sandboxes carries a signal, limits count memory held outside mappings, /dev is neither
writable nor unbounded, inodes are capped without tmpfs, a host socket is out of reach, the host's
git apply is bounded before it runs, and a graded run never loads bytecode.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tandem.envs.coding.graded_diff import DiffRefused, check_sizes, filter_diff, scrub_leftovers
from tandem.envs.coding.grading import pytest_command
from tandem.envs.coding.sandbox import Isolation, Limits, SandboxPool, TemplateCache, seccomp
from tandem.envs.coding.sandbox import pool as pool_module
from tandem.envs.coding.sandbox.cgroup import MemoryCgroups
from tandem.envs.coding.sandbox.runner import run_bounded
from tandem.envs.coding.sandbox.storage import DiskCap, chown_tree
from tandem.envs.coding.sandbox.templates import host_git
from tests._swe import sandbox_backends

_, BACKENDS = sandbox_backends()
LIMITS = Limits(cpu_time_s=20, memory_mb=256, max_processes=32, max_file_mb=64, max_open_files=128)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: per-slot uids, cgroups, an unprivileged owner")
NOBODY = 65534


@pytest.fixture(params=BACKENDS)
def pool(request, tmp_path):
    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", lambda d: (d / "app.py").write_text("print('hello')\n"))
    pool = SandboxPool(tmp_path / "pools", 2, Isolation.create(request.param, LIMITS), templates,
                       command_timeout_s=60, base_uid=61800, disk_cap=DiskCap(64 << 20, 5000))
    yield pool, template
    pool.close()


def unprivileged(backend: str, command: str, count_memory: bool = False) -> str:
    """`command` as a non-root tandem runs it (the real argv, under setpriv as uid 65534): no cgroup."""
    slot = Path(tempfile.mkdtemp(prefix="tandem-shared-"))
    try:
        for sub in ("testbed", "tmp", "root"):
            (slot / sub).mkdir()
        chown_tree(slot, NOBODY)
        iso = Isolation(backend, LIMITS, "/usr/bin/python3", (), count_memory)
        filter_fd = seccomp.program_fd(count_memory) if iso.needs_seccomp_fd() else None
        owner = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        run = run_bounded(owner + iso.argv(slot, command, uid=None, seccomp_fd=filter_fd), 60, 100_000,
                          give_fds=() if filter_fd is None else (filter_fd,))
        return run.output
    finally:
        subprocess.run(["rm", "-rf", str(slot)], check=False)


# ----------------------------------------------------------------------------- locks and file events
HOLD = """python3 - <<'EOF'
import fcntl, os, time
files = [open(p) for p in ("/etc/passwd", "/dev/null", "/usr/bin/env")]
held = [open(f.name, "rb") for f in files]  # kept open: closing a file drops its fcntl locks
for f, g in zip(files, held):
    fcntl.flock(f, fcntl.LOCK_EX)
    fcntl.lockf(g, fcntl.LOCK_SH)
open("/tmp/held", "w").close()
for _ in range(600):
    if os.path.exists("/tmp/release"):
        break
    time.sleep(0.1)
print("released")
EOF"""
PROBE = """python3 - <<'EOF'
import fcntl, struct
for p in ("/etc/passwd", "/dev/null", "/usr/bin/env"):
    f = open(p)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        state = "free"
    except OSError:
        state = "BUSY"
    probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
    held = struct.unpack("hhqqi", fcntl.fcntl(open(p, "rb"), fcntl.F_GETLK, probe))[0] != fcntl.F_UNLCK
    print(p, state, "LOCKED" if held else "unlocked")
EOF"""


@needs_root
def test_a_lock_on_a_shared_file_carries_no_signal_between_sandboxes(pool):
    """Issue 34: a grading and an agent sandbox at once; flock/fcntl locks on files both can open were a channel."""
    pool, template = pool
    holder, prober = pool.acquire(template), pool.acquire(template)
    try:
        held = {}
        thread = threading.Thread(target=lambda: held.update(run=holder.exec(HOLD)))
        thread.start()
        marker = holder.slot.dir / "tmp" / "held"
        deadline = time.monotonic() + 60
        while not marker.exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), held
        probe = prober.exec(PROBE)
        (holder.slot.dir / "tmp" / "release").touch()
        thread.join(90)
    finally:
        holder.close()
        prober.close()
    assert "released" in held["run"].output, held["run"].output
    lines = probe.output.splitlines()
    assert len(lines) == 3 and all(line.endswith("free unlocked") for line in lines), probe.output


FILE_EVENTS = """python3 - <<'EOF'
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print("inotify", libc.inotify_init1(0), ctypes.get_errno())
print("io_uring", libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno())
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(os.environ.get("HOST_SOCKET", "/x"))
    print("unix CONNECTED")
except OSError as err:
    print("unix", err.errno)
a, b = socket.socketpair()
a.send(b"ok")
print("socketpair", b.recv(2).decode())
EOF"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_events_io_uring_and_host_unix_sockets_are_refused(tmp_path, backend):
    """A host unix socket in a read-only-bound directory (issue 34) cannot be reached; socketpair still works."""
    where = Path(tempfile.mkdtemp(prefix="tandem-sock-"))
    os.chmod(where, 0o755)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(where / "host.sock"))
    os.chmod(where / "host.sock", 0o777)
    server.listen(1)
    try:
        templates = TemplateCache(tmp_path / "templates")
        template = templates.get("t", lambda d: (d / "app.py").write_text(""))
        pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS, extra_ro_paths=[str(where)]),
                           templates, base_uid=61810)
        try:
            with pool.acquire(template) as sb:
                run = sb.exec(f"HOST_SOCKET={where}/host.sock " + FILE_EVENTS)
        finally:
            pool.close()
        outputs = [run.output] + ([unprivileged(backend, FILE_EVENTS)] if ROOT else [])
    finally:
        server.close()
        subprocess.run(["rm", "-rf", str(where)], check=False)
    for out in outputs:
        assert "inotify -1 38" in out and "io_uring -1 38" in out, out  # ENOSYS
        assert "unix 1" in out and "CONNECTED" not in out, out  # EPERM at socket()
        assert "socketpair ok" in out, out


# ----------------------------------------------------------------------------- memory held outside mappings
MEMFD = """python3 - <<'EOF'
import os
try:
    fd = os.memfd_create("hold")
except OSError as err:
    print("memfd refused", err.errno)
    raise SystemExit(0)
chunk = b"x" * (16 << 20)
for i in range(90):  # 1.4 GiB, never mapped: RLIMIT_AS does not see it
    os.write(fd, chunk)
print("HELD", (i + 1) * 16, "MiB")
EOF"""
PROCESSES = """python3 - <<'EOF'
import os, time
kids = []
for _ in range(4):  # 4 x 120 MiB, each under the 256 MiB address-space limit
    pid = os.fork()
    if pid == 0:
        block = bytearray(120 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
codes = [os.waitpid(k, 0)[1] for k in kids]
print("ALL HELD" if all(c == 0 for c in codes) else "killed", codes)
EOF"""


@needs_root
def test_memory_held_outside_mappings_counts_against_the_limit(pool):
    """Issue 34: 1.4 GiB held through memfd with memory_mb = 256, and many processes each under RLIMIT_AS."""
    pool, template = pool
    if pool.cgroups is None:
        pytest.skip("no memory cgroup can be made here")
    with pool.acquire(template) as sb:
        memfd = sb.exec(MEMFD)
        kids = sb.exec(PROCESSES)
        shm = sb.exec("head -c 300M /dev/zero > /dev/shm/big; echo rc=$?; ls /tmp")
    assert "HELD" not in memfd.output and memfd.returncode != 0, memfd.output
    assert "ALL HELD" not in kids.output, kids.output
    assert "rc=0" not in shm.output and "big" in shm.output, shm.output  # the slot's /tmp: its disk cap


@needs_root
@pytest.mark.parametrize("backend", BACKENDS)
def test_without_a_cgroup_memfd_and_sysv_shm_are_refused(backend):
    out = unprivileged(backend, MEMFD + "\npython3 -c \"import ctypes; l = ctypes.CDLL(None, use_errno=True); "
                                         "print('shmget', l.shmget(0, 1 << 20, 0o1600), ctypes.get_errno())\"")
    assert "memfd refused 1" in out and "shmget -1 1" in out, out


DEV = ("touch /dev/x 2>&1 | tail -1; head -c 1M /dev/zero > /dev/shm/f && echo shm-written; ls /tmp; "
       "df -k /dev | tail -1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_dev_is_read_only_and_shared_memory_lands_in_the_slot(tmp_path, backend):
    """Issue 34: /dev was a writable tmpfs of half the RAM (non-root bwrap); now read-only, /dev/shm is the slot's /tmp."""
    outputs = [unprivileged(backend, DEV)] if ROOT else []
    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", lambda d: (d / "app.py").write_text(""))
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61820)
    try:
        with pool.acquire(template) as sb:
            outputs.append(sb.exec(DEV).output)
            assert (sb.slot.dir / "tmp" / "f").stat().st_size == 1 << 20
    finally:
        pool.close()
    for out in outputs:
        assert "Read-only file system" in out and "shm-written" in out and "\nf\n" in out, out


# ----------------------------------------------------------------------------- inodes without tmpfs
@pytest.mark.parametrize("backend", BACKENDS)
def test_inodes_are_measured_and_capped_without_a_tmpfs(tmp_path, backend, monkeypatch):
    """Issue 34: as non-root (no tmpfs per slot) 100,000 empty files were neither counted nor capped."""
    monkeypatch.setattr(pool_module, "tmpfs_available", lambda where: False)  # what a non-root tandem gets
    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", lambda d: (d / "app.py").write_text(""))
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61830,
                       disk_cap=DiskCap(64 << 20, 2000))
    try:
        with pool.acquire(template) as sb:
            assert not sb.slot.capped and not sb.over_disk_cap()
            sb.exec("python3 -c \"import os\nfor i in range(2500):\n    open(f'/tmp/e{i}', 'w').close()\"")
            assert sb.over_disk_cap() and sb.disk_usage()[1] > 2000
    finally:
        pool.close()


# ----------------------------------------------------------------------------- the host's git apply
def sparse_diff(tmp_path: Path, files: int, size: str) -> str:
    repo = tmp_path / "repo"
    repo.mkdir()
    host_git(["init", "-q"], cwd=repo)
    (repo / "README").write_text("x\n")
    host_git(["add", "-A"], cwd=repo)
    host_git(["commit", "-qm", "base"], cwd=repo)
    for i in range(files):
        subprocess.run(["truncate", "-s", size, str(repo / f"sparse{i}.bin")], check=True)
    host_git(["add", "-A"], cwd=repo)
    return host_git(["diff", "--cached", "--binary", "HEAD"], cwd=repo).stdout.decode()


def test_sparse_and_huge_files_are_refused_by_name_before_git_applies(tmp_path):
    """Issue 34: a 1.8 MB diff of sparse files made the host's git apply reach 636 MiB per grading."""
    diff = sparse_diff(tmp_path, 5, "60M")
    assert len(diff) < 2_000_000
    started = time.monotonic()
    with pytest.raises(DiffRefused, match=r"sparse\d\.bin a mostly empty \(sparse\) file of 62914560 bytes"):
        check_sizes(diff, 64 << 20, 512 << 20)
    with pytest.raises(DiffRefused, match=r"sparse\d\.bin 62914560 bytes, more than a sandbox file"):
        check_sizes(diff, 32 << 20, 512 << 20)
    assert time.monotonic() - started < 120  # read from the diff's headers: git never wrote the 300 MB
    honest = tmp_path / "honest"
    honest.mkdir()
    (tmp_path / "repo" / "blob.bin").write_bytes(os.urandom(300_000))
    for i in range(5):
        (tmp_path / "repo" / f"sparse{i}.bin").unlink()
    host_git(["add", "-A"], cwd=tmp_path / "repo")
    check_sizes(host_git(["diff", "--cached", "--binary", "HEAD"], cwd=tmp_path / "repo").stdout.decode(),
                64 << 20, 512 << 20)  # a real binary file passes


# ----------------------------------------------------------------------------- bytecode
def test_bytecode_and_build_leftovers_are_not_graded(tmp_path):
    diff = "".join(f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+x\n"
                   for p in ("pkg/core.py", "pkg/__pycache__/core.cpython-311.pyc", "pkg/core.pyc", "pkg/_c.so",
                             "pkg.egg-info/entry_points.txt", "X-1.DIST-INFO/entry_points.txt", ".pytest_cache/v"))
    kept, dropped = filter_diff(diff, set())
    assert "pkg/core.py" in kept and len(dropped) == 6 and "pkg/core.pyc" in dropped
    testbed, template = tmp_path / "testbed", tmp_path / "template"
    for root in (testbed, template):
        (root / "pkg" / "__pycache__").mkdir(parents=True)
        (root / "pkg" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"forged")
        (root / "pkg" / "_c.so").write_bytes(b"ours" if root == testbed else b"theirs")
    (testbed / "pkg" / "old.pyc").write_bytes(b"forged")
    scrubbed = scrub_leftovers(testbed, template)
    assert scrubbed == ["pkg/__pycache__", "pkg/_c.so", "pkg/old.pyc"]
    assert not (testbed / "pkg" / "__pycache__").exists() and (testbed / "pkg" / "_c.so").read_bytes() == b"theirs"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graded_interpreter_never_loads_the_agents_bytecode(tmp_path, backend):
    """Issue 34: a fix shipped only as an unchecked-hash .pyc scored 1; the graded copy is scrubbed, then read-only."""
    def tree(d: Path) -> None:
        (d / "pkg").mkdir()
        (d / "pkg" / "__init__.py").write_text("")
        (d / "pkg" / "core.py").write_text("VALUE = 'source'\n")
        code = compile("VALUE = 'bytecode'\n", str(d / "pkg" / "core.py"), "exec")
        cached = Path(importlib.util.cache_from_source(str(d / "pkg" / "core.py")))
        cached.parent.mkdir()
        cached.write_bytes(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + b"\0" * 8 + marshal.dumps(code))

    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", tree)
    clean = tmp_path / "clean"
    clean.mkdir()
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, LIMITS), templates, base_uid=61840)
    graded_env = pytest_command(["t.py"]).split(" python ")[0]  # the graded run's own environment and flags
    probe = (f"{graded_env} python -P -B -c 'import sys; sys.path.insert(0, \"/testbed\"); import pkg.core; "
             "print(pkg.core.VALUE)'")
    try:
        with pool.acquire(template, graded=True) as sb:
            attack = sb.exec(probe).output.strip()
            assert scrub_leftovers(sb.testbed, clean) == ["pkg/__pycache__"]
            graded = sb.exec(probe + "; touch /testbed/pkg/x.pyc 2>&1 | tail -1").output.strip()
    finally:
        pool.close()
    assert attack == "bytecode", attack  # the attack is real: an unchecked .pyc beside its source wins
    assert graded.splitlines() == ["source", "touch: cannot touch '/testbed/pkg/x.pyc': Read-only file system"], graded


def test_memory_cgroups_are_found_where_root_may_make_them():
    found = MemoryCgroups.detect()
    if not ROOT:
        assert found is None
        return
    if found is None:
        pytest.skip("no writable memory cgroup hierarchy here")
    child = found.create("t", 32 << 20)
    try:
        limit = (child / ("memory.max" if found.version == 2 else "memory.limit_in_bytes")).read_text()
        assert int(limit) == 32 << 20
    finally:
        found.remove(child)
    assert not child.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_graded_files_are_never_restored_through_a_directory_the_diff_made_a_link(tmp_path, backend):
    """Round 2 (hardening): a diff deletes the graded test files under C-quoted names (filter_diff does not
    parse them) and turns tests/ into a link to a host directory. Putting the graded files back, the host
    (root) would read, delete and write through that link; it refuses instead, and the directory is untouched."""
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tests._swe import make_cfg, row_named

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "test_romanum_parse.py").write_text("keep me\n")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path / "run", sandbox={"backend": backend, "pool_size": 2}))
    try:
        task = runtime.grader.task(row_named("romanum"))
        repo = Path(task.repo_path)
        diff = ""
        for path in sorted((repo / "tests").iterdir()):
            quoted = "".join(f"\\{ord(c):03o}" if c == "_" else c for c in f"tests/{path.name}")
            body = "".join(f"-{line}\n" for line in path.read_text().splitlines())
            diff += (f'diff --git "a/{quoted}" "b/{quoted}"\ndeleted file mode 100644\n--- "a/{quoted}"\n+++ /dev/null\n'
                     f"@@ -1,{len(path.read_text().splitlines())} +0,0 @@\n{body}")
        diff += (f"diff --git a/tests b/tests\nnew file mode 120000\n--- /dev/null\n+++ b/tests\n@@ -0,0 +1 @@\n"
                 f"+{outside}\n\\ No newline at end of file\n")
        res = runtime.grader.grade(task, diff)
    finally:
        reset_runtime()
    assert res.reward == 0.0 and "leads out of the repository" in res.reason, res.reason
    assert sorted(p.name for p in outside.iterdir()) == ["test_romanum_parse.py"]
    assert (outside / "test_romanum_parse.py").read_text() == "keep me\n"
