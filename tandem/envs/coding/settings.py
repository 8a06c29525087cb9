"""The coding environment's arguments: [environment.args.agent] and [environment.args.sandbox].

They are typed here, beside the environment that reads them, and reach the core only as
`environment.args` (CodingEnv.Args): the launcher checks them against these models before
anything starts, naming each bad key as environment.args.agent.KEY or
environment.args.sandbox.KEY. The hidden-test grader (swe_reward) reads the same settings,
whether or not the coding environment drives the run.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from typing import Any, Literal

from pydantic import Field

from tandem.config import validate_section
from tandem.config.base import Section


class AgentSettings(Section):
    output_max_chars: int = Field(10000, ge=1)
    """Command output longer than this is shown as its first and last half (mini-swe-agent: 10k, 5k + 5k)."""
    action_regex: str = "```bash\\s*\\n(.*?)\\n```"
    """Regex (DOTALL) that finds the bash action in a reply; exactly one match is a valid turn."""
    submit_sentinel: str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    """The episode ends ('submitted') when a command's first output line is this string."""
    prompt_file: str = ""
    """TOML file overriding system_template / instance_template / format_error_template / observation_template (Jinja2); empty = built-in mini-swe-agent-style prompts."""


class SandboxSettings(Section):
    backend: Literal["auto", "bwrap", "unshare"] = "auto"
    """How commands are isolated: bwrap (bubblewrap), unshare (util-linux namespaces + rlimits), or auto (bwrap when installed, else unshare)."""
    root_dir: str = ""
    """Where sandbox working copies live; empty = <run.run_dir>/sandboxes."""
    pool_size: int = Field(0, ge=0)
    """Warm sandbox slots; 0 = the number of rollouts that can be in flight (groups per step x samples x (staleness + 1))."""
    command_timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit of one agent command; the whole process tree is killed past it."""
    test_timeout_s: float = Field(120.0, gt=0)
    """Wall-clock limit of the hidden-test run when grading."""
    test_plugin_autoload: bool = False
    """Let pytest auto-load installed plugins when grading (off: faster and deterministic; turn on for repositories whose tests need e.g. pytest-asyncio)."""
    cpu_time_s: int = Field(60, ge=1)
    """RLIMIT_CPU per process inside the sandbox, in seconds."""
    memory_mb: int = Field(2048, ge=1)
    """RLIMIT_AS (address space) per process inside the sandbox, in MiB."""
    max_processes: int = Field(64, ge=1)
    """RLIMIT_NPROC: most processes/threads the sandbox user may run (stops fork bombs)."""
    max_file_mb: int = Field(64, ge=1)
    """RLIMIT_FSIZE: largest file a sandboxed process may write, in MiB."""
    max_open_files: int = Field(256, ge=1)
    """RLIMIT_NOFILE inside the sandbox."""
    max_workdir_mb: int = Field(512, ge=1)
    """Disk cap of one sandbox (repo + /tmp + its git baseline). As root each slot is a tmpfs of this size (in RAM), so writes past it fail with ENOSPC; without root usage is measured after each command and passing it ends the episode with 'disk_limit'."""
    max_inodes: int = Field(50000, ge=100)
    """Files and directories one sandbox may hold (the tmpfs inode cap; root only, like the byte cap)."""
    max_infra_failures: int = Field(5, ge=1)
    """Samples in a row lost to the sandbox itself (reward 0, reason 'sandbox failure') before the run stops with the cause."""
    max_output_bytes: int = Field(1000000, ge=1)
    """Bytes of command output kept (head and tail); the rest is dropped while reading, so `yes` cannot fill memory."""
    prepare_retries: int = Field(4, ge=0)
    """Extra attempts at checking out a task's repository before the rollout fails (the reference run lost ~11% of checkouts under load without retries)."""
    base_uid: int = Field(61000, ge=1)
    """When tandem runs as root, sandbox slot k runs as the unprivileged uid base_uid + k (per-slot process limits, no access to root's files)."""
    python: str = ""
    """Python interpreter made available inside the sandbox as `python`; empty = the interpreter running tandem (its packages, e.g. pytest, come with it)."""
    extra_ro_paths: list[str] = []
    """Additional host paths bound read-only at the same place inside the sandbox (e.g. a conda env with a task's dependencies)."""


class CodingArgs(Section):
    agent: AgentSettings = AgentSettings()
    """The coding agent's prompts and action format."""
    sandbox: SandboxSettings = SandboxSettings()
    """Isolation and limits for agent commands and hidden-test grading."""


def coding_args(cfg: Any) -> CodingArgs:
    """The coding settings of a run's config (its environment.args), validated as strictly as the
    config itself; a bad key fails naming environment.args.KEY."""
    return validate_section(CodingArgs, cfg.environment.args, "environment.args.")


PYTEST_INSTALL = "pip install -r requirements.txt"
"""What installs pytest beside tandem (a dependency of the project since the grader needs it)."""


def pytest_problems(configured_python: str) -> list[str]:
    """Whether the sandbox's Python (environment.args.sandbox.python; empty: this one) imports pytest,
    checked before anything starts: the grader runs every episode's hidden tests with it."""
    python = configured_python or sys.executable
    if python == sys.executable:
        found = importlib.util.find_spec("pytest") is not None
    else:
        exe = shutil.which(python) or python
        try:
            found = subprocess.run([exe, "-c", "import pytest"], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired) as err:
            return [f"the sandbox's Python {python} (environment.args.sandbox.python) cannot run: {err}"]
    if found:
        return []
    fix = PYTEST_INSTALL if python == sys.executable else f"{python} -m pip install pytest"
    return [f"the sandbox's Python {python} has no pytest, which grades every episode (every reward would be 0): "
            f"`{fix}`, or set environment.args.sandbox.python to an interpreter that has it"]
