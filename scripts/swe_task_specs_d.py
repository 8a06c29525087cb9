"""Bundled bug-fix tasks, part D (see swe_task_specs_a for the layout)."""

from swe_task_specs_a import spec

# ----------------------------------------------------------------------------- 19 tic-tac-toe
spec("tictac", {
    "tictac/__init__.py": """
        from tictac.board import Board, winner

        __all__ = ["Board", "winner"]
    """,
    "tictac/board.py": """
        \"\"\"Tic-tac-toe boards as 9-character strings, row by row ('X', 'O' or '.').\"\"\"

        LINES = [
            (0, 1, 2), (3, 4, 5), (6, 7, 8),
            (0, 3, 6), (1, 4, 7), (2, 5, 8),
            (0, 4, 8), (2, 4, 6),
        ]


        def winner(cells: str):
            for a, b, c in LINES:
                if cells[a] != "." and cells[a] == cells[b] == cells[c]:
                    return cells[a]
            return None


        class Board:
            def __init__(self, cells: str = "." * 9):
                if len(cells) != 9 or set(cells) - set("XO."):
                    raise ValueError("a board is 9 cells of X, O or .")
                self.cells = cells

            @property
            def to_move(self) -> str:
                return "X" if self.cells.count("X") == self.cells.count("O") else "O"

            def play(self, index: int) -> "Board":
                if winner(self.cells):
                    raise ValueError("game is over")
                if self.cells[index] != ".":
                    raise ValueError(f"cell {index} is taken")
                return Board(self.cells[:index] + self.to_move + self.cells[index + 1:])

            def status(self) -> str:
                w = winner(self.cells)
                if w:
                    return f"{w} wins"
                return "draw" if "." not in self.cells else f"{self.to_move} to move"
    """,
    "tests/test_tictac_winner.py": """
        from tictac import winner


        def test_rows_and_columns():
            assert winner("XXX......") == "X"
            assert winner("O..O..O..") == "O"


        def test_anti_diagonal():
            assert winner("..X.X.X..") == "X"
            assert [winner(b) for b in ("O.XOX.X..", "X.OXO.O..", "XO.XO....")] == ["X", "O", None]


        def test_no_winner():
            assert winner("XOXOXOOXO") is None
    """,
    "tests/test_tictac_play.py": """
        import pytest

        from tictac import Board


        def test_alternates():
            b = Board().play(4).play(0)
            assert b.cells == "O...X...."
            assert b.status() == "X to move"


        def test_taken():
            with pytest.raises(ValueError):
                Board().play(4).play(4)


        def test_draw():
            assert Board("XOXXOOOXX").status() == "draw"
    """,
}, "tictac/board.py",
    """
            (0, 4, 8), (2, 4, 6),
    """,
    """
            (0, 4, 8),
    """,
    """
    The anti-diagonal does not count as a win

    `winner("..X.X.X..")` returns None, although X holds cells 2, 4 and 6. Both
    diagonals should win.
    """, "func_pm_drop_case")


