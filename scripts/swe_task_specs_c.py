"""Bundled bug-fix tasks, part C (see swe_task_specs_a for the layout)."""

from swe_task_specs_a import spec

# ----------------------------------------------------------------------------- 13 calculator
spec("calcparse", {
    "calcparse/__init__.py": """
        from calcparse.evaluate import evaluate, tokenize

        __all__ = ["evaluate", "tokenize"]
    """,
    "calcparse/evaluate.py": """
        \"\"\"A recursive-descent calculator: + - * / ** parentheses and unary minus.\"\"\"

        import re

        _TOKEN = re.compile(r"\\s*(\\d+\\.\\d*|\\d+|\\*\\*|[-+*/()])")


        def tokenize(text: str):
            pos, out = 0, []
            text = text.rstrip()
            while pos < len(text):
                m = _TOKEN.match(text, pos)
                if not m:
                    raise SyntaxError(f"unexpected character at {pos}: {text[pos]!r}")
                out.append(m.group(1))
                pos = m.end()
            return out


        class _Parser:
            def __init__(self, tokens):
                self.tokens, self.i = tokens, 0

            def peek(self):
                return self.tokens[self.i] if self.i < len(self.tokens) else None

            def take(self):
                tok = self.peek()
                self.i += 1
                return tok

            def expr(self):
                value = self.term()
                while self.peek() in ("+", "-"):
                    if self.take() == "+":
                        value += self.term()
                    else:
                        value -= self.term()
                return value

            def term(self):
                value = self.power()
                while self.peek() in ("*", "/"):
                    if self.take() == "*":
                        value *= self.power()
                    else:
                        value /= self.power()
                return value

            def power(self):
                base = self.unary()
                if self.peek() == "**":
                    self.take()
                    return base ** self.power()  # right-associative
                return base

            def unary(self):
                if self.peek() == "-":
                    self.take()
                    return -self.unary()
                return self.atom()

            def atom(self):
                tok = self.take()
                if tok == "(":
                    value = self.expr()
                    if self.take() != ")":
                        raise SyntaxError("missing ')'")
                    return value
                if tok is None or not tok[0].isdigit():
                    raise SyntaxError(f"unexpected token {tok!r}")
                return float(tok) if "." in tok else int(tok)


        def evaluate(text: str):
            parser = _Parser(tokenize(text))
            value = parser.expr()
            if parser.peek() is not None:
                raise SyntaxError(f"trailing input: {parser.peek()!r}")
            return value
    """,
    "tests/test_calcparse_precedence.py": """
        from calcparse import evaluate


        def test_mul_before_add():
            assert evaluate("2 + 3 * 4") == 14


        def test_left_assoc_sub_div():
            assert evaluate("10 - 4 - 3") == 3
            assert evaluate("64 / 4 / 2") == 8
            assert evaluate("20 - 6 + 5 - 2") == 17


        def test_power_right_assoc():
            assert evaluate("2 ** 3 ** 2") == 512
    """,
    "tests/test_calcparse_basics.py": """
        import pytest

        from calcparse import evaluate, tokenize


        def test_tokens():
            assert tokenize("1+2.5*(3)") == ["1", "+", "2.5", "*", "(", "3", ")"]


        def test_parens_unary():
            assert evaluate("-(1 + 2) * 3") == -9


        def test_errors():
            with pytest.raises(SyntaxError):
                evaluate("1 +")
            with pytest.raises(SyntaxError):
                evaluate("(1")
    """,
}, "calcparse/evaluate.py",
    """
            def expr(self):
                value = self.term()
                while self.peek() in ("+", "-"):
                    if self.take() == "+":
                        value += self.term()
                    else:
                        value -= self.term()
                return value
    """,
    """
            def expr(self):
                value = self.term()
                if self.peek() in ("+", "-"):
                    if self.take() == "+":
                        value += self.expr()
                    else:
                        value -= self.expr()
                return value
    """,
    """
    Subtraction chains evaluate right to left

    `evaluate("10 - 4 - 3")` returns 9, but 10 - 4 - 3 is 3. Subtraction must be
    left-associative like in Python; multiplication and division chains are fine.
    """, "func_pm_assoc")


