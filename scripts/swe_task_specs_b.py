"""Bundled bug-fix tasks, part B (see swe_task_specs_a for the layout)."""

from swe_task_specs_a import SPECS, spec  # noqa: F401  (shared registry)

# ----------------------------------------------------------------------------- 7 levenshtein
spec("editdist", {
    "editdist/__init__.py": """
        from editdist.distance import closest, levenshtein

        __all__ = ["levenshtein", "closest"]
    """,
    "editdist/distance.py": """
        \"\"\"Edit distance and fuzzy lookup.\"\"\"


        def levenshtein(a: str, b: str) -> int:
            if len(a) < len(b):
                a, b = b, a
            prev = list(range(len(b) + 1))
            for i, ca in enumerate(a, 1):
                cur = [i]
                for j, cb in enumerate(b, 1):
                    cost = 0 if ca == cb else 1
                    cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost))
                prev = cur
            return prev[-1]


        def closest(word: str, candidates, max_distance: int = 2):
            best, best_d = None, max_distance + 1
            for c in candidates:
                dist = levenshtein(word, c)
                if dist < best_d:
                    best, best_d = c, dist
            return best
    """,
    "tests/test_editdist_levenshtein.py": """
        from editdist import levenshtein


        def test_identical():
            assert levenshtein("abc", "abc") == 0
            assert levenshtein("kitten", "kitchen") == 2


        def test_classic():
            assert levenshtein("kitten", "sitting") == 3
            assert levenshtein("flaw", "lawn") == 2


        def test_empty():
            assert levenshtein("", "abc") == 3
    """,
    "tests/test_editdist_closest.py": """
        from editdist import closest, levenshtein


        def test_closest():
            assert closest("appel", ["apple", "maple", "apply"]) in ("apple", "apply")
            assert [levenshtein("appel", w) for w in ("apple", "maple", "apply")] == [2, 3, 2]


        def test_none_close_enough():
            assert closest("zzzzzz", ["apple"]) is None
            assert levenshtein("zzzzzz", "apple") == 6
    """,
}, "editdist/distance.py",
    "cost = 0 if ca == cb else 1",
    "cost = 1 if ca == cb else 0",
    """
    levenshtein() is wrong for identical strings

    `levenshtein("abc", "abc")` returns 3 instead of 0, and `levenshtein("kitten", "sitting")`
    is not 3. The distance between equal strings must be zero.
    """, "func_pm_flip_cost")


# ----------------------------------------------------------------------------- 8 toposort
spec("depgraph", {
    "depgraph/__init__.py": """
        from depgraph.graph import CycleError, toposort

        __all__ = ["toposort", "CycleError"]
    """,
    "depgraph/graph.py": """
        \"\"\"Dependency ordering (Kahn's algorithm), deterministic.\"\"\"

        import heapq


        class CycleError(ValueError):
            pass


        def toposort(deps: dict) -> list:
            \"\"\"deps maps a node to the nodes it depends on; dependencies come first.\"\"\"
            nodes = set(deps)
            for ds in deps.values():
                nodes.update(ds)
            indegree = {n: 0 for n in nodes}
            users = {n: [] for n in nodes}
            for node, ds in deps.items():
                for dep in set(ds):
                    indegree[node] += 1
                    users[dep].append(node)
            ready = [n for n in nodes if indegree[n] == 0]
            heapq.heapify(ready)
            order = []
            while ready:
                n = heapq.heappop(ready)
                order.append(n)
                for user in users[n]:
                    indegree[user] -= 1
                    if indegree[user] == 0:
                        heapq.heappush(ready, user)
            if len(order) != len(nodes):
                raise CycleError("dependency cycle among: " + ", ".join(sorted(nodes - set(order))))
            return order
    """,
    "tests/test_depgraph_order.py": """
        from depgraph import toposort


        def test_chain():
            assert toposort({"c": ["b"], "b": ["a"]}) == ["a", "b", "c"]


        def test_diamond():
            order = toposort({"d": ["b", "c"], "b": ["a"], "c": ["a"]})
            assert order == ["a", "b", "c", "d"]


        def test_duplicate_edges():
            assert toposort({"b": ["a", "a"]}) == ["a", "b"]
    """,
    "tests/test_depgraph_cycle.py": """
        import pytest

        from depgraph import CycleError, toposort


        def test_cycle():
            with pytest.raises(CycleError):
                toposort({"a": ["b"], "b": ["a"]})


        def test_empty():
            assert toposort({}) == []


        def test_cycle_next_to_independent_nodes():
            with pytest.raises(CycleError) as err:
                toposort({"a": ["b"], "b": ["a"], "c": []})
            assert str(err.value) == "dependency cycle among: a, b"
    """,
}, "depgraph/graph.py",
    "if len(order) != len(nodes):",
    "if not order and nodes:",
    """
    toposort() silently drops nodes that are part of a cycle

    `toposort({"a": ["b"], "b": ["a"], "c": []})` returns `["c"]` instead of raising
    `CycleError`. A cycle is only reported when every node is part of it; any cycle should
    be an error.
    """, "func_pm_weak_check")