# ----------------------------------------------------------------------------- 20 ciphers
spec("ciphers", {
    "ciphers/__init__.py": """
        from ciphers.classic import caesar, vigenere

        __all__ = ["caesar", "vigenere"]
    """,
    "ciphers/classic.py": """
        \"\"\"Classical ciphers that keep case and leave non-letters alone.\"\"\"


        def _shift(ch: str, k: int) -> str:
            if "a" <= ch <= "z":
                return chr((ord(ch) - 97 + k) % 26 + 97)
            if "A" <= ch <= "Z":
                return chr((ord(ch) - 65 + k) % 26 + 65)
            return ch


        def caesar(text: str, k: int, decrypt: bool = False) -> str:
            return "".join(_shift(c, -k if decrypt else k) for c in text)


        def vigenere(text: str, key: str, decrypt: bool = False) -> str:
            if not key.isalpha():
                raise ValueError("key must be letters")
            shifts = [ord(c.lower()) - 97 for c in key]
            out, i = [], 0
            for ch in text:
                if ch.isalpha():
                    k = shifts[i % len(shifts)]
                    out.append(_shift(ch, -k if decrypt else k))
                    i += 1
                else:
                    out.append(ch)
            return "".join(out)
    """,
    "tests/test_ciphers_vigenere.py": """
        from ciphers import vigenere


        def test_known_vector():
            assert vigenere("ATTACK AT DAWN", "LEMON") == "LXFOPV EF RNHR"
            assert vigenere("HOLD THE LINE", "QUEEN") == "XIPH GXY PMAU"


        def test_roundtrip():
            msg = "Hello, World!"
            assert vigenere(vigenere(msg, "key"), "key", decrypt=True) == msg
    """,
    "tests/test_ciphers_caesar.py": """
        import pytest

        from ciphers import caesar, vigenere


        def test_caesar():
            assert caesar("abc xyz", 3) == "def abc"
            assert caesar("Def", 3, decrypt=True) == "Abc"


        def test_bad_key():
            with pytest.raises(ValueError):
                vigenere("x", "k3y")
    """,
}, "ciphers/classic.py",
    """
            for ch in text:
                if ch.isalpha():
                    k = shifts[i % len(shifts)]
                    out.append(_shift(ch, -k if decrypt else k))
                    i += 1
                else:
                    out.append(ch)
    """,
    """
            for ch in text:
                k = shifts[i % len(shifts)]
                if ch.isalpha():
                    out.append(_shift(ch, -k if decrypt else k))
                else:
                    out.append(ch)
                i += 1
    """,
    """
    Vigenère output is wrong for text with spaces

    `vigenere("ATTACK AT DAWN", "LEMON")` does not return the textbook ciphertext
    `"LXFOPV EF RNHR"`; only the first word comes out right. Spaces and punctuation must not consume
    key letters; text without spaces already encrypts correctly.
    """, "func_pm_key_advance")


# ----------------------------------------------------------------------------- 21 base conversion
spec("radix", {
    "radix/__init__.py": """
        from radix.convert import from_base, to_base

        __all__ = ["to_base", "from_base"]
    """,
    "radix/convert.py": """
        \"\"\"Integers in bases 2..36.\"\"\"

        DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


        def to_base(n: int, base: int) -> str:
            if not 2 <= base <= 36:
                raise ValueError("base must be in 2..36")
            if n == 0:
                return "0"
            sign = "-" if n < 0 else ""
            n = abs(n)
            out = []
            while n:
                n, r = divmod(n, base)
                out.append(DIGITS[r])
            return sign + "".join(reversed(out))


        def from_base(text: str, base: int) -> int:
            if not 2 <= base <= 36:
                raise ValueError("base must be in 2..36")
            text = text.strip().lower()
            sign = -1 if text.startswith("-") else 1
            text = text.lstrip("+-")
            if not text:
                raise ValueError("empty number")
            value = 0
            for ch in text:
                d = DIGITS.find(ch)
                if d < 0 or d >= base:
                    raise ValueError(f"invalid digit {ch!r} for base {base}")
                value = value * base + d
            return sign * value
    """,
    "tests/test_radix_to.py": """
        from radix import to_base


        def test_binary():
            assert to_base(10, 2) == "1010"


        def test_hex_negative():
            assert to_base(-255, 16) == "-ff"


        def test_zero():
            assert to_base(0, 7) == "0"
    """,
    "tests/test_radix_from.py": """
        import pytest

        from radix import from_base, to_base


        def test_parse():
            assert from_base("ff", 16) == 255
            assert from_base("-1010", 2) == -10


        def test_invalid_digit():
            with pytest.raises(ValueError):
                from_base("2", 2)


        def test_base36():
            assert from_base("21i3v9", 36) == 123456789
    """,
}, "radix/convert.py",
    "value = value * base + d",
    "value = value + d * base",
    """
    from_base() parses most numbers wrong

    `from_base("ff", 16)` returns 480 instead of 255, and `from_base("1010", 2)` gives 4.
    Single-digit numbers come out right.
    """, "func_pm_op_swap")


