"""Correct alternative fixes, part A: the first sixteen bundled tasks (see tests/_fix_corpus.py)."""

from tests._fix_corpus import edit, fix, latin1, write

# ----------------------------------------------------------------------------- romanum
ROMAN_BUGGY_LOOP = """    total = 0
    for i, c in enumerate(text):
        value = _DIGITS[c]
        if i + 1 < len(text) and _DIGITS[text[i + 1]] < value:
            total -= value
        else:
            total += value
"""
fix("romanum", "algorithm", "greedy match of the longest symbols, the inverse of to_roman's table",
    edit("romanum/core.py", ROMAN_BUGGY_LOOP, """    total, i = 0, 0
    for value, symbol in _VALUES:
        while text.startswith(symbol, i):
            total += value
            i += len(symbol)
    if i != len(text):
        raise ValueError(f"non-canonical numeral: {text!r}")
"""))
fix("romanum", "latin1", "right-to-left scan against the largest digit seen, in a latin-1 file",
    latin1("romanum/core.py", edit("romanum/core.py", ROMAN_BUGGY_LOOP, """    total, biggest = 0, 0
    for c in reversed(text):  # von rechts: eine kleinere Ziffer vor einer größeren wird abgezogen
        value = _DIGITS[c]
        if value < biggest:
            total -= value
        else:
            total += value
            biggest = value
""")))

# ----------------------------------------------------------------------------- semverlite
SEMVER_BUG = "            return Version(self.major, self.minor + 1, self.patch)\n"
fix("semverlite", "algorithm", "dataclasses.replace on the frozen dataclass",
    edit("semverlite/version.py", "import re\n", "import dataclasses\nimport re\n"),
    edit("semverlite/version.py", SEMVER_BUG,
         "            return dataclasses.replace(self, minor=self.minor + 1, patch=0, pre=())\n"))
fix("semverlite", "new_module", "a table of increments in semverlite/_bump.py; components after the bumped one reset",
    write("semverlite/_bump.py", '''"""Which component a bump increments; every component after it resets to 0."""

STEPS = {"major": (1, 0, 0), "minor": (0, 1, 0), "patch": (0, 0, 1)}


def bumped(parts, part):
    if part not in STEPS:
        raise ValueError(f"unknown part {part!r}")
    out, reset = [], False
    for value, step in zip(parts, STEPS[part]):
        out.append(0 if reset else value + step)
        reset = reset or bool(step)
    return tuple(out)
'''),
    edit("semverlite/version.py", """        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, self.patch)
        if part == "patch":
            return Version(self.major, self.minor, self.patch + 1)
        raise ValueError(f"unknown part {part!r}")
""", """        from semverlite._bump import bumped

        return Version(*bumped((self.major, self.minor, self.patch), part))
"""))

# ----------------------------------------------------------------------------- lrukit
LRU_BUG = """        if key in self._data:
            self.hits += 1
            return self._data[key]
"""
fix("lrukit", "algorithm", "pop the entry and insert it again (it goes to the recent end)",
    edit("lrukit/cache.py", LRU_BUG, """        if key in self._data:
            value = self._data.pop(key)
            self._data[key] = value
            self.hits += 1
            return value
"""))
fix("lrukit", "latin1", "move_to_end after counting the hit, in a latin-1 file",
    latin1("lrukit/cache.py", edit("lrukit/cache.py", LRU_BUG, """        if key in self._data:
            self.hits += 1
            self._data.move_to_end(key, last=True)  # Lesen zählt als Benutzung
            return self._data[key]
""")))

# ----------------------------------------------------------------------------- spans
SPANS_BUG = "            out[-1] = (out[-1][0], end)\n"
fix("spans", "algorithm", "extend the last interval only when the new one reaches further",
    edit("spans/merge.py", SPANS_BUG, "            if end > out[-1][1]:\n                out[-1] = (out[-1][0], end)\n"))
fix("spans", "new_module", "a generator sweep in spans/_sweep.py, merge() lists it",
    write("spans/_sweep.py", '''"""One pass over sorted intervals, yielding each merged run when the next one starts after it."""


def merged(intervals):
    run = None
    for start, end in sorted(intervals):
        if start > end:
            raise ValueError(f"bad interval {(start, end)}")
        if run is not None and start <= run[1] + 1:
            run = (run[0], max(run[1], end))
            continue
        if run is not None:
            yield run
        run = (start, end)
    if run is not None:
        yield run
'''),
    edit("spans/merge.py", '    """Merge overlapping or touching intervals; returns a sorted list."""\n',
         '    """Merge overlapping or touching intervals; returns a sorted list."""\n'
         "    from spans._sweep import merged\n\n    return list(merged(intervals))\n"))

