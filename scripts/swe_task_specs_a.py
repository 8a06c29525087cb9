"""Bundled bug-fix tasks, part A: small pure-Python repositories, each with one injected bug.

Each spec: name, files (path -> clean content), bug (file, clean snippet, buggy snippet),
problem statement (written as a user's issue: the symptom, never the fix). The generator
(scripts/make_swe_tasks.py) derives the SWE-smith fields from these by running the tests.
"""

from textwrap import dedent as d

SPECS = []


def spec(name, files, file, old, new, statement, bug_id):
    SPECS.append({"name": name, "files": {k: d(v).lstrip("\n") for k, v in files.items()},
                  "bug": {"file": file, "old": d(old).strip("\n"), "new": d(new).strip("\n"), "id": bug_id},
                  "problem_statement": d(statement).strip() + "\n"})


# ----------------------------------------------------------------------------- 1 roman
spec("romanum", {
    "romanum/__init__.py": """
        from romanum.core import from_roman, to_roman

        __all__ = ["from_roman", "to_roman"]
    """,
    "romanum/core.py": """
        \"\"\"Roman numeral conversion for 1..3999.\"\"\"

        _VALUES = [
            (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
            (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
            (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
        ]
        _DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


        def to_roman(n: int) -> str:
            if not 0 < n < 4000:
                raise ValueError(f"{n} is out of range (1..3999)")
            out = []
            for value, symbol in _VALUES:
                while n >= value:
                    out.append(symbol)
                    n -= value
            return "".join(out)


        def from_roman(text: str) -> int:
            text = text.strip().upper()
            if not text or any(c not in _DIGITS for c in text):
                raise ValueError(f"not a roman numeral: {text!r}")
            total = 0
            for i, c in enumerate(text):
                value = _DIGITS[c]
                if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:
                    total -= value
                else:
                    total += value
            if to_roman(total) != text:
                raise ValueError(f"non-canonical numeral: {text!r}")
            return total
    """,
    "tests/test_romanum_parse.py": """
        import pytest

        from romanum import from_roman


        def test_simple():
            assert from_roman("III") == 3
            assert from_roman("VIII") == 8
            assert from_roman("XXVII") == 27


        def test_subtractive():
            assert from_roman("IV") == 4
            assert from_roman("XC") == 90
            assert from_roman("MCMXCIV") == 1994


        def test_lowercase_and_spaces():
            assert from_roman(" xiv ") == 14


        def test_rejects_garbage():
            with pytest.raises(ValueError):
                from_roman("ABC")
            with pytest.raises(ValueError):
                from_roman("IIII")
    """,
    "tests/test_romanum_format.py": """
        import pytest

        from romanum import to_roman


        def test_format():
            assert to_roman(1) == "I"
            assert to_roman(2024) == "MMXXIV"


        def test_range():
            with pytest.raises(ValueError):
                to_roman(0)
            with pytest.raises(ValueError):
                to_roman(4000)
    """,
}, "romanum/core.py",
    "if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:",
    "if i + 1 < len(text) and _DIGITS[text[i + 1]] < value:",
    """
    from_roman() rejects valid numerals

    `from_roman("IV")` raises `ValueError: non-canonical numeral: 'IV'` and even
    `from_roman("VIII")` fails, although `to_roman(4)` returns "IV" and `to_roman(8)` returns "VIII".
    Parsing should be the inverse of formatting for every number in 1..3999.
    """, "func_pm_op_swap")


# ----------------------------------------------------------------------------- 2 semver
spec("semverlite", {
    "semverlite/__init__.py": """
        from semverlite.version import Version, parse

        __all__ = ["Version", "parse"]
    """,
    "semverlite/version.py": """
        \"\"\"Semantic versions: parse, compare, bump.\"\"\"

        from __future__ import annotations

        import re
        from dataclasses import dataclass

        _RE = re.compile(r"^(\\d+)\\.(\\d+)\\.(\\d+)(?:-([0-9A-Za-z.-]+))?$")


        @dataclass(frozen=True)
        class Version:
            major: int
            minor: int
            patch: int
            pre: tuple = ()

            def _key(self):
                # A pre-release sorts before the release it precedes.
                pre_key = [(0, int(p)) if p.isdigit() else (1, p) for p in self.pre]
                return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre_key)

            def __lt__(self, other: "Version") -> bool:
                return self._key() < other._key()

            def __le__(self, other: "Version") -> bool:
                return self._key() <= other._key()

            def bump(self, part: str) -> "Version":
                if part == "major":
                    return Version(self.major + 1, 0, 0)
                if part == "minor":
                    return Version(self.major, self.minor + 1, 0)
                if part == "patch":
                    return Version(self.major, self.minor, self.patch + 1)
                raise ValueError(f"unknown part {part!r}")

            def __str__(self) -> str:
                base = f"{self.major}.{self.minor}.{self.patch}"
                return base + ("-" + ".".join(self.pre) if self.pre else "")


        def parse(text: str) -> Version:
            m = _RE.match(text.strip())
            if not m:
                raise ValueError(f"invalid version: {text!r}")
            pre = tuple(m.group(4).split(".")) if m.group(4) else ()
            return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)
    """,
    "tests/test_semverlite_bump.py": """
        from semverlite import parse


        def test_bump_major():
            assert str(parse("1.4.2").bump("major")) == "2.0.0"


        def test_bump_minor_resets_patch():
            assert str(parse("1.4.2").bump("minor")) == "1.5.0"
            assert str(parse("3.0.7").bump("minor")) == "3.1.0"
            assert str(parse("0.9.9").bump("minor").bump("patch")) == "0.10.1"


        def test_bump_patch():
            assert str(parse("1.4.2").bump("patch")) == "1.4.3"
    """,
    "tests/test_semverlite_order.py": """
        import pytest

        from semverlite import parse


        def test_parse_roundtrip():
            assert str(parse("10.20.30-rc.1")) == "10.20.30-rc.1"


        def test_order():
            assert parse("1.0.0-alpha") < parse("1.0.0")
            assert parse("1.0.0-alpha.2") < parse("1.0.0-alpha.10")
            assert parse("1.2.3") < parse("1.10.0")


        def test_invalid():
            with pytest.raises(ValueError):
                parse("1.2")
    """,
}, "semverlite/version.py",
    "return Version(self.major, self.minor + 1, 0)",
    "return Version(self.major, self.minor + 1, self.patch)",
    """
    bump("minor") keeps the old patch number

    `parse("1.4.2").bump("minor")` gives `1.5.2`. Per semantic versioning a minor bump
    must reset the patch component, so this should be `1.5.0`.
    """, "func_pm_remove_reset")


