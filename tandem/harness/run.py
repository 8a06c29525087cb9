"""Running one harness trajectory: an async function in process, or a program per trajectory.

Both get a trajectory's endpoint (base URL and key) and the dataset row, are bounded by
rollout.harness_timeout_s, and give back a reward (or nothing, for rollout.reward to score) and
what happened (time; for a program its exit status and the ends of its output). Whatever goes
wrong (a raise, a hang, a crash, output with no reward in it) is a HarnessFailed naming why.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import openai

from tandem.errors import RunFatal
from tandem.rollout.plugins import PluginError, load_plugin

OUTPUT_TAIL_CHARS = 2000
"""The end of a program's stdout and stderr kept with its trajectory (and in a failure's reason)."""


class HarnessFailed(RuntimeError):
    """The trajectory failed; the message says why (timeout, error, garbage, no calls)."""


@dataclass
class HarnessOutcome:
    reward: float | None
    """None: the harness left scoring to rollout.reward."""
    info: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    """Kept in sample.metadata['harness']: elapsed_s; for a program exit_status, stdout and stderr tails."""


def load_harness_fn(spec: str) -> Callable:
    """rollout.harness -> the function, checked: `async def fn(client, row)`."""
    fn = load_plugin(spec, "rollout.harness")
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))):
        raise PluginError(f"rollout.harness '{spec}' must be an async function (async def run(client, row))")
    try:
        inspect.signature(fn).bind("client", "row")
    except (TypeError, ValueError) as err:
        raise PluginError(f"rollout.harness '{spec}' must take (client, row): {err}") from err
    return fn


def reward_of(value: Any, what: str) -> tuple[float | None, dict]:
    """A harness's result as (reward, info): a number, (number, info), {"reward": n, "info": {...}} or None."""
    if value is None:
        return None, {}
    if isinstance(value, dict) and "reward" in value:
        value = (value["reward"], value.get("info") or {})
    reward, info = value if isinstance(value, tuple) and len(value) == 2 else (value, {})
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not isinstance(info, dict):
        raise HarnessFailed(f"garbage: {what} gave {value!r:.200}, not a reward (a number, (number, info) "
                            f"or None)")
    return float(reward), dict(info)


async def run_function(fn: Callable, base_url: str, key: str, row: dict, timeout_s: float,
                       http_client: Any = None) -> HarnessOutcome:
    """`await fn(client, row)` with an AsyncOpenAI client on the trajectory's endpoint. `http_client`: one
    httpx client shared by every trajectory (a client of its own per trajectory loads the CA bundle each
    time: measured, most of the orchestrator's time at 128 trajectories a step)."""
    started = time.monotonic()
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=timeout_s,
                                http_client=http_client)
    try:
        value = await asyncio.wait_for(fn(client, dict(row)), timeout_s)
    except asyncio.TimeoutError:
        raise HarnessFailed(f"timeout: the harness ran past rollout.harness_timeout_s = {timeout_s:g}s") from None
    except (RunFatal, HarnessFailed):
        raise
    except Exception as err:
        raise HarnessFailed(f"error: the harness raised {type(err).__name__}: {err}") from err
    finally:
        if http_client is None:
            await client.close()
    reward, info = reward_of(value, "the harness function")
    return HarnessOutcome(reward, info, {"elapsed_s": round(time.monotonic() - started, 3)})


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the program and every child it left in its group
    except (ProcessLookupError, PermissionError):
        pass


def reward_line(stdout: str) -> tuple[float, dict] | None:
    """The last stdout line that is a reward: {"reward": n, "info": {...}} or a bare number."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "reward" in value or isinstance(value, (int, float)) and not isinstance(value, bool):
            reward, info = reward_of(value, "the program's reward line")
            return float(reward or 0.0), info
    return None


async def run_program(argv: list[str], base_url: str, key: str, row: dict, timeout_s: float) -> HarnessOutcome:
    """One process for the trajectory, in its own process group (killed whole at the end, on timeout
    or when the group is cancelled), the row as JSON on stdin."""
    started = time.monotonic()
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, start_new_session=True)
    except OSError as err:
        raise HarnessFailed(f"error: cannot start the harness program {argv[0]!r}: {err}") from err
    try:
        out, err_out = await asyncio.wait_for(proc.communicate(json.dumps(row, default=str).encode()), timeout_s)
    except asyncio.TimeoutError:
        raise HarnessFailed(f"timeout: the harness program ran past rollout.harness_timeout_s = {timeout_s:g}s "
                            f"and was killed with its process group") from None
    finally:
        _kill_group(proc)
        await proc.wait()
    stdout, stderr = out.decode(errors="replace"), err_out.decode(errors="replace")
    details = {"elapsed_s": round(time.monotonic() - started, 3), "exit_status": proc.returncode,
               "stdout": stdout[-OUTPUT_TAIL_CHARS:], "stderr": stderr[-OUTPUT_TAIL_CHARS:]}
    if proc.returncode != 0:
        raise HarnessFailed(f"error: the harness program exited with status {proc.returncode}; stderr ends: "
                            f"{stderr[-OUTPUT_TAIL_CHARS:].strip()!r}")
    reward, info = reward_line(stdout) or (None, {})
    return HarnessOutcome(reward, info, details=details)
