"""Bundled bug-fix tasks, part E (see swe_task_specs_a for the layout)."""

from swe_task_specs_a import spec

# ----------------------------------------------------------------------------- 25 json pointer
spec("jpointer", {
    "jpointer/__init__.py": """
        from jpointer.pointer import PointerError, resolve, split

        __all__ = ["resolve", "split", "PointerError"]
    """,
    "jpointer/pointer.py": """
        \"\"\"RFC 6901 JSON Pointers.\"\"\"


        class PointerError(LookupError):
            pass


        def split(pointer: str):
            if pointer == "":
                return []
            if not pointer.startswith("/"):
                raise PointerError(f"pointer must start with '/': {pointer!r}")
            # '~1' must be decoded before '~0', or '~01' would turn into '/'.
            return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


        def resolve(document, pointer: str):
            node = document
            for token in split(pointer):
                if isinstance(node, list):
                    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                        raise PointerError(f"bad array index {token!r}")
                    index = int(token)
                    if index >= len(node):
                        raise PointerError(f"index {index} out of range")
                    node = node[index]
                elif isinstance(node, dict):
                    if token not in node:
                        raise PointerError(f"no member {token!r}")
                    node = node[token]
                else:
                    raise PointerError(f"cannot descend into {type(node).__name__}")
            return node
    """,
    "tests/test_jpointer_escape.py": """
        from jpointer import resolve, split


        DOC = {"a/b": 1, "m~n": 2, "~1": 3}


        def test_slash_escape():
            assert resolve(DOC, "/a~1b") == 1


        def test_tilde_escape():
            assert resolve(DOC, "/m~0n") == 2


        def test_order_of_unescaping():
            assert split("/~01") == ["~1"]
            assert resolve(DOC, "/~01") == 3
    """,
    "tests/test_jpointer_resolve.py": """
        import pytest

        from jpointer import PointerError, resolve


        DOC = {"foo": ["bar", "baz"], "": 0, "x": {"y": None}}


        def test_whole_document():
            assert resolve(DOC, "") is DOC


        def test_arrays():
            assert resolve(DOC, "/foo/1") == "baz"
            with pytest.raises(PointerError):
                resolve(DOC, "/foo/01")
            with pytest.raises(PointerError):
                resolve(DOC, "/foo/2")


        def test_empty_key_and_null():
            assert resolve(DOC, "/") == 0
            assert resolve(DOC, "/x/y") is None
    """,
}, "jpointer/pointer.py",
    'return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]',
    'return [p.replace("~0", "~").replace("~1", "/") for p in pointer[1:].split("/")]',
    """
    Pointer "/~01" resolves the wrong member

    Per RFC 6901, "/~01" refers to the member named "~1", but `split("/~01")` returns
    `["/"]`. "/a~1b" and "/m~0n" work.
    """, "func_pm_swap_calls")


