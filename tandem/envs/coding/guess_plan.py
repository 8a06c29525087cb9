"""The grading plan's last word on hidden tests whose decisive checks are all within a forger's reach
(tandem.envs.coding.grading_plan calls `guessed_or_refused`): graded when a forger's guesses at them are long
odds together (GUESS_BOUND), the original rows' guesses by the odds model (tandem.envs.coding.odds) and, where
that is not enough, their tables' fresh rows counted as blind guesses (tandem.envs.coding.blind); else the
reasons they stay refused."""

from __future__ import annotations

from typing import Any

from tandem.envs.coding.blind import blind_chance, family_odds, rows_of
from tandem.envs.coding.call_rows import same_table
from tandem.envs.coding.checks import Site
from tandem.envs.coding.derivation import _codomains
from tandem.envs.coding.exposure import TRANSFORMS, Exposure, analyse
from tandem.envs.coding.odds import Inputs
from tandem.envs.coding.separating_plan import Pool, computed_by, items_of, separated
from tandem.envs.coding.swe_data import SweTask
from tandem.envs.coding.verdict import Stream

GradingPlan = Any
"""tandem.envs.coding.grading_plan.GradingPlan, which the functions here fill in (not imported: that module
imports this one, and the layout's contracts forbid a cycle even under TYPE_CHECKING)."""

GUESS_BOUND = 1 / 1000
"""The most a forger may win by guessing: a hidden test whose only decisive checks are guesses (a value among
a family of candidates and which rows to change, tandem.envs.coding.odds) is graded when the chance of making
every such guess of the task right, taken as independent, is at most this."""


def _graded_by_guesses(plan: GradingPlan, decisive: dict[str, list[tuple[int, int]]], sites: dict[int, Site],
                       exposure: Exposure) -> list[str]:
    """Hidden tests without a decisive check beyond a forger's reach are graded by their guesses when the
    whole task's guesses are long enough odds (GUESS_BOUND); the reasons of those still refused."""
    weak = [t for t in decisive if not plan.host_graded[t]]
    odds = {t: {(k, nth): n for k, nth in decisive[t] if (n := exposure.guessed(sites[k], t, nth))} for t in weak}
    # one value of one function is one guess wherever asked (a forger writes it wherever it changes a row);
    # one function's rows of one bug value split one way (tandem.envs.coding.odds)
    chance, _ = _guess_chance({t: list(odds[t]) for t in weak}, exposure)
    if weak and all(odds.values()) and chance <= GUESS_BOUND:
        for t in weak:
            plan.host_graded[t] = sorted({k for k, _ in odds[t]})
        plan.graded_by_guesses = weak
        return []
    reasons = [_why_not_graded(t, decisive[t], sites, exposure) for t in weak]
    if weak and all(odds.values()):
        reasons.append(f"their checks are guesses a forger wins together 1 in {round(1 / chance)} "
                       f"(graded from 1 in {round(1 / GUESS_BOUND)})")
    return reasons


def _guess_chance(guessed: dict[str, list[tuple[int, int]]], exposure: Exposure) -> tuple[float, set[tuple]]:
    """The chance a forger makes every guess of `guessed` (test -> its guessed checks) right, and the values guessed:
    one value of one function is one guess wherever asked (a forger writes it wherever it changes a row); one
    function's rows of one bug value split one way (tandem.envs.coding.odds)."""
    distinct: dict[tuple, int] = {}
    splits: dict[tuple, int] = {}
    for t, checks in guessed.items():
        for k, _ in checks:
            g = exposure.guesses[(t, k)]
            distinct[g.of] = min(distinct.get(g.of, g.odds), g.odds)
            splits[g.group] = g.ways
    chance = 1.0
    for n in (*distinct.values(), *splits.values()):
        chance /= n
    return chance, set(distinct)


