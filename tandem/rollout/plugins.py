"""Plug-ins: the rollout and reward contracts as types, and how a config names a function.

A config names a plug-in as 'package.module:function' or 'path/to/file.py:function'
(tandem.registry resolves it). A module tandem renamed fails with the name to use instead
(tandem.config.renamed).
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Protocol, Union, runtime_checkable

from tandem.config.renamed import renamed_module_message
from tandem.registry import PluginError, load
from tandem.rollout.context import RolloutContext
from tandem.sample import Sample

RewardResult = Union[float, tuple[float, dict[str, Any]]]
"""A reward: a number, or a number and an info dict (kept in sample.reward_info; put a "reason"
there for any 0)."""


@runtime_checkable
class RolloutFn(Protocol):
    """`async def fn(ctx, row, group_size) -> list[Sample]`: one group of samples for one dataset
    row. Raise RolloutAborted to have the group regenerated, RunFatal to stop the run."""

    def __call__(self, ctx: RolloutContext, row: dict, group_size: int) -> Awaitable[list[Sample]]: ...


@runtime_checkable
class RewardFn(Protocol):
    """`fn(sample, row) -> RewardResult`, sync (run on the rollout pool) or async."""

    def __call__(self, sample: Sample, row: dict) -> RewardResult | Awaitable[RewardResult]: ...


CONTRACTS = {"rollout": (RolloutFn, ("ctx", "row", "group_size"), True), "reward": (RewardFn, ("sample", "row"), None)}
"""kind -> (protocol, its positional parameters, must it be a coroutine function (None: either))."""


def load_plugin(spec: str, what: str) -> Callable:
    """Resolve 'pkg.module:fn' or 'path/to/file.py:fn' to the function."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{what} '{spec}' must look like 'module:function' or 'file.py:function'")
    renamed = renamed_module_message(module_name)
    if renamed:
        raise PluginError(f"{what} '{spec}': {renamed}")
    fn = load(spec, what)
    if not callable(fn):
        raise PluginError(f"{what} '{spec}': {module_name} has no function {attr}")
    return fn


def check_contract(fn: Callable, kind: str, spec: str) -> Callable:
    """Refuse at start-up a function that cannot meet the contract, instead of failing mid-run."""
    _, params, must_be_async = CONTRACTS[kind]
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as err:
        raise PluginError(f"{kind} plug-in '{spec}': no signature to check: {err}") from err
    try:
        signature.bind(*params)
    except TypeError as err:
        raise PluginError(f"{kind} plug-in '{spec}' must take ({', '.join(params)}): {err}") from err
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
    if must_be_async and not is_async:
        raise PluginError(f"{kind} plug-in '{spec}' must be an async function (async def)")
    return fn


def load_rollout_fn(spec: str) -> RolloutFn:
    return check_contract(load_plugin(spec, "rollout.function"), "rollout", spec)


def load_reward_fn(spec: str) -> RewardFn:
    return check_contract(load_plugin(spec, "rollout.reward"), "reward", spec)


def check_rollout_result(result: Any, spec: str) -> list[Sample]:
    """What a rollout function returned, checked: a non-empty list of Samples."""
    if not isinstance(result, list) or not result or not all(isinstance(s, Sample) for s in result):
        kinds = sorted({type(s).__name__ for s in result}) if isinstance(result, list) else []
        got = f"list of {kinds or 'nothing'}" if isinstance(result, list) else type(result).__name__
        raise PluginError(f"rollout plug-in '{spec}' must return a non-empty list[Sample], got {got}")
    return result
