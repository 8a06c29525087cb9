"""How one task is graded, decided once from three reference runs: which checks the host holds, and
whether the task can be graded at all.

1. Every graded test file is split (tandem.envs.coding.instrument): each check that can be becomes a
   host-held site; the sandbox copy of the file holds only what the check computes.
2. **Clean run**: the split files against the reference fix (the task's bug patch reversed),
   `E == R` sites computing R too. Every FAIL_TO_PASS and PASS_TO_PASS test must pass, or the
   task is refused (its fix does not pass here: a missing dependency, a flaky test). R's values
   become those sites' expectations (tandem.envs.coding.checks.Reference). A site whose reference value the
   host cannot judge (not plain data, or not meeting its expectation here) goes back into the
   sandbox as the ordinary assert it was. The sites each test reached are *required*: a graded
   run that skips one fails that test.
3. **Buggy run**: the graded files against the bug. A site is *decisive* for a hidden test
   when the bug fails it (a wrong value, or never reached). A reference site whose R runs the
   repository's code and that is decisive for no test becomes *own* (tandem.envs.coding.expected_sides):
   the graded copies compute its R too and a run's own `E == R` passes it (a correct fix may change
   what R's code returns); the buggy run is repeated with those copies.
4. **Confirming run**: the graded files, exactly as samples get them, against the reference
   fix: it must score 1 under this plan (an R that had side effects, a value that changes from
   run to run), or the task is refused.
5. **Exposure** (tandem.envs.coding.exposure): which sites a forger can answer without the fix, from what
   the sandbox holds (constants of the sandbox's copies, asserts kept there, round trips), from
   what the agent reads (the literals the problem statement writes out) or by one
   transformation of the bug's values. A hidden test is graded by the host when one of its
   decisive sites is beyond a guess and not exposed: to pass it, any code, forging or not, must
   write the value the fix computes. Hidden tests whose only decisive sites are guesses among a
   function's few values are graded when the task's guesses together are long odds (GUESS_BOUND).
   A parametrized hidden test with no such check is graded by its table's fresh rows when the bug fails one
   beyond a forger's reach (tandem.envs.coding.differential: new inputs, the reference's values held here).

A task with a hidden test that is not graded by the host is **refused**: grading it
would let a forger pass it by writing a guess, so it scores 0 with the reason, for every
sample (its groups carry no signal), and the grader logs and counts it. Reasons name what
each check computes, never what it expects.
"""

from __future__ import annotations

import functools
import random
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import AbstractSet, Callable

from tandem.envs.coding.call_rows import held as held_twins, same_table
from tandem.envs.coding.checks import Reference, Site
from tandem.envs.coding.confined import is_probe
from tandem.envs.coding.differential import expectations, fold, without
from tandem.envs.coding.regression_rows import require_kept_rows
from tandem.envs.coding.enum_value import enum_table
from tandem.envs.coding.expected_sides import eligible, marked, own_side
from tandem.envs.coding.exposure import Exposure, analyse
from tandem.envs.coding.guess_plan import GUESS_BOUND, _graded_by_guesses, guessed_or_refused  # docs, tests: GUESS_BOUND here
from tandem.envs.coding.hard_rows import beyond, require_hard_rows
from tandem.envs.coding.instrument import Candidate, find_sites, rewrite, whole_statements
from tandem.envs.coding.params import hide
from tandem.envs.coding.raising_rows import GENERATED, add_rows, outcomes, renumber, task_own
from tandem.envs.coding.raising_values import must_raise_rows, reference_raises
from tandem.envs.coding.row_rules import graded_beyond_the_visible_rows
from tandem.envs.coding.separating_plan import keep_separating_rows
from tandem.envs.coding.sandbox.runner import ExecResult
from tandem.envs.coding.swe_data import SweTask
from tandem.envs.coding.verdict import Stream, Verdict, judge, lookup

