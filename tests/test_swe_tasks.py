"""The bundled tasks are real: each has a fix that passes and a buggy state that fails.

Every task goes through the real grader (sandboxed pytest, one run per task state, two
at a time): the reverse of its `patch`, taken as a diff of the agent's repository, earns
reward 1 with every FAIL_TO_PASS and PASS_TO_PASS test passing; the untouched buggy state
fails every FAIL_TO_PASS test and passes every PASS_TO_PASS test. Also covered: the
SWE-smith instance format and branch layout, checkout retries and diff filtering (the
verdict's pieces are in test_reward_forgery.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tandem.envs.coding.grading import filter_diff, get_runtime, pytest_command, reset_runtime
from tandem.envs.coding.sandbox.templates import PrepareError, TemplateCache, host_git
from tandem.envs.coding.swe_data import BUNDLED_TASKS, apply_patch, load_bundled, read_rows, task_from_row
from tandem.envs.coding.verdict import parse_pytest_report
from tests._swe import make_cfg

SWE_FIELDS = {"instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement",
              "created_at", "image_name"}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    reset_runtime()
    rt = get_runtime(make_cfg(tmp_path_factory.mktemp("swe"), sandbox={"pool_size": 2, "test_timeout_s": 120}))
    yield rt
    reset_runtime()


def test_bundled_set_is_large_distinct_and_in_swe_smith_format():
    rows = read_rows(BUNDLED_TASKS)
    assert len(rows) >= 30
    assert len({r["instance_id"] for r in rows}) == len(rows)
    assert len({r["repo"] for r in rows}) == len(rows)  # 30+ distinct repositories
    for r in rows:
        assert SWE_FIELDS <= set(r), r["instance_id"]
        assert r["FAIL_TO_PASS"] and r["PASS_TO_PASS"] and r["problem_statement"].strip()
        assert r["patch"].startswith("diff --git a/") and "tests/" not in r["patch"]
        assert all("::" in t and t.startswith("tests/") for t in r["FAIL_TO_PASS"] + r["PASS_TO_PASS"])
        repo = BUNDLED_TASKS.parent / r["repo_path"]
        assert (repo / "README.md").exists() and list(repo.glob("tests/test_*.py"))


def _run_side_by_side(runtime, tasks, key: str, fixed: bool) -> dict[str, str]:
    """Every task's graded state (bug + all tests; with `fixed`, the reverse patch applied) side by
    side in one sandbox, tested by one pytest run. The repositories have distinct package and
    test-file names, so one process imports them all; node ids come back as tNN/<node id>."""
    def materialize(dest: Path) -> None:
        for i, task in enumerate(tasks):
            task.materialize_graded(dest / f"t{i:02d}")
            if fixed:
                apply_patch(dest / f"t{i:02d}", task.patch, reverse=True)

    template = runtime.templates.get(key, materialize)
    files = [f"t{i:02d}/{f}" for i, t in enumerate(tasks) for f in t.test_files]
    ini = "[pytest]\npythonpath = " + " ".join(f"/testbed/t{i:02d}" for i in range(len(tasks))) + "\naddopts =\n"
    with runtime.agent_pool.acquire(template) as sb:
        (sb.slot.dir / "tmp" / ".tandem_pytest.ini").write_text(ini)
        run = sb.exec(pytest_command(files, ini="/tmp/.tandem_pytest.ini"), timeout_s=300,
                      ro_binds=runtime.grader.ro_binds)
    report = parse_pytest_report(run.output)
    assert report, run.output[-3000:]
    return report


def test_every_fix_passes_and_every_bug_fails(runtime):
    """For each task: the fix (reverse of `patch`) passes all F2P and P2P tests; the bug fails every
    F2P test and passes every P2P test. Two sandboxed pytest runs cover all tasks."""
    tasks = load_bundled()
    fixed = _run_side_by_side(runtime, tasks, "all-fixed", fixed=True)
    buggy = _run_side_by_side(runtime, tasks, "all-buggy", fixed=False)
    bad = {}
    for i, task in enumerate(tasks):
        f = {t: fixed.get(f"t{i:02d}/{t}", "MISSING") for t in task.tests}
        b = {t: buggy.get(f"t{i:02d}/{t}", "MISSING") for t in task.tests}
        wrong = {f"fixed {t}": s for t, s in f.items() if s != "PASSED"}
        wrong.update({f"buggy {t}": b[t] for t in task.fail_to_pass if b[t] == "PASSED"})
        wrong.update({f"buggy {t}": b[t] for t in task.pass_to_pass if b[t] != "PASSED"})
        if wrong:
            bad[task.instance_id] = wrong
    assert not bad, json.dumps(bad, indent=1)[:4000]


def test_agent_state_matches_base_commit_and_hides_f2p_tests(runtime):
    for task in load_bundled():
        template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
        assert TemplateCache.commit_of(template) == task.base_commit, task.instance_id
        assert task.hidden_test_files and not any((template / "testbed" / r).exists() for r in task.hidden_test_files)
        assert host_git(["log", "--oneline"], cwd=template / "testbed").stdout.count(b"\n") == 1  # no history


@pytest.mark.parametrize("index", [0, 11, 22, 31])
def test_fix_as_an_agent_diff_earns_reward_one(runtime, index):
    """The real grader path: the fix taken as a diff of the agent's repository, graded in a clean copy."""
    task = load_bundled()[index]
    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        apply_patch(sb.testbed, task.patch, reverse=True)
        diff = sb.diff()
    res = runtime.grader.grade(task, diff)
    assert res.reward == 1.0 and set(res.tests.values()) == {"PASSED"}, res.reason
    assert res.f2p_passed == len(task.fail_to_pass) and res.p2p_passed == len(task.pass_to_pass)


