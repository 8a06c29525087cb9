"""Where the core finds what plugs into it: each backend name a config can give, and the module
that implements it, as a 'module:attribute' string imported on first use. An engine or trainer
backend's strings are on its config model (tandem/config/engine_sections.py, trainer_sections.py: the
one table of each); the bundled environments' are in ENVIRONMENTS below; this module loads them.

The core (config, launcher and loop, producer, rollout client, losses, trainer process, weights,
checkpoints) imports no engine implementation, no environment and no lab module; the layering
contracts in pyproject.toml fail the tests if one does. What it needs of them it asks for here,
by the name the config gave (`engine.backend`, `trainer.backend`, `environment.name`, ...),
so a backend costs its imports (torch, megatron, fastapi) only in the process that runs it.
This is also the one module that imports tandem code at run time: everywhere else an import
stands at the top of its module, where the contracts see it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINE_SERVER = "tandem.engine"
"""The module run as `python -m` for an engine backend whose config model names a `core`."""


@dataclass(frozen=True)
class BundledEnvironment:
    """What the core knows of an environment shipped in tandem/envs without importing it."""
    args: str | None = None
    """'module:Model' of its typed arguments (environment.args), for --help."""
    rehearsal_data: str | None = None
    """Data of the project's own that `--rehearse` uses when the configured data exists only on the node."""


ENVIRONMENTS = {
    "tandem.envs.coding:CodingEnv": BundledEnvironment("tandem.envs.coding.settings:CodingArgs",
                                                       "data/swe_tasks/tasks.jsonl"),
    "tandem.envs.counter:Counter": BundledEnvironment(),
    "tandem.envs.lookup:Lookup": BundledEnvironment(),
    "tandem.envs.verifiers_env:VerifiersEnv": BundledEnvironment(),
    "tandem.envs.openenv_env:OpenEnvEnv": BundledEnvironment(),
}
"""environment.name -> the bundled environment's entry: the one table of environments (an environment of
the user's, 'module:Class' or 'file.py:Class', needs none)."""

LAB = {
    "rehearsal": "tandem.lab.rehearse",
    "model_shape": "tandem.lab.plan.shape:load_shape",
    "decode_step_time": "tandem.lab.sim.latency:decode_step_time",
    "colocation_verdict": "tandem.lab.plan.planner:one_gpu_verdict",
}
"""The lab's pieces the core uses when asked: run.rehearse, the planner's parameter count (for the
disk preflight), the latency model (the autoscaler's decode step time), the memory plan of a colocated
run (run.colocate = "auto" on a one-GPU box)."""

RUN_PHASE = "tandem.orchestrator.session:run"
"""The launcher's run phase (start the children, run the loop), imported once the checks passed: what it
imports (torch, transformers) costs seconds that a refused run should not wait for."""

HARNESS_ROLLOUT = "tandem.harness:HarnessRollout"
"""rollout.harness / rollout.harness_command's rollout plug-in, loaded by the launcher only for a harness run:
the OpenAI SDK it imports is half the launcher's import time, which every refusal and `--help` would pay."""

COMMANDS = {"train": "tandem.orchestrator.train_command:command", "engine": "tandem.engine.__main__:main",
            "inspect": "tandem.inspect.__main__:main", "eval": "tandem.orchestrator.eval_command:main"}
"""`tandem COMMAND` -> its main(argv)."""


class PluginError(ValueError):
    """A name that resolves to nothing: the message names the config key and the cause."""


def load(spec: str, what: str = "plug-in") -> Any:
    """Resolve 'pkg.module:attr', 'path/to/file.py:attr' or a bare module name to the object."""
    module_name, sep, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if sep and (not module_name or not attr):
        raise PluginError(f"{what} '{spec}' must look like 'module:function' or 'file.py:function'")
    module = _import(module_name, what, spec)
    if not attr:
        return module
    if not hasattr(module, attr):
        raise PluginError(f"{what} '{spec}': {module_name} has no function {attr}")
    return getattr(module, attr)


def _import(module_name: str, what: str, spec: str) -> Any:
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            if not path.exists():
                raise PluginError(f"{what} '{spec}': file {path} does not exist")
            mod_spec = importlib.util.spec_from_file_location(f"tandem_plugin_{path.stem}", path)
            if mod_spec is None or mod_spec.loader is None:
                raise PluginError(f"{what} '{spec}': {path} is not a Python module")
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
            return module
        return importlib.import_module(module_name)
    except ImportError as err:
        raise PluginError(f"{what} '{spec}': cannot import {module_name}: {err}") from err


def importable(module: str) -> bool:
    """`module` can be imported here (found on the path; nothing is imported but its parents)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def named(table: dict[str, str], name: str, key: str) -> Any:
    """The entry `name` of `table` (a config key's value) loaded; `key` names the config key."""
    if name not in table:
        raise PluginError(f"{key} = {name!r} has no implementation here (known: {', '.join(sorted(table))})")
    return load(table[name], key)
