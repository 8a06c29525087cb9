"""The layout's rules, checked: imports run one way, nothing edits sys.path, modules and
functions stay small enough to read (the exceptions are listed with their reason)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY_SCRIPTS = {"train", "rollout", "reward", "sync"}
"""The top-level scripts: the package never imports them (they import the package)."""
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
LONG_MODULES = {
    "scripts/swe_task_specs_a.py": "data: bundled task specs (source text of buggy repositories)",
    "scripts/swe_task_specs_b.py": "data: bundled task specs",
    "scripts/swe_task_specs_c.py": "data: bundled task specs",
    "scripts/swe_task_specs_d.py": "data: bundled task specs",
    "scripts/swe_task_specs_e.py": "data: bundled task specs",
}
"""Module -> why it is clearer whole."""
LONG_FUNCTIONS: dict[str, str] = {}
"""'path::function' -> why it is clearer whole."""


def python_files(*roots: str) -> list[Path]:
    files = [REPO / f"{name}.py" for name in sorted(ENTRY_SCRIPTS)]
    for root in roots:
        files += sorted(p for p in (REPO / root).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_package_never_imports_the_entry_scripts():
    """One table: every module of the package, and which entry scripts (if any) it imports."""
    offenders = {rel(p): sorted(found) for p in python_files("tandem")[len(ENTRY_SCRIPTS):]
                 if (found := imported_modules(ast.parse(p.read_text())) & ENTRY_SCRIPTS)}
    assert offenders == {}


def edits_sys_path(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            return True
    return False


def test_no_code_edits_sys_path():
    offenders = [rel(p) for p in python_files("tandem", "scripts", "bench", "tests") if edits_sys_path(ast.parse(p.read_text()))]
    assert offenders == []


def test_no_module_is_over_the_limit_unless_listed_with_a_reason():
    long = {rel(p): n for p in python_files("tandem", "scripts", "bench")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert set(long) <= set(LONG_MODULES), {k: v for k, v in long.items() if k not in LONG_MODULES}


def test_no_function_is_over_the_limit_unless_listed_with_a_reason():
    long = {}
    for path in python_files("tandem", "scripts", "bench"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{rel(path)}::{node.name}"] = n
    assert set(long) <= set(LONG_FUNCTIONS), {k: v for k, v in long.items() if k not in LONG_FUNCTIONS}


def test_the_exceptions_are_still_needed():
    """An exception whose module or function has shrunk below the limit comes off the list."""
    for path in LONG_MODULES:
        assert len((REPO / path).read_text().splitlines()) > MAX_MODULE_LINES, path
    for entry in LONG_FUNCTIONS:
        path, name = entry.split("::")
        nodes = [n for n in ast.walk(ast.parse((REPO / path).read_text()))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        assert any(n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES for n in nodes), entry