# ----------------------------------------------------------------------------- 9 fractions
spec("ratio", {
    "ratio/__init__.py": """
        from ratio.frac import Frac

        __all__ = ["Frac"]
    """,
    "ratio/frac.py": """
        \"\"\"Exact fractions, always stored in lowest terms with a positive denominator.\"\"\"

        from math import gcd


        class Frac:
            __slots__ = ("num", "den")

            def __init__(self, num: int, den: int = 1):
                if den == 0:
                    raise ZeroDivisionError("denominator is zero")
                if den < 0:
                    num, den = -num, -den
                g = gcd(num, den) or 1
                self.num, self.den = num // g, den // g

            def __add__(self, other):
                other = _coerce(other)
                return Frac(self.num * other.den + other.num * self.den, self.den * other.den)

            def __sub__(self, other):
                other = _coerce(other)
                return Frac(self.num * other.den - other.num * self.den, self.den * other.den)

            def __mul__(self, other):
                other = _coerce(other)
                return Frac(self.num * other.num, self.den * other.den)

            def __truediv__(self, other):
                other = _coerce(other)
                return Frac(self.num * other.den, self.den * other.num)

            def __eq__(self, other):
                other = _coerce(other)
                return (self.num, self.den) == (other.num, other.den)

            def __repr__(self):
                return f"Frac({self.num}, {self.den})"


        def _coerce(x):
            return x if isinstance(x, Frac) else Frac(int(x))
    """,
    "tests/test_ratio_arith.py": """
        from ratio import Frac


        def test_add():
            assert Frac(1, 2) + Frac(1, 3) == Frac(5, 6)


        def test_sub():
            d = Frac(7, 10) - Frac(1, 4)
            assert (d.num, d.den) == (9, 20)
            assert Frac(1, 3) - Frac(1, 2) == Frac(-1, 6)


        def test_div():
            assert Frac(1, 2) / Frac(3, 4) == Frac(2, 3)
    """,
    "tests/test_ratio_norm.py": """
        import pytest

        from ratio import Frac


        def test_lowest_terms():
            f = Frac(6, -8)
            assert (f.num, f.den) == (-3, 4)


        def test_zero_den():
            with pytest.raises(ZeroDivisionError):
                Frac(1, 0)


        def test_mul_int():
            assert Frac(2, 3) * 3 == Frac(2)
    """,
}, "ratio/frac.py",
    "return Frac(self.num * other.den - other.num * self.den, self.den * other.den)",
    "return Frac(other.num * self.den - self.num * other.den, self.den * other.den)",
    """
    Frac subtraction has the wrong sign

    `Frac(1, 2) - Frac(1, 3)` gives `Frac(-1, 6)`; it should be `Frac(1, 6)`.
    Addition, multiplication and division look right.
    """, "func_pm_swap_operands")


# ----------------------------------------------------------------------------- 10 stats
spec("tinystats", {
    "tinystats/__init__.py": """
        from tinystats.describe import mean, median, mode, variance

        __all__ = ["mean", "median", "mode", "variance"]
    """,
    "tinystats/describe.py": """
        \"\"\"Descriptive statistics without numpy.\"\"\"

        from collections import Counter


        def mean(xs):
            xs = list(xs)
            if not xs:
                raise ValueError("mean of empty data")
            return sum(xs) / len(xs)


        def median(xs):
            xs = sorted(xs)
            if not xs:
                raise ValueError("median of empty data")
            mid = len(xs) // 2
            if len(xs) % 2:
                return xs[mid]
            return (xs[mid - 1] + xs[mid]) / 2


        def mode(xs):
            counts = Counter(xs)
            if not counts:
                raise ValueError("mode of empty data")
            top = max(counts.values())
            return min(x for x, c in counts.items() if c == top)


        def variance(xs, sample: bool = True):
            xs = list(xs)
            n = len(xs)
            if n < (2 if sample else 1):
                raise ValueError("not enough data")
            m = mean(xs)
            ss = sum((x - m) ** 2 for x in xs)
            return ss / (n - 1 if sample else n)
    """,
    "tests/test_tinystats_median.py": """
        import pytest

        from tinystats import median


        def test_odd():
            assert median([3, 1, 2]) == 2


        def test_even():
            assert median([4, 1, 3, 2]) == 2.5
            assert median([9, 2, 6, 5, 1, 8]) == 5.5


        def test_empty():
            with pytest.raises(ValueError):
                median([])
    """,
    "tests/test_tinystats_moments.py": """
        from tinystats import mean, mode, variance


        def test_mean():
            assert mean([1, 2, 3, 4]) == 2.5


        def test_mode_tie_smallest():
            assert mode([3, 1, 3, 1, 2]) == 1


        def test_variance():
            assert variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False) == 4.0
            assert abs(variance([1, 2, 3, 4]) - 1.6666666) < 1e-6
    """,
}, "tinystats/describe.py",
    "return (xs[mid - 1] + xs[mid]) / 2",
    "return (xs[mid] + xs[mid + 1]) / 2",
    """
    median() of an even-length list is wrong

    `median([4, 1, 3, 2])` returns 3.5 instead of 2.5, and a two-element list raises
    IndexError. Odd-length lists work.
    """, "func_pm_off_by_one")


