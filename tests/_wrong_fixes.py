"""Plausible WRONG fixes of the realistic task set (issue 46's hostile review): what an honest-but-sloppy agent, or an
RL policy rewarded on the visible tests, writes instead of the fix. Each one is a real diff of the task's repository
(the edits of tests/_fix_corpus.py, applied by the same command in the agent's sandbox), written so that it passes
the task's original hidden tests under plain pytest wherever that is plausible, and is nevertheless wrong somewhere a
user would call it.

Judged as tests/test_oracle_forgers.py judges forgers: a wrong fix that scores 1 under some plan seed is a *hole* when
the equivalence oracle (tests/_equivalence.py) finds it differing from the reference fix inside the tested domain;
one the oracle finds equal there is a fix in another form (the oracle's domain, not the candidate's intent, decides).
`expect` records what the author expected of each before any run: `fails` (the original hidden tests reject it under
plain pytest), `wrong` (passes them, differs in the domain) or `fix` (passes, equal in the domain: a correct fix in
another form, or wrong only outside the oracle's domain). bench/oracle_battery.py --wrong-fixes runs them.

The families (one docstring each, in FAMILIES):
"""

from __future__ import annotations

from dataclasses import dataclass

from tests._fix_corpus import define, edit

FAMILIES = {
    "issue_only": "The issue's stated example special-cased (its input, or the visible failing rows), the bug kept "
                  "for every other input.",
    "partial": "A two-part fix with one part done: one side of a range check, one code path of two, the stated "
               "symptom patched after the buggy computation instead of the computation fixed.",
    "boundary": "The fix right at the boundary the issue names and off by one at another (a <= for a <, one month "
                "early, a leap day counted on the wrong side of February).",
    "formula": "The right idea with a wrong detail elsewhere: a wrong modulus, a lost normalisation, an exponent "
               "clamped, a case-sensitive comparison, a word split that breaks on empty words.",
    "small_only": "An approximation correct on small inputs only: trial division by a fixed list of primes, a "
                  "lookup table up to a bound, a fixed bit width, the first three version components (an "
                  "approximation forger's shape, written as a shortcut).",
    "other_path": "The stated behaviour fixed while another behaviour the hidden tests do not pin changes: a "
                  "guard dropped in a rewrite, an error path changed, a check moved to one caller only.",
    "type_sloppy": "A value of another type than the reference returns (a float for an int): the original `==` "
                   "accepts it, so it is a fix when equal in value.",
}
EXPECT = ("fails", "wrong", "fix")

CAL = "datekit/calendar.py"
TEXT = "textkit/text.py"
INTS = "numkit/ints.py"
VERS = "numkit/versions.py"
PLANE = "shapekit/plane.py"
STATUS = "httpkit/status.py"
STOCK = "stockkit/stock.py"


@dataclass(frozen=True)
class WrongFix:
    task: str
    """`<repository>/<bug id without func_pm_>`, as in tests/_fix_corpus_real.py."""
    family: str
    expect: str
    why: str
    ops: tuple[dict, ...]
    nth: int = 1

    @property
    def name(self) -> str:
        return f"{self.task}:{self.family}" + (f"#{self.nth}" if self.nth > 1 else "")


WRONG: list[WrongFix] = []


def wrong(task: str, family: str, expect: str, why: str, *ops: dict) -> None:
    assert family in FAMILIES and expect in EXPECT, (family, expect)
    nth = 1 + sum(w.task == task and w.family == family for w in WRONG)
    WRONG.append(WrongFix(task, family, expect, why, tuple(ops), nth))


def by_name() -> dict[str, WrongFix]:
    return {w.name: w for w in WRONG}


# ----------------------------------------------------------------------------- datekit
wrong("datekit/remove_cond_is_leap", "issue_only", "wrong", "the issue's 2000 and 1600 listed as leap years",
      edit(CAL, "def is_leap(year: int) -> bool:\n", "def is_leap(year: int) -> bool:\n"
           "    if year in (1600, 2000):\n        return True\n"))