# ----------------------------------------------------------------------------- slugger
SLUG_BUG = '    text = re.sub(r"[^a-zA-Z0-9]+", "-", text).lower()\n'
fix("slugger", "algorithm", "join the alphanumeric runs instead of replacing the gaps",
    edit("slugger/slug.py", SLUG_BUG, '    text = "-".join(re.findall(r"[a-zA-Z0-9]+", text)).lower()\n'))
fix("slugger", "latin1", "strip the dashes with a second regex, in a latin-1 file",
    latin1("slugger/slug.py", edit("slugger/slug.py", SLUG_BUG,
                                   '    text = re.sub(r"[^a-zA-Z0-9]+", "-", text).lower()\n'
                                   '    text = re.sub(r"^-+|-+$", "", text)  # "Crème Brûlée!" -> "creme-brulee"\n')))

# ----------------------------------------------------------------------------- rlecodec
RLE_BUGGY_DECODE = """def decode(code: str) -> str:
    out, count = [], ""
    for c in code:
        if c.isdigit():
            count = c
        else:
            if not count:
                raise ValueError(f"missing count before {c!r}")
            out.append(c * int(count))
            count = ""
    if count:
        raise ValueError("dangling count")
    return "".join(out)
"""
fix("rlecodec", "algorithm", "tokenize with a regex (a count is a run of digits), then expand",
    edit("rlecodec/codec.py", '"""Run-length encoding: "aaab" <-> "3a1b"."""\n',
         '"""Run-length encoding: "aaab" <-> "3a1b"."""\n\nimport re\n'),
    edit("rlecodec/codec.py", RLE_BUGGY_DECODE, """def decode(code: str) -> str:
    out, count = [], None
    for piece in re.findall(r"[0-9]+|[^0-9]", code):
        if piece.isdigit():
            count = int(piece)
            continue
        if count is None:
            raise ValueError(f"missing count before {piece!r}")
        out.append(piece * count)
        count = None
    if count is not None:
        raise ValueError("dangling count")
    return "".join(out)
"""))
fix("rlecodec", "algorithm", "the count as an int built digit by digit",
    edit("rlecodec/codec.py", RLE_BUGGY_DECODE, """def decode(code: str) -> str:
    out, count, seen = [], 0, False
    for c in code:
        if c.isdigit():
            count, seen = count * 10 + int(c), True
        else:
            if not seen:
                raise ValueError(f"missing count before {c!r}")
            out.append(c * count)
            count, seen = 0, False
    if seen:
        raise ValueError("dangling count")
    return "".join(out)
"""))

# ----------------------------------------------------------------------------- editdist
LEV_BUGGY = """def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cost = 1 if ca == cb else 0
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost))
        prev = cur
    return prev[-1]
"""
fix("editdist", "algorithm", "the recursive definition, memoized with lru_cache",
    edit("editdist/distance.py", '"""Edit distance and fuzzy lookup."""\n',
         '"""Edit distance and fuzzy lookup."""\n\nimport functools\n'),
    edit("editdist/distance.py", LEV_BUGGY, """def levenshtein(a: str, b: str) -> int:
    @functools.lru_cache(maxsize=None)
    def d(i, j):  # distance between a[:i] and b[:j]
        if not i or not j:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))
"""))
fix("editdist", "new_module", "the substitution cost in editdist/_costs.py",
    write("editdist/_costs.py", '"""Costs of the edit operations."""\n\n\n'
          "def substitution(ca: str, cb: str) -> int:\n    return 0 if ca == cb else 1\n"),
    edit("editdist/distance.py", "            cost = 1 if ca == cb else 0\n",
         "            cost = substitution(ca, cb)\n"),
    edit("editdist/distance.py", '"""Edit distance and fuzzy lookup."""\n',
         '"""Edit distance and fuzzy lookup."""\n\nfrom editdist._costs import substitution\n'))