# ----------------------------------------------------------------------------- 3 lru
spec("lrukit", {
    "lrukit/__init__.py": """
        from lrukit.cache import LRUCache

        __all__ = ["LRUCache"]
    """,
    "lrukit/cache.py": """
        \"\"\"A small least-recently-used cache.\"\"\"

        from collections import OrderedDict


        class LRUCache:
            def __init__(self, capacity: int):
                if capacity < 1:
                    raise ValueError("capacity must be positive")
                self.capacity = capacity
                self._data = OrderedDict()
                self.hits = 0
                self.misses = 0

            def get(self, key, default=None):
                if key in self._data:
                    self._data.move_to_end(key)
                    self.hits += 1
                    return self._data[key]
                self.misses += 1
                return default

            def put(self, key, value) -> None:
                if key in self._data:
                    self._data.move_to_end(key)
                self._data[key] = value
                if len(self._data) > self.capacity:
                    self._data.popitem(last=False)

            def __len__(self) -> int:
                return len(self._data)

            def __contains__(self, key) -> bool:
                return key in self._data
    """,
    "tests/test_lrukit_evict.py": """
        from lrukit import LRUCache


        def test_evicts_least_recent():
            c = LRUCache(2)
            c.put("a", 1)
            c.put("b", 2)
            c.get("a")
            c.put("c", 3)
            assert "a" in c and "c" in c and "b" not in c
            assert [c.get(k) for k in ("a", "b", "c")] == [1, None, 3]


        def test_update_refreshes():
            c = LRUCache(2)
            c.put("a", 1)
            c.put("b", 2)
            c.put("a", 10)
            c.put("c", 3)
            assert c.get("a") == 10
            assert "b" not in c
    """,
    "tests/test_lrukit_basic.py": """
        import pytest

        from lrukit import LRUCache


        def test_get_put():
            c = LRUCache(3)
            c.put(1, "x")
            assert c.get(1) == "x"
            assert c.get(2, "d") == "d"
            assert (c.hits, c.misses) == (1, 1)


        def test_capacity_validation():
            with pytest.raises(ValueError):
                LRUCache(0)
    """,
}, "lrukit/cache.py",
    """
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
    """,
    """
            if key in self._data:
                self.hits += 1
                return self._data[key]
    """,
    """
    LRUCache evicts an entry that was just read

    ```python
    c = LRUCache(2); c.put("a", 1); c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    "a" in c   # False, expected True: "b" is the least recently used entry
    ```
    Reading an entry should count as using it.
    """, "func_pm_remove_call")


