"""Correct fixes in forms the reference did not use, for the tasks that grading by separation, structure rows and
call rows newly grade (issue 46, this stop): the honest side of the hostile review. Each passes the task's original
hidden tests under plain pytest (bench/oracle_battery.py --host) and is graded under several plan seeds
(bench/oracle_battery.py --fixes); one scoring 0 where the task is graded is a correct fix refused.
Same format as tests/_fix_corpus_real.py (tests/_fix_corpus.py: Fix, define)."""

from tests._fix_corpus import Fix, define, fix

ORACLE2: list[Fix] = []
CAL, INTS, PLANE, STOCK = "datekit/calendar.py", "numkit/ints.py", "shapekit/plane.py", "stockkit/stock.py"


def alt(task: str, form: str, why: str, *ops, outside: str = "") -> None:
    fix(task, form, why, *ops, outside=outside, into=ORACLE2)


alt("datekit/remove_cond_is_leap", "algorithm", "does February 29 exist (datetime)",
    define(CAL, "is_leap", """
def is_leap(year: int) -> bool:
    import datetime

    try:
        datetime.date(year, 2, 29)
    except ValueError:
        return False
    return True
"""), outside="years outside 1..9999: False where the reference answers by the rule (e.g. -2024, 0, 20240)")
alt("numkit/op_swap_clamp", "return_type", "branches, the bound or x returned as a float (== the int the test expects)",
    define(INTS, "clamp", """
def clamp(x: float, lo: float, hi: float) -> float:
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return float(lo)
    if x > hi:
        return float(hi)
    return float(x)
"""), outside="ints beyond 2**53 lose digits as floats")
alt("numkit/remove_assign_gcd", "algorithm", "math.gcd", define(INTS, "gcd", """
def gcd(a: int, b: int) -> int:
    import math

    return math.gcd(a, b)
"""))
alt("numkit/op_change_const_is_prime", "algorithm", "trial division up to math.isqrt, all()", define(INTS, "is_prime", """
def is_prime(n: int) -> bool:
    import math

    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))
"""))
alt("numkit/op_change_const_popcount", "algorithm", "int.bit_count", define(INTS, "popcount", """
def popcount(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    return n.bit_count()
"""))
alt("numkit/op_swap_compare_versions", "algorithm", "an if-chain on the parts", define("numkit/versions.py",
    "compare_versions", '''
def compare_versions(a: str, b: str) -> int:
    """-1 if a < b, 0 if equal, 1 if a > b."""
    pa, pb = _parts(a), _parts(b)
    if pa == pb:
        return 0
    return 1 if pa > pb else -1
'''))
alt("shapekit/op_flip_classify_triangle", "algorithm", "the longest side at least half the perimeter: invalid",
    define(PLANE, "classify_triangle", """
def classify_triangle(a: float, b: float, c: float) -> Kind:
    sides = (a, b, c)
    if min(sides) <= 0 or 2 * max(sides) >= sum(sides):
        return Kind.INVALID
    if a == b == c:
        return Kind.EQUILATERAL
    if a == b or b == c or a == c:
        return Kind.ISOSCELES
    return Kind.SCALENE
"""), outside="float sides where 2 * c and a + b + c round differently")
alt("shapekit/op_break_chains_classify_triangle", "algorithm", "the most common side length counted (Counter)",
    define(PLANE, "classify_triangle", """
def classify_triangle(a: float, b: float, c: float) -> Kind:
    from collections import Counter

    a, b, c = sorted((a, b, c))
    if a <= 0 or a + b <= c:
        return Kind.INVALID
    most = max(Counter((a, b, c)).values())
    return Kind.EQUILATERAL if most == 3 else Kind.ISOSCELES if most == 2 else Kind.SCALENE
"""))
alt("shapekit/remove_assign_manhattan", "algorithm", "a sum over the coordinates", define(PLANE, "manhattan", """
def manhattan(p: tuple, q: tuple) -> float:
    return sum(abs(x - y) for x, y in zip(p, q))
"""))
alt("shapekit/op_flip_in_rect", "return_type", "outside on any side, as an int (== True/False)",
    define(PLANE, "in_rect", '''
def in_rect(point: tuple, rect: tuple) -> bool:
    """rect = (left, bottom, right, top); the edges belong to the rectangle."""
    x, y = point
    left, bottom, right, top = rect
    return int(not (x < left or x > right or y < bottom or y > top))
'''))
alt("stockkit/op_flip_needs_reorder", "return_type", "1 / 0 (== True/False)", define(STOCK,
    "needs_reorder", """
def needs_reorder(count: int, threshold: int) -> bool:
    return int(count <= threshold)
"""))
alt("stockkit/op_change_const_count", "algorithm", "a membership test", define(STOCK, "count", """
def count(self, item: str) -> int:
    return self._items[item] if item in self._items else 0
"""))
alt("datekit/ctrl_invert_if_days_in_month", "algorithm", "30 + (month + month // 8) % 2, February by is_leap",
    define(CAL, "days_in_month", """
def days_in_month(year: int, month: int) -> int:
    _check_month(month)
    if month == 2:
        return 29 if is_leap(year) else 28
    return 30 + (month + month // 8) % 2
"""))
alt("numkit/ctrl_invert_if_sign", "return_type", "math.copysign: a float +-1.0 (== the int), 0 for zero",
    define(INTS, "sign", """
def sign(x: float) -> int:
    import math

    return math.copysign(1, x) if x else 0
"""), outside="NaN: 1.0 where the reference answers 0")