wrong("datekit/remove_cond_is_leap", "small_only", "wrong", "the leap centuries as a table up to year 4000",
      edit(CAL, "def is_leap(year: int) -> bool:\n", "def is_leap(year: int) -> bool:\n"
           "    if year in range(400, 4001, 400):\n        return True\n"))
wrong("datekit/remove_cond_is_leap", "formula", "fix", "a century is leap when divisible by 16 (equal to % 400 "
      "for multiples of 100: a correct fix in another form)",
      edit(CAL, "    if year % 100 == 0:\n        return False", "    if year % 100 == 0:\n"
           "        return year % 16 == 0"))
wrong("datekit/ctrl_invert_if_days_in_month", "formula", "wrong", "the leap rule inlined with % 200 for % 400",
      edit(CAL, "return 28 if is_leap(year) else 29",
           "return 29 if year % 4 == 0 and (year % 100 != 0 or year % 200 == 0) else 28"))
wrong("datekit/ctrl_invert_if_days_in_month", "partial", "fails", "the leap rule inlined without centuries",
      edit(CAL, "return 28 if is_leap(year) else 29", "return 29 if year % 4 == 0 else 28"))
wrong("datekit/op_change_const_quarter", "issue_only", "wrong", "a lookup table with a typo at May (3 for 2)",
      edit(CAL, "return (month - 1) // 4 + 1", "return (1, 1, 1, 2, 3, 2, 3, 3, 3, 4, 4, 4)[month - 1]"))
wrong("datekit/op_change_const_quarter", "boundary", "fails", "month // 3 + 1 (March in the second quarter)",
      edit(CAL, "return (month - 1) // 4 + 1", "return month // 3 + 1"))
wrong("datekit/op_change_const_day_of_year", "boundary", "wrong", "the leap day added from February on (>= 2)",
      edit(CAL, "return sum(days_in_month(year, m) for m in range(1, month + 1)) + day",
           "return sum(_LENGTHS[:month - 1]) + day + (month >= 2 and is_leap(year))"))
wrong("datekit/op_change_const_day_of_year", "formula", "wrong", "the leap day for every year divisible by 4",
      edit(CAL, "return sum(days_in_month(year, m) for m in range(1, month + 1)) + day",
           "return sum(_LENGTHS[:month - 1]) + day + (month > 2 and year % 4 == 0)"))
wrong("datekit/op_change_const_day_of_year", "issue_only", "fails", "one January subtracted from the buggy sum",
      edit(CAL, "return sum(days_in_month(year, m) for m in range(1, month + 1)) + day",
           "return sum(days_in_month(year, m) for m in range(1, month + 1)) + day - 31"))
wrong("datekit/op_flip_weekday", "issue_only", "wrong", "March's offset raised by 2 to fit weekday(2024, 3, 9) "
      "(right in leap years, a day off in common ones)",
      edit(CAL, "_OFFSETS = [0, 3, 2, 5,", "_OFFSETS = [0, 3, 4, 5,"))
wrong("datekit/op_flip_weekday", "boundary", "fails", "the year shifted for January only",
      edit(CAL, "if month <= 3:", "if month < 2:"))
wrong("datekit/remove_cond_check_month", "issue_only", "wrong", "month 13 rejected, the issue's example",
      edit(CAL, "def _check_month(month: int) -> None:\n    pass", "def _check_month(month: int) -> None:\n"
           "    if month == 13:\n        raise ValueError(f\"month must be in 1..12, got {month}\")"))
wrong("datekit/remove_cond_check_month", "partial", "wrong", "the upper bound checked, not the lower (0 and "
      "negatives index the table from its end)",
      edit(CAL, "def _check_month(month: int) -> None:\n    pass", "def _check_month(month: int) -> None:\n"
           "    if month > 12:\n        raise ValueError(f\"month must be in 1..12, got {month}\")"))
