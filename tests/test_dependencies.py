"""One place for every exact pin: constraints.txt. pyproject.toml names the packages (its
dependencies and extras), the requirements files install them against the constraints, and
nothing else carries a version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTALL_FILES = ("requirements.txt", "requirements-dev.txt", "requirements-gpu.txt", "requirements-envs.txt",
                 "requirements-deploy.txt", "requirements-wandb.txt")
"""Every requirements file of tandem's own environment (requirements-sglang.txt is SGLang's virtualenv)."""


def name(requirement: str) -> str:
    return re.split(r"[=<>\[;\s]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines(REPO / "constraints.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", line), f"constraints.txt: {line!r} is not name==version"
        assert name(line) not in found, f"constraints.txt pins {name(line)} twice"
        found[name(line)] = line.split("==")[1]
    return found


def test_every_named_package_is_pinned_once_in_constraints_and_nowhere_else():
    pinned = pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    named = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert all(not re.search(r"[=<>~]", r) for r in named), "pyproject.toml names packages; versions are in constraints.txt"
    for path in map(REPO.joinpath, INSTALL_FILES):
        text = lines(path)
        assert "-c constraints.txt" in text, f"{path.name} installs without the constraints"
        named += [line for line in text if not line.startswith("-")]
        assert not [line for line in text if "==" in line], f"{path.name} carries a version"
    assert {name(r) for r in named} - set(pinned) == set(), "a package named but not pinned"


def test_the_extras_are_the_ones_the_install_files_use():
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert extras == {"megatron", "deploy", "wandb", "dev"}
    assert "-e .[megatron,deploy,wandb,dev]" in lines(REPO / "requirements-dev.txt")
    assert "-e .[megatron]" in lines(REPO / "requirements-gpu.txt") and "-e ." in lines(REPO / "requirements.txt")
