"""The realistic task set (data/swe_realistic, scripts/make_realistic_tasks.py) is SWE-smith-shaped:
procedural bugs, several per repository, whose hidden tests are mostly parametrize tables of functions
returning bools, small ints and enums; and it is what the generator writes from its specs.

The rows were validated when written (the clean repository passes its tests under plain pytest,
each bug fails at least one: scripts/make_swe_tasks.py raises otherwise); bench/refusal_rate.py
grades them. These checks read files only (no sandbox, no pytest run).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "swe_realistic"
SWE_FIELDS = {"instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement",
              "created_at", "image_name"}
PROCEDURAL = re.compile(r"\.func_pm_(op_flip|op_swap|op_change_const|op_change|op_break_chains|remove_cond|"
                        r"remove_assign|remove_loop|ctrl_invert_if)_\w+__[0-9a-f]{8}$")


def _rows() -> list[dict]:
    return [json.loads(line) for line in (DATA / "tasks.jsonl").read_text().splitlines()]


def _script(name: str):
    """A module of scripts/ loaded from its file (its sibling imports resolve through sys.modules)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
        assert spec and spec.loader
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def _specs() -> list[dict]:
    for sibling in ("make_swe_tasks", "realistic_specs_a", "realistic_specs_b"):
        _script(sibling)
    return _script("make_realistic_tasks").specs()


def test_thirty_procedural_bugs_drawn_several_per_repository():
    rows = _rows()
    assert len(rows) >= 30 and len({r["instance_id"] for r in rows}) == len(rows)
    per_repo = Counter(r["repo"] for r in rows)
    assert len(per_repo) >= 5 and min(per_repo.values()) >= 4, per_repo
    for r in rows:
        assert SWE_FIELDS <= set(r) and r["FAIL_TO_PASS"] and r["PASS_TO_PASS"], r["instance_id"]
        assert PROCEDURAL.search(r["instance_id"]), r["instance_id"]
        assert r["patch"].startswith("diff --git a/") and "tests/" not in r["patch"]
        assert len([ln for ln in r["patch"].splitlines() if ln.startswith("+") and not ln.startswith("+++")]) <= 2
        assert (DATA / r["repo_path"] / "README.md").exists()


def test_hidden_tests_are_mostly_parametrized_with_small_codomains():
    rows = _rows()
    hidden = [t for r in rows for t in r["FAIL_TO_PASS"]]
    assert sum(t.endswith("]") for t in hidden) >= 0.8 * len(hidden)
    # functions returning a bool, a small int or an enum: the shapes the grader's guess rules meet
    sources = "".join((DATA / r["repo_path"] / f).read_text() for r in {r["repo"]: r for r in rows}.values()
                      for f in ("datekit/calendar.py", "numkit/ints.py", "shapekit/plane.py", "httpkit/status.py",
                                "stockkit/stock.py", "textkit/text.py") if (DATA / r["repo_path"] / f).exists())
    assert len(re.findall(r"\) -> bool:", sources)) >= 5 and len(re.findall(r"enum\.\w*Enum", sources)) >= 2


def test_the_rows_are_the_generators_output():
    """Each row's patch and problem statement come from its spec, and its instance id hashes the spec's files
    and patch as scripts/make_swe_tasks.py does (a spec edited without regenerating fails here)."""
    rows = {r["instance_id"].split(".")[-1].rsplit("__", 1)[0] + "@" + r["repo"]: r for r in _rows()}
    specs = _specs()
    assert len(specs) == len(rows)
    for spec in specs:
        row = rows[f"{spec['bug']['id']}@tandem/{spec['name']}"]
        assert row["problem_statement"] == spec["problem_statement"]
        files = {**spec["files"], "README.md": (DATA / row["repo_path"] / "README.md").read_text()}
        assert row["instance_id"].split(".")[1] == hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]
        assert row["instance_id"].endswith(hashlib.sha1(row["patch"].encode()).hexdigest()[:8])
        for rel, text in spec["files"].items():
            assert (DATA / row["repo_path"] / rel).read_text() == text, rel
