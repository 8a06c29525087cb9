"""How one task is graded, decided once from two reference runs: which checks the host holds, and
whether the task can be graded at all.

1. Every graded test file is split (tandem.instrument): each check that can be becomes a
   host-held site; the sandbox copy of the file holds only what the check computes.
2. **Clean run**: the split files against the reference fix (the task's bug patch reversed).
   Every FAIL_TO_PASS and PASS_TO_PASS test must pass, or the task is refused (its fix
   does not pass here: a missing dependency, a flaky test). A site whose reference value
   the host cannot judge (not plain data, or not meeting its expectation here) goes back
   into the sandbox as the ordinary assert it was. The sites each test reached are
   *required*: a graded run that skips one fails that test.
3. **Buggy run**: the same files against the bug. A site is *decisive* for a hidden test
   when the bug fails it (a wrong value, or never reached). A hidden test is graded by the
   host when one of its decisive sites is strong (tandem.checks.Site.strong): to pass it,
   any code, forging or not, must write the value the fix computes.

A task with a hidden test that is not graded by the host is **refused**: grading it
would let a forger pass it by writing a guess, so it scores 0 with the reason, for every
sample (its groups carry no signal), and the grader logs and counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tandem.envs.coding.checks import Site
from tandem.envs.coding.instrument import Candidate, find_sites, rewrite
from tandem.envs.coding.sandbox.runner import ExecResult
from tandem.envs.coding.swe_data import SweTask
from tandem.envs.coding.verdict import Stream, lookup

RunTests = Callable[[bool, dict[str, str]], tuple[ExecResult, Stream]]
"""(clean: reference fix applied, else the bug; graded file texts) -> the run and its stream."""


class PlanUnavailable(RuntimeError):
    """A reference run could not tell anything (timed out, no stream): try again later, nothing is cached."""


@dataclass
class GradingPlan:
    files: dict[str, str]
    """Graded test file -> the text written into every graded copy (its host-held checks split out)."""
    sites: dict[int, Site]
    required: dict[str, set[int]] = field(default_factory=dict)
    """Test id (the task's spelling) -> the sites the reference fix reached in it."""
    refused: str = ""
    """Why the task cannot be graded; empty when it can."""
    host_graded: dict[str, list[int]] = field(default_factory=dict)
    """Hidden test -> its strong sites that the bug fails (what a forger would have to write right)."""
    kept_in_sandbox: list[str] = field(default_factory=list)
    """Sites put back as ordinary asserts after the clean run, with why."""

    def summary(self) -> dict:
        return {"sites": len(self.sites), "host_graded": {t: len(k) for t, k in self.host_graded.items()},
                "kept_in_sandbox": self.kept_in_sandbox[:8], "refused": self.refused}


def split_files(testbed: Path, test_files: list[str]) -> tuple[dict[str, str], dict[str, list[Candidate]]]:
    """(original text, candidates) of every graded test file that parses; site numbers are unique across files."""
    sources, candidates, k = {}, {}, 0
    for rel in test_files:
        path = testbed / rel
        if path.suffix != ".py" or path.is_symlink() or not path.is_file():
            continue
        source = path.read_text(errors="surrogateescape")
        found = find_sites(source, rel, k)
        if found is None:
            continue
        sources[rel], candidates[rel] = source, found
        k += len(found)
    return sources, candidates


def build_plan(task: SweTask, testbed: Path, run_tests: RunTests) -> GradingPlan:
    """Split the graded files of `task` (from its graded template's testbed) and run both references."""
    sources, candidates = split_files(testbed, task.test_files)
    sites = {s.k: s for found in candidates.values() for c in found for s in c.sites}
    files = {rel: rewrite(sources[rel], candidates[rel]) for rel in sources}
    run, clean = _reference(run_tests, True, files)
    plan = GradingPlan(files, sites)
    failing = [f"{t} {lookup(clean.status, t, 'MISSING')}" for t in task.tests
               if lookup(clean.status, t) != "PASSED"]
    if failing or clean.tamper:
        plan.refused = (f"the reference fix does not pass its own tests in this sandbox: "
                        f"{', '.join(failing[:3]) or clean.tamper[0]} (exit {run.returncode}): "
                        f"{run.output[-300:].strip()}")
        return plan
    kept = _unjudgeable(clean, sites)
    for found in candidates.values():  # a statement is split whole or not at all
        for c in found:
            if any(s.k in kept for s in c.sites):
                kept.update({s.k: kept.get(s.k, "split with a check the host cannot judge") for s in c.sites})
    plan.kept_in_sandbox = [f"{sites[k].where} `{sites[k].source}`: {why}" for k, why in sorted(kept.items())]
    for k in kept:
        del sites[k]
    plan.files = {rel: rewrite(sources[rel], candidates[rel], keep=set(kept)) for rel in sources}
    plan.required = {t: {k for k, _ in lookup(clean.checks, t, []) if k in sites} for t in task.tests}
    _, buggy = _reference(run_tests, False, plan.files)
    reasons = []
    for t in task.fail_to_pass:
        decisive = _decisive(lookup(buggy.checks, t, []), sites, plan.required[t])
        plan.host_graded[t] = [k for k in decisive if sites[k].strong]
        if not plan.host_graded[t]:
            reasons.append(_why_not_graded(t, decisive, sites))
    if reasons:
        plan.refused = "; ".join(reasons)[:1500]
    return plan


def _reference(run_tests: RunTests, clean: bool, files: dict[str, str]) -> tuple[ExecResult, Stream]:
    run, stream = run_tests(clean, files)
    if run.timed_out or not stream.started:
        state = "reference fix" if clean else "bug"
        raise PlanUnavailable(f"the reference run with the {state} {'timed out' if run.timed_out else 'never started'}"
                              f" (exit {run.returncode}): {run.output[-300:].strip()}")
    return run, stream


def _unjudgeable(clean: Stream, sites: dict[int, Site]) -> dict[int, str]:
    """Sites whose reference value the host cannot hold: they go back into the sandbox."""
    kept: dict[int, str] = {}
    for events in clean.checks.values():
        for k, value in events:
            if k in sites and k not in kept and not sites[k].passes(value):
                kept[k] = f"the reference fix's value ({type(value).__name__}) cannot be judged on the host"
    return kept


def _decisive(events: list, sites: dict[int, Site], required: set[int]) -> list[int]:
    """Required sites that the bug fails: a value that does not hold, or never reached."""
    held: dict[int, bool] = {}
    for k, value in events:
        if k in sites:
            held[k] = held.get(k, True) and sites[k].passes(value)
    return sorted(k for k in required if not held.get(k, False))


def _why_not_graded(test: str, decisive: list[int], sites: dict[int, Site]) -> str:
    if not decisive:
        return (f"{test}: the bug fails none of its host-held checks (what fails it stays in the sandbox, "
                f"where a forger can pass it)")
    forms = ", ".join(f"`{sites[k].source}`" for k in decisive[:3])
    return f"{test}: every check the bug fails has an expected value a forger can guess ({forms})"