RunTests = Callable[..., tuple[ExecResult, Stream]]
"""(clean: reference fix applied, else the bug; graded file texts; the sites; references: the run
writes R of `E == R` sites) -> the run and its stream."""


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
    exposed: dict[int, str] = field(default_factory=dict)
    """Sites a forger can answer without the fix (tandem.envs.coding.exposure), with how."""
    graded_by_guesses: list[str] = field(default_factory=list)
    """Hidden tests graded by guesses only, their odds together within GUESS_BOUND (_graded_by_guesses)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Task node id -> its id in the graded copies, where a parametrized expectation was taken out of them
    (tandem.envs.coding.params); everything else in the plan uses the graded ids."""
    differential: dict[str, list[str]] = field(default_factory=dict)
    """Hidden test (graded id) -> the fresh rows of its table it requires: graded by them, its own decisive
    checks all within a forger's reach (tandem.envs.coding.differential)."""
    narrower: list[str] = field(default_factory=list)
    """Required hard rows beyond the fresh rows' guard (tandem.envs.coding.hard_rows): a candidate that raises there
    passes them (a narrower domain, as datetime's past 9999, not a wrong value); a value must be the reference's."""
    confined: list[str] = field(default_factory=list)
    """Hidden tests graded as a confined change (tandem.envs.coding.confined), their guards in `differential`."""
    blind: str = ""
    """The fresh rows counted as blind guesses (tandem.envs.coding.blind): their odds, where the plan counted them."""
    fresh_failed: list[str] = field(default_factory=list)
    """The fresh rows kept (reference values held) that the bug fails: where it differs from the reference
    beyond the visible rows (bench.refusal_rate counts them)."""
    fresh_kept: int = 0
    """How many fresh rows the plan kept (the reference's value held in both reference runs): fresh_failed's whole."""
    must_raise: dict[str, str] = field(default_factory=dict)
    """Fresh rows the reference and the bug raise on -> the class a run must raise there (raising_values)."""

    def graded_id(self, test: str) -> str:
        return self.aliases.get(test, test)

    def judged_ids(self, tests: tuple[str, ...]) -> list[str]:
        """The graded ids a run is judged on: the task's tests and the fresh rows they require."""
        graded = [self.graded_id(t) for t in tests]
        return graded + sorted({f for t in graded for f in self.differential.get(t, [])})

    def in_task_ids(self, verdict: Verdict, tests: tuple[str, ...]) -> Verdict:
        """A verdict on the graded ids, told in the task's (a test fails where a fresh row it requires fails)."""
        verdict = fold(verdict, self.differential)
        return replace(verdict, tests={t: verdict.tests[self.graded_id(t)] for t in tests},
                       check_failures={t: verdict.check_failures[self.graded_id(t)] for t in tests
                                       if self.graded_id(t) in verdict.check_failures})

    def summary(self) -> dict:
        return {"sites": len(self.sites), "host_graded": {t: len(k) for t, k in self.host_graded.items()},
                "kept_in_sandbox": self.kept_in_sandbox[:8], "exposed": len(self.exposed), "refused": self.refused}


def split_files(testbed: Path, test_files: list[str], tests: tuple[str, ...] = (), rng: random.Random | None = None,
                failing: tuple[str, ...] = (), drop: AbstractSet[str] = frozenset(), pool: list[str] | None = None,
                hard: dict[str, bool] | None = None
                ) -> tuple[dict[str, str], dict[str, list[Candidate]], dict[str, str], dict[int, Site], list[str]]:
    """(text, candidates) of every graded test file that parses, its parametrized expectations taken out
    (tandem.envs.coding.params: the task ids' aliases, the sites whose expectations the host holds, and with
    `rng` the fresh rows added to their tables, half near the `failing` tests, pool rows among them: their ids
    appended to `pool`, those of `drop` left out, tandem.envs.coding.separating; hard rows' ids appended to `hard`,
    tandem.envs.coding.hard_rows); site numbers are unique across files."""
    sources, aliases, held, k, fresh = {}, {}, {}, 0, []
    candidates: dict[str, list[Candidate]] = {}
    enums = functools.cache(lambda: enum_table(testbed))
    for rel in test_files:
        path = testbed / rel
        if path.suffix != ".py" or path.is_symlink() or not path.is_file():
            continue
        hidden = hide(path.read_text(errors="surrogateescape"), rel, tests, enums, rng, failing, drop)
        if pool is not None:
            pool += hidden.pool
        if hard is not None:
            hard.update(hidden.hard)
        text, rows = add_rows(hidden.source, rel, tests, rng, failing) if rng is not None else (hidden.source, [])
        found = find_sites(text, rel, k)
        if found is None:
            continue
        found = renumber(found, hidden.source, [c for cs in candidates.values() for c in cs])
        sources[rel], candidates[rel] = text, found
        aliases.update(hidden.aliases)
        held.update({**_held_sites(found, hidden.expected), **held_twins(found)})
        fresh += hidden.fresh + rows
        k += sum(len(c.sites) for c in found if c.sites[0].k < GENERATED)
    return sources, candidates, aliases, held, fresh