# ----------------------------------------------------------------------------- 11 case conversion
spec("casefold", {
    "casefold/__init__.py": """
        from casefold.convert import to_camel, to_kebab, to_snake

        __all__ = ["to_snake", "to_camel", "to_kebab"]
    """,
    "casefold/convert.py": """
        \"\"\"Identifier case conversion.\"\"\"

        import re

        _BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


        def _words(name: str):
            name = _BOUNDARY.sub(" ", name)
            return [w.lower() for w in re.split(r"[\\s_\\-]+", name) if w]


        def to_snake(name: str) -> str:
            return "_".join(_words(name))


        def to_kebab(name: str) -> str:
            return "-".join(_words(name))


        def to_camel(name: str, upper_first: bool = False) -> str:
            words = _words(name)
            if not words:
                return ""
            first = words[0].capitalize() if upper_first else words[0]
            return first + "".join(w.capitalize() for w in words[1:])
    """,
    "tests/test_casefold_snake.py": """
        from casefold import to_snake


        def test_camel_to_snake():
            assert to_snake("parseHttpResponse") == "parse_http_response"


        def test_acronyms():
            assert to_snake("HTTPServerError") == "http_server_error"
            assert to_snake("parseXMLDocument") == "parse_xml_document"


        def test_mixed_separators():
            assert to_snake("already-kebab_and snake") == "already_kebab_and_snake"
    """,
    "tests/test_casefold_camel.py": """
        from casefold import to_camel, to_kebab


        def test_camel():
            assert to_camel("user_id") == "userId"
            assert to_camel("user_id", upper_first=True) == "UserId"


        def test_kebab():
            assert to_kebab("some_name") == "some-name"


        def test_empty():
            assert to_camel("") == ""
    """,
}, "casefold/convert.py",
    '_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")',
    '_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")',
    """
    to_snake() does not split acronyms

    `to_snake("HTTPServerError")` returns `"httpserver_error"`; expected
    `"http_server_error"`. Plain camelCase names like `parseHttpResponse` work.
    """, "func_pm_regex_drop_alt")


# ----------------------------------------------------------------------------- 12 bank ledger
spec("ledger", {
    "ledger/__init__.py": """
        from ledger.account import Account, InsufficientFunds

        __all__ = ["Account", "InsufficientFunds"]
    """,
    "ledger/account.py": """
        \"\"\"A bank account with an overdraft limit, amounts in cents.\"\"\"


        class InsufficientFunds(Exception):
            pass


        class Account:
            def __init__(self, owner: str, overdraft: int = 0):
                self.owner = owner
                self.overdraft = overdraft
                self.balance = 0
                self.history = []

            def deposit(self, cents: int) -> None:
                if cents <= 0:
                    raise ValueError("deposit must be positive")
                self.balance += cents
                self.history.append(("deposit", cents))

            def withdraw(self, cents: int) -> None:
                if cents <= 0:
                    raise ValueError("withdrawal must be positive")
                if self.balance - cents < -self.overdraft:
                    raise InsufficientFunds(f"{self.owner} cannot withdraw {cents}")
                self.balance -= cents
                self.history.append(("withdraw", cents))

            def transfer(self, other: "Account", cents: int) -> None:
                self.withdraw(cents)
                other.deposit(cents)
    """,
    "tests/test_ledger_withdraw.py": """
        import pytest

        from ledger import Account, InsufficientFunds


        def test_withdraw_to_zero():
            a = Account("ann")
            a.deposit(500)
            a.withdraw(500)
            assert a.balance == 0
            assert a.history == [("deposit", 500), ("withdraw", 500)]


        def test_overdraft_limit():
            a = Account("bob", overdraft=100)
            a.withdraw(100)
            assert a.balance == -100
            with pytest.raises(InsufficientFunds):
                a.withdraw(1)
            a.deposit(35)
            assert a.balance == -65


        def test_transfer():
            a, b = Account("a"), Account("b")
            a.deposit(300)
            a.transfer(b, 300)
            assert (a.balance, b.balance) == (0, 300)
    """,
    "tests/test_ledger_deposit.py": """
        import pytest

        from ledger import Account


        def test_deposit():
            a = Account("x")
            a.deposit(10)
            assert a.balance == 10
            assert a.history == [("deposit", 10)]


        def test_negative_deposit():
            with pytest.raises(ValueError):
                Account("x").deposit(-5)
    """,
}, "ledger/account.py",
    "if self.balance - cents < -self.overdraft:",
    "if self.balance - cents <= -self.overdraft:",
    """
    Cannot withdraw the whole balance

    An account with 500 cents raises `InsufficientFunds` on `withdraw(500)`, and an
    account with an overdraft of 100 cannot go to exactly -100. Withdrawing down to the
    limit should be allowed.
    """, "func_pm_op_boundary")
