"""Issue 46: correct alternative fixes of the bundled tasks score 1 (a sample of the corpus in tests/_fix_corpus*.py).

The whole corpus (two or more fixes per bundled task, each checked against the original hidden tests under
plain pytest and graded on both sandbox backends) runs in `python bench/fix_corpus.py`, the realistic set's in
`python bench/fix_corpus.py --tasks data/swe_realistic/tasks.jsonl`; here one fix of each form runs through the
real grader on one working backend, after passing the original tests itself, and one fix of the realistic set.
"""

from __future__ import annotations

import collections
import pytest

from pathlib import Path

from tests._fix_corpus import FORMS, corpus

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = ("tinystats:return_type", "ciphers:latin1", "checkout:cache", "jpointer:new_module", "globmatch:algorithm",
          "textkit/ctrl_invert_if_title_words:return_type")
"""One fix per form, chosen where the grader had to change or could go wrong: an exact Fraction where the test
compares with a float, a latin-1 source file, a module writing a JSON file beside itself (and a new module),
a helper in a new file, a stdlib algorithm replacing the repository's matcher; and of the realistic set, a
collections.UserString where the parametrized expectation (held on the host) is a str."""

REALISTIC = ROOT / "data" / "swe_realistic" / "tasks.jsonl"


def _fix_and_task(name: str):
    """A corpus fix by name and its task (bundled or realistic: a realistic task's name holds a '/')."""
    from bench.fix_corpus import BUNDLED, task_resolver
    from tests._fix_corpus_real import realistic_corpus

    fixes = corpus() + realistic_corpus()
    fx = next(fx for fx in fixes if fx.name == name)
    return fx, task_resolver(REALISTIC if "/" in fx.task else BUNDLED)(fx)


def test_the_corpus_holds_two_fixes_of_every_bundled_task_and_every_form():
    from tests._swe import bundled_rows

    fixes = corpus()
    per_task = collections.Counter(fx.task for fx in fixes)
    tasks = {r["repo"].split("/", 1)[1] for r in bundled_rows()}
    assert set(per_task) == tasks and min(per_task.values()) >= 2, per_task
    assert {fx.form for fx in fixes} == set(FORMS)
    assert len({fx.name for fx in fixes}) == len(fixes)  # names are unique
    assert {fx.form for fx in fixes if fx.name in SAMPLE} == set(FORMS)


def test_the_realistic_corpus_holds_two_fixes_of_every_realistic_task_and_every_form():
    from bench.fix_corpus import task_resolver
    from tandem.envs.coding.swe_data import read_rows
    from tests._fix_corpus_real import realistic_corpus

    fixes, task_of = realistic_corpus(), task_resolver(REALISTIC)
    per_task = collections.Counter(task_of(fx).instance_id for fx in fixes)  # each names exactly one task
    assert set(per_task) == {r["instance_id"] for r in read_rows(REALISTIC)} and min(per_task.values()) >= 2
    assert {fx.form for fx in fixes} == set(FORMS)
    assert len({fx.name for fx in fixes}) == len(fixes)
    assert any(fx.outside for fx in fixes) and not all(fx.outside for fx in fixes)


def test_a_latin1_fix_is_not_utf8_and_applies_as_bytes(tmp_path):
    """The corpus' latin-1 fixes really write a non-UTF-8 byte (the form they stand for)."""
    import subprocess

    from tests._fix_corpus import apply_command

    from tandem.envs.coding.swe_data import task_from_row
    from tests._swe import row_named

    fx = next(fx for fx in corpus() if fx.name == "ciphers:latin1")
    task_from_row(row_named("ciphers")).materialize_agent(tmp_path)  # the bug in place, on the host
    subprocess.run(["bash", "-c", apply_command(fx)], cwd=tmp_path, check=True)
    pkg = tmp_path / "ciphers"
    data = (pkg / "classic.py").read_bytes()
    assert data.startswith(b"# -*- coding: latin-1 -*-\n") and b"Vigen\xe8re" in data
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")


@pytest.mark.parametrize("name", SAMPLE)
def test_a_correct_fix_of_each_form_scores_one(tmp_path, name):
    from bench.fix_corpus import plain_pytest, take_diff
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tests._swe import make_cfg, sandbox_backends

    available, _ = sandbox_backends()
    if not available:
        pytest.skip("no sandbox backend can create namespaces here")
    fx, task = _fix_and_task(name)
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": available[0], "pool_size": 1}))
    try:
        diff = take_diff(runtime, task, fx)
        plain = plain_pytest(task, diff, tmp_path / "plain")
        result = runtime.grader.grade(task, diff)
    finally:
        reset_runtime()
    assert set(plain.values()) == {"PASSED"}, plain  # correct: the original hidden tests pass as written
    assert result.reward == 1.0 and not result.tamper, result.info()


def test_the_checker_drops_a_fix_that_fails_the_original_tests(tmp_path):
    """bench/fix_corpus.py's check (a): a diff that does not fix the bug fails the original hidden tests under
    plain pytest, so the checker reports it as not correct (and does not grade it); so does a diff after which the
    tests do not run at all."""
    from bench.fix_corpus import _failed, plain_pytest
    from tandem.envs.coding.swe_data import task_from_row
    from tests._swe import row_named

    task = task_from_row(row_named("radix"))
    no_fix = b"diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+not a fix\n"
    failed = _failed(plain_pytest(task, no_fix, tmp_path / "bug"))
    assert set(failed) == set(task.fail_to_pass) and set(failed.values()) == {"FAILED"}, failed
    # a diff after which pytest collects nothing: every test is missing from the report, so none passed
    broken = b"diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n" \
             b"@@ -0,0 +1 @@\n+import a_module_that_is_not_there\n"
    missing = _failed(plain_pytest(task, broken, tmp_path / "broken"))
    assert set(missing) == set(task.tests) and set(missing.values()) == {"NOT_RUN"}, missing