def _held_sites(found: list[Candidate], expected: dict[tuple[int, int, str], dict]) -> dict[int, Site]:
    """`E == want` sites of a parametrized test whose `want` column the host took out: values per case."""
    out = {}
    for c in found:
        for site, (_, reference) in zip(c.sites, c.parts):
            for (first, last, name), values in expected.items():
                if reference == name and first <= site.line <= last and isinstance(site.expected, Reference):
                    out[site.k] = replace(site, expected=Reference({t: (v,) for t, v in values.items()}, held=True))
    return out


def build_plan(task: SweTask, testbed: Path, run_tests: RunTests, seed: int | None = None) -> GradingPlan:
    """Split the graded files of `task` (from its graded template's testbed) and run the references;
    `seed` draws the fresh rows (a new one, held here only, when None)."""
    rng = random.Random(seed := secrets.randbits(64) if seed is None else seed)  # resplit: the same seed
    pool, hard = list[str](), dict[str, bool]()
    sources, candidates, aliases, held, fresh = split_files(testbed, task.test_files, task.tests, rng,
                                                          task.fail_to_pass, pool=pool, hard=hard)
    plain = functools.partial(_without_fresh_rows, testbed, task, aliases, task_own(candidates))
    resplit = functools.partial(split_files, testbed, task.test_files, task.tests, random.Random(seed), task.fail_to_pass)
    task = replace(task, fail_to_pass=tuple(aliases.get(t, t) for t in task.fail_to_pass),
                   pass_to_pass=tuple(aliases.get(t, t) for t in task.pass_to_pass))
    sites = {s.k: s for found in candidates.values() for c in found for s in c.sites}
    sites.update(held)
    first = {rel: rewrite(sources[rel], candidates[rel], with_references=True) for rel in sources}
    run, clean = _reference(run_tests, True, first, sites, True)
    plan = GradingPlan(first, sites, aliases=aliases)
    if _refuse_failing(plan, task, run, clean, "the reference fix does not pass its own tests in this sandbox"):
        return plan
    sites.update(_with_references(sites, clean, task.tests))
    fresh_sites, kept_fresh = expectations(clean, fresh, sites)
    raising_sites, kept_raising = outcomes(clean, fresh, sites)
    raising = reference_raises(clean, fresh, sites, hard)  # value rows where the reference raises
    sites.update({**fresh_sites, **raising_sites})
    kept_fresh += kept_raising
    clean = without(clean, set(fresh) - set(kept_fresh))
    kept = whole_statements(_unjudgeable(clean, sites), candidates)
    plan.kept_in_sandbox = [f"{sites[k].where} `{sites[k].source}`: {why}" for k, why in sorted(kept.items())]
    for k in kept:
        del sites[k]
    plan.files = {rel: rewrite(sources[rel], candidates[rel], keep=set(kept)) for rel in sources}
    reference_files = {rel: rewrite(sources[rel], candidates[rel], keep=set(kept), with_references=True)
                       for rel in sources}
    plan.required = {t: {k for k, _ in lookup(clean.checks, t, []) if k in sites} for t in (*task.tests, *kept_fresh)}
    _, buggy = _reference(run_tests, False, plan.files, sites)
    buggy = _own_sides(plan, sources, candidates, set(kept), buggy, run_tests, task.tests)
    (kept_fresh, outer), fresh = beyond(hard, kept_fresh), beyond(hard, fresh)[0]  # outer hard rows decide nothing
    separation, reference_files, fresh, kept_fresh = keep_separating_rows(plan, task, pool, fresh, kept_fresh, buggy,
                                                                          reference_files, resplit, candidates, set(kept))
    run, confirm = _reference(run_tests, True, plan.files, sites)
    if _refuse_failing(plan, task, run, confirm, "the reference fix does not pass the graded copies of its tests",
                       judged=True):
        return plan
    kept_fresh, outer = _alike(plan, run, confirm, kept_fresh, outer)
    plan.fresh_kept = len(kept_fresh)
    plan.fresh_failed = [f for f in kept_fresh if _decisive(lookup(buggy.checks, f, []), sites, plan.required[f], f)]
    exposure, decisive = _host_graded(plan, task, plain(set(kept)) or reference_files, buggy)
    counted = [f for f in kept_fresh if not is_probe(f)]  # probe rows reach past the domain: guards only
    _graded_by_fresh_rows(plan, task, counted, buggy, reference_files)
    graded_beyond_the_visible_rows(plan, task, fresh, kept_fresh, buggy, set(plan.fresh_failed).__contains__)
    reasons = guessed_or_refused(plan, task, decisive, exposure, counted, buggy, reference_files, separation)
    plan.refused = "; ".join(reasons)[:1500]
    if not reasons:  # the rows the bug gets right too: a fix must not break them (tandem.envs.coding.regression_rows)
        plan.must_raise = must_raise_rows(raising, buggy, confirm, sites, fresh)
        require_kept_rows(plan.differential, task.tests, [*counted, *plan.must_raise])
    require_hard_rows(plan, task.fail_to_pass, [*kept_fresh, *outer], hard)
    graded = plain(set(kept), references=False)
    if not plan.differential and graded and not any(own_side(s) for s in sites.values()):
        plan.files = graded  # no test requires a fresh row: the graded runs need not pay for them
    return plan


