"""The grading plan's side of separation (tandem.envs.coding.separating): the rule family F of each function built
from the plan's reference runs, the pool rows that separate its open rules (picked before the confirming run, so the
graded copies hold only those; `plan` arguments are tandem.envs.coding.grading_plan.GradingPlan, which imports this
module), and, for the blind count (tandem.envs.coding.guess_plan), the functions whose rules
are all refuted by required rows or fixes on the pool."""

from __future__ import annotations

import ast
import builtins
from typing import Any, Callable, NamedTuple

from tandem.envs.coding.blind import FIX_TRANSFORMS, MISSING, rows_of
from tandem.envs.coding.checks import Site, _same
from tandem.envs.coding.confined import is_probe
from tandem.envs.coding.expected_sides import own_side
from tandem.envs.coding.instrument import Candidate, call_name, rewrite
from tandem.envs.coding.exposure import TRANSFORMS, stated_values
from tandem.envs.coding.fresh_rows import owner
from tandem.envs.coding.odds import Inputs, kind
from tandem.envs.coding.separating import Family, Item, _agrees, family, flat, judge_rules, selectors, separate, sources
from tandem.envs.coding.swe_data import SweTask
from tandem.envs.coding.verdict import Stream


class Pool(NamedTuple):
    """What the plan learnt of each function (name ->): its pool rows' items (every kept pool row, separating or
    not), the flat inputs of its visible rows, of those the bug fails, and the constants a forger reads."""

    items: dict[str, list[Item]]
    visible: dict[str, list[tuple]]
    failing: dict[str, list[tuple]]
    constants: dict[str, list]


def items_of(ids: list[str], sites: dict[int, Site], buggy: dict[str, list], required: dict[str, set[int]],
             inputs: Inputs) -> dict[str, list[Item]]:
    """Function -> one Item per host-held check of each row of `ids` (the bug's value, the reference's)."""
    out: dict[str, list[Item]] = {}
    for row in ids:
        for r in rows_of([row], sites, buggy, required, inputs, {row}):
            out.setdefault(r.function, []).append(Item(row, flat(r.inputs), r.bug, r.want))
    return out


