"""Fresh rows of a value table where the reference fix raises (issue 46): kept as rows that must raise.

    @pytest.mark.parametrize("value, expected", [("120", 120), (" 30 ", 30), ("0", 0), ("-5", 0)])
    def test_parse_retry_after(value, expected):
        assert parse_retry_after(value) == expected

A fresh row joins strings of the column ('120 30 ') or crosses columns (clamp(4, 4, 3): lo above hi), and the
reference raises ValueError there. tandem.envs.coding.differential drops such a row (no value to hold), and the
table has no `pytest.raises` test for tandem.envs.coding.raising_rows to vary: a rewrite that answers 0 for
a malformed header, or one that drops clamp's empty-range guard, passed every row required.

Such a row is kept here as a **must-raise** row where the bug raised too, and an instance of one class: the most
specific class both raised (their MROs' first common name). What the reference and the bug agree on is behaviour the
fix did not come to change, so every correct fix keeps it (a regression guard, as
tandem.envs.coding.regression_rows); a row where the bug answers a value, or raises another class, is dropped (a
correct fix may raise or not there). The row passes where the test body raised an Exception before any host-held
check ran (verdict.judge's `must_raise`), of that class or **another**: which class rejects an input the tests never
give is no contract (a span() through sorted() raises IndexError on [] where min() raised ValueError, and passes
every hidden test). A value there fails: the reference and the bug both refuse the input, and a fix that answers it
(clamp without its lo > hi guard, a malformed header read as 0) changed what it did not come to. Not kept: a class
every exception shares (Exception, BaseException), an AssertionError (an assert the host left in the copy failed), a
limit of the machine rather than a decision (RecursionError, MemoryError, OverflowError: an iterative or integer fix
may answer there), probe rows and hard rows beyond the guard (a correct fix may answer otherwise there), generated
rows of raising_rows and call_rows (judged by their own rule).

A forger raising everywhere fails every kept row that must not raise (their values are required), and one
raising for some rows only must tell from the inputs which ones: the reference's decision, the fix.
"""

from __future__ import annotations

from tandem.envs.coding.call_rows import CALLS_SUFFIX
from tandem.envs.coding.checks import Site
from tandem.envs.coding.confined import is_probe
from tandem.envs.coding.fresh_rows import owner
from tandem.envs.coding.raising_rows import ROWS_SUFFIX
from tandem.envs.coding.verdict import Stream, raised_before_checks

TOO_WIDE = frozenset({"object", "BaseException", "Exception", "AssertionError", "RecursionError", "MemoryError",
                      "OverflowError"})
"""Classes a must-raise row never requires (the module's docstring says why)."""


def reference_raises(clean: Stream, fresh: list[str], sites: dict[int, Site],
                     hard: dict[str, bool]) -> dict[str, tuple[str, ...]]:
    """Fresh rows of value tables (row -> the MRO's names) where the reference's clean run raised an Exception
    before any host-held check; no probe, no hard row beyond the guard, no generated rows test."""
    out = {}
    for f in fresh:
        if is_probe(f) or hard.get(f) or owner(f).endswith((ROWS_SUFFIX, CALLS_SUFFIX)):
            continue
        names = raised_before_checks(clean, f, sites)
        if "Exception" in names:
            out[f] = names
    return out


def agreed_with_bug(raising: dict[str, tuple[str, ...]], buggy: Stream, sites: dict[int, Site]) -> dict[str, str]:
    """The rows of `raising` where the bug raised too (row -> the most specific class both raised), none whose
    common class is TOO_WIDE."""
    out = {}
    for f, names in raising.items():
        bug = raised_before_checks(buggy, f, sites)
        common = next((n for n in names if n in bug), None)
        if common is not None and common not in TOO_WIDE:
            out[f] = common
    return out


def confirmed(must_raise: dict[str, str], confirm: Stream, sites: dict[int, Site], fresh: list[str]
              ) -> dict[str, str]:
    """The rows of `must_raise` still drawn (`fresh`) that the reference's confirming run raised the same way."""
    return {f: name for f, name in must_raise.items()
            if f in fresh and name in raised_before_checks(confirm, f, sites)}


def must_raise_rows(raising: dict[str, tuple[str, ...]], buggy: Stream, confirm: Stream, sites: dict[int, Site],
                    fresh: list[str]) -> dict[str, str]:
    """The must-raise rows of a plan (row -> class): those of `raising` (reference_raises of the clean run) that the
    bug raised alike and the confirming run raised again, still drawn."""
    return confirmed(agreed_with_bug(raising, buggy, sites), confirm, sites, fresh)