def _graded_blind(plan: GradingPlan, task: SweTask, decisive: dict[str, list[tuple[int, int]]], exposure: Exposure,
                  fresh: list[str], buggy: Stream, reference_files: dict[str, str], pool: Pool | None = None) -> bool:
    """Grade the hidden tests left weak by their tables' fresh rows counted as blind guesses
    (tandem.envs.coding.blind): every kept fresh row of the table required, the chance that a forger passes them
    and the original rows' guesses together within GUESS_BOUND. A weak test without fresh rows must be a guess
    all through (as _graded_by_guesses has it). A function whose rules (tandem.envs.coding.separating) are all
    refuted by those rows or fixes on the `pool` is no guess at all."""
    weak = [t for t in decisive if not plan.host_graded[t]]
    tables = {t: [f for f in fresh if same_table(f, t)] for t in weak}
    guessed = {t: [(k, nth) for k, nth in decisive[t] if exposure.guessed(plan.sites[k], t, nth)] for t in weak}
    if not weak or not any(tables.values()) or not all(decisive[t] for t in weak) or \
            any(not tables[t] and len(guessed[t]) < len(decisive[t]) for t in weak):
        return False
    original, counted = _guess_chance(guessed, exposure)
    rows = sorted(set().union(*tables.values()))
    seen = analyse(reference_files, plan.sites, buggy.checks, plan.required, [*task.tests, *rows],
                   task.problem_statement, buggy.own)
    inputs = Inputs(reference_files)
    everything = rows_of([*task.tests, *rows], plan.sites, buggy.checks, plan.required, inputs, set(rows),
                         set(seen.derived))
    family = family_odds(seen.echoes, seen.stated, _codomains(plan.sites, buggy.checks, task.tests), TRANSFORMS,
                         inputs.frequency)
    fixes = separated(items_of(rows, plan.sites, buggy.checks, plan.required, inputs), pool) if pool else set()
    count = blind_chance(everything, TRANSFORMS, family, counted, fixes)
    plan.blind = f"{count.why}; the original rows' guesses 1 in {round(1 / original)}"
    if original * count.chance > GUESS_BOUND:
        return False
    # a fix on the pool of one function, and a guess at another's in a test without a table: the guess still counts
    alone = {t: [(k, n) for k, n in guessed[t] if not computed_by(plan.sites[k].source, fixes)] for t in weak
             if not tables[t]}
    if fixes and any(alone.values()) and _guess_chance(alone, exposure)[0] > GUESS_BOUND:
        return False
    for t in weak:
        plan.host_graded[t] = sorted({k for k, _ in decisive[t]})
        if tables[t]:
            plan.differential[t] = tables[t]
        else:
            plan.graded_by_guesses.append(t)
    return True


def guessed_or_refused(plan: GradingPlan, task: SweTask, decisive: dict[str, list[tuple[int, int]]],
                       exposure: Exposure, fresh: list[str], buggy: Stream, reference_files: dict[str, str],
                       pool: Pool | None = None) -> list[str]:
    """Grade the hidden tests still weak by their guesses, then by their fresh rows as blind guesses; the
    reasons of those still refused (none when graded)."""
    reasons = _graded_by_guesses(plan, decisive, plan.sites, exposure)
    if reasons and _graded_blind(plan, task, decisive, exposure, fresh, buggy, reference_files, pool):
        return []
    if reasons and plan.blind:
        reasons.append(f"its tables' fresh rows as blind guesses: {plan.blind}")
    return reasons


def _why_not_graded(test: str, decisive: list[tuple[int, int]], sites: dict[int, Site], exposure: Exposure) -> str:
    if not decisive:
        return (f"{test}: the bug fails none of its host-held checks (what fails it stays in the sandbox, "
                f"where a forger can pass it)")
    first = {k: nth for k, nth in reversed(decisive)}  # each site once, at its first run the bug fails
    forms = "; ".join(f"`{sites[k].source}`: {exposure.why(sites[k], test, nth)}"
                      for k, nth in sorted(first.items())[:3])
    return f"{test}: every check the bug fails is within a forger's reach ({forms})"
