"""Correct alternative fixes of the realistic task set (data/swe_realistic, scripts/realistic_specs_*.py): two or
more per task, written from the buggy function as an agent would, not from the reference (see tests/_fix_corpus.py
for how fixes are stored and applied).

A task is named `<repository>/<bug id without func_pm_>`. Fixes that answer differently from the reference on inputs
outside the hidden tests' domain (NaN, floats where the tests pass ints, years outside datetime's range, ...) say
where in `outside=`: a check on fresh inputs could judge them.
"""

from tests._fix_corpus import Fix, define, edit, fix, latin1, write

REALISTIC: list[Fix] = []


def real(task: str, form: str, why: str, *ops, outside: str = "") -> None:
    fix(task, form, why, *ops, outside=outside, into=REALISTIC)


CAL = "datekit/calendar.py"
TEXT = "textkit/text.py"
INTS = "numkit/ints.py"
PLANE = "shapekit/plane.py"
STATUS = "httpkit/status.py"
STOCK = "stockkit/stock.py"
DATETIME_RANGE = "years outside 1..9999 raise (datetime's range) where the reference answers"

# ----------------------------------------------------------------------------- datekit
real("datekit/remove_cond_is_leap", "algorithm", "one boolean expression, the 4-100-400 rule",
     define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
"""))
real("datekit/remove_cond_is_leap", "return_type", "returns 1 / 0 (an int; the tests compare with == True/False)",
     define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    if year % 400 == 0:
        return 1
    if year % 100 == 0:
        return 0
    return int(year % 4 == 0)
"""))
real("datekit/remove_cond_is_leap", "algorithm", "calendar.isleap from the standard library",
     define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    import calendar

    return calendar.isleap(year)
"""))
real("datekit/remove_cond_is_leap", "algorithm", "is the day before March 1 the 29th (datetime; raises past 9999)",
     define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    import datetime

    return (datetime.date(year, 3, 1) - datetime.timedelta(days=1)).day == 29
"""), outside=DATETIME_RANGE)
real("datekit/remove_cond_is_leap", "algorithm", "one modulus chosen by the century: year % (400 or 4) == 0",
     define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    return year % (400 if year % 100 == 0 else 4) == 0
"""))
real("datekit/remove_cond_is_leap", "algorithm", "a century is leap when divisible by 16 (for a multiple of 100, "
     "% 16 == 0 is % 400 == 0): found as a 'wrong' fix in tests/_wrong_fixes.py, a fix by the oracle, paid on seeds 0-1",
     edit(CAL, "    if year % 100 == 0:\n        return False", "    if year % 100 == 0:\n        return year % 16 == 0"))
real("datekit/ctrl_invert_if_days_in_month", "algorithm", "calendar.monthrange from the standard library",
     define(CAL, "days_in_month", """
def days_in_month(year: int, month: int) -> int:
    import calendar

    _check_month(month)
    return calendar.monthrange(year, month)[1]
"""), outside=DATETIME_RANGE)
real("datekit/ctrl_invert_if_days_in_month", "latin1", "the month table plus one day for a leap February, latin-1 file",
     latin1(CAL, define(CAL, "days_in_month", """
def days_in_month(year: int, month: int) -> int:
    _check_month(month)
    # Schaltjahr: der Februar bekommt einen Tag mehr (29 statt 28), die übrigen Monate stehen in der Tabelle
    return _LENGTHS[month - 1] + (month == 2 and is_leap(year))
""")))
real("datekit/op_change_const_quarter", "algorithm", "(month + 2) // 3",
     edit(CAL, "return (month - 1) // 4 + 1", "return (month + 2) // 3"))
real("datekit/op_change_const_quarter", "new_module", "a month -> quarter lookup table in datekit/_quarters.py",
     write("datekit/_quarters.py", '''"""Which quarter each month belongs to."""

QUARTER_OF = {1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 3, 8: 3, 9: 3, 10: 4, 11: 4, 12: 4}
'''),
     define(CAL, "quarter", """
def quarter(month: int) -> int:
    from datekit._quarters import QUARTER_OF

    _check_month(month)
    return QUARTER_OF[month]
"""), outside="a month like 2.0 (a float equal to an int) works, 2.5 raises KeyError where the reference answers")
real("datekit/op_change_const_day_of_year", "cache", "cumulative month lengths computed once and cached in a JSON "
     "file beside the module",
     define(CAL, "day_of_year", """
def day_of_year(year: int, month: int, day: int) -> int:
    import json
    import pathlib

    _check_month(month)
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"no day {day} in {year}-{month:02d}")
    cache = pathlib.Path(__file__).with_name("_cumulative_days.json")
    if not cache.exists():
        before, total = [], 0
        for length in _LENGTHS:
            before.append(total)
            total += length
        cache.write_text(json.dumps(before))
    before = json.loads(cache.read_text())
    return before[month - 1] + day + (month > 2 and is_leap(year))