# ----------------------------------------------------------------------------- 26 word wrap
spec("wrapper", {
    "wrapper/__init__.py": """
        from wrapper.wrap import justify, wrap

        __all__ = ["wrap", "justify"]
    """,
    "wrapper/wrap.py": """
        \"\"\"Greedy word wrapping and full justification.\"\"\"


        def wrap(text: str, width: int):
            if width < 1:
                raise ValueError("width must be positive")
            lines, current = [], ""
            for word in text.split():
                while len(word) > width:  # hard-split words longer than a line
                    if current:
                        lines.append(current)
                        current = ""
                    lines.append(word[:width])
                    word = word[width:]
                if not current:
                    current = word
                elif len(current) + 1 + len(word) <= width:
                    current += " " + word
                else:
                    lines.append(current)
                    current = word
            if current:
                lines.append(current)
            return lines


        def justify(text: str, width: int):
            lines = wrap(text, width)
            out = []
            for line in lines[:-1]:
                words = line.split()
                if len(words) == 1:
                    out.append(line.ljust(width))
                    continue
                gaps = len(words) - 1
                spaces = width - sum(len(w) for w in words)
                built = ""
                for i, w in enumerate(words[:-1]):
                    built += w + " " * (spaces // gaps + (1 if i < spaces % gaps else 0))
                out.append(built + words[-1])
            if lines:
                out.append(lines[-1].ljust(width))
            return out
    """,
    "tests/test_wrapper_wrap.py": """
        from wrapper import justify, wrap


        def test_exact_fit():
            assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]
            assert justify("aaa bbb ccc", 7) == ["aaa bbb", "ccc    "]


        def test_long_word():
            assert wrap("abcdefgh ij", 3) == ["abc", "def", "gh", "ij"]


        def test_whitespace():
            assert wrap("  a   b  ", 10) == ["a b"]
    """,
    "tests/test_wrapper_justify.py": """
        from wrapper import justify


        def test_justify():
            assert justify("a bb ccc dd", 7) == ["a    bb", "ccc dd "]


        def test_single_word_lines():
            assert justify("hello", 7) == ["hello  "]
    """,
}, "wrapper/wrap.py",
    "elif len(current) + 1 + len(word) <= width:",
    "elif len(current) + 1 + len(word) < width:",
    """
    wrap() breaks lines that would fit exactly

    `wrap("aaa bbb ccc", 7)` returns `["aaa", "bbb", "ccc"]`, but "aaa bbb" is exactly 7
    characters and fits. Lines should be filled up to the full width.
    """, "func_pm_op_boundary")


# ----------------------------------------------------------------------------- 27 matrix
spec("minimat", {
    "minimat/__init__.py": """
        from minimat.matrix import Matrix

        __all__ = ["Matrix"]
    """,
    "minimat/matrix.py": """
        \"\"\"Small dense matrices over floats.\"\"\"


        class Matrix:
            def __init__(self, rows):
                rows = [list(map(float, r)) for r in rows]
                if not rows or any(len(r) != len(rows[0]) for r in rows):
                    raise ValueError("rows must be non-empty and of equal length")
                self.rows = rows

            @property
            def shape(self):
                return len(self.rows), len(self.rows[0])

            @classmethod
            def identity(cls, n: int) -> "Matrix":
                return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

            def transpose(self) -> "Matrix":
                return Matrix([list(col) for col in zip(*self.rows)])

            def __matmul__(self, other: "Matrix") -> "Matrix":
                n, m = self.shape
                m2, p = other.shape
                if m != m2:
                    raise ValueError(f"cannot multiply {self.shape} by {other.shape}")
                cols = other.transpose().rows
                return Matrix([[sum(a * b for a, b in zip(row, col)) for col in cols] for row in self.rows])

            def __eq__(self, other) -> bool:
                return isinstance(other, Matrix) and self.rows == other.rows

            def determinant(self) -> float:
                n, m = self.shape
                if n != m:
                    raise ValueError("determinant needs a square matrix")
                a = [row[:] for row in self.rows]
                det = 1.0
                for c in range(n):
                    pivot = max(range(c, n), key=lambda r: abs(a[r][c]))
                    if a[pivot][c] == 0:
                        return 0.0
                    if pivot != c:
                        a[c], a[pivot] = a[pivot], a[c]
                        det = -det
                    det *= a[c][c]
                    for r in range(c + 1, n):
                        f = a[r][c] / a[c][c]
                        for k in range(c, n):
                            a[r][k] -= f * a[c][k]
                return det
    """,
    "tests/test_minimat_det.py": """
        import pytest

        from minimat import Matrix


        def test_det_2x2():
            assert Matrix([[1, 2], [3, 4]]).determinant() == -2
            assert Matrix([[2, 7], [4, 3]]).determinant() == -22


        def test_det_needs_swap():
            assert Matrix([[0, 1], [1, 0]]).determinant() == -1
            assert Matrix([[0, 2], [3, 0]]).determinant() == -6


        def test_det_3x3():
            assert Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]]).determinant() == pytest.approx(6)
    """,
    "tests/test_minimat_ops.py": """
        import pytest

        from minimat import Matrix


        def test_matmul():
            a = Matrix([[1, 2], [3, 4]])
            assert a @ Matrix.identity(2) == a
            assert a @ Matrix([[0, 1], [1, 0]]) == Matrix([[2, 1], [4, 3]])


        def test_shape_mismatch():
            with pytest.raises(ValueError):
                Matrix([[1, 2]]) @ Matrix([[1, 2]])


        def test_transpose():
            assert Matrix([[1, 2, 3]]).transpose().shape == (3, 1)
    """,
}, "minimat/matrix.py",
    """
                    if pivot != c:
                        a[c], a[pivot] = a[pivot], a[c]
                        det = -det
    """,
    """
                    if pivot != c:
                        a[c], a[pivot] = a[pivot], a[c]
    """,
    """
    determinant() has the wrong sign for some matrices

    `Matrix([[0, 1], [1, 0]]).determinant()` returns 1.0; the determinant is -1.
    `Matrix([[1, 2], [3, 4]]).determinant()` also comes out as 2 instead of -2.
    """, "func_pm_remove_negation")


