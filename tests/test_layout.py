"""The layout's rules, checked: imports run one way, nothing edits sys.path, modules and
functions stay small enough to read (the exceptions are listed with their reason)."""

from __future__ import annotations

import ast
import copy
import importlib.util
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENTRY_SCRIPTS = {"train", "rollout", "reward", "sync"}
"""The top-level scripts: the package never imports them (they import the package)."""
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
LONG_MODULES = {
    "scripts/swe_task_specs_a.py": "data: bundled task specs (source text of buggy repositories)",
    "scripts/realistic_specs_a.py": "data: the realistic task set's repositories and bugs",
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


# --------------------------------------------------------------------------- the layering (import-linter)
def lint_report():
    """import-linter's report on pyproject.toml's contracts, built in this process (no cache)."""
    from importlinter.application import use_cases
    from importlinter.configuration import configure
    from importlinter.contracts import acyclic_siblings, forbidden, independence, layers
    from importlinter.domain.contract import registry

    configure()  # what the lint-imports command sets up before it reads the config
    for name, contract_type in (("forbidden", forbidden.ForbiddenContract), ("layers", layers.LayersContract),
                                ("independence", independence.IndependenceContract),
                                ("acyclic_siblings", acyclic_siblings.AcyclicSiblingsContract)):
        registry.register(contract_type, name)
    options = use_cases.read_user_options(str(REPO / "pyproject.toml"))
    return use_cases.create_report(options, cache_dir=None)


def broken(report, graph=None) -> dict[str, str]:
    """Contract id -> what breaks it, for each contract the graph (the report's own, or a changed
    copy) breaks."""
    found = {}
    for contract, check in report.get_contracts_and_checks():
        if graph is not None:
            check = contract.check(copy.deepcopy(graph), verbose=False)
        if not check.kept:
            found[contract.contract_options["id"]] = f"{contract.name}: {check.metadata}"
    return found


@pytest.fixture(scope="module")
def report():
    return lint_report()


def test_the_import_contracts_hold(report):
    assert len(report.contracts) == 5 and not report.could_not_run
    assert broken(report) == {}


def contract_script():
    spec = importlib.util.spec_from_file_location("write_import_contracts", REPO / "scripts" / "write_import_contracts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_core_and_its_plugins_are_the_ones_the_backend_tables_name():
    """core-imports-no-plugin's two lists are derived from the backend tables (an engine's core or launch
    command, a bundled environment, a lab piece, ...: scripts/write_import_contracts.py), never listed by
    hand: a new module of tandem/ is core unless a table names it, and cannot slip past the contracts, as
    tandem.moe once did. Every core module also has its place in core-layers."""
    script = contract_script()
    text = (REPO / "pyproject.toml").read_text()
    assert script.with_derived_contract(text) == text, "run `python scripts/write_import_contracts.py`"
    core, plugins = script.contract_modules()
    assert {"tandem.engine", "tandem.envs", "tandem.lab", "tandem.cli"} <= set(plugins)
    assert {"tandem.orchestrator", "tandem.trainer", "tandem.moe", "tandem.handoff"} <= set(core)
    contracts = {c["id"]: c for c in tomllib.loads(text)["tool"]["importlinter"]["contracts"]}
    assert contracts["core-imports-no-plugin"]["source_modules"] == core
    layered = {m.strip() for layer in contracts["core-layers"]["layers"] for m in layer.split("|")}
    assert sorted(layered) == core, "place each core module in one of core-layers' layers"


def test_a_backend_table_entry_makes_its_package_a_plugin(monkeypatch):
    """The derivation follows the tables: an engine backend served from a core package would make that
    package a plug-in, which the core may then not import."""
    script = contract_script()
    monkeypatch.setattr(script.ENGINE_BACKENDS["embedded"], "core", "tandem.weights.fake:Core")
    core, plugins = script.contract_modules()
    assert "tandem.weights" in plugins and "tandem.weights" not in core


@pytest.mark.parametrize("importer,imported,breaks", [
    # the core reaching for a plug-in instead of asking tandem.registry
    ("tandem.orchestrator.cluster", "tandem.engine.sglang_launch", {"core-imports-no-plugin"}),
    ("tandem.trainer.__main__", "tandem.lab.sim_trainer", {"core-imports-no-plugin", "no-cycles-between-packages"}),
    # a layer reaching up, and with it a cycle
    ("tandem.config.schema", "tandem.orchestrator.loop", {"core-layers", "no-cycles-between-packages"}),
    # plug-ins stay side by side, under the lab
    ("tandem.envs.coding.grading", "tandem.engine.core", {"plugins-side-by-side"}),
    ("tandem.engine.core", "tandem.lab.sim.latency", {"lab-on-top", "no-cycles-between-packages"}),
])
def test_a_planted_back_import_breaks_its_contract(report, importer, imported, breaks):
    """The contracts fail on the import they exist to refuse: each planted into a copy of the real graph."""
    graph = copy.deepcopy(report.graph)
    assert importer in graph.modules and imported in graph.modules
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    found = broken(report, graph)
    assert set(found) == breaks, found
    assert all(importer.rpartition(".")[0] in why for why in found.values()), found  # the message names the importer


def imports_inside_functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of tandem code made inside a function body."""
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("tandem")):
                    found.append((node.lineno, "." * node.level + (node.module or "")))
                elif isinstance(node, ast.Import):
                    found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tandem"]
    return found


def test_no_module_imports_tandem_code_inside_a_function():
    """An import inside a function hides an edge from the contracts (and so a cycle): tandem code is
    imported at the top of its module, or by name through tandem.registry (third-party imports may
    stay lazy: torch, megatron)."""
    offenders = {rel(p): found for p in python_files("tandem")[len(ENTRY_SCRIPTS):]
                 if (found := imports_inside_functions(ast.parse(p.read_text())))}
    assert offenders == {}


def test_the_inside_function_check_sees_each_form():
    source = ("def f():\n    from tandem.lab import sim_engine\n"
              "async def g():\n    import tandem.envs.coding\n    import torch\n"
              "class C:\n    def m(self):\n        from . import sibling\n")
    assert imports_inside_functions(ast.parse(source)) == [(2, "tandem.lab"), (4, "tandem.envs.coding"), (8, ".")]