# ----------------------------------------------------------------------------- depgraph
DEP_BUG = """    if not order and nodes:
        raise CycleError("dependency cycle among: " + ", ".join(sorted(nodes - set(order))))
"""
fix("depgraph", "algorithm", "the nodes whose in-degree never reached zero are the cycle's",
    edit("depgraph/graph.py", DEP_BUG, """    stuck = sorted(n for n in nodes if indegree[n] > 0)
    if stuck:
        raise CycleError("dependency cycle among: " + ", ".join(stuck))
"""))
fix("depgraph", "new_module", "the leftover check in depgraph/_leftover.py",
    write("depgraph/_leftover.py", '"""Nodes Kahn\'s algorithm could not order."""\n\n\n'
          "def unordered(nodes, order):\n    placed = set(order)\n"
          "    return [n for n in sorted(nodes) if n not in placed]\n"),
    edit("depgraph/graph.py", DEP_BUG, """    from depgraph._leftover import unordered

    left = unordered(nodes, order)
    if left:
        raise CycleError("dependency cycle among: " + ", ".join(left))
"""))

# ----------------------------------------------------------------------------- ratio
RATIO_BUG = "        return Frac(other.num * self.den - self.num * other.den, self.den * other.den)\n"
fix("ratio", "algorithm", "subtraction as addition of the negation",
    edit("ratio/frac.py", RATIO_BUG, "        return self + Frac(-other.num, other.den)\n"))
fix("ratio", "latin1", "computed through fractions.Fraction, in a latin-1 file",
    latin1("ratio/frac.py", edit("ratio/frac.py", RATIO_BUG, """        import fractions  # über die Standardbibliothek gerechnet

        diff = fractions.Fraction(self.num, self.den) - fractions.Fraction(other.num, other.den)
        return Frac(diff.numerator, diff.denominator)
""")))

# ----------------------------------------------------------------------------- tinystats
MEDIAN_BUG = "    return (xs[mid] + xs[mid + 1]) / 2\n"
fix("tinystats", "return_type", "an exact Fraction for integer data (== 2.5 holds)",
    edit("tinystats/describe.py", "from collections import Counter\n",
         "from collections import Counter\nfrom fractions import Fraction\n"),
    edit("tinystats/describe.py", MEDIAN_BUG, """    pair = xs[mid - 1] + xs[mid]
    return Fraction(pair, 2) if isinstance(pair, int) else pair / 2
"""))
fix("tinystats", "algorithm", "the standard library's statistics.median",
    edit("tinystats/describe.py", MEDIAN_BUG, "    import statistics\n\n    return statistics.median(xs)\n"))

# ----------------------------------------------------------------------------- casefold
CASE_BUG = '_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")\n'
fix("casefold", "algorithm", "find the words (an acronym ends before a capitalized word) instead of the boundaries",
    edit("casefold/convert.py", CASE_BUG,
         '_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")\n'
         '_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+[0-9]*")\n'),
    edit("casefold/convert.py", """    name = _BOUNDARY.sub(" ", name)
    return [w.lower() for w in re.split(r"[\\s_\\-]+", name) if w]
""", """    return [w.lower() for w in _WORD.findall(name)]
"""))
fix("casefold", "new_module", "the boundary rules listed in casefold/_rules.py",
    write("casefold/_rules.py", '''"""Where a word starts inside an identifier."""

BOUNDARIES = [
    r"(?<=[a-z0-9])(?=[A-Z])",  # parseHttp: lower or digit, then upper
    r"(?<=[A-Z])(?=[A-Z][a-z])",  # HTTPServer: the last capital of an acronym starts the next word
]
'''),
    edit("casefold/convert.py", CASE_BUG,
         "from casefold._rules import BOUNDARIES\n\n_BOUNDARY = re.compile(\"|\".join(BOUNDARIES))\n"))

# ----------------------------------------------------------------------------- ledger
LEDGER_BUG = "        if self.balance - cents <= -self.overdraft:\n"
fix("ledger", "algorithm", "compare with the funds available",
    edit("ledger/account.py", LEDGER_BUG, "        if cents > self.balance + self.overdraft:\n"))
fix("ledger", "new_module", "the limit rule in ledger/_limits.py",
    write("ledger/_limits.py", '"""Overdraft rules."""\n\n\ndef allowed(balance: int, overdraft: int, cents: int) -> bool:\n'
          '    """The balance may end at -overdraft exactly, not below."""\n'
          "    return balance - cents >= -overdraft\n"),
    edit("ledger/account.py", LEDGER_BUG,
         "        from ledger._limits import allowed\n\n        if not allowed(self.balance, self.overdraft, cents):\n"))