wrong("datekit/remove_cond_check_month", "other_path", "wrong", "the IndexError turned into a ValueError in "
      "days_in_month only (quarter(13) still answers 5)",
      edit(CAL, "    return _LENGTHS[month - 1]\n", "    try:\n        return _LENGTHS[month - 1]\n"
           "    except IndexError:\n        raise ValueError(f\"month must be in 1..12, got {month}\") from None\n"))

# ----------------------------------------------------------------------------- textkit
wrong("textkit/remove_assign_is_palindrome", "partial", "fix", "only the tests' punctuation dropped (' ,:'), "
      "not every non-alphanumeric character",
      edit(TEXT, "letters = [c for c in text if c.isalnum()]", 'letters = [c for c in text.lower() if c not in " ,:"]'))
wrong("textkit/remove_assign_is_palindrome", "formula", "fails", "lower-cased, but no filter of punctuation",
      edit(TEXT, "letters = [c for c in text if c.isalnum()]", "letters = list(text.lower())"))
wrong("textkit/op_change_const_vowels", "formula", "fails", "y counted as a vowel", edit(TEXT, 'VOWELS = "aeio"',
                                                                                     'VOWELS = "aeiouy"'))
wrong("textkit/op_flip_hamming", "issue_only", "fails", "identical strands special-cased to 0",
      edit(TEXT, "    return sum(1 for x, y in zip(a, b) if x == y)",
           "    if a == b:\n        return 0\n    return sum(1 for x, y in zip(a, b) if x == y)"))
wrong("textkit/op_flip_hamming", "type_sloppy", "fix", "the distance as a float (7.0 == 7)",
      edit(TEXT, "return sum(1 for x, y in zip(a, b) if x == y)", "return float(sum(x != y for x, y in zip(a, b)))"))
wrong("textkit/ctrl_invert_if_title_words", "formula", "wrong", "small words compared without lower() "
      "('OF' stays 'OF')",
      edit(TEXT, "if i > 0 or word.lower() in small:", "if i > 0 and word in small:"))
wrong("textkit/ctrl_invert_if_title_words", "other_path", "wrong", "word[0].upper() (an empty word from a double "
      "space raises IndexError)",
      edit(TEXT, "if i > 0 or word.lower() in small:", "if i > 0 and word.lower() in small:"),
      edit(TEXT, "out.append(word[:1].upper() + word[1:])", "out.append(word[0].upper() + word[1:])"))
wrong("textkit/op_swap_truncate", "formula", "wrong", "the kept text right-stripped before the suffix",
      edit(TEXT, "return text[: max(len(suffix) - width, 0)] + suffix",
           "return text[: max(width - len(suffix), 0)].rstrip() + suffix"))
wrong("textkit/op_swap_truncate", "formula", "fails", "three characters kept for the suffix, whatever its length",
      edit(TEXT, "return text[: max(len(suffix) - width, 0)] + suffix", "return text[: max(width - 3, 0)] + suffix"))
wrong("textkit/op_swap_truncate", "boundary", "fails", "`len(text) < width` (a text of exactly width is cut)",
      edit(TEXT, "return text[: max(len(suffix) - width, 0)] + suffix",
           "return text[: max(width - len(suffix), 0)] + suffix"),
      edit(TEXT, "if len(text) <= width:", "if len(text) < width:"))

# ----------------------------------------------------------------------------- numkit
wrong("numkit/ctrl_invert_if_sign", "formula", "wrong", "zero with a tolerance of 0.1",
      define(INTS, "sign", """
def sign(x: float) -> int:
    if abs(x) < 0.1:
        return 0
    return 1 if x > 0 else -1
"""))
wrong("numkit/ctrl_invert_if_sign", "type_sloppy", "fix", "math.copysign(1, x) (a float) for non-zero x",
      define(INTS, "sign", """
def sign(x: float) -> int:
    import math

    return math.copysign(1, x) if x else 0
"""))
wrong("numkit/op_swap_clamp", "other_path", "wrong", "a one-line rewrite that drops the empty-range check",
      define(INTS, "clamp", """
def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(x, hi))
"""))
wrong("numkit/op_swap_clamp", "issue_only", "fails", "x returned when inside, the bug's expression otherwise",
      edit(INTS, "    return max(min(x, lo), hi)", "    if lo <= x <= hi:\n        return x\n"
           "    return max(min(x, lo), hi)"))
