"""The type checker over tandem/: mypy, configured in pyproject.toml ([tool.mypy]), finds no error.

The annotations are what a reader and a refactor rely on (a child's signature names its view of the
config, TrainerView or EngineView, not the whole TandemConfig it never receives); this keeps them
true. Run in this process through mypy's API; its cache (.mypy_cache, beside pyproject.toml) makes a
second run take seconds."""

from __future__ import annotations

import tomllib
from pathlib import Path

from mypy import api

REPO = Path(__file__).resolve().parents[1]


def run_mypy(*extra: str) -> tuple[str, int]:
    """mypy as CI runs it, from the repository root: (its report, its exit status)."""
    stdout, stderr, status = api.run(["--config-file", str(REPO / "pyproject.toml"),
                                      "--cache-dir", str(REPO / ".mypy_cache"), *extra])
    return stdout + stderr, status


def test_mypy_finds_no_error_in_tandem(monkeypatch):
    monkeypatch.chdir(REPO)  # [tool.mypy] files = ["tandem"] is relative to the root
    report, status = run_mypy()
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert status == 0 and not errors, f"mypy found {len(errors)} error(s) in tandem/:\n" + "\n".join(errors)
    # every module was checked: a config that skipped a package would pass for the wrong reason
    modules = len(list((REPO / "tandem").rglob("*.py")))
    assert f"Success: no issues found in {modules} source files" in report, report


def test_the_checker_settings_are_the_ones_documented():
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert settings["files"] == ["tandem"] and settings["python_version"] == "3.11"
    assert settings["check_untyped_defs"] is True  # the bodies of unannotated functions are checked too
    assert settings["warn_unused_ignores"] is True  # an ignore that no longer hides an error goes