"""))
real("datekit/op_change_const_day_of_year", "algorithm", "datetime's tm_yday",
     define(CAL, "day_of_year", """
def day_of_year(year: int, month: int, day: int) -> int:
    import datetime

    _check_month(month)
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"no day {day} in {year}-{month:02d}")
    return datetime.date(year, month, day).timetuple().tm_yday
"""), outside=DATETIME_RANGE)
real("datekit/op_flip_weekday", "algorithm", "datetime's isoweekday() % 7 (Sunday = 0)",
     define(CAL, "weekday", """
def weekday(year: int, month: int, day: int) -> int:
    \"\"\"0 = Sunday ... 6 = Saturday.\"\"\"
    import datetime

    _check_month(month)
    return datetime.date(year, month, day).isoweekday() % 7
"""), outside=DATETIME_RANGE + "; an invalid day (Feb 30) raises where the reference answers")
real("datekit/op_flip_weekday", "latin1", "`month in (1, 2)` with a comment, latin-1 file",
     latin1(CAL, edit(CAL, "if month <= 3:", "if month in (1, 2):  # Jänner und Februar zählen zum Vorjahr")))
real("datekit/remove_cond_check_month", "algorithm", "membership in range(1, 13)",
     edit(CAL, "def _check_month(month: int) -> None:\n    pass", "def _check_month(month: int) -> None:\n"
          "    if month not in range(1, 13):\n        raise ValueError(f\"month must be in 1..12, got {month}\")"),
     outside="a non-integral month like 2.5 is rejected where the reference lets it through")
real("datekit/remove_cond_check_month", "new_module", "a MonthError(ValueError) in datekit/_errors.py",
     write("datekit/_errors.py", '''class MonthError(ValueError):
    """A month number outside 1..12."""
'''),
     edit(CAL, "def _check_month(month: int) -> None:\n    pass", "def _check_month(month: int) -> None:\n"
          "    from datekit._errors import MonthError\n\n    if month < 1 or month > 12:\n"
          "        raise MonthError(month)"))

# ----------------------------------------------------------------------------- textkit
real("textkit/remove_assign_is_palindrome", "algorithm", "two indexes walking inwards over casefolded characters",
     define(TEXT, "is_palindrome", """
def is_palindrome(text: str) -> bool:
    letters = [c.casefold() for c in text if c.isalnum()]
    i, j = 0, len(letters) - 1
    while i < j:
        if letters[i] != letters[j]:
            return False
        i, j = i + 1, j - 1
    return True
"""), outside="characters whose casefold differs from lower() (e.g. 'ß' vs 'SS')")
real("textkit/remove_assign_is_palindrome", "latin1", "a joined string lowered once, latin-1 file",
     latin1(TEXT, define(TEXT, "is_palindrome", """
def is_palindrome(text: str) -> bool:
    # Groß- und Kleinschreibung zählen nicht
    cleaned = "".join(filter(str.isalnum, text)).lower()
    return cleaned == cleaned[::-1]
""")), outside="characters whose lower() is longer than one character ('İ')")
real("textkit/op_change_const_vowels", "algorithm", "a case-insensitive regex",
     define(TEXT, "count_vowels", """
def count_vowels(text: str) -> int:
    import re

    return len(re.findall("[aeiou]", text, re.IGNORECASE))
