"""Where a weak hidden test is graded by rows beyond the visible ones (issue 46): a confined change
(tandem.envs.coding.confined) or a `pytest.raises` test's block on fresh inputs (tandem.envs.coding.raising_rows).
Called by tandem.envs.coding.grading_plan.build_plan after the fresh-row rule, before the guesses' odds."""

from __future__ import annotations

from typing import Any, Callable

from tandem.envs.coding.checks import Reference
from tandem.envs.coding.confined import confined_tables
from tandem.envs.coding.raising_rows import graded_by_rows
from tandem.envs.coding.swe_data import SweTask
from tandem.envs.coding.verdict import Stream, lookup


def graded_beyond_the_visible_rows(plan: Any, task: SweTask, fresh: list[str], kept: list[str],
                                   buggy: Stream, bug_fails: Callable[[str], bool]) -> None:
    """Weak hidden tests graded as a confined change (every fresh and probe row of the table a guard) or by their
    raising block's outcomes on fresh inputs; each requires those rows (GradingPlan.differential).
    `plan`: the GradingPlan being built (its module imports this one); `bug_fails(row)`: the bug fails a host-held
    check of the row or never reaches one."""
    def value_of(test: str) -> object:
        return next((s.expected.of(test) for s in plan.sites.values()
                     if isinstance(s.expected, Reference) and s.expected.held and s.expected.of(test)), None)

    weak = [t for t in task.fail_to_pass if not plan.host_graded[t]]
    confined = confined_tables(weak, list(task.pass_to_pass), fresh, kept, bug_fails,
                               lambda f: bool(lookup(buggy.checks, f)), value_of)
    plan.confined = sorted(confined)
    weak = [t for t in weak if t not in confined]
    for t, rows in {**confined, **graded_by_rows(weak, kept, plan.sites, bug_fails)}.items():
        plan.host_graded[t] = sorted({k for f in rows for k in plan.required[f]})
        plan.differential[t] = rows