# ----------------------------------------------------------------------------- 28 bisect
spec("sortedlist", {
    "sortedlist/__init__.py": """
        from sortedlist.core import SortedList, lower_bound

        __all__ = ["SortedList", "lower_bound"]
    """,
    "sortedlist/core.py": """
        \"\"\"A list kept sorted with binary search.\"\"\"


        def lower_bound(xs, x) -> int:
            \"\"\"First index i with xs[i] >= x (len(xs) if none).\"\"\"
            lo, hi = 0, len(xs)
            while lo < hi:
                mid = (lo + hi) // 2
                if xs[mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            return lo


        class SortedList:
            def __init__(self, items=()):
                self._xs = sorted(items)

            def add(self, x) -> None:
                self._xs.insert(lower_bound(self._xs, x), x)

            def remove(self, x) -> None:
                i = lower_bound(self._xs, x)
                if i == len(self._xs) or self._xs[i] != x:
                    raise ValueError(f"{x!r} not in list")
                del self._xs[i]

            def count_range(self, lo, hi) -> int:
                \"\"\"How many items lie in [lo, hi).\"\"\"
                return lower_bound(self._xs, hi) - lower_bound(self._xs, lo)

            def __contains__(self, x) -> bool:
                i = lower_bound(self._xs, x)
                return i < len(self._xs) and self._xs[i] == x

            def __iter__(self):
                return iter(self._xs)

            def __len__(self):
                return len(self._xs)
    """,
    "tests/test_sortedlist_bound.py": """
        from sortedlist import SortedList, lower_bound


        def test_lower_bound_duplicates():
            assert lower_bound([10, 20, 20, 20, 30], 20) == 1
            assert lower_bound([0, 50, 50, 70, 70, 70, 90], 70) == 3
            assert lower_bound([11, 13, 14, 17, 19, 23, 26, 31, 31, 31, 40], 31) == 7


        def test_lower_bound_edges():
            assert lower_bound([], 50) == 0
            assert lower_bound([10, 30], 40) == 2
            assert lower_bound([10, 30], 0) == 0


        def test_count_range():
            s = SortedList([50, 10, 30, 30, 90, 40, 60])
            assert s.count_range(30, 60) == 4
            assert SortedList([12, 12, 12, 15, 17, 18, 21, 26, 30]).count_range(12, 25) == 7
    """,
    "tests/test_sortedlist_ops.py": """
        import pytest

        from sortedlist import SortedList


        def test_add_keeps_order():
            s = SortedList([30, 10])
            s.add(20)
            assert list(s) == [10, 20, 30]


        def test_remove_missing():
            with pytest.raises(ValueError):
                SortedList([1]).remove(2)


        def test_contains():
            assert 40 in SortedList([40])
            assert [x for x in range(10) if x in SortedList([8, 5, 8, 2])] == [2, 5, 8]
    """,
}, "sortedlist/core.py",
    "if xs[mid] < x:",
    "if xs[mid] <= x:",
    """
    lower_bound() returns the index after duplicates

    `lower_bound([1, 2, 2, 2, 3], 2)` returns 4 instead of 1, and
    `SortedList([5, 1, 3, 3, 9]).count_range(3, 6)` is 1 instead of 3 (both 3s are
    missed).
    """, "func_pm_op_boundary")