# ----------------------------------------------------------------------------- 14 ini
spec("iniread", {
    "iniread/__init__.py": """
        from iniread.parser import ParseError, parse

        __all__ = ["parse", "ParseError"]
    """,
    "iniread/parser.py": """
        \"\"\"A small INI reader: sections, key = value, comments, and typed getters.\"\"\"


        class ParseError(ValueError):
            pass


        class Config(dict):
            def get_int(self, section, key, default=None):
                value = self.get(section, {}).get(key)
                return default if value is None else int(value)

            def get_bool(self, section, key, default=False):
                value = self.get(section, {}).get(key)
                if value is None:
                    return default
                return value.lower() in ("1", "yes", "true", "on")


        def parse(text: str) -> Config:
            config = Config()
            section = None
            for lineno, raw in enumerate(text.splitlines(), 1):
                line = raw.strip()
                if not line or line.startswith(("#", ";")):
                    continue
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                    config.setdefault(section, {})
                    continue
                if "=" not in line:
                    raise ParseError(f"line {lineno}: expected key = value")
                if section is None:
                    raise ParseError(f"line {lineno}: key outside any section")
                key, value = line.split("=", 1)
                config[section][key.strip().lower()] = value.strip()
            return config
    """,
    "tests/test_iniread_values.py": """
        from urllib.parse import parse_qs, urlsplit

        from iniread import parse


        def test_value_with_equals():
            c = parse("[db]\\nurl = postgres://h/db?opt=1\\n")
            assert c["db"]["url"] == "postgres://h/db?opt=1"
            # the whole query reaches its reader (a value cut at its first "=" keeps none of it)
            url = parse("[db]\\nurl = postgres://h/db?opt=1&ssl=on\\n")["db"]["url"]
            assert parse_qs(urlsplit(url).query) == {"opt": ["1"], "ssl": ["on"]}


        def test_keys_case_insensitive():
            c = parse("[a]\\nName = x\\n")
            assert c["a"]["name"] == "x"


        def test_typed():
            c = parse("[s]\\nport = 8080\\ndebug = yes\\n")
            assert c.get_int("s", "port") == 8080
            assert c.get_bool("s", "debug") is True
            assert c.get_int("s", "missing", 7) == 7
    """,
    "tests/test_iniread_structure.py": """
        import pytest

        from iniread import ParseError, parse


        def test_sections_and_comments():
            c = parse("# top\\n[one]\\na = 1\\n; note\\n[two]\\nb = 2\\n")
            assert c == {"one": {"a": "1"}, "two": {"b": "2"}}


        def test_errors():
            with pytest.raises(ParseError):
                parse("a = 1\\n")
            with pytest.raises(ParseError):
                parse("[s]\\njunk\\n")
    """,
}, "iniread/parser.py",
    'key, value = line.split("=", 1)',
    'key, value = line.split("=")[:2]',
    """
    Values containing '=' are cut off

    With `url = postgres://h/db?opt=1` in a section, `parse(...)["db"]["url"]` is
    `"postgres://h/db?opt"`. Everything after the first "=" should be the value.
    """, "func_pm_split_limit")


# ----------------------------------------------------------------------------- 15 query strings
spec("qstring", {
    "qstring/__init__.py": """
        from qstring.query import build, parse

        __all__ = ["parse", "build"]
    """,
    "qstring/query.py": """
        \"\"\"URL query strings: percent-decoding, '+' as space, repeated keys.\"\"\"

        _SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


        def _unquote(s: str) -> str:
            s = s.replace("+", " ")
            out, i, buf = [], 0, bytearray()
            while i < len(s):
                if s[i] == "%" and len(s[i + 1:i + 3]) == 2:
                    try:
                        buf.append(int(s[i + 1:i + 3], 16))
                        i += 3
                        continue
                    except ValueError:
                        pass
                if buf:
                    out.append(buf.decode("utf-8", "replace"))
                    buf = bytearray()
                out.append(s[i])
                i += 1
            if buf:
                out.append(buf.decode("utf-8", "replace"))
            return "".join(out)


        def _quote(s: str) -> str:
            return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in s)


        def parse(query: str) -> dict:
            \"\"\"'a=1&b=2&a=3' -> {'a': ['1', '3'], 'b': ['2']}\"\"\"
            result = {}
            for part in query.lstrip("?").split("&"):
                if not part:
                    continue
                key, _, value = part.partition("=")
                result.setdefault(_unquote(key), []).append(_unquote(value))
            return result


        def build(params: dict) -> str:
            parts = []
            for key, values in params.items():
                for v in values if isinstance(values, list) else [values]:
                    parts.append(f"{_quote(str(key))}={_quote(str(v))}")
            return "&".join(parts)
    """,
    "tests/test_qstring_parse.py": """
        from qstring import parse


        def test_repeated_keys():
            assert parse("a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}


        def test_decoding():
            assert parse("q=caf%C3%A9+au+lait") == {"q": ["café au lait"]}


        def test_leading_question_mark_and_empty():
            assert parse("?x=&&y=1") == {"x": [""], "y": ["1"]}
    """,
    "tests/test_qstring_build.py": """
        from qstring import build, parse


        def test_build():
            assert build({"a": "1 2", "b": ["x", "y"]}) == "a=1%202&b=x&b=y"


        def test_roundtrip():
            params = {"name": ["Zoë & co"], "n": ["5"]}
            assert parse(build(params)) == params
    """,
}, "qstring/query.py",
    'result.setdefault(_unquote(key), []).append(_unquote(value))',
    'result[_unquote(key)] = [_unquote(value)]',
    """
    Repeated query keys lose earlier values

    `parse("a=1&b=2&a=3")` returns `{"a": ["3"], "b": ["2"]}`. Every value of a repeated
    key should be kept, in order: `{"a": ["1", "3"], ...}`.
    """, "func_pm_overwrite")