"""), outside="non-ASCII letters whose lower() is a vowel plus a mark ('İ')")
real("textkit/op_change_const_vowels", "new_module", "upper and lower vowels in a set in textkit/_letters.py",
     write("textkit/_letters.py", 'VOWELS = frozenset("aeiouAEIOU")\n'),
     edit(TEXT, 'VOWELS = "aeio"', 'VOWELS = "aeiou"'),
     define(TEXT, "count_vowels", """
def count_vowels(text: str) -> int:
    from textkit._letters import VOWELS as both_cases

    return sum(c in both_cases for c in text)
"""), outside="non-ASCII letters whose lower() is a vowel ('İ')")
real("textkit/op_flip_hamming", "algorithm", "map(operator.ne) over both strands",
     edit(TEXT, "return sum(1 for x, y in zip(a, b) if x == y)", "import operator\n\n"
          "    return sum(map(operator.ne, a, b))"))
real("textkit/op_flip_hamming", "latin1", "length minus the matching positions, latin-1 file",
     latin1(TEXT, edit(TEXT, "return sum(1 for x, y in zip(a, b) if x == y)",
                      "# Länge minus Übereinstimmungen\n    return len(a) - sum(x == y for x, y in zip(a, b))")))
real("textkit/ctrl_invert_if_title_words", "algorithm", "the first word capitalised apart, then a comprehension",
     define(TEXT, "title_words", """
def title_words(text: str, small=("a", "an", "of", "the")) -> str:
    def cap(word: str) -> str:
        return word[:1].upper() + word[1:]

    first, *rest = text.split(" ")
    return " ".join([cap(first)] + [w.lower() if w.lower() in small else cap(w) for w in rest])
"""))
real("textkit/ctrl_invert_if_title_words", "return_type", "returns a collections.UserString (== compares its text)",
     edit(TEXT, "if i > 0 or word.lower() in small:", "if i > 0 and word.lower() in small:"),
     edit(TEXT, '    return " ".join(out)\n\n\ndef truncate', '    import collections\n\n'
          '    return collections.UserString(" ".join(out))\n\n\ndef truncate'))
real("textkit/op_swap_truncate", "algorithm", "how much text to keep computed first, an empty slice when none",
     edit(TEXT, "return text[: max(len(suffix) - width, 0)] + suffix",
          'keep = width - len(suffix)\n    return (text[:keep] if keep > 0 else "") + suffix'))
real("textkit/op_swap_truncate", "new_module", "a clip() helper in textkit/_clip.py",
     write("textkit/_clip.py", '''def clip(text: str, width: int, suffix: str) -> str:
    """text cut so that text + suffix is at most width long (the suffix alone if it does not fit)."""
    room = max(0, width - len(suffix))
    return text[:room] + suffix
'''),
     edit(TEXT, "return text[: max(len(suffix) - width, 0)] + suffix",
          "from textkit._clip import clip\n\n    return clip(text, width, suffix)"))

# ----------------------------------------------------------------------------- numkit
real("numkit/ctrl_invert_if_sign", "algorithm", "(x > 0) - (x < 0)",
     define(INTS, "sign", """
def sign(x: float) -> int:
    return (x > 0) - (x < 0)
"""))
real("numkit/ctrl_invert_if_sign", "return_type", "math.copysign: a float 1.0 / -1.0, 0 for zero",
     define(INTS, "sign", """
def sign(x: float) -> int:
    import math

    return math.copysign(1.0, x) if x else 0
"""), outside="NaN gives 1.0 or -1.0 where the reference gives 0")
real("numkit/op_swap_clamp", "algorithm", "early returns",
     define(INTS, "clamp", """
def clamp(x: float, lo: float, hi: float) -> float:
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
"""))
real("numkit/op_swap_clamp", "latin1", "the median of (lo, x, hi), latin-1 file",
     latin1(INTS, edit(INTS, "return max(min(x, lo), hi)",
                       "return sorted((lo, x, hi))[1]  # der mittlere Wert, für lo <= hi")),
     outside="NaN (sorted() with NaN keeps an arbitrary order)")
real("numkit/remove_assign_gcd", "algorithm", "math.gcd",
     define(INTS, "gcd", """
def gcd(a: int, b: int) -> int:
    import math

    return math.gcd(a, b)