# ----------------------------------------------------------------------------- 29 csv
spec("csvlite", {
    "csvlite/__init__.py": """
        from csvlite.reader import parse_line, read

        __all__ = ["parse_line", "read"]
    """,
    "csvlite/reader.py": """
        \"\"\"A CSV line parser: quoted fields, doubled quotes, custom delimiter.\"\"\"


        def parse_line(line: str, delimiter: str = ","):
            fields, field, i = [], [], 0
            quoted = False
            while i < len(line):
                ch = line[i]
                if quoted:
                    if ch == '"':
                        if i + 1 < len(line) and line[i + 1] == '"':
                            field.append('"')
                            i += 1
                        else:
                            quoted = False
                    else:
                        field.append(ch)
                elif ch == '"':
                    quoted = True
                elif ch == delimiter:
                    fields.append("".join(field))
                    field = []
                else:
                    field.append(ch)
                i += 1
            if quoted:
                raise ValueError("unterminated quoted field")
            fields.append("".join(field))
            return fields


        def read(text: str, delimiter: str = ","):
            \"\"\"Rows as dicts keyed by the header line.\"\"\"
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if not lines:
                return []
            header = parse_line(lines[0], delimiter)
            rows = []
            for ln in lines[1:]:
                values = parse_line(ln, delimiter)
                if len(values) != len(header):
                    raise ValueError(f"expected {len(header)} fields, got {len(values)}")
                rows.append(dict(zip(header, values)))
            return rows
    """,
    "tests/test_csvlite_quotes.py": """
        import pytest

        from csvlite import parse_line


        def test_quoted_delimiter():
            assert parse_line('a,"b,c",d') == ["a", "b,c", "d"]


        def test_doubled_quote():
            assert parse_line('\"say \"\"hi\"\"\",x') == ['say "hi"', "x"]
            assert parse_line('7,"a ""b"" c"') == ["7", 'a "b" c']


        def test_unterminated():
            with pytest.raises(ValueError):
                parse_line('"abc')
    """,
    "tests/test_csvlite_read.py": """
        import pytest

        from csvlite import parse_line, read


        def test_read():
            assert read("name;age\\nann;3\\n", delimiter=";") == [{"name": "ann", "age": "3"}]


        def test_empty_fields():
            assert parse_line(",,") == ["", "", ""]


        def test_ragged():
            with pytest.raises(ValueError):
                read("a,b\\n1\\n")
    """,
}, "csvlite/reader.py",
    """
                        if i + 1 < len(line) and line[i + 1] == '"':
                            field.append('"')
                            i += 1
                        else:
                            quoted = False
    """,
    """
                        quoted = False
    """,
    """
    Doubled quotes inside a quoted field are mangled

    `parse_line('\"say \"\"hi\"\"\",x')` returns `['say hi""', 'x']`-style output instead of
    `['say "hi"', 'x']`. Inside quotes, `\"\"` stands for one literal quote character.
    """, "func_pm_remove_escape")


