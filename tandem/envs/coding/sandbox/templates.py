"""Task repositories on the host: git without the user's config, and per-task templates.

A *template* is one task state checked out once (files + a one-commit git repository,
built by a materializer from tandem.envs.coding.swe_data) and reused by every rollout of that task;
the reference run lost ~11% of single-attempt checkouts under load, so builds retry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from tandem.envs.coding.sandbox import lifecycle
from tandem.envs.coding.sandbox.storage import remove_tree

log = logging.getLogger(__name__)

# Fixed identity and date: a template's commit id depends only on its files.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tandem", "GIT_AUTHOR_EMAIL": "tandem@localhost",
    "GIT_COMMITTER_NAME": "tandem", "GIT_COMMITTER_EMAIL": "tandem@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
GIT_EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n"


class PrepareError(RuntimeError):
    """A task's repository could not be checked out into a sandbox, even after retries."""



class DiffTooLarge(RuntimeError):
    """The agent's changes exceed the size that is graded (never a bug fix; would bloat the handoff)."""


def host_git(args: list[str], cwd: Path | None = None, timeout: float = 120.0, check: bool = True,
             git_dir: Path | None = None, work_tree: Path | None = None,
             max_output: int | None = None, rlimits: tuple[int, int] | None = None) -> subprocess.CompletedProcess:
    """git on the host with no system/global config, hooks or fsmonitor: only what we pass.

    With max_output, stdout is read up to that many bytes and a longer output raises
    DiffTooLarge (the process is killed; nothing larger is held in memory). rlimits =
    (address space, largest file written) in bytes bounds git itself (prlimit)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0", "LANG": "C.UTF-8", **GIT_IDENTITY}
    if cwd is not None:
        # Never discover a repository above cwd (sandboxes may live inside the project's checkout).
        env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    pre = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.autocrlf=false",
           "-c", "safe.directory=*", "-c", "init.defaultBranch=main"]
    if rlimits is not None:
        pre = ["prlimit", f"--as={rlimits[0]}", f"--fsize={rlimits[1]}", "--", *pre]
    if git_dir is not None:
        pre += [f"--git-dir={git_dir}"]
    if work_tree is not None:
        pre += [f"--work-tree={work_tree}"]
    if max_output is not None:
        return _git_capped(pre + args, cwd, env, timeout, max_output, check)
    out = subprocess.run(pre + args, cwd=cwd, env=env, capture_output=True, timeout=timeout)
    if check and out.returncode != 0:
        raise subprocess.CalledProcessError(out.returncode, ["git", *args], out.stdout, out.stderr)
    return out


def _git_capped(argv: list[str], cwd, env, timeout: float, max_output: int, check: bool) -> subprocess.CompletedProcess:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err)
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            data = stdout.read(max_output + 1)
            if len(data) > max_output:
                proc.kill()
                raise DiffTooLarge(f"diff exceeds {max_output} bytes")
            stdout.close()
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        stderr = err.read()
    if check and rc != 0:
        raise subprocess.CalledProcessError(rc, argv, data, stderr)
    return subprocess.CompletedProcess(argv, rc, data, stderr)


Materializer = Callable[[Path], object]
"""Writes one task state (its files, no .git) into an empty directory."""


class TemplateCache:
    """Each task state is checked out once, as a one-commit repository, then copied per rollout."""

    def __init__(self, root: Path, retries: int = 4, backoff_s: float = 0.25):
        self.root = root
        self.backoff_s = backoff_s
        root.mkdir(parents=True, exist_ok=True)
        self.retries = retries
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.builds = 0
        self.failed_attempts = 0

    def path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in key)[:80]
        return self.root / f"{safe}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"

    def get(self, key: str, materialize: Materializer, message: str = "tandem task state") -> Path:
        """The template directory for `key` (holding testbed/ with .git), built on first use."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            dest = self.path(key)
            if (dest / "READY").exists():
                return dest
            last: Exception | None = None
            for attempt in range(self.retries + 1):
                try:
                    self._build(dest, materialize, message)
                    self.builds += 1
                    return dest
                except Exception as err:  # network checkouts fail transiently under load
                    last = err
                    self.failed_attempts += 1
                    log.warning("checkout of %s failed (attempt %d/%d): %s", key, attempt + 1, self.retries + 1, err)
                    if attempt < self.retries:
                        time.sleep(min(8.0, self.backoff_s * 2**attempt))
            raise PrepareError(f"could not check out {key} after {self.retries + 1} attempts: {last}") from last

    def _build(self, dest: Path, materialize: Materializer, message: str) -> None:
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}.{threading.get_ident()}")
        remove_tree(tmp)
        testbed = tmp / "testbed"
        testbed.mkdir(parents=True)
        materialize(testbed)
        remove_tree(testbed / ".git")
        host_git(["init", "-q", "--template="], cwd=testbed)  # no sample hooks: fewer files to copy per slot
        (testbed / ".git" / "info").mkdir(exist_ok=True)
        (testbed / ".git" / "info" / "exclude").write_text(GIT_EXCLUDES)
        host_git(["add", "-A"], cwd=testbed)
        host_git(["commit", "-q", "--allow-empty", "-m", message], cwd=testbed)
        (tmp / "READY").write_text(host_git(["rev-parse", "HEAD"], cwd=testbed).stdout.decode().strip())
        remove_tree(dest)
        os.replace(tmp, dest)

    @staticmethod
    def commit_of(template: Path) -> str:
        return (template / "READY").read_text().strip()

    def close(self) -> None:
        remove_tree(self.root)
        lifecycle.LIVE.discard(self)

    @classmethod
    def ephemeral(cls, sandbox_root: Path, retries: int = 4) -> "TemplateCache":
        """A cache private to this process, removed at exit like the pools."""
        lifecycle.sweep_stale(sandbox_root)
        cache = cls(sandbox_root / f"pool-{os.getpid()}-templates", retries)
        lifecycle.LIVE.add(cache)
        lifecycle.install_cleanup_hooks()
        return cache
