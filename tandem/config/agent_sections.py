"""The multi-turn sections of the config tree: the environment loop, the coding agent, and its sandbox.

The environment loop (tandem.env) reads [environment]; the coding environment and the
hidden-test grader read [agent] and [sandbox]; the fields follow the conventions of tandem.config.sections (a docstring each,
ranges declared on the field).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tandem.config.base import Section


class EnvironmentConfig(Section):
    args: dict[str, Any] = {}
    """Keyword arguments for the constructor of the class named by rollout.environment (TOML: [environment.args])."""
    tool_parser: Literal["auto", "hermes", "tool_tokens"] = "auto"
    """How tool calls are read from a reply: hermes = Qwen2.5/Qwen3/Hermes `<tool_call>{json}</tool_call>`; tool_tokens = the tiny model's one-token-per-tool format (model.tiny.tool_tokens); auto = tool_tokens when the tokenizer has them, else hermes."""
    max_turns: int = Field(20, ge=1)
    """Most model turns per episode (a malformed reply uses up a turn); the episode then ends with 'turn_limit'."""
    max_context_tokens: int = Field(32768, ge=1)
    """Longest trajectory (prompt + every turn + observations) in tokens; the episode ends with 'context_limit' before exceeding it."""
    min_turn_tokens: int = Field(16, ge=1)
    """End with 'context_limit' when fewer tokens than this are left for the next reply."""
    wall_time_s: float = Field(1800.0, gt=0)
    """Wall-clock budget of one episode (generation, tools and environment steps); past it the episode ends with 'wall_clock'."""
    tool_timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit of one tool call (or one step/reset of the environment); past it the model is told the call timed out."""
    max_tool_calls_per_turn: int = Field(8, ge=1)
    """Tool calls run from one reply; further calls in the same reply are answered with an error."""
    chat_template_kwargs: dict[str, Any] = {}
    """Extra arguments for tokenizer.apply_chat_template (e.g. {enable_thinking = false} for Qwen3)."""


class AgentConfig(Section):
    output_max_chars: int = Field(10000, ge=1)
    """Command output longer than this is shown as its first and last half (mini-swe-agent: 10k, 5k + 5k)."""
    action_regex: str = "```bash\\s*\\n(.*?)\\n```"
    """Regex (DOTALL) that finds the bash action in a reply; exactly one match is a valid turn."""
    submit_sentinel: str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    """The episode ends ('submitted') when a command's first output line is this string."""
    prompt_file: str = ""
    """TOML file overriding system_template / instance_template / format_error_template / observation_template (Jinja2); empty = built-in mini-swe-agent-style prompts."""


class SandboxConfig(Section):
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