# ----------------------------------------------------------------------------- 22 dates
spec("calendarx", {
    "calendarx/__init__.py": """
        from calendarx.days import add_days, day_of_year, days_in_month, is_leap

        __all__ = ["is_leap", "days_in_month", "day_of_year", "add_days"]
    """,
    "calendarx/days.py": """
        \"\"\"Gregorian calendar arithmetic on (year, month, day) tuples.\"\"\"

        _MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


        def is_leap(year: int) -> bool:
            return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


        def days_in_month(year: int, month: int) -> int:
            if not 1 <= month <= 12:
                raise ValueError(f"bad month {month}")
            return 29 if month == 2 and is_leap(year) else _MONTH[month - 1]


        def day_of_year(year: int, month: int, day: int) -> int:
            if not 1 <= day <= days_in_month(year, month):
                raise ValueError(f"bad day {day}")
            return sum(days_in_month(year, m) for m in range(1, month)) + day


        def add_days(date, n: int):
            year, month, day = date
            day += n
            while day > days_in_month(year, month):
                day -= days_in_month(year, month)
                month += 1
                if month > 12:
                    month, year = 1, year + 1
            while day < 1:
                month -= 1
                if month < 1:
                    month, year = 12, year - 1
                day += days_in_month(year, month)
            return (year, month, day)
    """,
    "tests/test_calendarx_leap.py": """
        from calendarx import days_in_month, is_leap


        def test_century_rules():
            assert is_leap(2000)
            assert not is_leap(1900)
            assert is_leap(2024)
            assert not is_leap(2023)
            assert [y for y in (1800, 1900, 1996, 2000, 2023, 2024) if is_leap(y)] == [1996, 2000, 2024]


        def test_february():
            assert days_in_month(1900, 2) == 28
            assert days_in_month(2000, 2) == 29
    """,
    "tests/test_calendarx_arith.py": """
        from calendarx import add_days, day_of_year


        def test_day_of_year():
            assert day_of_year(2023, 3, 1) == 60
            assert day_of_year(2024, 12, 31) == 366


        def test_add_days_across_year():
            assert add_days((2023, 12, 30), 3) == (2024, 1, 2)
            assert add_days((2024, 3, 1), -1) == (2024, 2, 29)
    """,
}, "calendarx/days.py",
    "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
    "return year % 4 == 0 and year % 100 != 0",
    """
    Year 2000 is not treated as a leap year

    `is_leap(2000)` returns False and `days_in_month(2000, 2)` is 28. Years divisible by
    400 are leap years in the Gregorian calendar.
    """, "func_pm_drop_clause")


# ----------------------------------------------------------------------------- 23 token bucket
spec("throttle", {
    "throttle/__init__.py": """
        from throttle.bucket import TokenBucket

        __all__ = ["TokenBucket"]
    """,
    "throttle/bucket.py": """
        \"\"\"A token-bucket rate limiter with an injectable clock (for tests).\"\"\"

        import time


        class TokenBucket:
            def __init__(self, rate: float, capacity: float, clock=time.monotonic):
                if rate <= 0 or capacity <= 0:
                    raise ValueError("rate and capacity must be positive")
                self.rate, self.capacity, self.clock = rate, capacity, clock
                self.tokens = capacity
                self.stamp = clock()

            def _refill(self) -> None:
                now = self.clock()
                self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now

            def try_acquire(self, n: float = 1) -> bool:
                self._refill()
                if self.tokens >= n:
                    self.tokens -= n
                    return True
                return False

            def wait_time(self, n: float = 1) -> float:
                \"\"\"Seconds until n tokens are available (0 if they are now).\"\"\"
                if n > self.capacity:
                    raise ValueError("request exceeds capacity")
                self._refill()
                return max(0.0, (n - self.tokens) / self.rate)
    """,
    "tests/test_throttle_refill.py": """
        from throttle import TokenBucket


        class Clock:
            def __init__(self):
                self.t = 0.0

            def __call__(self):
                return self.t


        def test_refill_is_capped():
            clock = Clock()
            b = TokenBucket(rate=2, capacity=7, clock=clock)
            assert b.try_acquire(7)
            clock.t = 100
            assert b.try_acquire(1)
            assert b.tokens == 6
            assert not b.try_acquire(7)


        def test_wait_time():
            clock = Clock()
            b = TokenBucket(rate=2, capacity=4, clock=clock)
            b.try_acquire(4)
            assert b.wait_time(1) == 0.5
            clock.t = 0.5
            assert b.wait_time(1) == 0.0
    """,
    "tests/test_throttle_basic.py": """
        import pytest

        from throttle import TokenBucket


        def test_burst():
            b = TokenBucket(rate=1, capacity=3, clock=lambda: 0.0)
            assert [b.try_acquire() for _ in range(4)] == [True, True, True, False]


        def test_validation():
            with pytest.raises(ValueError):
                TokenBucket(0, 1)
            with pytest.raises(ValueError):
                TokenBucket(1, 1, clock=lambda: 0.0).wait_time(2)
    """,
}, "throttle/bucket.py",
    "self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)",
    "self.tokens = self.tokens + (now - self.stamp) * self.rate",
    """
    TokenBucket allows bursts larger than its capacity after idling

    With `capacity=2, rate=1`, after 100 idle seconds the bucket lets 100 requests
    through at once. The number of stored tokens should never exceed the capacity.
    """, "func_pm_remove_cap")


