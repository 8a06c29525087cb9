"""SWE-smith-shaped tasks, part A: three small repositories (dates, text, numbers), several bugs each.

Each bug is one of SWE-smith's procedural modifications of one function (its ids name them:
func_pm_op_flip flips a comparison, func_pm_op_swap swaps operands, func_pm_op_change_const
changes a constant by one, func_pm_remove_cond / _assign / _loop drop a statement,
func_pm_ctrl_invert_if swaps an if's branches, func_pm_op_break_chains drops part of a
boolean chain). The repository's own tests are the hidden tests, most of them
`pytest.mark.parametrize` tables, many of functions returning a bool, a small int or an enum.
scripts/make_realistic_tasks.py builds the tasks with scripts/make_swe_tasks.py's machinery.
"""

from textwrap import dedent as d

REPOS: dict[str, dict[str, str]] = {}
BUGS: list[dict] = []


def repo(name: str, files: dict[str, str]) -> None:
    REPOS[name] = {k: d(v).lstrip("\n") for k, v in files.items()}


def bug(name: str, bug_id: str, file: str, old: str, new: str, statement: str) -> None:
    BUGS.append({"name": name, "file": file, "old": d(old).strip("\n"), "new": d(new).strip("\n"), "id": bug_id,
                 "problem_statement": d(statement).strip() + "\n"})


# ----------------------------------------------------------------------------- datekit
repo("datekit", {
    "datekit/__init__.py": """
        from datekit.calendar import day_of_year, days_in_month, is_leap, quarter, weekday

        __all__ = ["day_of_year", "days_in_month", "is_leap", "quarter", "weekday"]
    """,
    "datekit/calendar.py": """
        \"\"\"Gregorian calendar helpers: leap years, month lengths, quarters, weekdays.\"\"\"

        _LENGTHS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        _OFFSETS = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4]


        def _check_month(month: int) -> None:
            if not 1 <= month <= 12:
                raise ValueError(f"month must be in 1..12, got {month}")


        def is_leap(year: int) -> bool:
            if year % 400 == 0:
                return True
            if year % 100 == 0:
                return False
            return year % 4 == 0


        def days_in_month(year: int, month: int) -> int:
            _check_month(month)
            if month == 2:
                return 29 if is_leap(year) else 28
            return _LENGTHS[month - 1]


        def quarter(month: int) -> int:
            _check_month(month)
            return (month - 1) // 3 + 1


        def day_of_year(year: int, month: int, day: int) -> int:
            _check_month(month)
            if not 1 <= day <= days_in_month(year, month):
                raise ValueError(f"no day {day} in {year}-{month:02d}")
            return sum(days_in_month(year, m) for m in range(1, month)) + day


        def weekday(year: int, month: int, day: int) -> int:
            \"\"\"0 = Sunday ... 6 = Saturday (Sakamoto's method).\"\"\"
            _check_month(month)
            if month < 3:
                year -= 1
            return (year + year // 4 - year // 100 + year // 400 + _OFFSETS[month - 1] + day) % 7
    """,
    "tests/test_leap.py": """
        import pytest

        from datekit import days_in_month, is_leap


        @pytest.mark.parametrize("year, expected", [
            (2024, True), (2023, False), (1900, False), (2000, True), (2100, False), (1600, True), (1996, True),
        ])
        def test_is_leap(year, expected):
            assert is_leap(year) == expected


        @pytest.mark.parametrize("year, month, expected", [
            (2023, 1, 31), (2023, 2, 28), (2024, 2, 29), (1900, 2, 28), (2000, 2, 29), (2023, 4, 30), (2023, 12, 31),
        ])
        def test_days_in_month(year, month, expected):
            assert days_in_month(year, month) == expected


        def test_days_in_month_rejects_bad_month():
            with pytest.raises(ValueError):
                days_in_month(2023, 13)
    """,
    "tests/test_quarter.py": """
        import pytest

        from datekit import quarter


        @pytest.mark.parametrize("month, expected", [
            (1, 1), (2, 1), (3, 1), (4, 2), (6, 2), (7, 3), (9, 3), (10, 4), (12, 4),
        ])
        def test_quarter(month, expected):
            assert quarter(month) == expected


        def test_quarters_cover_the_year():
            assert [quarter(m) for m in range(1, 13)].count(4) == 3
    """,
    "tests/test_ordinal.py": """
        import pytest

        from datekit import day_of_year, weekday


        @pytest.mark.parametrize("date, expected", [
            ((2023, 1, 1), 1), ((2023, 2, 1), 32), ((2023, 3, 1), 60), ((2024, 3, 1), 61), ((2023, 12, 31), 365),
            ((2024, 12, 31), 366),
        ])
        def test_day_of_year(date, expected):
            assert day_of_year(*date) == expected


        def test_day_of_year_rejects_feb_30():
            with pytest.raises(ValueError):
                day_of_year(2024, 2, 30)


        @pytest.mark.parametrize("date, expected", [
            ((2024, 1, 1), 1), ((2023, 12, 25), 1), ((2000, 2, 29), 2), ((1969, 7, 20), 0), ((2024, 3, 9), 6),
            ((2021, 2, 14), 0), ((2022, 11, 3), 4),
        ])
        def test_weekday(date, expected):
            assert weekday(*date) == expected
    """,
})
bug("datekit", "func_pm_remove_cond_is_leap", "datekit/calendar.py", """
    if year % 400 == 0:
        return True
    if year % 100 == 0:
""", """
    if year % 100 == 0:
""", "is_leap(2000) is False\n\nYears divisible by 400 are leap years, but `datekit.is_leap` says 2000 and 1600 "
    "are not, so February 2000 has the wrong length too.")
