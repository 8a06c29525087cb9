"""Regenerate the core's import contract from the backend tables: `python scripts/write_import_contracts.py`.

pyproject.toml's contract `core-imports-no-plugin` names the core (its source_modules) and the plug-ins
(its forbidden_modules); neither list is written by hand. A plug-in is a top-level package of tandem/
that holds something a backend table names: an engine backend's core, launch command, environment or
preflight (tandem/config/engine_sections.py), a bundled environment or its arguments
(tandem.registry.ENVIRONMENTS), a lab piece (tandem.registry.LAB), a trainer backend that lives outside
the trainer process's own package (tandem/config/trainer_sections.py); and the `tandem` command's
module, which sits above everything (pyproject's [project.scripts]). The core is every other top-level
module. tests/test_layout.py fails when pyproject.toml and the tables drift apart; the order of the
core's layers (`core-layers`) is a design decision, kept by hand and checked to hold exactly the core.
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

from tandem import registry
from tandem.config import ENGINE_BACKENDS, TRAINER_BACKENDS

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
TRAINER_PROCESS = "tandem.trainer"
"""The trainer process is core: the backends it ships (torch, megatron) are its own modules, loaded by name."""


def package(spec: str) -> str:
    """'tandem.engine.embedded:EmbeddedCore' -> 'tandem.engine'."""
    return ".".join(spec.partition(":")[0].split(".")[:2])


def named_by_the_tables() -> list[str]:
    """Every 'module:attribute' a backend table names, and the command's entry point."""
    specs = [s for model in ENGINE_BACKENDS.values()
             for s in (model.core, model.launch_command, model.launch_env, model.preflight) if s]
    specs += [s for name, env in registry.ENVIRONMENTS.items() for s in (name, env.args) if s]
    specs += list(registry.LAB.values())
    specs += [s for model in TRAINER_BACKENDS.values() for s in (model.implementation, model.launch_command)
              if s and package(s) != TRAINER_PROCESS]
    specs += tomllib.loads(PYPROJECT.read_text())["project"]["scripts"].values()
    return specs


def contract_modules() -> tuple[list[str], list[str]]:
    """(core, plug-ins): the top-level modules of tandem/, split by the backend tables."""
    plugins = {package(spec) for spec in named_by_the_tables() if spec.startswith("tandem.")}  # not a user's module
    on_disk = {f"tandem.{p.stem}" for p in (REPO / "tandem").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    return sorted(on_disk - plugins), sorted(plugins)


def toml_list(key: str, names: list[str]) -> str:
    body = textwrap.fill(", ".join(f'"{n}"' for n in names), 104, initial_indent="    ", subsequent_indent="    ")
    return f"{key} = [\n{body},\n]"


def with_derived_contract(text: str) -> str:
    """pyproject.toml's text with core-imports-no-plugin's two lists derived from the tables."""
    core, plugins = contract_modules()
    start = text.index('id = "core-imports-no-plugin"')
    end = text.index("[[tool.importlinter.contracts]]", start)
    block = text[start:end]
    block = re.sub(r"source_modules = \[.*?\]", toml_list("source_modules", core), block, count=1, flags=re.S)
    block = re.sub(r"forbidden_modules = \[.*?\]", toml_list("forbidden_modules", plugins), block, count=1, flags=re.S)
    return text[:start] + block + text[end:]


if __name__ == "__main__":
    PYPROJECT.write_text(with_derived_contract(PYPROJECT.read_text()))
