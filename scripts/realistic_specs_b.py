"""SWE-smith-shaped tasks, part B: geometry with an enum, HTTP status helpers, an inventory.

Same shape as part A (scripts/realistic_specs_a.py): one repository, several procedural bugs.
"""

from realistic_specs_a import bug, repo

# ----------------------------------------------------------------------------- shapekit
repo("shapekit", {
    "shapekit/__init__.py": """
        from shapekit.plane import Kind, classify_triangle, in_rect, manhattan, quadrant

        __all__ = ["Kind", "classify_triangle", "in_rect", "manhattan", "quadrant"]
    """,
    "shapekit/plane.py": """
        \"\"\"Plane geometry helpers: triangle kinds, quadrants, distances, rectangles.\"\"\"

        import enum


        class Kind(enum.Enum):
            EQUILATERAL = "equilateral"
            ISOSCELES = "isosceles"
            SCALENE = "scalene"
            INVALID = "invalid"


        def classify_triangle(a: float, b: float, c: float) -> Kind:
            a, b, c = sorted((a, b, c))
            if a <= 0 or a + b <= c:
                return Kind.INVALID
            if a == b == c:
                return Kind.EQUILATERAL
            if a == b or b == c or a == c:
                return Kind.ISOSCELES
            return Kind.SCALENE


        def quadrant(x: float, y: float) -> int:
            \"\"\"1..4 counter-clockwise from the upper right; 0 on an axis.\"\"\"
            if x == 0 or y == 0:
                return 0
            if x > 0:
                return 1 if y > 0 else 4
            return 2 if y > 0 else 3


        def manhattan(p: tuple, q: tuple) -> float:
            return abs(p[0] - q[0]) + abs(p[1] - q[1])


        def in_rect(point: tuple, rect: tuple) -> bool:
            \"\"\"rect = (left, bottom, right, top); the edges belong to the rectangle.\"\"\"
            x, y = point
            left, bottom, right, top = rect
            return left <= x <= right and bottom <= y <= top
    """,
    "tests/test_triangle.py": """
        import pytest

        from shapekit import Kind, classify_triangle


        @pytest.mark.parametrize("sides, expected", [
            ((3, 3, 3), Kind.EQUILATERAL), ((3, 3, 5), Kind.ISOSCELES), ((5, 3, 3), Kind.ISOSCELES),
            ((3, 4, 5), Kind.SCALENE), ((1, 2, 3), Kind.INVALID), ((0, 1, 1), Kind.INVALID), ((1, 1, 3), Kind.INVALID),
            ((4, 7, 4), Kind.ISOSCELES), ((2, 5, 5), Kind.ISOSCELES),
        ])
        def test_classify(sides, expected):
            assert classify_triangle(*sides) == expected


        def test_kind_values():
            assert Kind("scalene") is Kind.SCALENE
    """,
    "tests/test_plane.py": """
        import pytest

        from shapekit import in_rect, manhattan, quadrant


        @pytest.mark.parametrize("x, y, expected", [(1, 1, 1), (-1, 1, 2), (-1, -1, 3), (1, -1, 4), (0, 5, 0),
                                                    (3, 0, 0), (2.5, -0.5, 4)])
        def test_quadrant(x, y, expected):
            assert quadrant(x, y) == expected


        @pytest.mark.parametrize("p, q, expected", [((0, 0), (3, 4), 7), ((1, 1), (1, 1), 0), ((-2, 5), (2, -1), 10),
                                                    ((5, 5), (2, 9), 7)])
        def test_manhattan(p, q, expected):
            assert manhattan(p, q) == expected


        @pytest.mark.parametrize("point, expected", [((1, 1), True), ((0, 0), True), ((4, 2), True), ((5, 1), False),
                                                     ((2, -1), False), ((4, 3), True)])
        def test_in_rect(point, expected):
            assert in_rect(point, (0, 0, 4, 3)) == expected
    """,
})
bug("shapekit", "func_pm_op_flip_classify_triangle", "shapekit/plane.py", """
    if a <= 0 or a + b <= c:
""", """
    if a <= 0 or a + b < c:
""", "Degenerate triangles are accepted\n\nSides 1, 2, 3 do not make a triangle but `classify_triangle` "
    "does not say INVALID.")
bug("shapekit", "func_pm_op_break_chains_classify_triangle", "shapekit/plane.py", """
    if a == b or b == c or a == c:
""", """
    if a == b or a == c:
""", "Some isosceles triangles are called scalene\n\nTwo equal long sides are not recognised.")
bug("shapekit", "func_pm_ctrl_invert_if_quadrant", "shapekit/plane.py", """
    return 1 if y > 0 else 4
""", """
    return 4 if y > 0 else 1
""", "quadrant() mixes up the right half-plane\n\nPoints with positive x get the wrong quadrant.")
bug("shapekit", "func_pm_remove_assign_manhattan", "shapekit/plane.py", """
    return abs(p[0] - q[0]) + abs(p[1] - q[1])
""", """
    return abs(p[0] - q[0]) + (p[1] - q[1])
""", "manhattan distance can be negative or too small\n\nThe distance between (0, 0) and (3, 4) is wrong.")
bug("shapekit", "func_pm_op_flip_in_rect", "shapekit/plane.py", """
    return left <= x <= right and bottom <= y <= top
""", """
    return left < x < right and bottom < y <= top
""", "Points on the edge are outside the rectangle\n\nThe docstring says the edges belong to the rectangle.")