def pool_of(tests: tuple[str, ...], pool: list[str], sites: dict[int, Site], buggy: dict[str, list],
            required: dict[str, set[int]], reference_files: dict[str, str], statement: str) -> Pool:
    """The Pool of the task's functions: `pool`, the kept pool rows; `tests`, the task's own rows (visible)."""
    inputs = Inputs(reference_files)
    visible: dict[str, list[tuple]] = {}
    failing: dict[str, list[tuple]] = {}
    constants: dict[str, list] = {}
    stated = [v for v in stated_values(statement) if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    for r in rows_of(list(tests), sites, buggy, required, inputs, set()):
        x = flat(r.inputs)
        visible.setdefault(r.function, []).append(x)
        if r.failing:
            failing.setdefault(r.function, []).append(x)
        constants.setdefault(r.function, list(stated)).extend(v for v in (*x, r.want) if v is not None)
    return Pool(items_of(pool, sites, buggy, required, inputs), visible, failing, constants)


def family_of(function: str, items: list[Item], pool: Pool) -> Family:
    """F over `items` (required and pool rows of one function): selectors fitted to the visible failing inputs,
    value sources from the bug's value, the inputs and the constants."""
    everything = [*items, *pool.items.get(function, [])]
    width = max((len(it.inputs) for it in everything), default=0)
    positions = [[it.inputs[p] for it in everything if p < len(it.inputs)] for p in range(width)]
    bugs = [it.bug for it in everything if it.bug is not MISSING]
    constants = pool.constants.get(function, [])
    return family(everything, selectors(positions, pool.failing.get(function, []), constants, bugs),
                  sources({**TRANSFORMS, **FIX_TRANSFORMS}, width, [*constants, *bugs]))


def separating_rows(required: dict[str, list[Item]], pool: Pool) -> list[str]:
    """The pool rows that join the fresh rows: per function, those that refute the rules no required row refutes
    (separating.separate: the most refuted first, at most SEPARATING_ROWS per table)."""
    picked: list[str] = []
    for function in sorted(set(required) & set(pool.items)):
        fam = family_of(function, required[function], pool)
        picked += [row for row in separate(fam, {it.row for it in required[function]} | set(picked), owner)
                   if row not in picked]
    return picked


def separated(required: dict[str, list[Item]], pool: Pool) -> set[str]:
    """Functions whose fresh rows leave a forger no rule but fixes: the bug fails a required row of it that no
    visible row's inputs hold, and every rule of F is refuted by a required row or equals the reference on every
    required and pool row."""
    out = set()
    for function, items in required.items():
        visible = pool.visible.get(function, [])
        beyond = [it for it in items if not _agrees(it.bug, it.want) and not any(_same_inputs(it.inputs, v)
                                                                                for v in visible)]
        if beyond and not judge_rules(family_of(function, items, pool), {it.row for it in items}).open:
            out.add(function)
    return out


def computed_by(source: str, functions: set[str]) -> bool:
    """A check whose every call is one of `functions` or a builtin or a method of a builtin container
    (`[quarter(m) for m in range(1, 13)].count(4)` with quarter separated): its value follows theirs."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return False
    calls = {call_name(n) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    plain = set(dir(builtins)) | {m for t in (list, tuple, dict, set, str) for m in dir(t)}
    return bool(calls & functions) and calls <= functions | plain


def _same_inputs(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(kind(x) == kind(y) and _same(x, y) for x, y in zip(a, b))


def keep_separating_rows(plan: Any, task: SweTask, pool: list[str], fresh: list[str], kept: list[str], buggy: Stream,
                         reference_files: dict[str, str], resplit: Callable[..., tuple],
                         candidates: dict[str, list[Candidate]], kept_sites: set[int]
                         ) -> tuple[Pool, dict[str, str], list[str], list[str]]:
    """Pick the separating rows among the kept pool rows (`pool_rows_of`) and drop the others from the plan's graded
    copies (`resplit(drop=...)`: split_files again, same seed): (what the plan learnt of the pool, the reference
    copies, the fresh rows drawn, those kept), the dropped rows in neither list. Grading pays for the picked only."""
    learnt, unpicked = pool_rows_of(plan, task, pool, kept, buggy, reference_files)
    if not unpicked:
        return learnt, reference_files, fresh, kept
    reference_files = without_pool_rows(plan, resplit(drop=set(unpicked)), candidates, kept_sites) or reference_files
    return (learnt, reference_files, [f for f in fresh if f not in unpicked],
            [f for f in kept if f not in unpicked])


def pool_rows_of(plan: Any, task: SweTask, pool: list[str], kept: list[str], buggy: Stream,
                     reference_files: dict[str, str]) -> tuple[Pool, list[str]]:
    """(what the plan learnt of the pool rows kept, the pool rows that separate no rule): the separating rows of the
    tables of the task's failing tests (tandem.envs.coding.separating) join their fresh rows."""
    failing = {owner(t) for t in task.fail_to_pass}
    fresh = [f for f in kept if owner(f) in failing and f not in pool and not is_probe(f)]
    pooled = [f for f in kept if owner(f) in failing and f in pool]
    learnt = pool_of(task.tests, pooled, plan.sites, buggy.checks, plan.required, reference_files,
                     task.problem_statement)
    required = items_of(fresh, plan.sites, buggy.checks, plan.required, Inputs(reference_files))
    picked = set(separating_rows(required, learnt))
    return learnt, [f for f in pool if f not in picked]


def without_pool_rows(plan: Any, split: tuple, candidates: dict[str, list[Candidate]],
                       kept: set[int]) -> dict[str, str] | None:
    """Rewrite the plan's graded copies from `split` (split_files less the unpicked pool rows); the reference
    copies returned. None, nothing rewritten, where the sites moved (the pool rows then stay, required by none)."""
    sources, found = split[0], split[1]

    def where(by_file: dict[str, list[Candidate]]) -> list[tuple[int, str, int]]:
        return [(s.k, s.file, s.line) for rel in sorted(by_file) for c in by_file[rel] for s in c.sites]

    if where(found) != where(candidates):
        return None
    own = {k for k, site in plan.sites.items() if own_side(site)}
    plan.files = {rel: rewrite(sources[rel], found[rel], keep=kept, own=own) for rel in sources}
    return {rel: rewrite(sources[rel], found[rel], keep=kept, with_references=True) for rel in sources}