def _alike(plan: GradingPlan, run: ExecResult, confirm: Stream, *groups: list[str]) -> tuple[list[str], ...]:
    """Each group of fresh rows less those the second reference run (`confirm`) did not pass: a row is kept where
    the reference answered the same in both runs."""
    confirmed = judge([f for g in groups for f in g], confirm, run.returncode, run.output, plan.sites,
                      plan.required).tests
    return tuple([f for f in g if confirmed[f] == "PASSED"] for g in groups)


def _host_graded(plan: GradingPlan, task: SweTask, files: dict[str, str], buggy: Stream) -> tuple[Exposure, dict]:
    """(the exposure of the task's checks in `files`, each failing test's decisive checks): the decisive checks
    beyond a forger's reach grade their test on the host (plan.host_graded)."""
    exposure = analyse(files, plan.sites, buggy.checks, plan.required, list(task.tests),
                       task.problem_statement, buggy.own)
    plan.exposed = {**exposure.reasons, **{k: why for (_, k), why in exposure.derived.items()}}
    decisive = {t: _decisive(lookup(buggy.checks, t, []), plan.sites, plan.required[t], t) for t in task.fail_to_pass}
    for t in task.fail_to_pass:
        plan.host_graded[t] = sorted({k for k, nth in decisive[t] if exposure.strong(plan.sites[k], t, nth)})
    return exposure, decisive


def _without_fresh_rows(testbed: Path, task: SweTask, aliases: dict[str, str], candidates: dict[str, list[Candidate]],
                        kept: set[int], references: bool = True) -> dict[str, str] | None:
    """The graded files as the reference run had them (or, not `references`, as samples get them), less the fresh
    rows (None where their sites differ):
    the task's own checks are analysed against the constants the task wrote. A fresh row's input is drawn
    here, at random inside the table's range, not by whoever wrote the expectations: it says no more of
    them than any value a forger could draw itself, and counting it as an echo would disarm another table's
    check that happens to expect it. The fresh rows' own checks are analysed with their inputs."""
    sources, plain, plain_aliases, _, _ = split_files(testbed, task.test_files, task.tests)  # the task's own ids

    def where(found: dict[str, list[Candidate]]) -> list[tuple[int, str, int]]:
        return [(s.k, s.file, s.line) for rel in sorted(found) for c in found[rel] for s in c.sites]

    if where(plain) != where(candidates) or plain_aliases != aliases:
        return None
    return {rel: rewrite(sources[rel], plain[rel], keep=kept, with_references=references) for rel in sources}


def _graded_by_fresh_rows(plan: GradingPlan, task: SweTask, fresh: list[str], buggy: Stream,
                          reference_files: dict[str, str]) -> None:
    """Hidden tests without a decisive check beyond a forger's reach, graded by their table's fresh rows
    (tandem.envs.coding.differential) that the bug fails beyond a forger's reach, each such test requiring
    those rows. The exposure analysis runs over the task's tests and the rows required, until none drops
    out: a transformation of the bug's values that only rows left out would catch must be caught."""
    weak = [t for t in task.fail_to_pass if not plan.host_graded[t]]
    rows = [f for f in fresh if any(same_table(f, t) for t in weak)]
    beyond: dict[str, set[int]] = {}
    while rows:
        exposure = analyse(reference_files, plan.sites, buggy.checks, plan.required, [*task.tests, *rows],
                           task.problem_statement, buggy.own)
        beyond = {f: {k for k, nth in _decisive(lookup(buggy.checks, f, []), plan.sites, plan.required[f], f)
                      if exposure.strong(plan.sites[k], f, nth)} for f in rows}
        if all(beyond.values()):
            break
        rows = [f for f in rows if beyond[f]]
    for t in weak:
        table = [f for f in rows if same_table(f, t)]
        if table:
            plan.host_graded[t] = sorted(set().union(*(beyond[f] for f in table)))
            plan.differential[t] = table