# ----------------------------------------------------------------------------- 30 priority queue
spec("heapq2", {
    "heapq2/__init__.py": """
        from heapq2.pq import PriorityQueue

        __all__ = ["PriorityQueue"]
    """,
    "heapq2/pq.py": """
        \"\"\"A binary min-heap priority queue, FIFO among equal priorities.\"\"\"

        import itertools


        class PriorityQueue:
            def __init__(self):
                self._heap = []
                self._counter = itertools.count()

            def push(self, item, priority) -> None:
                self._heap.append((priority, next(self._counter), item))
                self._sift_up(len(self._heap) - 1)

            def pop(self):
                if not self._heap:
                    raise IndexError("pop from empty queue")
                top = self._heap[0]
                last = self._heap.pop()
                if self._heap:
                    self._heap[0] = last
                    self._sift_down(0)
                return top[2]

            def peek(self):
                if not self._heap:
                    raise IndexError("peek at empty queue")
                return self._heap[0][2]

            def __len__(self):
                return len(self._heap)

            def _sift_up(self, i):
                h = self._heap
                while i > 0:
                    parent = (i - 1) // 2
                    if h[i] < h[parent]:
                        h[i], h[parent] = h[parent], h[i]
                        i = parent
                    else:
                        break

            def _sift_down(self, i):
                h, n = self._heap, len(self._heap)
                while True:
                    smallest = i
                    for child in (2 * i + 1, 2 * i + 2):
                        if child < n and h[child] < h[smallest]:
                            smallest = child
                    if smallest == i:
                        return
                    h[i], h[smallest] = h[smallest], h[i]
                    i = smallest
    """,
    "tests/test_heapq2_order.py": """
        import random

        from heapq2 import PriorityQueue


        def test_pops_in_priority_order():
            q = PriorityQueue()
            values = list(range(50))
            random.Random(0).shuffle(values)
            for v in values:
                q.push(v, v)
            assert [q.pop() for _ in range(50)] == list(range(50))
            jobs = PriorityQueue()
            for job, priority in zip("pqrstuvwxyz", [7, 3, 9, 1, 8, 2, 6, 10, 4, 5, 0]):
                jobs.push(job, priority)
            assert "".join(jobs.pop() for _ in range(11)) == "zsuqxyvptrw"


        def test_fifo_for_ties():
            q = PriorityQueue()
            for name in "abc":
                q.push(name, 1)
            q.push("urgent", 0)
            assert [q.pop() for _ in range(4)] == ["urgent", "a", "b", "c"]
    """,
    "tests/test_heapq2_basic.py": """
        import pytest

        from heapq2 import PriorityQueue


        def test_peek_and_len():
            q = PriorityQueue()
            q.push("x", 5)
            q.push("y", 2)
            assert q.peek() == "y"
            assert len(q) == 2


        def test_empty():
            with pytest.raises(IndexError):
                PriorityQueue().pop()
    """,
}, "heapq2/pq.py",
    "for child in (2 * i + 1, 2 * i + 2):",
    "for child in (2 * i + 1,):",
    """
    PriorityQueue pops items out of order

    After pushing 50 shuffled numbers with their own value as priority, popping them
    does not yield 0, 1, 2, ... in order. Peeking at the first element works.
    """, "func_pm_drop_child")


# ----------------------------------------------------------------------------- 31 units
spec("unitconv", {
    "unitconv/__init__.py": """
        from unitconv.convert import convert, parse_quantity

        __all__ = ["convert", "parse_quantity"]
    """,
    "unitconv/convert.py": """
        \"\"\"Unit conversion for length, mass and temperature.\"\"\"

        import re

        _LINEAR = {
            "length": {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048, "mi": 1609.344},
            "mass": {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125},
        }
        _TEMPS = {"C", "F", "K"}


        def _to_kelvin(value, unit):
            if unit == "K":
                return value
            if unit == "C":
                return value + 273.15
            return (value - 32) * 5 / 9 + 273.15


        def _from_kelvin(value, unit):
            if unit == "K":
                return value
            if unit == "C":
                return value - 273.15
            return (value - 273.15) * 9 / 5 + 32


        def convert(value: float, src: str, dst: str) -> float:
            if src in _TEMPS and dst in _TEMPS:
                return round(_from_kelvin(_to_kelvin(value, src), dst), 10)
            for table in _LINEAR.values():
                if src in table and dst in table:
                    return round(value * table[src] / table[dst], 10)
            raise ValueError(f"cannot convert {src} to {dst}")


        def parse_quantity(text: str):
            m = re.fullmatch(r"\\s*(-?\\d+(?:\\.\\d+)?)\\s*([A-Za-z]+)\\s*", text)
            if not m:
                raise ValueError(f"not a quantity: {text!r}")
            return float(m.group(1)), m.group(2)
    """,
    "tests/test_unitconv_temperature.py": """
        from unitconv import convert


        def test_boiling_point():
            assert convert(100, "C", "F") == 212
            assert convert(37, "C", "F") == 98.6


        def test_kelvin():
            assert convert(0, "K", "C") == -273.15
            assert convert(-40, "F", "C") == -40
    """,
    "tests/test_unitconv_linear.py": """
        import pytest

        from unitconv import convert, parse_quantity


        def test_length():
            assert convert(1, "mi", "km") == 1.609344
            assert convert(12, "in", "ft") == 1


        def test_mass():
            assert convert(1000, "g", "kg") == 1


        def test_incompatible_and_parse():
            with pytest.raises(ValueError):
                convert(1, "kg", "m")
            assert parse_quantity(" 3.5 km") == (3.5, "km")
    """,
}, "unitconv/convert.py",
    "return (value - 273.15) * 9 / 5 + 32",
    "return (value - 273.15) * 5 / 9 + 32",
    """
    Converting to Fahrenheit gives wrong values

    `convert(100, "C", "F")` returns about 87.6 instead of 212. Converting from
    Fahrenheit to Celsius is correct.
    """, "func_pm_swap_factors")