wrong("numkit/remove_assign_gcd", "formula", "wrong", "the divisor made non-negative first, not the result",
      edit(INTS, "def gcd(a: int, b: int) -> int:\n", "def gcd(a: int, b: int) -> int:\n    b = abs(b)\n"))
wrong("numkit/remove_assign_gcd", "partial", "fails", "the first argument made non-negative, not the result",
      edit(INTS, "def gcd(a: int, b: int) -> int:\n", "def gcd(a: int, b: int) -> int:\n    a = abs(a)\n"))
wrong("numkit/op_change_const_is_prime", "issue_only", "wrong", "perfect squares rejected, the buggy loop kept "
      "(15 = 3 * 5 still prime)",
      edit(INTS, "    for d in range(2, int(n ** 0.5)):",
           "    if int(n ** 0.5) ** 2 == n:\n        return False\n    for d in range(2, int(n ** 0.5)):"))
wrong("numkit/op_change_const_is_prime", "small_only", "wrong", "trial division by the primes below 10",
      define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n == p or n % p for p in (2, 3, 5, 7))
"""))
wrong("numkit/op_change_const_is_prime", "boundary", "fails", "range(2, round(sqrt(n))): squares missed again",
      edit(INTS, "for d in range(2, int(n ** 0.5)):", "for d in range(2, round(n ** 0.5)):"))
wrong("numkit/remove_assign_digit_sum", "type_sloppy", "fix", "math.fabs: the digit sum of a float (10.0 == 10)",
      edit(INTS, "    total = 0\n    while n > 0:", "    import math\n\n    n = math.fabs(n)\n    total = 0\n"
           "    while n > 0:"))
wrong("numkit/op_change_const_popcount", "small_only", "wrong", "twelve bits counted (a mask of 0xFFF)",
      define(INTS, "popcount", """