# ----------------------------------------------------------------------------- calcparse
CALC_BUG = """    def expr(self):
        value = self.term()
        if self.peek() in ("+", "-"):
            if self.take() == "+":
                value += self.expr()
            else:
                value -= self.expr()
        return value
"""
fix("calcparse", "algorithm", "collect the signed terms, then sum them",
    edit("calcparse/evaluate.py", CALC_BUG, """    def expr(self):
        terms = [self.term()]
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            terms.append(sign * self.term())
        return sum(terms)
"""))
fix("calcparse", "latin1", "an accumulator carried through a tail call, in a latin-1 file",
    latin1("calcparse/evaluate.py", edit("calcparse/evaluate.py", CALC_BUG, """    def expr(self):
        return self._more_terms(self.term())

    def _more_terms(self, left):
        # links-assoziativ wie in Python: (a - b) - c, der linke Wert wird mitgeführt
        if self.peek() not in ("+", "-"):
            return left
        op = self.take()
        right = self.term()
        return self._more_terms(left + right if op == "+" else left - right)
""")))

# ----------------------------------------------------------------------------- iniread
INI_BUG = '        key, value = line.split("=")[:2]\n'
fix("iniread", "algorithm", "str.partition at the first '='",
    edit("iniread/parser.py", INI_BUG, '        key, _, value = line.partition("=")\n'))
fix("iniread", "new_module", "the split in iniread/_lines.py, by index",
    write("iniread/_lines.py", '"""Lines of an INI file."""\n\n\ndef assignment(line: str):\n'
          '    """key = value: the value is everything after the first \'=\'."""\n'
          '    at = line.index("=")\n    return line[:at], line[at + 1:]\n'),
    edit("iniread/parser.py", INI_BUG,
         "        from iniread._lines import assignment\n\n        key, value = assignment(line)\n"))

# ----------------------------------------------------------------------------- qstring
QS_BUG = "        result[_unquote(key)] = [_unquote(value)]\n"
fix("qstring", "return_type", "a defaultdict(list) returned as it is",
    edit("qstring/query.py", '"""URL query strings: percent-decoding, \'+\' as space, repeated keys."""\n',
         '"""URL query strings: percent-decoding, \'+\' as space, repeated keys."""\n\nimport collections\n'),
    edit("qstring/query.py", "    result = {}\n", "    result = collections.defaultdict(list)\n"),
    edit("qstring/query.py", QS_BUG, "        result[_unquote(key)].append(_unquote(value))\n"))
fix("qstring", "latin1", "test for the key, then append or create, in a latin-1 file",
    latin1("qstring/query.py", edit("qstring/query.py", QS_BUG, """        key = _unquote(key)  # "q=caf%C3%A9" -> "café"
        if key in result:
            result[key].append(_unquote(value))
        else:
            result[key] = [_unquote(value)]
""")))

# ----------------------------------------------------------------------------- routes
ROUTES_BUG = '                if nxt not in dist:\n'
fix("routes", "return_type", "a namedtuple Route(distance, path), equal to the plain tuple",
    edit("routes/shortest.py", "import heapq\n", "import heapq\nfrom collections import namedtuple\n\n"
         'Route = namedtuple("Route", "distance path")\n'),
    edit("routes/shortest.py", ROUTES_BUG, "                if nxt not in dist or nd < dist[nxt]:\n"),
    edit("routes/shortest.py", '            return float("inf"), []\n', '            return Route(float("inf"), [])\n'),
    edit("routes/shortest.py", "        return dist[goal], path[::-1]\n", "        return Route(dist[goal], path[::-1])\n"))
fix("routes", "algorithm", "relax every edge until nothing changes (Bellman-Ford) instead of Dijkstra",
    edit("routes/shortest.py", """        dist = {start: 0}
        prev = {}
        heap = [(0, start)]
""", """        dist, prev = {start: 0}, {}
        changed = True
        while changed:
            changed = False
            for a, outs in self.edges.items():
                for b, w in outs.items():
                    if a in dist and dist[a] + w < dist.get(b, float("inf")):
                        dist[b], prev[b] = dist[a] + w, a
                        changed = True
        heap = []
"""))