# ----------------------------------------------------------------------------- 4 intervals
spec("spans", {
    "spans/__init__.py": """
        from spans.merge import merge, total_length, overlaps

        __all__ = ["merge", "total_length", "overlaps"]
    """,
    "spans/merge.py": """
        \"\"\"Closed integer intervals [start, end].\"\"\"


        def overlaps(a, b) -> bool:
            return a[0] <= b[1] and b[0] <= a[1]


        def merge(intervals):
            \"\"\"Merge overlapping or touching intervals; returns a sorted list.\"\"\"
            out = []
            for start, end in sorted(intervals):
                if start > end:
                    raise ValueError(f"bad interval {(start, end)}")
                if out and start <= out[-1][1] + 1:
                    out[-1] = (out[-1][0], max(out[-1][1], end))
                else:
                    out.append((start, end))
            return out


        def total_length(intervals) -> int:
            return sum(end - start + 1 for start, end in merge(intervals))
    """,
    "tests/test_spans_merge.py": """
        from spans import merge, total_length


        def test_merge_overlapping():
            assert merge([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]


        def test_merge_nested():
            assert merge([(1, 10), (2, 3)]) == [(1, 10)]
            assert merge([(4, 40), (6, 9), (12, 15)]) == [(4, 40)]


        def test_merge_touching():
            assert merge([(1, 2), (3, 4)]) == [(1, 4)]


        def test_total_length():
            assert total_length([(1, 10), (2, 3), (20, 20)]) == 11
    """,
    "tests/test_spans_overlap.py": """
        import pytest

        from spans import merge, overlaps


        def test_overlaps():
            assert overlaps((1, 5), (5, 9))
            assert not overlaps((1, 4), (5, 9))


        def test_bad_interval():
            with pytest.raises(ValueError):
                merge([(3, 1)])
    """,
}, "spans/merge.py",
    "out[-1] = (out[-1][0], max(out[-1][1], end))",
    "out[-1] = (out[-1][0], end)",
    """
    merge() shrinks intervals that contain later ones

    `merge([(1, 10), (2, 3)])` returns `[(1, 3)]` instead of `[(1, 10)]`, and
    `total_length` is wrong for the same input. Nested intervals should not shorten the
    interval that contains them.
    """, "func_pm_remove_max")


# ----------------------------------------------------------------------------- 5 slugify
spec("slugger", {
    "slugger/__init__.py": """
        from slugger.slug import slugify, unique_slug

        __all__ = ["slugify", "unique_slug"]
    """,
    "slugger/slug.py": """
        \"\"\"URL slugs.\"\"\"

        import re
        import unicodedata


        def slugify(text: str, max_length: int = 50) -> str:
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
            text = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
            if len(text) > max_length:
                text = text[:max_length].rstrip("-")
            return text


        def unique_slug(text: str, taken) -> str:
            base = slugify(text) or "item"
            slug, n = base, 2
            while slug in taken:
                slug = f"{base}-{n}"
                n += 1
            return slug
    """,
    "tests/test_slugger_slugify.py": """
        from slugger import slugify


        def test_basic():
            assert slugify("Hello, World!") == "hello-world"


        def test_accents():
            assert slugify("Crème Brûlée") == "creme-brulee"


        def test_max_length_no_trailing_dash():
            assert slugify("abc def ghi", max_length=4) == "abc"
    """,
    "tests/test_slugger_unique.py": """
        from slugger import unique_slug


        def test_unique():
            assert unique_slug("Post", set()) == "post"
            assert unique_slug("Post", {"post", "post-2"}) == "post-3"


        def test_empty_falls_back():
            assert unique_slug("!!!", set()) == "item"
    """,
}, "slugger/slug.py",
    'text = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()',
    'text = re.sub(r"[^a-zA-Z0-9]+", "-", text).lower()',
    """
    slugify leaves dashes at the ends

    `slugify("Hello, World!")` returns `"hello-world-"` (note the trailing dash), and
    titles that start with punctuation get a leading dash. Slugs should never start or
    end with "-".
    """, "func_pm_remove_strip")


# ----------------------------------------------------------------------------- 6 rle
spec("rlecodec", {
    "rlecodec/__init__.py": """
        from rlecodec.codec import decode, encode

        __all__ = ["encode", "decode"]
    """,
    "rlecodec/codec.py": """
        \"\"\"Run-length encoding: "aaab" <-> "3a1b".\"\"\"


        def encode(text: str) -> str:
            if any(c.isdigit() for c in text):
                raise ValueError("digits cannot be run-length encoded")
            out = []
            i = 0
            while i < len(text):
                j = i
                while j < len(text) and text[j] == text[i]:
                    j += 1
                out.append(f"{j - i}{text[i]}")
                i = j
            return "".join(out)


        def decode(code: str) -> str:
            out, count = [], ""
            for c in code:
                if c.isdigit():
                    count += c
                else:
                    if not count:
                        raise ValueError(f"missing count before {c!r}")
                    out.append(c * int(count))
                    count = ""
            if count:
                raise ValueError("dangling count")
            return "".join(out)
    """,
    "tests/test_rlecodec_decode.py": """
        import pytest

        from rlecodec import decode


        def test_decode():
            assert decode("3a1b") == "aaab"


        def test_decode_multidigit():
            assert decode("12x2y") == "x" * 12 + "yy"


        def test_decode_errors():
            with pytest.raises(ValueError):
                decode("a")
            with pytest.raises(ValueError):
                decode("3a2")
    """,
    "tests/test_rlecodec_encode.py": """
        from rlecodec import encode


        def test_encode():
            assert encode("aaab") == "3a1b"
            assert encode("") == ""


        def test_encode_long_run():
            assert encode("z" * 15) == "15z"
    """,
}, "rlecodec/codec.py",
    "count += c",
    "count = c",
    """
    decode() mangles runs of ten or more

    `decode(encode("x" * 12))` returns `"xx"` instead of twelve x's. `encode` writes
    `"12x"`, which `decode` should read back.
    """, "func_pm_op_change")
