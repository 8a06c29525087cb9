"""Every kept fresh row of a graded test's table is required (issue 46): the regression rows.

The fresh-row rules (tandem.envs.coding.differential, guess_plan, row_rules) require the rows that decide a test:
those the bug fails beyond a forger's reach. The other kept rows, where the bug already answers as the reference
does, ran in the graded copy and were judged by nothing. So a fix that mends the stated inputs and breaks the
function elsewhere scored 1 wherever the original rows miss the break: a reviewer's wrong fixes of the realistic
set (a title-case rewrite that raises on a trailing space, a truncation off by the separator, a sign that reads
0.08 as 0) passed every original row and failed kept fresh rows that nothing required.

Requiring them is safe for a correct fix: a kept row lies inside the domain guard (tandem.envs.coding.wide_pools:
the column's types, signs and magnitude), where a correct fix answers as the reference does, and it is kept only
where the reference gave the same value in both of the plan's runs. Probe rows reach past the domain (confined
changes' guards) and stay out.
"""

from __future__ import annotations

from tandem.envs.coding.call_rows import same_table


def require_kept_rows(differential: dict[str, list[str]], tests: tuple[str, ...], rows: list[str]) -> None:
    """Add to `differential` (graded test id -> the fresh rows it requires) every row of `rows` (kept, confirmed,
    no probe) of each test's table or twin, after those it requires already."""
    for test in tests:
        table = [f for f in rows if same_table(f, test)]
        have = differential.get(test, [])
        extra = [f for f in table if f not in have]
        if extra:
            differential[test] = [*have, *extra]