# ----------------------------------------------------------------------------- 16 dijkstra
spec("routes", {
    "routes/__init__.py": """
        from routes.shortest import Graph

        __all__ = ["Graph"]
    """,
    "routes/shortest.py": """
        \"\"\"Weighted directed graphs and shortest paths (Dijkstra).\"\"\"

        import heapq


        class Graph:
            def __init__(self):
                self.edges = {}

            def add_edge(self, a, b, weight: float, both_ways: bool = False) -> None:
                if weight < 0:
                    raise ValueError("negative weights are not supported")
                self.edges.setdefault(a, {})[b] = weight
                self.edges.setdefault(b, {})
                if both_ways:
                    self.edges[b][a] = weight

            def shortest_path(self, start, goal):
                \"\"\"(distance, [start, ..., goal]) or (inf, []) when unreachable.\"\"\"
                dist = {start: 0}
                prev = {}
                heap = [(0, start)]
                done = set()
                while heap:
                    d, node = heapq.heappop(heap)
                    if node in done:
                        continue
                    done.add(node)
                    if node == goal:
                        break
                    for nxt, w in self.edges.get(node, {}).items():
                        nd = d + w
                        if nd < dist.get(nxt, float("inf")):
                            dist[nxt] = nd
                            prev[nxt] = node
                            heapq.heappush(heap, (nd, nxt))
                if goal not in dist:
                    return float("inf"), []
                path = [goal]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return dist[goal], path[::-1]
    """,
    "tests/test_routes_paths.py": """
        from routes import Graph


        def make():
            g = Graph()
            g.add_edge("a", "b", 7)
            g.add_edge("a", "c", 2)
            g.add_edge("c", "b", 3)
            g.add_edge("b", "d", 1)
            return g


        def test_prefers_cheaper_detour():
            assert make().shortest_path("a", "b") == (5, ["a", "c", "b"])
            g = make()
            g.add_edge("a", "e", 9)
            g.add_edge("c", "e", 4)
            assert g.shortest_path("a", "e") == (6, ["a", "c", "e"])


        def test_longer_path():
            assert make().shortest_path("a", "d") == (6, ["a", "c", "b", "d"])
    """,
    "tests/test_routes_graph.py": """
        import math

        import pytest

        from routes import Graph


        def test_unreachable():
            g = Graph()
            g.add_edge("a", "b", 1)
            assert g.shortest_path("b", "a") == (math.inf, [])


        def test_both_ways():
            g = Graph()
            g.add_edge("x", "y", 2, both_ways=True)
            assert g.shortest_path("y", "x") == (2, ["y", "x"])


        def test_negative():
            with pytest.raises(ValueError):
                Graph().add_edge("a", "b", -1)
    """,
}, "routes/shortest.py",
    "if nd < dist.get(nxt, float(\"inf\")):",
    "if nxt not in dist:",
    """
    shortest_path() returns a longer route

    With edges a->b (7), a->c (2), c->b (3), `shortest_path("a", "b")` returns
    `(7, ["a", "b"])` instead of `(5, ["a", "c", "b"])`. A cheaper route found later must
    replace the first one.
    """, "func_pm_no_relax")