# ----------------------------------------------------------------------------- httpkit
repo("httpkit", {
    "httpkit/__init__.py": """
        from httpkit.status import StatusClass, backoff, is_retryable, parse_retry_after, status_class

        __all__ = ["StatusClass", "backoff", "is_retryable", "parse_retry_after", "status_class"]
    """,
    "httpkit/status.py": """
        \"\"\"HTTP status helpers: classes of codes, retry decisions, back-off delays.\"\"\"

        import enum

        RETRYABLE = frozenset({408, 429, 502, 503, 504})


        class StatusClass(enum.IntEnum):
            INFORMATIONAL = 1
            SUCCESS = 2
            REDIRECT = 3
            CLIENT_ERROR = 4
            SERVER_ERROR = 5


        def status_class(code: int) -> StatusClass:
            if not 100 <= code < 600:
                raise ValueError(f"not an HTTP status: {code}")
            return StatusClass(code // 100)


        def is_retryable(code: int) -> bool:
            return code in RETRYABLE


        def parse_retry_after(value: str) -> int:
            \"\"\"Seconds from a Retry-After header given in seconds (never negative).\"\"\"
            seconds = int(value.strip())
            return max(seconds, 0)


        def backoff(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
            \"\"\"Exponential back-off: base * 2**attempt, at most cap.\"\"\"
            return min(cap, base * 2 ** attempt)
    """,
    "tests/test_status.py": """
        import pytest

        from httpkit import StatusClass, is_retryable, status_class


        @pytest.mark.parametrize("code, expected", [
            (100, StatusClass.INFORMATIONAL), (200, StatusClass.SUCCESS), (204, StatusClass.SUCCESS),
            (301, StatusClass.REDIRECT), (404, StatusClass.CLIENT_ERROR), (499, StatusClass.CLIENT_ERROR),
            (500, StatusClass.SERVER_ERROR), (599, StatusClass.SERVER_ERROR),
        ])
        def test_status_class(code, expected):
            assert status_class(code) == expected


        @pytest.mark.parametrize("code", [99, 600, -1])
        def test_status_class_rejects(code):
            with pytest.raises(ValueError):
                status_class(code)


        @pytest.mark.parametrize("code, expected", [(429, True), (503, True), (408, True), (404, False), (500, False),
                                                    (200, False)])
        def test_is_retryable(code, expected):
            assert is_retryable(code) == expected
    """,
    "tests/test_retry.py": """
        import pytest

        from httpkit import backoff, parse_retry_after


        @pytest.mark.parametrize("value, expected", [("120", 120), (" 30 ", 30), ("0", 0), ("-5", 0)])
        def test_parse_retry_after(value, expected):
            assert parse_retry_after(value) == expected


        @pytest.mark.parametrize("attempt, expected", [(0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0)])
        def test_backoff(attempt, expected):
            assert backoff(attempt) == expected


        def test_backoff_custom_base():
            assert backoff(2, base=0.1, cap=100) == pytest.approx(0.4)
    """,
})
bug("httpkit", "func_pm_op_change_const_status_class", "httpkit/status.py", """
    if not 100 <= code < 600:
""", """
    if not 100 <= code < 599:
""", "status_class rejects 599\n\n`status_class(599)` raises ValueError, but 599 is a valid server error.")
bug("httpkit", "func_pm_op_change_const_retryable", "httpkit/status.py", """
    RETRYABLE = frozenset({408, 429, 502, 503, 504})
""", """
    RETRYABLE = frozenset({408, 502, 503, 504})
""", "Rate-limited requests are not retried\n\nA 429 Too Many Requests response should be retryable.")
bug("httpkit", "func_pm_remove_assign_retry_after", "httpkit/status.py", """
    return max(seconds, 0)
""", """
    return seconds
""", "Negative Retry-After values come through\n\nA server sending a negative Retry-After makes us compute a "
    "negative delay.")
bug("httpkit", "func_pm_op_swap_backoff", "httpkit/status.py", """
    return min(cap, base * 2 ** attempt)
""", """
    return min(cap, attempt * 2 ** base)
""", "backoff() delays are wrong\n\nThe first retry should wait `base` seconds and the delay should double "
    "each attempt.")

