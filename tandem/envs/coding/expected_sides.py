"""Checks whose expected side runs the repository's code, which a correct fix may change (issue 46).

    assert parse(bump("1.4.2", "patch")) == parse("1.4.3")

The host holds R of `E == R` at the reference fix's value (tandem.envs.coding.checks.Reference) and
compares the run's E with it. When R calls the repository's code and a correct fix changes what that
code returns (its parse() gives a tuple where the reference's gave a dict), `E == R` still holds under
plain pytest but E no longer meets the reference's R, and the fix scored 0.

The agent's code must never write both sides of a check that decides the task: a forger would make
both sides return the same constant. So a run's own R counts only where it decides nothing:

- a reference site is **own** when R names something other than a builtin (instrument.runs_code: its
  expectation is an instrument.CodeReference), its
  values are not held from the start (a parametrize column), the reference fix reached it, and the bug
  passes it in every hidden test: decisive for none (grading_plan._decisive). Where the bug already
  writes a value that passes, letting the run write both sides gains a forger nothing;
- graded copies compute R of own sites too (`__tandem_check__(k, (E), (R))`): each record carries R's
  value and whether `E == R` held in the run (tandem_checks), as the original assert judges it, whatever
  the values' types;
- the host passes an own site's value when it meets the reference's R, or when the run's own `E == R`
  held; where a value passed by the run's own R alone (the diff changed what R computes), the site
  must be reached, not meet each of the reference's values (otherwise it must, as every site);
- every decisive site is judged on the host-held values alone, as before; when one misses and its R
  runs the repository's code, the reason says that its expected side is held at the reference fix's
  value (verdict.host_check), so a diff that changes what that code returns fails it.

What R in the graded copies gives a forger, and how the plan counts it (tandem.envs.coding.exposure): R's
constants are echoes; `E == R` is a kept equality (every other host-held check computing E or R is
exposed); the values R's calls compute under the bug join their functions' codomains
(tandem.envs.coding.derivation); a uniform transformation need not pass own sites (a forger passes them
with its own R). If the bug fails an own site once R runs in its copy (R's side effects), the plan takes
no own site at all.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

from tandem.envs.coding.checks import Site
from tandem.envs.coding.instrument import CodeReference, computes_of


def own_side(site: Site | None) -> bool:
    """The graded copies compute this check's R, and a run's own `E == R` passes it."""
    return site is not None and isinstance(site.expected, CodeReference) and site.expected.own


def eligible(sites: dict[int, Site], required: dict[str, set[int]]) -> set[int]:
    """Reference sites whose R runs the repository's code, not held from the start, reached by the reference."""
    reached = set().union(*required.values()) if required else set()
    return {k for k, s in sites.items() if isinstance(s.expected, CodeReference) and not s.expected.held
            and k in reached}


def marked(sites: dict[int, Site], own: set[int]) -> dict[int, Site]:
    """The sites of `own` as own sites."""
    return {k: replace(sites[k], expected=replace(sites[k].expected, own=True)) for k in own}


def agreed(site: Site, record: tuple[Any, bool] | None) -> bool:
    """An own site's value passes when the run's own `E == R` held (record: R's value and that outcome)."""
    return own_side(site) and record is not None and record[1] is True


def held_note(site: Site) -> str:
    """What the reason of a failing check adds when its expected side runs the repository's code but is held."""
    if isinstance(site.expected, CodeReference) and not site.expected.own:
        return ("; its expected side is computed by the repository's code, which the diff may change: it is held "
                "at the reference fix's value, since the bug fails this check")
    return ""


def with_r_values(sites: dict[int, Site], buggy: dict[str, list], own: dict[str, dict[int, tuple[Any, bool]]],
                  r_sides: dict[int, ast.expr]) -> tuple[dict[int, Site], dict[str, list]]:
    """`sites` and the bug's values with R of each own site as one more check (numbered -1 - k): what R's calls
    computed under the bug is a value of their function the sandbox holds (a codomain, derivation._codomains).
    `own`: per test, the index of a record in `buggy`'s list -> (R's value, `E == R`); `r_sides`: R's node per site."""
    extra = {-1 - k: Site(-1 - k, sites[k].file, sites[k].line, "truth", None, ast.unparse(r)[:200],
                          computes=computes_of(r)) for k, r in r_sides.items() if k in sites}
    if not extra:
        return sites, buggy
    values = {}
    for test, events in buggy.items():
        by_index = own.get(test, {})
        values[test] = list(events) + [(-1 - events[i][0], r) for i, (r, _) in sorted(by_index.items())
                                       if i < len(events) and -1 - events[i][0] in extra]
    return {**sites, **extra}, values