"""), outside="float arguments raise TypeError where the reference computes a float")
real("numkit/remove_assign_gcd", "new_module", "binary GCD (Stein's algorithm) in numkit/_euclid.py",
     write("numkit/_euclid.py", '''def binary_gcd(a: int, b: int) -> int:
    """Stein's algorithm on the absolute values."""
    a, b = abs(a), abs(b)
    if a == 0 or b == 0:
        return a or b
    shift = 0
    while (a | b) & 1 == 0:
        a, b, shift = a >> 1, b >> 1, shift + 1
    while a & 1 == 0:
        a >>= 1
    while b:
        while b & 1 == 0:
            b >>= 1
        if a > b:
            a, b = b, a
        b -= a
    return a << shift
'''),
     define(INTS, "gcd", """
def gcd(a: int, b: int) -> int:
    from numkit._euclid import binary_gcd

    return binary_gcd(a, b)
"""), outside="float arguments raise TypeError where the reference computes a float")
real("numkit/op_change_const_is_prime", "algorithm", "trial division up to math.isqrt(n)",
     edit(INTS, "for d in range(2, int(n ** 0.5)):", "for d in range(2, __import__('math').isqrt(n) + 1):"),
     outside="float arguments raise TypeError")
real("numkit/op_change_const_is_prime", "cache", "a sieve up to 1000 cached in a JSON file beside the module, 6k±1 "
     "trial division above it",
     define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    import json
    import pathlib

    if n < 2:
        return False
    cache = pathlib.Path(__file__).with_name("_primes_below_1000.json")
    if not cache.exists():
        sieve = [True] * 1000
        sieve[0] = sieve[1] = False
        for p in range(2, 32):
            if sieve[p]:
                sieve[p * p::p] = [False] * len(sieve[p * p::p])
        cache.write_text(json.dumps([p for p, prime in enumerate(sieve) if prime]))
    if n < 1000:
        return n in set(json.loads(cache.read_text()))
    if n % 2 == 0 or n % 3 == 0:
        return False
    i = 5
    while i * i <= n:
        if n % i == 0 or n % (i + 2) == 0:
            return False
        i += 6
    return True
"""), outside="non-integral floats below 1000 are never prime here (the reference tests divisors)")
real("numkit/op_change_const_is_prime", "algorithm", "6k±1 trial division while k * k <= n",
     define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    if n < 4:
        return n >= 2
    if n % 2 == 0 or n % 3 == 0:
        return False
    k = 5
    while k * k <= n:
        if n % k == 0 or n % (k + 2) == 0:
            return False
        k += 6
    return True
"""))
real("numkit/op_change_const_is_prime", "algorithm", "deterministic Miller-Rabin (bases 2..17, exact below 3.4e14)",
     define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True
"""), outside="float arguments raise TypeError (pow with a modulus)")
real("numkit/op_change_const_is_prime", "algorithm", "a sieve of Eratosthenes sized from n",
     define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    if n < 2:
        return False
    flags = bytearray([1]) * (n + 1)
    p = 2
    while p * p <= n:
        if flags[p]:
            flags[p * p::p] = bytes(len(range(p * p, n + 1, p)))
        p += 1
    return bool(flags[n])
"""), outside="float arguments raise TypeError (a bytearray sized by n)")
real("numkit/op_change_const_is_prime", "new_module", "divisor search while d * d <= n in numkit/_primes.py",
     write("numkit/_primes.py", '''"""Primality by the smallest divisor."""


def smallest_divisor(n: int) -> int:
    d = 2
    while d * d <= n:
        if n % d == 0:
            return d
        d += 1
    return n