# ----------------------------------------------------------------------------- 32 glob
spec("globmatch", {
    "globmatch/__init__.py": """
        from globmatch.match import filter_names, match

        __all__ = ["match", "filter_names"]
    """,
    "globmatch/match.py": """
        \"\"\"Shell-style wildcard matching: *, ? and [abc] / [!abc] classes.\"\"\"


        def _class_end(pattern: str, i: int) -> int:
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                j += 1
            return j


        def _in_class(ch: str, body: str) -> bool:
            i = 0
            while i < len(body):
                if i + 2 < len(body) and body[i + 1] == "-":
                    if body[i] <= ch <= body[i + 2]:
                        return True
                    i += 3
                else:
                    if body[i] == ch:
                        return True
                    i += 1
            return False


        def match(name: str, pattern: str) -> bool:
            \"\"\"Backtracking matcher over the whole name.\"\"\"
            n, p = 0, 0
            star_p, star_n = -1, 0
            while n < len(name):
                if p < len(pattern) and pattern[p] == "*":
                    star_p, star_n = p, n
                    p += 1
                    continue
                if p < len(pattern) and pattern[p] == "[":
                    end = _class_end(pattern, p)
                    if end < len(pattern):
                        body = pattern[p + 1:end]
                        negate = body.startswith("!")
                        if negate:
                            body = body[1:]
                        if _in_class(name[n], body) != negate:
                            n, p = n + 1, end + 1
                            continue
                elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
                    n, p = n + 1, p + 1
                    continue
                if star_p >= 0:
                    star_n += 1
                    n, p = star_n, star_p + 1
                    continue
                return False
            while p < len(pattern) and pattern[p] == "*":
                p += 1
            return p == len(pattern)


        def filter_names(names, pattern: str):
            return [n for n in names if match(n, pattern)]
    """,
    "tests/test_globmatch_star.py": """
        from globmatch import match


        def test_star_backtracks():
            assert match("abcabd", "*abd")
            assert match("a.tar.gz", "*.gz")
            assert [n for n in ("abcabd", "abd", "abcab", "xabd", "abdx") if match(n, "*abd")] == ["abcabd", "abd", "xabd"]


        def test_trailing_stars():
            assert match("abc", "abc**")


        def test_star_matches_empty():
            assert match("", "*")
            assert not match("", "?")
    """,
    "tests/test_globmatch_classes.py": """
        from globmatch import filter_names, match


        def test_question_mark():
            assert match("cat", "c?t")
            assert not match("cart", "c?t")


        def test_classes():
            assert match("b1", "[abc][0-9]")
            assert not match("b1", "[abc][xyz]")
            assert match("b", "[abc]")
            assert match("d", "[!abc]")


        def test_filter():
            assert filter_names(["a.py", "b.txt", "c.py"], "*.py") == ["a.py", "c.py"]
    """,
}, "globmatch/match.py",
    """
                if star_p >= 0:
                    star_n += 1
                    n, p = star_n, star_p + 1
                    continue
    """,
    """
                if star_p >= 0 and p == star_p + 1:
                    star_n += 1
                    n, p = star_n, star_p + 1
                    continue
    """,
    """
    '*' does not backtrack after a partial match

    `match("abcabd", "*abd")` returns False, though "abcabd" ends with "abd". It looks
    like once part of the text after '*' has matched, a later mismatch is not retried at
    the next position.
    """, "func_pm_no_backtrack")