bug("datekit", "func_pm_ctrl_invert_if_days_in_month", "datekit/calendar.py", """
    return 29 if is_leap(year) else 28
""", """
    return 28 if is_leap(year) else 29
""", "February has the wrong number of days\n\n`days_in_month(2023, 2)` and `days_in_month(2024, 2)` both look "
    "wrong: leap and common years seem to be mixed up.")
bug("datekit", "func_pm_op_change_const_quarter", "datekit/calendar.py", """
    return (month - 1) // 3 + 1
""", """
    return (month - 1) // 4 + 1
""", "quarter() puts months in the wrong quarter\n\nApril should be in the second quarter and October in the "
    "fourth, but `quarter` disagrees for several months.")
bug("datekit", "func_pm_op_change_const_day_of_year", "datekit/calendar.py", """
    return sum(days_in_month(year, m) for m in range(1, month)) + day
""", """
    return sum(days_in_month(year, m) for m in range(1, month + 1)) + day
""", "day_of_year is too large\n\n`day_of_year(2023, 1, 1)` should be the first day of the year but the "
    "result is a month too far.")
bug("datekit", "func_pm_op_flip_weekday", "datekit/calendar.py", """
    if month < 3:
""", """
    if month <= 3:
""", "Wrong weekday for dates in March\n\n`weekday(2024, 3, 9)` should be a Saturday; dates in January and "
    "other months look right.")
bug("datekit", "func_pm_remove_cond_check_month", "datekit/calendar.py", """
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
""", """
    pass
""", "No error for month 13\n\n`days_in_month(2023, 13)` raises an IndexError instead of a ValueError "
    "naming the month.")