def _own_sides(plan: GradingPlan, sources: dict[str, str], candidates: dict[str, list[Candidate]], kept: set[int],
               buggy: Stream, run_tests: RunTests, tests: tuple[str, ...]) -> Stream:
    """Make own the reference sites whose R runs the repository's code and that the bug passes in every test
    (tandem.envs.coding.expected_sides): the graded copies compute their R too. The bug's run again with those
    copies, which it returns; if the bug fails an own site there (R's side effects), no site is own."""
    def decisive(stream: Stream) -> set[int]:
        return {k for t in tests for k, _ in _decisive(lookup(stream.checks, t, []), plan.sites, plan.required[t], t)}

    own = eligible(plan.sites, plan.required) - decisive(buggy)
    if not own:
        return buggy
    before = dict(plan.sites)
    plan.sites.update(marked(plan.sites, own))
    files = {rel: rewrite(sources[rel], candidates[rel], keep=kept, own=own) for rel in sources}
    _, again = _reference(run_tests, False, files, plan.sites)
    if own & decisive(again):
        plan.sites.update(before)
        return buggy
    plan.files = files
    return again


def _reference(run_tests: RunTests, clean: bool, files: dict[str, str], sites: dict[int, Site],
               references: bool = False) -> tuple[ExecResult, Stream]:
    run, stream = run_tests(clean, files, sites, references)
    if run.timed_out or not stream.started:
        state = "reference fix" if clean else "bug"
        raise PlanUnavailable(f"the reference run with the {state} {'timed out' if run.timed_out else 'never started'}"
                              f" (exit {run.returncode}): {run.output[-300:].strip()}")
    return run, stream


def _refuse_failing(plan: GradingPlan, task: SweTask, run: ExecResult, stream: Stream, what: str,
                    judged: bool = False) -> bool:
    """Refuse the task when a reference fix's run fails a test (judged: by the plan's host-held checks too)."""
    if judged:
        verdict = judge(list(task.tests), stream, run.returncode, run.output, plan.sites, plan.required)
        status, tamper = verdict.tests, verdict.tamper
        failing = [f"{t} {status[t]}" + (f" ({verdict.check_failures[t]})" if t in verdict.check_failures else "")
                   for t in task.tests if status[t] != "PASSED"]
    else:
        tamper = stream.tamper
        failing = [f"{t} {lookup(stream.status, t, 'MISSING')}" for t in task.tests
                   if lookup(stream.status, t) != "PASSED"]
    if failing or tamper:
        plan.refused = (f"{what}: {', '.join(failing[:3]) or tamper[0]} (exit {run.returncode}): "
                        f"{run.output[-300:].strip()}")
    return bool(plan.refused)


def _with_references(sites: dict[int, Site], clean: Stream, tests) -> dict[int, Site]:
    """Reference sites with R's values from the clean run, per test (as the stream and the task spell it)."""
    values: dict[int, dict[str, list]] = {k: {} for k, s in sites.items()
                                          if isinstance(s.expected, Reference) and not s.expected.held}
    for test, events in clean.references.items():
        for k, value in events:
            if k in values:
                values[k].setdefault(test, []).append(value)
    for t in tests:  # the task's spelling of a test whose id pytest escapes
        for per_test in values.values():
            found = lookup(per_test, t)
            if found is not None:
                per_test.setdefault(t, found)
    return {k: replace(sites[k], expected=replace(sites[k].expected, values={t: tuple(v) for t, v in vs.items()}))
            for k, vs in values.items()}


def _unjudgeable(clean: Stream, sites: dict[int, Site]) -> dict[int, str]:
    """Sites whose reference value the host cannot hold: they go back into the sandbox."""
    kept: dict[int, str] = {}
    for test, events in clean.checks.items():
        runs: dict[int, int] = {}
        for k, value in events:
            nth = runs[k] = runs.get(k, -1) + 1
            if k in sites and k not in kept and not sites[k].passes(value, test, nth):
                kept[k] = f"the reference fix's value ({type(value).__name__}) cannot be judged on the host"
    return kept


def _decisive(events: list, sites: dict[int, Site], required: set[int], test: str) -> list[tuple[int, int]]:
    """(site, nth run) of required sites that the bug fails: a value that does not hold, or one of the
    reference's values it never meets (Site.unmet)."""
    out: list[tuple[int, int]] = []
    seen: dict[int, list] = {}
    for k, value in events:
        if k in sites:
            nth = len(seen.setdefault(k, []))
            seen[k].append(value)
            if not sites[k].passes(value, test, nth):
                out.append((k, min(nth, sites[k].runs(test) - 1)))
    for k in required:
        out += [(k, nth) for nth in sites[k].unmet(test, seen.get(k, []))]
    return sorted(set(out))