# ----------------------------------------------------------------------------- stockkit
repo("stockkit", {
    "stockkit/__init__.py": """
        from stockkit.stock import OutOfStock, Stock, chunk, dedupe, needs_reorder

        __all__ = ["OutOfStock", "Stock", "chunk", "dedupe", "needs_reorder"]
    """,
    "stockkit/stock.py": """
        \"\"\"A small inventory: item counts, reorder checks, batching helpers.\"\"\"


        class OutOfStock(Exception):
            pass


        class Stock:
            def __init__(self) -> None:
                self._items: dict[str, int] = {}

            def add(self, item: str, qty: int = 1) -> None:
                if qty <= 0:
                    raise ValueError("quantity must be positive")
                self._items[item] = self._items.get(item, 0) + qty

            def remove(self, item: str, qty: int = 1) -> None:
                have = self._items.get(item, 0)
                if have < qty:
                    raise OutOfStock(f"{item}: have {have}, need {qty}")
                self._items[item] = have - qty

            def count(self, item: str) -> int:
                return self._items.get(item, 0)

            def total(self) -> int:
                return sum(self._items.values())


        def needs_reorder(count: int, threshold: int) -> bool:
            return count <= threshold


        def chunk(seq: list, size: int) -> list[list]:
            if size < 1:
                raise ValueError("size must be at least 1")
            return [seq[i:i + size] for i in range(0, len(seq), size)]


        def dedupe(seq: list) -> list:
            seen = set()
            out = []
            for x in seq:
                if x not in seen:
                    seen.add(x)
                    out.append(x)
            return out
    """,
    "tests/test_stock.py": """
        import pytest

        from stockkit import OutOfStock, Stock


        @pytest.fixture
        def stock():
            s = Stock()
            s.add("apple", 3)
            s.add("pear", 2)
            return s


        def test_count(stock):
            assert stock.count("apple") == 3
            assert stock.count("plum") == 0


        @pytest.mark.parametrize("qty, left", [(1, 2), (2, 1), (3, 0)])
        def test_remove(stock, qty, left):
            stock.remove("apple", qty)
            assert stock.count("apple") == left


        def test_remove_too_many(stock):
            with pytest.raises(OutOfStock):
                stock.remove("pear", 3)


        def test_total(stock):
            stock.add("plum", 4)
            assert stock.total() == 9
    """,
    "tests/test_helpers.py": """
        import pytest

        from stockkit import chunk, dedupe, needs_reorder


        @pytest.mark.parametrize("count, threshold, expected", [(5, 10, True), (10, 10, True), (11, 10, False),
                                                                (0, 0, True)])
        def test_needs_reorder(count, threshold, expected):
            assert needs_reorder(count, threshold) == expected


        @pytest.mark.parametrize("seq, size, expected", [
            ([1, 2, 3, 4, 5], 2, [[1, 2], [3, 4], [5]]), ([1, 2, 3, 4], 2, [[1, 2], [3, 4]]), ([], 3, []),
            ([1, 2, 3], 5, [[1, 2, 3]]),
        ])
        def test_chunk(seq, size, expected):
            assert chunk(seq, size) == expected


        @pytest.mark.parametrize("seq, expected", [([3, 1, 3, 2, 1], [3, 1, 2]), (["b", "a", "b"], ["b", "a"]),
                                                   ([], [])])
        def test_dedupe(seq, expected):
            assert dedupe(seq) == expected
    """,
})
bug("stockkit", "func_pm_op_flip_remove", "stockkit/stock.py", """
    if have < qty:
""", """
    if have <= qty:
""", "Cannot take the last items out of stock\n\nRemoving exactly the quantity in stock raises OutOfStock.")
bug("stockkit", "func_pm_op_change_const_count", "stockkit/stock.py", """
    return self._items.get(item, 0)
""", """
    return self._items.get(item, 1)
""", "Unknown items have a count\n\n`Stock().count(\"plum\")` is not zero for an item never added.")
bug("stockkit", "func_pm_op_change_total", "stockkit/stock.py", """
    return sum(self._items.values())
""", """
    return len(self._items)
""", "total() counts kinds, not items\n\nThree apples and two pears should total more than 2.")
bug("stockkit", "func_pm_op_flip_needs_reorder", "stockkit/stock.py", """
    return count <= threshold
""", """
    return count < threshold
""", "No reorder at the threshold\n\nA count equal to the threshold should trigger a reorder.")
bug("stockkit", "func_pm_op_change_const_chunk", "stockkit/stock.py", """
    return [seq[i:i + size] for i in range(0, len(seq), size)]
""", """
    return [seq[i:i + size] for i in range(0, len(seq) - 1, size)]
""", "chunk() loses the last item\n\nSplitting an odd-length list drops its last element.")
bug("stockkit", "func_pm_remove_assign_dedupe", "stockkit/stock.py", """
    seen.add(x)
""", """
    pass
""", "dedupe() keeps duplicates\n\nThe list comes back unchanged.")
