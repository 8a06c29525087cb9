"""Bug-fix tasks in SWE-smith's instance format: the bundled offline set and SWE-smith itself.

An instance (one JSON row) has SWE-smith's fields:

    instance_id        unique name, e.g. "tandem__roman.3f2a91c0.func_pm_op_swap__k2"
    repo               repository name (SWE-smith: the mirror "swesmith/<owner>__<name>.<commit>")
    base_commit        commit the agent starts from (the bug in place, failing tests removed)
    patch              a diff that *introduces* the bug into the clean code; the fix is its reverse
    FAIL_TO_PASS       pytest node ids that fail with the bug and pass once fixed
    PASS_TO_PASS       node ids that pass both ways (regressions are caught by these)
    problem_statement  the issue text shown to the agent
    created_at, image_name

How SWE-smith lays a task out (swesmith/harness/gather.py): on branch `instance_id` of the
mirror, a commit "Bug Patch" applies `patch`, then a commit "Remove F2P Tests" deletes the
files holding the FAIL_TO_PASS tests. The agent works at the branch head (bug, no hidden
tests); grading checks out HEAD~1 (bug + tests), applies the agent's diff and runs the
F2P and P2P tests. tandem reproduces the same two states for every task:

- agent state:  bug in place, F2P test files deleted, as a fresh one-commit repository
                (no history: `git log -p` must not reveal the bug patch);
- graded state: bug in place, every test file present.

tandem adds three fields to a row: `source` ("bundled" | "swesmith"), `repo_path` (bundled:
the clean repository, relative to the tasks file) and `repo_url` (swesmith: where to clone).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.envs.coding.sandbox.templates import host_git
from tandem.paths import PROJECT_ROOT

SWE_SMITH_DATASET = "SWE-bench/SWE-smith"
BUNDLED_TASKS = PROJECT_ROOT / "data" / "swe_tasks" / "tasks.jsonl"
_FIELD_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")


@dataclass(frozen=True)
class SweTask:
    instance_id: str
    repo: str
    patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str
    base_commit: str = ""
    source: str = "bundled"
    repo_path: str = ""
    """Bundled: absolute path of the clean repository."""
    repo_url: str = ""
    """SWE-smith: git URL of the mirror repository (one branch per instance)."""

    @property
    def tests(self) -> tuple[str, ...]:
        return self.fail_to_pass + self.pass_to_pass

    @property
    def hidden_test_files(self) -> list[str]:
        """Files holding FAIL_TO_PASS tests: absent from the agent's copy, restored for grading."""
        return sorted({t.split("::", 1)[0] for t in self.fail_to_pass})

    @property
    def test_files(self) -> list[str]:
        """Every file the grader runs (F2P and P2P); agent edits to them are never graded."""
        return sorted({t.split("::", 1)[0] for t in self.tests})

    # ------------------------------------------------------------------ task states
    def materialize_agent(self, dest: Path, cache_dir: Path | None = None) -> None:
        """Agent state: the bug in place, the hidden (F2P) test files removed."""
        if self.source == "swesmith":
            _swesmith_checkout(self, dest, cache_dir, graded=False)
            return
        self._bundled_with_bug(dest)
        for rel in self.hidden_test_files:
            target = dest / rel
            if target.exists():
                target.unlink()

    def materialize_graded(self, dest: Path, cache_dir: Path | None = None) -> None:
        """Graded state: the bug in place and every test present."""
        if self.source == "swesmith":
            _swesmith_checkout(self, dest, cache_dir, graded=True)
            return
        self._bundled_with_bug(dest)

    def _bundled_with_bug(self, dest: Path) -> None:
        src = Path(self.repo_path)
        if not src.is_dir():
            raise FileNotFoundError(f"{self.instance_id}: repository {src} does not exist")
        shutil.copytree(src, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        apply_patch(dest, self.patch)


def apply_patch(repo_dir: Path, patch: str | bytes, reverse: bool = False,
                rlimits: tuple[int, int] | None = None) -> None:
    """Apply a git-style diff to a directory (no repository needed), or raise with git's reason.

    `patch` as bytes, or as text that holds them (diff_text: undecodable bytes as surrogate escapes).

    rlimits: (address space, largest file) in bytes for git apply (see tandem.envs.coding.graded_diff)."""
    if not patch.strip():
        return
    patch_file = repo_dir.parent / f".{repo_dir.name}.{os.getpid()}.{threading.get_ident()}.diff"
    patch_file.write_bytes(patch if isinstance(patch, bytes) else patch.encode("utf-8", "surrogateescape"))
    try:
        args = ["apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), str(patch_file)]
        out = host_git(args, cwd=repo_dir, check=False, timeout=60, rlimits=rlimits)
        if out.returncode != 0:
            raise ValueError(f"patch does not apply: {out.stderr.decode(errors='replace').strip()[-500:]}")
    finally:
        patch_file.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- rows
def task_from_row(row: dict[str, Any], base_dir: str | os.PathLike | None = None) -> SweTask:
    """Build a task from a dataset row; relative `repo_path`s resolve against base_dir."""
    def tests(key: str) -> tuple[str, ...]:
        value = row.get(key) or []
        if isinstance(value, str):  # the hub stores these lists as JSON strings in some versions
            value = json.loads(value)
        return tuple(str(v) for v in value)

    source = str(row.get("source") or ("bundled" if row.get("repo_path") else "swesmith"))
    repo_path = str(row.get("repo_path") or "")
    if repo_path and not os.path.isabs(repo_path):
        candidates = [Path(base_dir)] if base_dir else []
        candidates.append(BUNDLED_TASKS.parent)  # the shipped tasks, wherever the config points
        found = next((c / repo_path for c in candidates if (c / repo_path).is_dir()), candidates[0] / repo_path)
        repo_path = str(found.resolve())
    repo_url = str(row.get("repo_url") or "")
    if source == "swesmith" and not repo_url:
        repo_url = f"https://github.com/{row['repo']}.git"
    return SweTask(
        instance_id=str(row["instance_id"]), repo=str(row.get("repo", "")), patch=str(row.get("patch", "")),
        fail_to_pass=tests("FAIL_TO_PASS"), pass_to_pass=tests("PASS_TO_PASS"),
        problem_statement=str(row.get("problem_statement", "")), base_commit=str(row.get("base_commit") or ""),
        source=source, repo_path=repo_path, repo_url=repo_url)


def read_rows(path: str | os.PathLike = BUNDLED_TASKS) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_bundled(path: str | os.PathLike = BUNDLED_TASKS) -> list[SweTask]:
    """The offline tasks shipped in data/swe_tasks (made by scripts/make_swe_tasks.py)."""
    return [task_from_row(r, Path(path).parent) for r in read_rows(path)]


def load_swe_smith(split: str = "train", limit: int | None = None, dataset: str = SWE_SMITH_DATASET,
                   repo_filter: str | None = None) -> list[dict[str, Any]]:
    """SWE-smith instances from the Hugging Face hub (needs network), as tandem rows."""
    import datasets

    ds = datasets.load_dataset(dataset, split=split)
    rows = []
    for r in ds:
        if repo_filter and repo_filter not in r["repo"]:
            continue
        row = {k: r.get(k) for k in ("instance_id", "repo", "base_commit", "patch", "problem_statement",
                                       "created_at", "image_name")}
        for key in _FIELD_LISTS:
            value = r.get(key) or []
            row[key] = json.loads(value) if isinstance(value, str) else list(value)
        row["source"] = "swesmith"
        row["repo_url"] = f"https://github.com/{r['repo']}.git"
        if not row["problem_statement"]:
            continue  # SWE-smith has instances without an issue text; the agent needs one
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows


# ----------------------------------------------------------------------------- swe-smith checkouts
_CLONE_LOCKS: dict[str, threading.Lock] = {}
_CLONE_GUARD = threading.Lock()


def _swesmith_checkout(task: SweTask, dest: Path, cache_dir: Path | None, graded: bool) -> None:
    """Export the instance branch (agent: its head; graded: the 'Bug Patch' commit) into dest.

    One bare clone per mirror repository is kept in cache_dir and fetched per branch; any
    failure raises, and the caller (TemplateCache) retries with backoff.
    """
    cache = Path(cache_dir or Path.home() / ".cache" / "tandem" / "swesmith")
    cache.mkdir(parents=True, exist_ok=True)
    bare = cache / (task.repo.replace("/", "__") + ".git")
    with _CLONE_GUARD:
        lock = _CLONE_LOCKS.setdefault(str(bare), threading.Lock())
    with lock:
        if not (bare / "HEAD").exists():
            tmp = bare.with_name(bare.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            host_git(["clone", "--bare", "--quiet", "--no-tags", "--single-branch", task.repo_url, str(tmp)],
                     cwd=cache, timeout=900)
            os.replace(tmp, bare)
        ref = f"refs/tandem/{task.instance_id}"
        host_git(["fetch", "--quiet", "--no-tags", "origin", f"+refs/heads/{task.instance_id}:{ref}"],
                 git_dir=bare, cwd=cache, timeout=600)
        head_subject = host_git(["log", "-1", "--format=%s", ref], git_dir=bare, cwd=cache).stdout.decode().strip()
        target = ref
        if graded and head_subject == "Remove F2P Tests":
            target = f"{ref}~1"
        archive = host_git(["archive", "--format=tar", target], git_dir=bare, cwd=cache, timeout=600).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    if not graded and head_subject != "Remove F2P Tests":
        for rel in task.hidden_test_files:  # older mirrors kept the tests on the branch head
            (dest / rel).unlink(missing_ok=True)


# ----------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export SWE-smith instances from the hub to a JSONL that "
                                                 "data.path can point at (needs network).")
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--dataset", default=SWE_SMITH_DATASET)
    parser.add_argument("--repo-filter", default=None, help="keep instances whose repo contains this string")
    args = parser.parse_args(argv)
    rows = load_swe_smith(args.split, args.limit, args.dataset, args.repo_filter)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} SWE-smith instances to {args.out}")


if __name__ == "__main__":
    main()