'''), define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    from numkit._primes import smallest_divisor

    return n >= 2 and smallest_divisor(n) == n
"""))
real("numkit/remove_assign_digit_sum", "algorithm", "the digits of str(abs(n))",
     define(INTS, "digit_sum", """
def digit_sum(n: int) -> int:
    return sum(int(c) for c in str(abs(n)))
"""), outside="floats raise ValueError (the '.') where the reference sums float remainders")
real("numkit/remove_assign_digit_sum", "latin1", "divmod on the absolute value, latin-1 file",
     latin1(INTS, define(INTS, "digit_sum", """
def digit_sum(n: int) -> int:
    # das Vorzeichen zählt nicht: für -1234 wie für 1234
    n, total = abs(n), 0
    while n:
        n, digit = divmod(n, 10)
        total += digit
    return total
""")), outside="floats: the loop runs on fractional remainders differently")
real("numkit/op_change_const_popcount", "algorithm", "bin(n).count('1')",
     edit(INTS, "    count = 0\n    while n:\n        count += n & 1\n        n >>= 2\n    return count",
          "    return bin(n).count(\"1\")"))
real("numkit/op_change_const_popcount", "new_module", "Kernighan's n &= n - 1 in numkit/_bits.py",
     write("numkit/_bits.py", '''def ones(n: int) -> int:
    """Set bits of a non-negative int: each n &= n - 1 clears the lowest one."""
    count = 0
    while n:
        n &= n - 1
        count += 1
    return count
'''),
     edit(INTS, "    count = 0\n    while n:\n        count += n & 1\n        n >>= 2\n    return count",
          "    from numkit._bits import ones\n\n    return ones(n)"))
real("numkit/op_swap_compare_versions", "algorithm", "early returns instead of bool arithmetic",
     edit("numkit/versions.py", "return (pa < pb) - (pa > pb)",
          "if pa == pb:\n        return 0\n    return 1 if pa > pb else -1"))
real("numkit/op_swap_compare_versions", "new_module", "both padded with zeros, compared part by part, in "
     "numkit/_vercmp.py",
     write("numkit/_vercmp.py", '''import itertools


def cmp_parts(a: list[int], b: list[int]) -> int:
    for x, y in itertools.zip_longest(a, b, fillvalue=0):
        if x != y:
            return -1 if x < y else 1
    return 0
'''),
     edit("numkit/versions.py", "return (pa < pb) - (pa > pb)",
          "from numkit._vercmp import cmp_parts\n\n    return cmp_parts(pa, pb)"))

# ----------------------------------------------------------------------------- shapekit
real("shapekit/op_flip_classify_triangle", "algorithm", "the inequality written as c >= a + b",
     edit(PLANE, "if a <= 0 or a + b < c:", "if a <= 0 or c >= a + b:"))
real("shapekit/op_flip_classify_triangle", "new_module", "all three strict triangle inequalities in shapekit/_valid.py",
     write("shapekit/_valid.py", '''def is_triangle(a: float, b: float, c: float) -> bool:
    """Positive sides, each shorter than the other two together."""
    return min(a, b, c) > 0 and a + b > c and b + c > a and a + c > b