# ----------------------------------------------------------------------------- textkit
repo("textkit", {
    "textkit/__init__.py": """
        from textkit.text import count_vowels, hamming, is_palindrome, title_words, truncate

        __all__ = ["count_vowels", "hamming", "is_palindrome", "title_words", "truncate"]
    """,
    "textkit/text.py": """
        \"\"\"Small string utilities: palindromes, vowels, Hamming distance, titles, truncation.\"\"\"

        VOWELS = "aeiou"


        def is_palindrome(text: str) -> bool:
            letters = [c for c in text.lower() if c.isalnum()]
            return letters == letters[::-1]


        def count_vowels(text: str) -> int:
            return sum(1 for c in text.lower() if c in VOWELS)


        def hamming(a: str, b: str) -> int:
            if len(a) != len(b):
                raise ValueError("strands of different length")
            return sum(1 for x, y in zip(a, b) if x != y)


        def title_words(text: str, small=("a", "an", "of", "the")) -> str:
            words = text.split(" ")
            out = []
            for i, word in enumerate(words):
                if i > 0 and word.lower() in small:
                    out.append(word.lower())
                else:
                    out.append(word[:1].upper() + word[1:])
            return " ".join(out)


        def truncate(text: str, width: int, suffix: str = "...") -> str:
            if len(text) <= width:
                return text
            return text[: max(width - len(suffix), 0)] + suffix
    """,
    "tests/test_palindrome.py": """
        import pytest

        from textkit import is_palindrome


        @pytest.mark.parametrize("text, expected", [
            ("racecar", True), ("Racecar", True), ("A man, a plan, a canal: Panama", True), ("hello", False),
            ("", True), ("ab", False), ("No lemon, no melon", True),
        ])
        def test_is_palindrome(text, expected):
            assert is_palindrome(text) == expected
    """,
    "tests/test_counts.py": """
        import pytest

        from textkit import count_vowels, hamming


        @pytest.mark.parametrize("text, expected", [
            ("hello", 2), ("rhythm", 0), ("AEIOU", 5), ("Queueing", 5), ("", 0), ("education", 5),
        ])
        def test_count_vowels(text, expected):
            assert count_vowels(text) == expected


        @pytest.mark.parametrize("a, b, expected", [
            ("GAGCCTACTAACGGGAT", "CATCGTAATGACGGCCT", 7), ("AAA", "AAA", 0), ("ABC", "ABD", 1), ("", "", 0),
        ])
        def test_hamming(a, b, expected):
            assert hamming(a, b) == expected


        def test_hamming_needs_equal_lengths():
            with pytest.raises(ValueError):
                hamming("AB", "A")
    """,
    "tests/test_format.py": """
        import pytest

        from textkit import title_words, truncate


        @pytest.mark.parametrize("text, expected", [
            ("the lord of the rings", "The Lord of the Rings"), ("a tale of two cities", "A Tale of Two Cities"),
            ("war and peace", "War And Peace"), ("iPhone sales", "IPhone Sales"),
        ])
        def test_title_words(text, expected):
            assert title_words(text) == expected


        @pytest.mark.parametrize("text, width, expected", [
            ("hello world", 8, "hello..."), ("short", 10, "short"), ("exactly", 7, "exactly"), ("abcdef", 2, "..."),
        ])
        def test_truncate(text, width, expected):
            assert truncate(text, width) == expected


        def test_truncate_custom_suffix():
            assert truncate("hello world", 6, suffix="~") == "hello~"
    """,
})
bug("textkit", "func_pm_remove_assign_is_palindrome", "textkit/text.py", """
    letters = [c for c in text.lower() if c.isalnum()]
""", """
    letters = [c for c in text if c.isalnum()]
""", "is_palindrome is case sensitive\n\n`is_palindrome(\"Racecar\")` returns False. Mixed-case palindromes "
    "should be recognised.")
bug("textkit", "func_pm_op_change_const_vowels", "textkit/text.py", """
    VOWELS = "aeiou"
""", """
    VOWELS = "aeio"
""", "count_vowels misses a vowel\n\nSome words get a lower vowel count than expected, e.g. `count_vowels` on "
    "\"Queueing\".")
bug("textkit", "func_pm_op_flip_hamming", "textkit/text.py", """
    return sum(1 for x, y in zip(a, b) if x != y)
""", """
    return sum(1 for x, y in zip(a, b) if x == y)
""", "hamming() counts the wrong positions\n\nThe Hamming distance of two identical strands should be 0.")
bug("textkit", "func_pm_ctrl_invert_if_title_words", "textkit/text.py", """
    if i > 0 and word.lower() in small:
""", """
    if i > 0 or word.lower() in small:
""", "title_words lowercases almost everything\n\nOnly small words like \"of\" should stay lower case after "
    "the first word.")
bug("textkit", "func_pm_op_swap_truncate", "textkit/text.py", """
    return text[: max(width - len(suffix), 0)] + suffix
""", """
    return text[: max(len(suffix) - width, 0)] + suffix
""", "truncate() drops the whole text\n\nTruncating a long string keeps none of it, only the suffix.")

