"""Sandboxed command execution for agent rollouts and hidden-test grading.

See `isolation` for what a command can and cannot do (backends: bubblewrap, or
util-linux unshare as the fallback), `runner` for how it is run, `pool` for warm slots,
`templates` for per-task checkouts, `storage` for the per-slot disk cap and cleanup.
"""

from tandem.envs.coding.sandbox.isolation import Isolation, Limits, SandboxUnavailable, detect_backend
from tandem.envs.coding.sandbox.pool import Sandbox, SandboxInfraError, SandboxPool
from tandem.envs.coding.sandbox.runner import ExecResult, run_bounded
from tandem.envs.coding.sandbox.storage import remove_tree
from tandem.envs.coding.sandbox.templates import PrepareError, TemplateCache, host_git

__all__ = ["ExecResult", "Isolation", "Limits", "PrepareError", "Sandbox", "SandboxInfraError", "SandboxPool",
           "SandboxUnavailable", "TemplateCache", "detect_backend", "host_git", "remove_tree", "run_bounded"]