'''),
     edit(PLANE, "if a <= 0 or a + b < c:",
          "from shapekit._valid import is_triangle\n\n    if not is_triangle(a, b, c):"),
     outside="NaN sides give INVALID where the reference classifies them")
real("shapekit/op_break_chains_classify_triangle", "algorithm", "two distinct side lengths: isosceles",
     edit(PLANE, "if a == b or a == c:", "if len({a, b, c}) == 2:"),
     outside="NaN sides (a set holds equal NaNs apart)")
real("shapekit/op_break_chains_classify_triangle", "latin1", "a == b or b == c on the sorted sides, latin-1 file",
     latin1(PLANE, edit(PLANE, "if a == b or a == c:",
                        "if a == b or b == c:  # sortiert: gleiche Seiten stehen nebeneinander (gleichschenklig heißt "
                        "das)")))
real("shapekit/ctrl_invert_if_quadrant", "new_module", "a (x > 0, y > 0) -> quadrant table in shapekit/_quadrants.py",
     write("shapekit/_quadrants.py", "QUADRANT = {(True, True): 1, (False, True): 2, (False, False): 3, "
           "(True, False): 4}\n"),
     define(PLANE, "quadrant", """
def quadrant(x: float, y: float) -> int:
    \"\"\"1..4 counter-clockwise from the upper right; 0 on an axis.\"\"\"
    from shapekit._quadrants import QUADRANT

    if x == 0 or y == 0:
        return 0
    return QUADRANT[x > 0, y > 0]
"""))
real("shapekit/ctrl_invert_if_quadrant", "algorithm", "the angle from math.atan2 in quarter turns",
     define(PLANE, "quadrant", """
def quadrant(x: float, y: float) -> int:
    \"\"\"1..4 counter-clockwise from the upper right; 0 on an axis.\"\"\"
    import math

    if x == 0 or y == 0:
        return 0
    return int(math.atan2(y, x) // (math.pi / 2)) % 4 + 1
"""), outside="NaN raises ValueError where the reference answers 2 or 3")
real("shapekit/remove_assign_manhattan", "algorithm", "a sum over zipped coordinates",
     define(PLANE, "manhattan", """
def manhattan(p: tuple, q: tuple) -> float:
    return sum(abs(a - b) for a, b in zip(p, q))
"""), outside="points with more than two coordinates: every coordinate counts")
real("shapekit/remove_assign_manhattan", "return_type", "a float, as the annotation says (7.0 == 7)",
     edit(PLANE, "return abs(p[0] - q[0]) + (p[1] - q[1])", "dx, dy = p[0] - q[0], p[1] - q[1]\n"
          "    return float(abs(dx) + abs(dy))"),
     outside="complex coordinates raise TypeError")
real("shapekit/op_flip_in_rect", "algorithm", "not outside any edge",
     edit(PLANE, "return left < x < right and bottom < y <= top",
          "return not (x < left or x > right or y < bottom or y > top)"),
     outside="NaN coordinates are inside where the reference says outside")
real("shapekit/op_flip_in_rect", "latin1", "the edges from min/max of the corners, latin-1 file",
     latin1(PLANE, edit(PLANE, "return left < x < right and bottom < y <= top",
                        "# die Ränder gehören dazu\n    return min(left, right) <= x <= max(left, right) "
                        "and min(bottom, top) <= y <= max(bottom, top)")),
     outside="a rectangle given with left > right or bottom > top is normalised where the reference holds nothing")

# ----------------------------------------------------------------------------- httpkit
real("httpkit/op_change_const_status_class", "algorithm", "membership in range(100, 600)",
     edit(STATUS, "if not 100 <= code < 599:", "if code not in range(100, 600):"),
     outside="non-integral codes (250.5) raise where the reference classifies them")
real("httpkit/op_change_const_status_class", "return_type", "the plain int class code // 100 (== the IntEnum member)",
     edit(STATUS, "if not 100 <= code < 599:", "if not 100 <= code <= 599:"),
     edit(STATUS, "return StatusClass(code // 100)", "return code // 100"),
     outside="599.5 raises where the reference classifies it")
real("httpkit/op_change_const_retryable", "algorithm", "comparisons instead of a set",
     define(STATUS, "is_retryable", """
def is_retryable(code: int) -> bool:
    return code == 408 or code == 429 or 502 <= code <= 504
"""), outside="non-integral codes between 502 and 504")
real("httpkit/op_change_const_retryable", "new_module", "http.HTTPStatus members in httpkit/_retry.py",
     write("httpkit/_retry.py", '''from http import HTTPStatus

RETRY_STATUSES = frozenset({HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.BAD_GATEWAY,
                            HTTPStatus.SERVICE_UNAVAILABLE, HTTPStatus.GATEWAY_TIMEOUT})