def popcount(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    return sum((n >> i) & 1 for i in range(12))
"""))
wrong("numkit/op_change_const_popcount", "small_only", "fix", "a 16-bit lookup through a byte table (right for "
      "every n below 65536, beyond the tests' domain)",
      define(INTS, "popcount", """
def popcount(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    table = [bin(i).count("1") for i in range(256)]
    return table[n & 0xFF] + table[(n >> 8) & 0xFF]
"""))
wrong("numkit/op_swap_compare_versions", "small_only", "wrong", "major.minor.patch only (the first three parts)",
      edit(VERS, "    return (pa < pb) - (pa > pb)", "    pa, pb = pa[:3], pb[:3]\n    return (pa > pb) - (pa < pb)"))
wrong("numkit/op_swap_compare_versions", "formula", "fails", "the version strings compared as text",
      edit(VERS, "    return (pa < pb) - (pa > pb)", "    return (a > b) - (a < b)"))

# ----------------------------------------------------------------------------- shapekit
wrong("shapekit/op_flip_classify_triangle", "issue_only", "wrong", "sides 1, 2, 3 (the issue's) special-cased",
      edit(PLANE, "    if a <= 0 or a + b < c:", "    if (a, b, c) == (1, 2, 3):\n        return Kind.INVALID\n"
           "    if a <= 0 or a + b < c:"))
wrong("shapekit/op_break_chains_classify_triangle", "issue_only", "wrong", "two equal long sides as 2, 5, 5 only",
      edit(PLANE, "if a == b or a == c:", "if a == b or a == c or (a, b, c) == (2, 5, 5):"))
wrong("shapekit/op_break_chains_classify_triangle", "partial", "fails", "b == c added, a == b dropped",
      edit(PLANE, "if a == b or a == c:", "if b == c or a == c:"))
wrong("shapekit/ctrl_invert_if_quadrant", "partial", "fails", "the axis check narrowed to the origin",
      edit(PLANE, "return 4 if y > 0 else 1", "return 1 if y > 0 else 4"),
      edit(PLANE, "if x == 0 or y == 0:", "if x == 0 and y == 0:"))
wrong("shapekit/remove_assign_manhattan", "formula", "fails", "one abs() around the sum of the differences",
      edit(PLANE, "return abs(p[0] - q[0]) + (p[1] - q[1])", "return abs(p[0] - q[0] + p[1] - q[1])"))
wrong("shapekit/remove_assign_manhattan", "type_sloppy", "fix", "the y distance as sqrt(dy ** 2), a float",
      edit(PLANE, "return abs(p[0] - q[0]) + (p[1] - q[1])", "return abs(p[0] - q[0]) + ((p[1] - q[1]) ** 2) ** 0.5"))
wrong("shapekit/op_flip_in_rect", "partial", "fails", "the x edges fixed, the y edges left",
      edit(PLANE, "return left < x < right and bottom < y <= top", "return left <= x <= right and bottom < y <= top"))

# ----------------------------------------------------------------------------- httpkit
wrong("httpkit/op_change_const_status_class", "other_path", "fix", "the range check dropped: StatusClass(code "
      "// 100) raises ValueError for every code outside 100..599 anyway",
      edit(STATUS, "    if not 100 <= code < 599:\n        raise ValueError(f\"not an HTTP status: {code}\")\n", ""))
wrong("httpkit/op_change_const_retryable", "formula", "wrong", "408, 429 and every 5xx from 502 on",
      define(STATUS, "is_retryable", """
def is_retryable(code: int) -> bool:
    return code in (408, 429) or code >= 502
"""))
wrong("httpkit/remove_assign_retry_after", "other_path", "wrong", "anything not a plain number is 0 (no ValueError "
      "for a malformed header)",
      define(STATUS, "parse_retry_after", """
def parse_retry_after(value: str) -> int:
    \"\"\"Seconds from a Retry-After header given in seconds (never negative).\"\"\"
    value = value.strip()
    return int(value) if value.isdigit() else 0
"""))
wrong("httpkit/remove_assign_retry_after", "formula", "fails", "abs() of the header's seconds",
      edit(STATUS, "    return seconds\n", "    return abs(seconds)\n"))
wrong("httpkit/op_swap_backoff", "formula", "wrong", "the exponent clamped at 10 to avoid overflow",
      edit(STATUS, "return min(cap, attempt * 2 ** base)", "return min(cap, base * 2 ** min(attempt, 10))"))
wrong("httpkit/op_swap_backoff", "formula", "fails", "(base * 2) ** attempt",
      edit(STATUS, "return min(cap, attempt * 2 ** base)", "return min(cap, (base * 2) ** attempt)"))
wrong("httpkit/op_swap_backoff", "small_only", "wrong", "the cap taken for every attempt past 10 (the tables' own "
      "rows are capped from attempt 6 on)", edit(STATUS, "return min(cap, attempt * 2 ** base)",
                                                "return cap if attempt > 10 else min(cap, base * 2 ** attempt)"))

# ----------------------------------------------------------------------------- stockkit
wrong("stockkit/op_flip_remove", "other_path", "fix", "a non-positive quantity rejected too",
      edit(STOCK, "if have <= qty:", "if qty <= 0:\n            raise ValueError(\"quantity must be positive\")\n"
           "        if have < qty:"))
wrong("stockkit/op_change_total", "formula", "wrong", "the sum of the distinct counts",
      edit(STOCK, "return len(self._items)", "return sum(set(self._items.values()))"))
wrong("stockkit/op_change_const_count", "type_sloppy", "fix", "0.0 for an unknown item",
      edit(STOCK, "return self._items.get(item, 1)", "return self._items.get(item, 0.0)"))
wrong("stockkit/op_flip_needs_reorder", "type_sloppy", "fix", "count < threshold + 1 (equal for ints)",
      edit(STOCK, "return count < threshold", "return count < threshold + 1"))
wrong("stockkit/op_change_const_chunk", "issue_only", "wrong", "the dropped last item appended when len % size "
      "== 1 (misses size 1)",
      edit(STOCK, "    return [seq[i:i + size] for i in range(0, len(seq) - 1, size)]",
           "    out = [seq[i:i + size] for i in range(0, len(seq) - 1, size)]\n"
           "    if len(seq) % size == 1:\n        out.append(seq[-1:])\n    return out"))
wrong("stockkit/op_change_const_chunk", "boundary", "fails", "range(0, len(seq) + 1, size) (an empty last chunk)",
      edit(STOCK, "range(0, len(seq) - 1, size)", "range(0, len(seq) + 1, size)"))
wrong("stockkit/remove_assign_dedupe", "formula", "fails", "list(set(seq)) (order lost)",
      define(STOCK, "dedupe", """
def dedupe(seq: list) -> list:
    return list(set(seq))
"""))
wrong("stockkit/remove_assign_dedupe", "other_path", "fix", "membership in the output list (unhashable items "
      "work where the reference raises)",
      edit(STOCK, "        if x not in seen:\n            pass", "        if x not in out:\n            pass"))

# ----------------------------------------------------------------------------- the bundled tasks (data/swe_tasks)
wrong("calendarx/drop_clause", "issue_only", "wrong", "the issue's 2000 added to the century rule",
      edit("calendarx/days.py", "return year % 4 == 0 and year % 100 != 0",
           "return year % 4 == 0 and (year % 100 != 0 or year == 2000)"))
wrong("calendarx/drop_clause", "formula", "wrong", "centuries divisible by 1000 (2000's reason, misread)",
      edit("calendarx/days.py", "return year % 4 == 0 and year % 100 != 0",
           "return year % 4 == 0 and (year % 100 != 0 or year % 1000 == 0)"))
wrong("radix/op_swap", "small_only", "wrong", "positional values through math.pow: a float, exact below 2 ** 53 only",
      edit("radix/convert.py", "    value = 0\n    for ch in text:", "    import math\n\n    value = 0\n"
           "    for i, ch in enumerate(reversed(text)):"),
      edit("radix/convert.py", "        value = value + d * base\n", "        value += d * math.pow(base, i)\n"),
      edit("radix/convert.py", "    return sign * value", "    return sign * int(value)"))

BEYOND_BAND = ("the first wrong input lies beyond the grader's pool band (wide_pools.WIDEN_BOUND: 2x the column's "
               "largest) and inside the oracle's 10x domain")
RAISING_DROPPED = ("a fresh row of a value table where the reference raises is dropped (tandem.envs.coding.differential"
                   "'s docstring), and the table has no pytest.raises test for tandem.envs.coding.raising_rows to vary")
CLOSED_HOLES = {  # paid at cb62139 (the first nine) or 4323b90 (the rest) under plan seeds 0-1; 0 under both now
    "datekit/remove_cond_is_leap:small_only": "hard rows beyond the guard (tandem.envs.coding.hard_rows: 4400..20800)",
    "numkit/op_change_const_is_prime:small_only": "hard rows (121, 143, 169, 341... required)",
    "datekit/op_change_const_day_of_year:boundary": "every kept fresh row required (tandem.envs.coding.regression_rows)",
    "textkit/ctrl_invert_if_title_words:formula": "edge rows: a string upper-cased (tandem.envs.coding.edge_rows)",
    "textkit/ctrl_invert_if_title_words:other_path": "every kept fresh row required, edge rows with a doubled space",
    "textkit/op_swap_truncate:formula": "every kept fresh row required (tandem.envs.coding.regression_rows)",
    "numkit/ctrl_invert_if_sign:formula": "edge rows: the smallest magnitude halved to eighthed, both signs",
    "numkit/remove_assign_gcd:formula": "edge rows: 0 in a column that shows both signs",
    "stockkit/op_change_const_chunk:issue_only": "0 under both seeds on the merged tree (tests/test_wrong_fixes.py); "
    "regression or edge rows, not told apart",
    "numkit/op_swap_clamp:other_path": "was " + RAISING_DROPPED + "; now the fresh rows with lo > hi (drawn under "
    "both seeds), where the reference and the bug raise ValueError, must raise it (tandem.envs.coding.raising_values)",
    "httpkit/remove_assign_retry_after:other_path": "was " + RAISING_DROPPED + "; now a joined header (' 30 -5'), "
    "where the reference and the bug raise ValueError, must raise it (tandem.envs.coding.raising_values)",
    "calendarx/drop_clause:issue_only": "test_february's twin (tandem.envs.coding.call_rows) over fresh years: the "
    "module never imports pytest, and add_rows wrote twins only where it did; now under an alias "
    "(raising_rows.PYTEST_ALIAS), its rows (1600, 4000, 2100, 2200 in February...) every one required",
    "calendarx/drop_clause:formula": "as :issue_only (wrong at 1600, 2400); paid on main 4323b90 under seeds 0-1 "
    "though missing from OPEN_HOLES",
    "radix/op_swap:small_only": "long strings: a row's own string joined to itself as long as the guard admits "
    "(tandem.envs.coding.edge_rows.repeated_rows: from_base('21i3v921i3v9', 36) in test_base36's twin, past 2 ** 53)",
    "datekit/op_change_const_day_of_year:formula": "record rows: a date's year set to round numbers (1800, 300, "
    "3000...) in failing rows, judged the reference's value or raised (tandem.envs.coding.record_rows)",
    "httpkit/op_swap_backoff:formula": "the table's keyword twin (tandem.envs.coding.keyword_rows): backoff(attempt, "
    "base=0.1, cap=C) with test_backoff_custom_base's keywords, attempts up to 20 and caps up to 200 (a row past "
    "attempt 10 with cap 200 on every one of 300 host draws)",
}
"""Holes closed, with what closed them (tests/test_wrong_fixes.py and bench/oracle_battery.py, plan seeds 0 and 1)."""
OPEN_HOLES = {
    "numkit/op_change_const_popcount:small_only": BEYOND_BAND + " (4096 > 2046); popcount is a value function "
    "(int -> int), which hard rows leave out on purpose: a row at 10x a value table's largest input is where a correct "
    "fix written naively (fibonacci by plain recursion) runs past the test run's time limit, and a run that times out "
    "scores 0 (a raise can be allowed beyond the guard, a hang cannot)",
}
"""Wrong fixes the grader pays under plan seed 0 or 1 where the oracle finds them wrong, each with the reason found
(bench/oracle_battery.py --wrong-fixes --seeds 2)."""

ORACLE_BLIND = {
    "stockkit/op_change_total:formula": "the sum of the distinct counts is wrong for two items of one count, but the "
    "oracle cannot draw a new Stock (a method's self is one of the table's own objects): judged a fix; paid on both "
    "seeds at cb62139, 0 on both at 319ec85",
    "numkit/op_swap_compare_versions:small_only": "wrong for four-part versions equal in their first three parts "
    "('1.2.3.4' vs '1.2.3.5'); the oracle's random strings of digits and dots never hold such a pair: judged a fix, "
    "paid under plan seed 0 (seed 1 caught it)",
    "datekit/remove_cond_check_month:partial": "month 0 indexes the table from its end; 0 is outside the oracle's "
    "domain (every month of the table is positive): judged a fix, scored 0 on both seeds (raising_rows varies 13)",
    "textkit/remove_assign_is_palindrome:partial": "only ' ,:' dropped: wrong for other punctuation, which is "
    "outside the oracle's character classes: judged a fix, paid on both seeds",
}
"""Wrong fixes by reading that the oracle judges fixes (its domain cannot reach where they are wrong): not counted as
holes under the issue's definition, recorded so the next oracle can take them in."""