def test_grader_reports_per_test_results_and_reasons(runtime):
    task = load_bundled()[0]
    wrong = task.patch  # the bug patch again: it cannot apply to a tree that already has the bug
    res = runtime.grader.grade(task, wrong)
    assert res.reward == 0.0 and res.reason.startswith("diff does not apply")
    empty = runtime.grader.grade(task, "")
    assert empty.reward == 0.0 and empty.reason == "no changes: the agent's diff is empty"
    assert set(empty.tests) == set(task.fail_to_pass) | set(task.pass_to_pass)


# ----------------------------------------------------------------------------- grading pieces
def test_filter_diff_drops_test_files_and_conftest():
    diff = ("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-a\n+b\n"
            "diff --git a/tests/test_m.py b/tests/test_m.py\ndeleted file mode 100644\n--- a/tests/test_m.py\n+++ /dev/null\n"
            "@@ -1 +0,0 @@\n-x\n"
            "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+y\n")
    kept, dropped = filter_diff(diff, {"tests/test_m.py"})
    assert kept.startswith("diff --git a/pkg/m.py") and "conftest" not in kept and "test_m" not in kept
    assert dropped == ["conftest.py", "tests/test_m.py"]


# ----------------------------------------------------------------------------- data sources
def test_hub_style_row_with_json_string_lists():
    row = {"instance_id": "o__r.abc.x", "repo": "swesmith/o__r.abc", "patch": "p",
           "FAIL_TO_PASS": '["t/test_a.py::x"]', "PASS_TO_PASS": '["t/test_b.py::y"]', "problem_statement": "s"}
    task = task_from_row(row)
    assert task.source == "swesmith" and task.repo_url == "https://github.com/swesmith/o__r.abc.git"
    assert task.fail_to_pass == ("t/test_a.py::x",) and task.hidden_test_files == ["t/test_a.py"]


def _git(repo: Path, *args: str) -> str:
    return host_git(list(args), cwd=repo).stdout.decode().strip()


def test_swe_smith_branch_layout_checkout(tmp_path):
    """A local mirror laid out like SWE-smith's: branch = instance, 'Bug Patch' then 'Remove F2P Tests'."""
    bundled = read_rows(BUNDLED_TASKS)[0]
    mirror = tmp_path / "mirror"
    task = task_from_row(bundled)
    subprocess.run(["cp", "-r", task.repo_path, str(mirror)], check=True)
    _git(mirror, "init", "-q")
    _git(mirror, "add", "-A")
    _git(mirror, "commit", "-q", "-m", "Initial commit")
    _git(mirror, "checkout", "-q", "-b", bundled["instance_id"])
    apply_patch(mirror, task.patch)
    _git(mirror, "commit", "-q", "-am", "Bug Patch")
    for rel in task.hidden_test_files:
        (mirror / rel).unlink()
    _git(mirror, "commit", "-q", "-am", "Remove F2P Tests")
    _git(mirror, "checkout", "-q", "main")
    row = {**bundled, "source": "swesmith", "repo": "swesmith/local__mirror", "repo_url": mirror.as_uri()}
    row.pop("repo_path")
    sm = task_from_row(row)
    cache = tmp_path / "cache"
    agent, graded = tmp_path / "agent", tmp_path / "graded"
    sm.materialize_agent(agent, cache)
    sm.materialize_graded(graded, cache)
    for rel in sm.hidden_test_files:
        assert not (agent / rel).exists() and (graded / rel).exists()
    bug_file = task.patch.split(" b/", 1)[1].split("\n", 1)[0]
    assert (agent / bug_file).read_text() == (graded / bug_file).read_text()  # bug present in both
    assert (agent / bug_file).read_text() != (Path(task.repo_path) / bug_file).read_text()


def test_checkout_is_retried_then_gives_up(tmp_path):
    cache = TemplateCache(tmp_path / "t", retries=2, backoff_s=0.01)
    calls = []

    def flaky(dest: Path) -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("connection reset by peer")
        (dest / "f").write_text("ok")

    template = cache.get("k", flaky)
    assert (template / "testbed" / "f").read_text() == "ok" and cache.failed_attempts == 2
    with pytest.raises(PrepareError, match="after 3 attempts"):
        cache.get("never", lambda d: (_ for _ in ()).throw(OSError("down")))