'''),
     define(STATUS, "is_retryable", """
def is_retryable(code: int) -> bool:
    from httpkit._retry import RETRY_STATUSES

    return code in RETRY_STATUSES
"""))
real("httpkit/remove_assign_retry_after", "algorithm", "a conditional expression",
     edit(STATUS, "    return seconds\n", "    return seconds if seconds > 0 else 0\n"))
real("httpkit/remove_assign_retry_after", "latin1", "max(0, int(value)) (int strips the blanks), latin-1 file",
     latin1(STATUS, define(STATUS, "parse_retry_after", """
def parse_retry_after(value: str) -> int:
    \"\"\"Seconds from a Retry-After header given in seconds (never negative).\"\"\"
    return max(0, int(value))  # für negative Werte gilt 0
""")))
real("httpkit/op_swap_backoff", "algorithm", "doubling in a loop, stopping at the cap",
     define(STATUS, "backoff", """
def backoff(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    \"\"\"Exponential back-off: base * 2**attempt, at most cap.\"\"\"
    delay = base
    for _ in range(attempt):
        if delay >= cap:
            break
        delay *= 2
    return min(delay, cap)
"""), outside="negative attempts give base where the reference halves it")
real("httpkit/op_swap_backoff", "algorithm", "math.ldexp(base, attempt)",
     edit(STATUS, "return min(cap, attempt * 2 ** base)",
          "import math\n\n    return min(cap, math.ldexp(base, attempt))"),
     outside="non-integral attempts raise TypeError")

# ----------------------------------------------------------------------------- stockkit
real("stockkit/op_flip_remove", "algorithm", "qty > have",
     edit(STOCK, "if have <= qty:", "if qty > have:"))
real("stockkit/op_flip_remove", "algorithm", "what is left computed first; an empty item's entry removed",
     define(STOCK, "remove", """
def remove(self, item: str, qty: int = 1) -> None:
    have = self._items.get(item, 0)
    left = have - qty
    if left < 0:
        raise OutOfStock(f"{item}: have {have}, need {qty}")
    if left:
        self._items[item] = left
    else:
        self._items.pop(item, None)
"""))
real("stockkit/op_change_const_count", "algorithm", "a membership test",
     edit(STOCK, "return self._items.get(item, 1)", "return self._items[item] if item in self._items else 0"))
real("stockkit/op_change_const_count", "algorithm", "the items kept in a collections.Counter",
     edit(STOCK, "self._items: dict[str, int] = {}", "import collections\n\n"
          "        self._items: collections.Counter = collections.Counter()"),
     edit(STOCK, "return self._items.get(item, 1)", "return self._items[item]"))
real("stockkit/op_change_total", "algorithm", "an explicit loop",
     edit(STOCK, "return len(self._items)", "total = 0\n        for qty in self._items.values():\n"
          "            total += qty\n        return total"))
real("stockkit/op_change_total", "latin1", "functools.reduce over the counts, latin-1 file",
     latin1(STOCK, edit(STOCK, "return len(self._items)", "import functools\n        import operator\n\n"
                        "        return functools.reduce(operator.add, self._items.values(), 0)  # Stückzahl, "
                        "nicht Sorten")))
real("stockkit/op_flip_needs_reorder", "algorithm", "not count > threshold",
     edit(STOCK, "return count < threshold", "return not count > threshold"),
     outside="NaN counts reorder where the reference does not")
real("stockkit/op_flip_needs_reorder", "latin1", "<= with a comment, latin-1 file",
     latin1(STOCK, edit(STOCK, "return count < threshold",
                        "return count <= threshold  # bei Erreichen der Schwelle nachbestellen, für 0 auch")))
real("stockkit/op_change_const_chunk", "algorithm", "slices taken off the front in a loop",
     define(STOCK, "chunk", """
def chunk(seq: list, size: int) -> list[list]:
    if size < 1:
        raise ValueError("size must be at least 1")
    out = []
    while seq:
        out.append(seq[:size])
        seq = seq[size:]
    return out
"""))
real("stockkit/op_change_const_chunk", "new_module", "an islice batching generator in stockkit/_batch.py",
     write("stockkit/_batch.py", '''import itertools


def batches(items, size: int):
    """Lists of `size` items (the last may be shorter), from any iterable."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch
'''),
     define(STOCK, "chunk", """
def chunk(seq: list, size: int) -> list[list]:
    from stockkit._batch import batches

    if size < 1:
        raise ValueError("size must be at least 1")
    return list(batches(seq, size))
"""), outside="a str or tuple gives lists (of characters / items) where the reference gives slices of it")
real("stockkit/remove_assign_dedupe", "algorithm", "list(dict.fromkeys(seq))",
     define(STOCK, "dedupe", """
def dedupe(seq: list) -> list:
    return list(dict.fromkeys(seq))
"""))
real("stockkit/remove_assign_dedupe", "algorithm", "keep an item not seen earlier in the list (no hashing)",
     define(STOCK, "dedupe", """
def dedupe(seq: list) -> list:
    return [x for i, x in enumerate(seq) if x not in seq[:i]]
"""), outside="unhashable items are deduplicated where the reference raises TypeError; equal items of unequal "
       "hash kept once")


def realistic_corpus() -> list[Fix]:
    return list(REALISTIC)
