"""Sandboxed command execution for agent rollouts and hidden-test grading.

See `isolation` for what a command can and cannot do (backends: bubblewrap, or
util-linux unshare as the fallback) and `pool` for warm slots, per-task templates and
cleanup.
"""

from tandem.sandbox.isolation import (ExecResult, Isolation, Limits, SandboxUnavailable, detect_backend,
                                      run_bounded)
from tandem.sandbox.pool import PrepareError, Sandbox, SandboxPool, TemplateCache, host_git, rmtree_hard

__all__ = ["ExecResult", "Isolation", "Limits", "PrepareError", "Sandbox", "SandboxPool", "SandboxUnavailable",
           "TemplateCache", "detect_backend", "host_git", "rmtree_hard", "run_bounded"]
