"""Build data/swe_tasks: small pure-Python repositories with one injected bug each.

    python scripts/make_swe_tasks.py [--out data/swe_tasks]

For every spec in scripts/swe_task_specs_*.py this writes the clean repository to
<out>/repos/<name>/, injects the bug into a copy, and runs pytest on both states to derive
SWE-smith's fields: FAIL_TO_PASS = tests that fail with the bug and pass without it,
PASS_TO_PASS = tests that pass in both. `patch` is the diff that introduces the bug (the
fix is its reverse), as in SWE-smith. A spec whose clean state fails a test, or whose bug
breaks nothing, is an error. base_commit is the commit id of the agent's starting
repository as tandem builds it (bug in place, FAIL_TO_PASS test files removed; fixed
identity and dates make it reproducible, and tests/test_swe_tasks.py checks it).
The output is deterministic: running the script twice gives identical files.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tandem.envs.coding.sandbox.templates import TemplateCache
from tandem.envs.coding.swe_data import task_from_row
from tandem.envs.coding.verdict import parse_pytest_report

ROOT = Path(__file__).resolve().parent.parent

CREATED_AT = "2026-01-01T00:00:00"


def load_specs() -> list[dict]:
    # The spec parts sit next to this script, so they import as top-level modules when it runs.
    import swe_task_specs_a
    import swe_task_specs_b  # noqa: F401  (each part registers its specs)
    import swe_task_specs_c  # noqa: F401
    import swe_task_specs_d  # noqa: F401
    import swe_task_specs_e  # noqa: F401

    return list(swe_task_specs_a.SPECS)


def replace_block(text: str, old: str, new: str) -> str:
    """Replace the (dedented) block `old` wherever it sits, at whatever indent, exactly once."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    lines = text.splitlines()
    hits = []
    for i in range(len(lines) - len(old_lines) + 1):
        first = lines[i]
        indent = first[: len(first) - len(first.lstrip())]
        lead = old_lines[0][: len(old_lines[0]) - len(old_lines[0].lstrip())]
        if not indent.endswith(lead):
            continue
        base = indent[: len(indent) - len(lead)]
        if all(lines[i + k] == (base + ol if ol else "") for k, ol in enumerate(old_lines)):
            hits.append((i, base))
    if len(hits) != 1:
        raise ValueError(f"bug snippet found {len(hits)} times (need exactly 1):\n{old}")
    i, base = hits[0]
    replaced = lines[:i] + [base + nl if nl else "" for nl in new_lines] + lines[i + len(old_lines):]
    return "\n".join(replaced) + ("\n" if text.endswith("\n") else "")


def git_style_diff(path: str, before: str, after: str) -> str:
    body = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def run_pytest(repo: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--tb=no", "-q",
                          "--no-header", "--color=no", "tests"], cwd=repo, capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    return parse_pytest_report(out.stdout)


def readme(spec: dict) -> str:
    pkg = spec["name"]
    module = next(p for p in spec["files"] if p.startswith(f"{pkg}/") and not p.endswith("__init__.py"))
    doc = spec["files"][module].split('"""')[1].strip().splitlines()[0]
    return f"# {pkg}\n\n{doc}\n\nRun the tests with `python -m pytest`.\n"


def write_repo(spec: dict, repos: Path, work: Path) -> tuple[dict, Path, Path, str, dict]:
    """The clean repository under repos/, a buggy copy under work/: (spec, clean, buggy, patch, files)."""
    clean = repos / spec["name"]
    files = {**spec["files"], "README.md": readme(spec)}
    for rel, content in files.items():
        (clean / rel).parent.mkdir(parents=True, exist_ok=True)
        (clean / rel).write_text(content)
    bug = spec["bug"]
    before = files[bug["file"]]
    after = replace_block(before, bug["old"], bug["new"])
    buggy = work / "buggy" / f"{spec['name']}.{bug['id']}"  # several bugs of one repository side by side
    shutil.copytree(clean, buggy)
    (buggy / bug["file"]).write_text(after)
    return spec, clean, buggy, git_style_diff(bug["file"], before, after), files


def task_row(spec: dict, patch: str, files: dict, before: dict[str, str], after: dict[str, str]) -> dict:
    """SWE-smith's fields from the test outcomes of the clean (before) and buggy (after) states."""
    if not before or any(s != "PASSED" for s in before.values()):
        raise ValueError(f"{spec['name']}: clean repository does not pass its tests: {before}")
    f2p = sorted(t for t, s in after.items() if s != "PASSED")
    f2p += sorted(t for t in before if t not in after)  # tests the bug made uncollectable
    p2p = sorted(t for t in before if after.get(t) == "PASSED")
    if not f2p:
        raise ValueError(f"{spec['name']}: the injected bug breaks no test")
    tree = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]
    bug_hash = hashlib.sha1(patch.encode()).hexdigest()[:8]
    return {
        "instance_id": f"tandem__{spec['name']}.{tree}.{spec['bug']['id']}__{bug_hash}",
        "repo": f"tandem/{spec['name']}",
        "base_commit": "",
        "patch": patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": spec["problem_statement"],
        "created_at": CREATED_AT,
        "image_name": "",
        "source": "bundled",
        "repo_path": f"repos/{spec['name']}",
    }


def build(out: Path, specs: list[dict] | None = None) -> list[dict]:
    """Write the tasks of `specs` (default: the bundled ones) to out/tasks.jsonl and their clean
    repositories to out/repos/. Several specs may share a repository (same name and files), each
    with its own bug, as SWE-smith draws many bugs from one repository."""
    specs = load_specs() if specs is None else specs
    keys = [(s["name"], s["bug"]["id"]) for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate (repository, bug id) pairs")
    for name in {s["name"] for s in specs}:
        if len({json.dumps(s["files"], sort_keys=True) for s in specs if s["name"] == name}) != 1:
            raise ValueError(f"{name}: specs of one repository hold different files")
    repos = out / "repos"
    shutil.rmtree(repos, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="swe_tasks_"))
    try:
        prepared = [write_repo(spec, repos, work) for spec in specs]
        with ThreadPoolExecutor(2) as pool:  # one pytest per state and task, two at a time
            clean_res = list(pool.map(run_pytest, [p[1] for p in prepared]))
            buggy_res = list(pool.map(run_pytest, [p[2] for p in prepared]))
        rows = []
        templates = TemplateCache(work / "templates", retries=0)
        for (spec, _clean, _buggy, patch, files), before, after in zip(prepared, clean_res, buggy_res):
            row = task_row(spec, patch, files, before, after)
            task = task_from_row(row, out)
            # The agent's starting commit, as tandem builds it (bug in place, F2P test files removed).
            row["base_commit"] = TemplateCache.commit_of(templates.get(task.instance_id, task.materialize_agent))
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(out / "tasks.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "data" / "swe_tasks"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = build(out)
    f2p = sum(len(r["FAIL_TO_PASS"]) for r in rows)
    p2p = sum(len(r["PASS_TO_PASS"]) for r in rows)
    print(f"wrote {len(rows)} tasks to {out / 'tasks.jsonl'} ({f2p} FAIL_TO_PASS, {p2p} PASS_TO_PASS tests)")


if __name__ == "__main__":
    main()