# ----------------------------------------------------------------------------- 24 cart
spec("checkout", {
    "checkout/__init__.py": """
        from checkout.cart import Cart

        __all__ = ["Cart"]
    """,
    "checkout/cart.py": """
        \"\"\"A shopping cart with quantity discounts and a percentage coupon, in cents.\"\"\"


        class Cart:
            def __init__(self, prices: dict):
                self.prices = prices
                self.items = {}
                self.coupon_pct = 0

            def add(self, sku: str, qty: int = 1) -> None:
                if sku not in self.prices:
                    raise KeyError(sku)
                if qty <= 0:
                    raise ValueError("quantity must be positive")
                self.items[sku] = self.items.get(sku, 0) + qty

            def remove(self, sku: str, qty: int = 1) -> None:
                left = self.items.get(sku, 0) - qty
                if left > 0:
                    self.items[sku] = left
                else:
                    self.items.pop(sku, None)

            def apply_coupon(self, pct: int) -> None:
                if not 0 < pct <= 50:
                    raise ValueError("coupon must be 1..50 percent")
                self.coupon_pct = pct

            def subtotal(self) -> int:
                total = 0
                for sku, qty in self.items.items():
                    line = self.prices[sku] * qty
                    if qty >= 10:
                        line = line * 90 // 100  # 10% off for 10 or more of one item
                    total += line
                return total

            def total(self) -> int:
                return self.subtotal() * (100 - self.coupon_pct) // 100
    """,
    "tests/test_checkout_discounts.py": """
        from checkout import Cart


        def test_bulk_discount_threshold():
            c = Cart({"pen": 100})
            c.add("pen", 10)
            assert c.subtotal() == 900
            d = Cart({"mug": 35})
            d.add("mug", 10)
            assert d.subtotal() == 315


        def test_coupon_after_bulk():
            c = Cart({"pen": 100, "pad": 250})
            c.add("pen", 10)
            c.add("pad", 2)
            c.apply_coupon(10)
            assert c.total() == 1260
    """,
    "tests/test_checkout_items.py": """
        import pytest

        from checkout import Cart


        def test_add_remove():
            c = Cart({"a": 5})
            c.add("a", 3)
            c.remove("a", 2)
            assert c.items == {"a": 1}
            c.remove("a", 5)
            assert c.items == {}


        def test_unknown_sku():
            with pytest.raises(KeyError):
                Cart({}).add("nope")


        def test_coupon_range():
            with pytest.raises(ValueError):
                Cart({}).apply_coupon(80)
    """,
}, "checkout/cart.py",
    "if qty >= 10:",
    "if qty > 10:",
    """
    Bulk discount not applied at exactly 10 items

    The docs promise 10% off when buying 10 or more of one item, but a cart with exactly
    10 pens at 100 cents has a subtotal of 1000 instead of 900. 11 pens are discounted.
    """, "func_pm_op_boundary")
