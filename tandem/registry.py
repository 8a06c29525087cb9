"""Where the core finds what plugs into it: each backend name a config can give, and the module
that implements it, as a 'module:attribute' string imported on first use.

The core (config, launcher and loop, producer, rollout client, losses, trainer process, weights,
checkpoints) imports no engine implementation, no environment and no lab module; the layering
contracts in pyproject.toml fail the tests if one does. What it needs of them it asks for here,
by the name the config gave (`engine.backend`, `environment.name`, ...; a trainer backend's
'module:Class' is on its config model, tandem/config/trainer_sections.py, and loaded here),
so a backend costs its imports (torch, megatron, fastapi) only in the process that runs it.
This is also the one module that imports tandem code at run time: everywhere else an import
stands at the top of its module, where the contracts see it.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

ENGINE_CORES = {
    "embedded": "tandem.engine.embedded:EmbeddedCore",
    "sim": "tandem.lab.sim_engine:SimEngineCore",
}
"""engine.backend -> the EngineCore that `python -m tandem.engine` serves (sglang and external
engines are not served by tandem)."""

ENGINE_SERVER = "tandem.engine"
"""The module run as `python -m` for an engine.backend in ENGINE_CORES."""

ENGINE_COMMANDS = {"sglang": "tandem.engine.sglang_launch:sglang_command"}
"""engine.backend -> fn(cfg, port=, model_path=) -> argv of an engine that is not tandem's own server."""

ENGINE_ENVS = {"sglang": "tandem.engine.sglang_launch:sglang_env"}
"""engine.backend -> fn(cfg) -> environment variables every engine of that backend gets."""

ENGINE_PREFLIGHT = {"sglang": "tandem.engine.sglang_launch:interpreter_problems"}
"""engine.backend -> fn(cfg, run) -> problems found before anything starts."""

ENVIRONMENT_ARGS = {"tandem.envs.coding:CodingEnv": "tandem.envs.coding.settings:CodingArgs"}
"""The bundled environments that type their arguments (environment.name -> its Args model), for --help."""

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