# ----------------------------------------------------------------------------- numkit
repo("numkit", {
    "numkit/__init__.py": """
        from numkit.ints import clamp, digit_sum, gcd, is_prime, popcount, sign
        from numkit.versions import compare_versions

        __all__ = ["clamp", "compare_versions", "digit_sum", "gcd", "is_prime", "popcount", "sign"]
    """,
    "numkit/ints.py": """
        \"\"\"Integer helpers: sign, clamp, gcd, primality, digit sums, bit counts.\"\"\"


        def sign(x: float) -> int:
            if x > 0:
                return 1
            if x < 0:
                return -1
            return 0


        def clamp(x: float, lo: float, hi: float) -> float:
            if lo > hi:
                raise ValueError("empty range")
            return min(max(x, lo), hi)


        def gcd(a: int, b: int) -> int:
            while b:
                a, b = b, a % b
            return abs(a)


        def is_prime(n: int) -> bool:
            if n < 2:
                return False
            for d in range(2, int(n ** 0.5) + 1):
                if n % d == 0:
                    return False
            return True


        def digit_sum(n: int) -> int:
            n = abs(n)
            total = 0
            while n > 0:
                total += n % 10
                n //= 10
            return total


        def popcount(n: int) -> int:
            if n < 0:
                raise ValueError("negative")
            count = 0
            while n:
                count += n & 1
                n >>= 1
            return count
    """,
    "numkit/versions.py": """
        \"\"\"Compare dotted version strings numerically.\"\"\"


        def _parts(version: str) -> list[int]:
            parts = [int(p) for p in version.split(".")]
            while len(parts) > 1 and parts[-1] == 0:
                parts.pop()
            return parts


        def compare_versions(a: str, b: str) -> int:
            \"\"\"-1 if a < b, 0 if equal, 1 if a > b.\"\"\"
            pa, pb = _parts(a), _parts(b)
            return (pa > pb) - (pa < pb)
    """,
    "tests/test_ints.py": """
        import pytest

        from numkit import clamp, digit_sum, gcd, sign


        @pytest.mark.parametrize("x, expected", [(5, 1), (-3, -1), (0, 0), (0.5, 1), (-0.25, -1)])
        def test_sign(x, expected):
            assert sign(x) == expected


        @pytest.mark.parametrize("x, lo, hi, expected", [(5, 0, 10, 5), (-5, 0, 10, 0), (15, 0, 10, 10), (3, 3, 3, 3)])
        def test_clamp(x, lo, hi, expected):
            assert clamp(x, lo, hi) == expected


        @pytest.mark.parametrize("a, b, expected", [(12, 18, 6), (-4, 6, 2), (17, 5, 1), (0, 9, 9), (-8, -12, 4)])
        def test_gcd(a, b, expected):
            assert gcd(a, b) == expected


        @pytest.mark.parametrize("n, expected", [(0, 0), (7, 7), (1234, 10), (-1234, 10), (99999, 45)])
        def test_digit_sum(n, expected):
            assert digit_sum(n) == expected
    """,
    "tests/test_bits.py": """
        import pytest

        from numkit import is_prime, popcount


        @pytest.mark.parametrize("n, expected", [
            (0, False), (1, False), (2, True), (3, True), (4, False), (9, False), (25, False), (29, True), (49, False),
        ])
        def test_is_prime(n, expected):
            assert is_prime(n) == expected


        @pytest.mark.parametrize("n, expected", [(0, 0), (1, 1), (255, 8), (256, 1), (1023, 10), (6, 2)])
        def test_popcount(n, expected):
            assert popcount(n) == expected
    """,
    "tests/test_versions.py": """
        import pytest

        from numkit import compare_versions


        @pytest.mark.parametrize("a, b, expected", [
            ("1.0", "1.0.0", 0), ("1.2", "1.10", -1), ("2.0", "1.9.9", 1), ("0.1", "0.1.1", -1), ("3.4.5", "3.4.5", 0),
        ])
        def test_compare_versions(a, b, expected):
            assert compare_versions(a, b) == expected
    """,
})
bug("numkit", "func_pm_ctrl_invert_if_sign", "numkit/ints.py", """
    if x < 0:
        return -1
    return 0
""", """
    if x <= 0:
        return -1
    return 0
""", "sign(0) is -1\n\n`numkit.sign` should return 0 for zero.")
bug("numkit", "func_pm_op_swap_clamp", "numkit/ints.py", """
    return min(max(x, lo), hi)
""", """
    return max(min(x, lo), hi)
""", "clamp returns the upper bound for values inside the range\n\n`clamp(5, 0, 10)` should leave 5 alone.")
bug("numkit", "func_pm_remove_assign_gcd", "numkit/ints.py", """
    return abs(a)
""", """
    return a
""", "gcd of negative numbers is negative\n\nThe greatest common divisor should never be negative.")
bug("numkit", "func_pm_op_change_const_is_prime", "numkit/ints.py", """
    for d in range(2, int(n ** 0.5) + 1):
""", """
    for d in range(2, int(n ** 0.5)):
""", "is_prime says squares of primes are prime\n\n`is_prime(9)` and `is_prime(25)` return True.")
bug("numkit", "func_pm_remove_assign_digit_sum", "numkit/ints.py", """
    n = abs(n)
    total = 0
""", """
    total = 0
""", "digit_sum of a negative number hangs or is wrong\n\n`digit_sum(-1234)` should be the same as for 1234.")
bug("numkit", "func_pm_op_change_const_popcount", "numkit/ints.py", """
    n >>= 1
""", """
    n >>= 2
""", "popcount undercounts\n\nCounting set bits of 255 does not give 8.")
bug("numkit", "func_pm_op_swap_compare_versions", "numkit/versions.py", """
    return (pa > pb) - (pa < pb)
""", """
    return (pa < pb) - (pa > pb)
""", "compare_versions is backwards\n\n`compare_versions(\"2.0\", \"1.9.9\")` says 2.0 is older.")