# ----------------------------------------------------------------------------- 17 trie
spec("prefixtree", {
    "prefixtree/__init__.py": """
        from prefixtree.trie import Trie

        __all__ = ["Trie"]
    """,
    "prefixtree/trie.py": """
        \"\"\"A prefix tree for autocompletion.\"\"\"


        class _Node:
            __slots__ = ("children", "terminal", "count")

            def __init__(self):
                self.children = {}
                self.terminal = False
                self.count = 0


        class Trie:
            def __init__(self, words=()):
                self.root = _Node()
                self.size = 0
                for w in words:
                    self.insert(w)

            def insert(self, word: str) -> None:
                node = self.root
                for ch in word:
                    node = node.children.setdefault(ch, _Node())
                if not node.terminal:
                    node.terminal = True
                    self.size += 1
                node.count += 1

            def __contains__(self, word: str) -> bool:
                node = self._find(word)
                return node is not None and node.terminal

            def _find(self, prefix: str):
                node = self.root
                for ch in prefix:
                    node = node.children.get(ch)
                    if node is None:
                        return None
                return node

            def complete(self, prefix: str, limit: int = 10):
                \"\"\"Words starting with prefix, most frequent first, then alphabetical.\"\"\"
                node = self._find(prefix)
                if node is None:
                    return []
                found = []
                stack = [(node, prefix)]
                while stack:
                    n, word = stack.pop()
                    if n.terminal:
                        found.append((-n.count, word))
                    for ch, child in n.children.items():
                        stack.append((child, word + ch))
                return [w for _, w in sorted(found)[:limit]]
    """,
    "tests/test_prefixtree_complete.py": """
        from prefixtree import Trie


        def test_complete_includes_prefix_word():
            t = Trie(["car", "cart", "carbon", "dog"])
            assert t.complete("car") == ["car", "carbon", "cart"]


        def test_frequency_first():
            t = Trie(["tea", "ten", "ten", "team"])
            assert t.complete("te") == ["ten", "tea", "team"]


        def test_limit_and_missing():
            t = Trie(["a", "ab", "abc"])
            assert t.complete("a", limit=2) == ["a", "ab"]
            assert t.complete("z") == []
    """,
    "tests/test_prefixtree_insert.py": """
        from prefixtree import Trie


        def test_contains():
            t = Trie(["hello"])
            assert "hello" in t
            assert "hell" not in t


        def test_size_counts_distinct():
            t = Trie(["a", "a", "b"])
            assert t.size == 2
    """,
}, "prefixtree/trie.py",
    """
                    n, word = stack.pop()
                    if n.terminal:
                        found.append((-n.count, word))
    """,
    """
                    n, word = stack.pop()
                    if n.terminal and n is not node:
                        found.append((-n.count, word))
    """,
    """
    complete() never suggests the prefix itself

    `Trie(["car", "cart", "carbon"]).complete("car")` returns `["carbon", "cart"]`;
    "car" is a word in the trie and should be suggested too.
    """, "func_pm_exclude_root")


# ----------------------------------------------------------------------------- 18 markdown table
spec("mdtable", {
    "mdtable/__init__.py": """
        from mdtable.render import render

        __all__ = ["render"]
    """,
    "mdtable/render.py": """
        \"\"\"Render rows as a GitHub-flavoured markdown table with aligned columns.\"\"\"


        def _cell(value) -> str:
            return str(value).replace("|", "\\\\|").replace("\\n", " ")


        def render(headers, rows, align=None) -> str:
            headers = [_cell(h) for h in headers]
            rows = [[_cell(v) for v in row] for row in rows]
            for row in rows:
                if len(row) != len(headers):
                    raise ValueError(f"row has {len(row)} cells, expected {len(headers)}")
            align = align or ["left"] * len(headers)
            widths = [max([len(h), 3] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

            def line(cells):
                padded = []
                for c, w, a in zip(cells, widths, align):
                    padded.append(c.rjust(w) if a == "right" else c.center(w) if a == "center" else c.ljust(w))
                return "| " + " | ".join(padded) + " |"

            rule = []
            for w, a in zip(widths, align):
                if a == "right":
                    rule.append("-" * (w - 1) + ":")
                elif a == "center":
                    rule.append(":" + "-" * (w - 2) + ":")
                else:
                    rule.append("-" * w)
            return "\\n".join([line(headers), "| " + " | ".join(rule) + " |"] + [line(r) for r in rows])
    """,
    "tests/test_mdtable_width.py": """
        from mdtable import render


        def test_widths_follow_longest_cell():
            out = render(["a", "b"], [["long value", 1]])
            assert out.splitlines() == [
                "| a          | b   |",
                "| ---------- | --- |",
                "| long value | 1   |",
            ]


        def test_right_align():
            out = render(["n"], [[5], [123]], align=["right"])
            assert out.splitlines()[1:] == ["| --: |", "|   5 |", "| 123 |"]
    """,
    "tests/test_mdtable_cells.py": """
        import pytest

        from mdtable import render


        def test_escapes_pipes():
            assert "a\\\\|b" in render(["x"], [["a|b"]])


        def test_row_length():
            with pytest.raises(ValueError):
                render(["a", "b"], [[1]])
    """,
}, "mdtable/render.py",
    "widths = [max([len(h), 3] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]",
    "widths = [max(len(h), 3) for h in headers]",
    """
    Columns are not widened for long cells

    `render(["a", "b"], [["long value", 1]])` produces a header row and a rule that are
    shorter than the data row, so the table is misaligned. Each column should be as wide
    as its longest cell (at least 3).
    """, "func_pm_drop_rows")
