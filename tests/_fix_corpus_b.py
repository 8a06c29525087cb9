"""Correct alternative fixes, part B: the last sixteen bundled tasks (see tests/_fix_corpus.py)."""

from tests._fix_corpus import edit, fix, latin1, write

# ----------------------------------------------------------------------------- prefixtree
TRIE_BUG = """            if n.terminal and n is not node:
                found.append((-n.count, word))
"""
fix("prefixtree", "algorithm", "collect (count, word) pairs and sort them with a key",
    edit("prefixtree/trie.py", TRIE_BUG, "            if n.terminal:\n                found.append((n.count, word))\n"),
    edit("prefixtree/trie.py", "        return [w for _, w in sorted(found)[:limit]]\n",
         "        found.sort(key=lambda cw: (-cw[0], cw[1]))\n        return [w for _, w in found[:limit]]\n"))
fix("prefixtree", "new_module", "a recursive walk that yields the start node too, in prefixtree/_walk.py",
    write("prefixtree/_walk.py", '"""Depth-first walks of trie nodes."""\n\n\ndef below(node, word):\n'
          '    """(node, word) for the node itself and every node under it."""\n    yield node, word\n'
          "    for ch, child in node.children.items():\n        yield from below(child, word + ch)\n"),
    edit("prefixtree/trie.py", """        found = []
        stack = [(node, prefix)]
        while stack:
            n, word = stack.pop()
""" + TRIE_BUG + """            for ch, child in n.children.items():
                stack.append((child, word + ch))
""", """        from prefixtree._walk import below

        found = [(-n.count, word) for n, word in below(node, prefix) if n.terminal]
"""))

# ----------------------------------------------------------------------------- mdtable
MD_BUG = "    widths = [max(len(h), 3) for h in headers]\n"
fix("mdtable", "algorithm", "the widths over the columns, zipped",
    edit("mdtable/render.py", MD_BUG, "    widths = [max(3, *map(len, column)) for column in zip(headers, *rows)]\n"))
fix("mdtable", "latin1", "widen the columns row by row, in a latin-1 file",
    latin1("mdtable/render.py", edit("mdtable/render.py", MD_BUG, """    widths = [max(len(h), 3) for h in headers]
    for row in rows:  # jede Spalte so breit wie ihre längste Zelle
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
""")))

# ----------------------------------------------------------------------------- tictac
fix("tictac", "new_module", "the winning lines generated in tictac/_lines.py",
    write("tictac/_lines.py", '''"""The winning lines of an n by n board, as cell indexes."""


def winning_lines(n: int = 3):
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    diagonals = [tuple(i * n + i for i in range(n)), tuple(i * n + n - 1 - i for i in range(n))]
    return rows + cols + diagonals
'''),
    edit("tictac/board.py", """LINES = [
    (0, 1, 2), (3, 4, 5), (6, 7, 8),
    (0, 3, 6), (1, 4, 7), (2, 5, 8),
    (0, 4, 8),
]
""", "from tictac._lines import winning_lines\n\nLINES = winning_lines(3)\n"))
fix("tictac", "return_type", "the winner as a StrEnum member (== 'X' holds), the anti-diagonal listed bottom-up",
    edit("tictac/board.py", "    (0, 4, 8),\n]\n", """    (0, 4, 8), (6, 4, 2),
]


class Mark(enum.StrEnum):
    X = "X"
    O = "O"  # noqa: E741
"""),
    edit("tictac/board.py", "            return cells[a]\n", "            return Mark(cells[a])\n"),
    edit("tictac/board.py", "('X', 'O' or '.').\"\"\"\n", "('X', 'O' or '.').\"\"\"\n\nimport enum\n"))

# ----------------------------------------------------------------------------- ciphers
VIG_BUG = """    for ch in text:
        k = shifts[i % len(shifts)]
        if ch.isalpha():
            out.append(_shift(ch, -k if decrypt else k))
        else:
            out.append(ch)
        i += 1
"""
fix("ciphers", "algorithm", "itertools.cycle over the key, advanced on letters only",
    edit("ciphers/classic.py", VIG_BUG, """    keys = itertools.cycle(shifts)
    for ch in text:
        if ch.isalpha():
            k = next(keys)
            out.append(_shift(ch, -k if decrypt else k))
        else:
            out.append(ch)
"""),
    edit("ciphers/classic.py", '"""Classical ciphers that keep case and leave non-letters alone."""\n',
         '"""Classical ciphers that keep case and leave non-letters alone."""\n\nimport itertools\n'))
fix("ciphers", "latin1", "the key index counted from the letters before each position, in a latin-1 file",
    latin1("ciphers/classic.py", edit("ciphers/classic.py", VIG_BUG, """    for pos, ch in enumerate(text):
        # Vigenère: nur Buchstaben verbrauchen einen Schlüsselbuchstaben
        k = shifts[sum(c.isalpha() for c in text[:pos]) % len(shifts)]
        out.append(_shift(ch, -k if decrypt else k) if ch.isalpha() else ch)
""")))

# ----------------------------------------------------------------------------- radix
RADIX_BUG = "        value = value + d * base\n"
fix("radix", "algorithm", "validate the digits, then let int() parse them",
    edit("radix/convert.py", RADIX_BUG, ""),
    edit("radix/convert.py", "    return sign * value\n", "    value = int(text, base)\n    return sign * value\n"))
fix("radix", "new_module", "the positional sum in radix/_positional.py",
    write("radix/_positional.py", '"""The value of digit values read as a number in a base."""\n\n\n'
          "def positional(digits, base: int) -> int:\n"
          "    return sum(d * base ** k for k, d in enumerate(reversed(digits)))\n"),
    edit("radix/convert.py", "    value = 0\n", "    from radix._positional import positional\n\n    values = []\n"),
    edit("radix/convert.py", RADIX_BUG, "        values.append(d)\n"),
    edit("radix/convert.py", "    return sign * value\n", "    return sign * positional(values, base)\n"))

# ----------------------------------------------------------------------------- calendarx
LEAP_BUG = "    return year % 4 == 0 and year % 100 != 0\n"
fix("calendarx", "algorithm", "the standard library's calendar.isleap",
    edit("calendarx/days.py", LEAP_BUG, "    import calendar\n\n    return calendar.isleap(year)\n"))
fix("calendarx", "cache", "leap years memoized in a JSON file written beside the module",
    edit("calendarx/days.py", '"""Gregorian calendar arithmetic on (year, month, day) tuples."""\n',
         '"""Gregorian calendar arithmetic on (year, month, day) tuples."""\n\nimport json\nimport os\n\n'
         '_LEAP_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".leap_years.json")\n'),
    edit("calendarx/days.py", LEAP_BUG, """    try:
        with open(_LEAP_CACHE) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if str(year) not in known:
        known[str(year)] = year % 400 == 0 or (year % 4 == 0 and year % 100 != 0)
        with open(_LEAP_CACHE, "w") as f:
            json.dump(known, f)
    return known[str(year)]
"""))

# ----------------------------------------------------------------------------- throttle
BUCKET_BUG = "        self.tokens = self.tokens + (now - self.stamp) * self.rate\n"
fix("throttle", "algorithm", "add the refill, then clip at the capacity",
    edit("throttle/bucket.py", BUCKET_BUG, """        self.tokens += (now - self.stamp) * self.rate
        if self.tokens > self.capacity:
            self.tokens = self.capacity
"""))
fix("throttle", "latin1", "a full bucket when the refill would overflow it, in a latin-1 file",
    latin1("throttle/bucket.py", edit("throttle/bucket.py", BUCKET_BUG, """        refill = (now - self.stamp) * self.rate
        # nie mehr als die Kapazität: der Überlauf wird verworfen
        full = self.tokens + refill >= self.capacity
        self.tokens = self.capacity if full else self.tokens + refill
""")))

# ----------------------------------------------------------------------------- checkout
CART_BUG = """            if qty > 10:
                line = line * 90 // 100  # 10% off for 10 or more of one item
"""
fix("checkout", "algorithm", "a percentage chosen per line, applied once",
    edit("checkout/cart.py", """            line = self.prices[sku] * qty
""" + CART_BUG, """            pct = 90 if qty > 9 else 100  # 10% off for 10 or more of one item
            line = self.prices[sku] * qty * pct // 100
"""))
fix("checkout", "cache", "the discount tiers read from a JSON file beside the module, written with the defaults",
    write("checkout/tiers.py", '''"""Bulk discount tiers, kept in tiers.json beside this module (created with the defaults)."""

import json
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiers.json")
_DEFAULT = [[10, 10]]  # [minimum quantity, percent off]


def tiers():
    if not os.path.exists(_PATH):
        with open(_PATH, "w") as f:
            json.dump(_DEFAULT, f)
    with open(_PATH) as f:
        return sorted(json.load(f), reverse=True)


def percent_off(qty: int) -> int:
    return next((pct for least, pct in tiers() if qty >= least), 0)
'''),
    edit("checkout/cart.py", CART_BUG, """            from checkout.tiers import percent_off

            line = line * (100 - percent_off(qty)) // 100
"""))

# ----------------------------------------------------------------------------- jpointer
JP_BUG = '    return [p.replace("~0", "~").replace("~1", "/") for p in pointer[1:].split("/")]\n'
fix("jpointer", "algorithm", "one regex pass over the escapes",
    edit("jpointer/pointer.py", JP_BUG, '    unescape = {"~0": "~", "~1": "/"}\n'
         '    return [re.sub("~[01]", lambda m: unescape[m.group()], p) for p in pointer[1:].split("/")]\n'),
    edit("jpointer/pointer.py", '"""RFC 6901 JSON Pointers."""\n', '"""RFC 6901 JSON Pointers."""\n\nimport re\n'))
fix("jpointer", "new_module", "a character-by-character decoder in jpointer/_escape.py",
    write("jpointer/_escape.py", '''"""Reference tokens of RFC 6901: '~0' is '~', '~1' is '/', read left to right once."""


def unescape(token: str) -> str:
    out, i = [], 0
    while i < len(token):
        if token[i] == "~" and token[i + 1:i + 2] in ("0", "1"):
            out.append("~" if token[i + 1] == "0" else "/")
            i += 2
        else:
            out.append(token[i])
            i += 1
    return "".join(out)
'''),
    edit("jpointer/pointer.py", JP_BUG, "    from jpointer._escape import unescape\n\n"
         '    return [unescape(p) for p in pointer[1:].split("/")]\n'))

# ----------------------------------------------------------------------------- wrapper
WRAP_BUG = "        elif len(current) + 1 + len(word) < width:\n"
WRAP_BODY = """    lines, current = [], ""
    for word in text.split():
        while len(word) > width:  # hard-split words longer than a line
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not current:
            current = word
""" + WRAP_BUG + """            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
"""
fix("wrapper", "algorithm", "the room left on the line, compared with the word",
    edit("wrapper/wrap.py", WRAP_BUG, "        elif len(word) <= width - len(current) - 1:  # room after a space\n"))
fix("wrapper", "latin1", "textwrap over the words joined by single spaces, in a latin-1 file",
    latin1("wrapper/wrap.py", edit("wrapper/wrap.py", WRAP_BODY, """    import textwrap

    # Zeilen bis zur vollen Breite füllen; überlange Wörter werden hart getrennt
    return textwrap.wrap(" ".join(text.split()), width)
""")))

# ----------------------------------------------------------------------------- minimat
DET_BUG = """            if pivot != c:
                a[c], a[pivot] = a[pivot], a[c]
            det *= a[c][c]
"""
DET_BODY = """        a = [row[:] for row in self.rows]
        det = 1.0
        for c in range(n):
            pivot = max(range(c, n), key=lambda r: abs(a[r][c]))
            if a[pivot][c] == 0:
                return 0.0
""" + DET_BUG + """            for r in range(c + 1, n):
                f = a[r][c] / a[c][c]
                for k in range(c, n):
                    a[r][k] -= f * a[c][k]
        return det
"""
fix("minimat", "return_type", "exact elimination over Fractions, the determinant a Fraction",
    edit("minimat/matrix.py", "        a = [row[:] for row in self.rows]\n        det = 1.0\n",
         "        from fractions import Fraction\n\n"
         "        a = [[Fraction(x) for x in row] for row in self.rows]\n        det = Fraction(1)\n"),
    edit("minimat/matrix.py", "                return 0.0\n", "                return Fraction(0)\n"),
    edit("minimat/matrix.py", DET_BUG, """            if pivot != c:
                a[c], a[pivot] = a[pivot], a[c]
                det = -det
            det *= a[c][c]
"""))
fix("minimat", "algorithm", "Laplace expansion along the first row",
    edit("minimat/matrix.py", DET_BODY, """        def laplace(m):
            if len(m) == 1:
                return m[0][0]
            return sum((-1) ** j * m[0][j] * laplace([r[:j] + r[j + 1:] for r in m[1:]]) for j in range(len(m)))

        return float(laplace(self.rows))
"""))

# ----------------------------------------------------------------------------- sortedlist
LB_BUG = """        if xs[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
"""
fix("sortedlist", "algorithm", "bisect.bisect_left",
    edit("sortedlist/core.py", """    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
""" + LB_BUG + "    return lo\n", "    import bisect\n\n    return bisect.bisect_left(xs, x)\n"))
fix("sortedlist", "latin1", "the comparison the other way round, in a latin-1 file",
    latin1("sortedlist/core.py", edit("sortedlist/core.py", LB_BUG, """        if x <= xs[mid]:  # x dürfte schon bei mid stehen
            hi = mid
        else:
            lo = mid + 1
""")))

# ----------------------------------------------------------------------------- csvlite
CSV_BUG = """            if ch == '"':
                quoted = False
"""
CSV_BODY = """    fields, field, i = [], [], 0
    quoted = False
    while i < len(line):
        ch = line[i]
        if quoted:
""" + CSV_BUG + """            else:
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
"""
fix("csvlite", "algorithm", "a quote right after a closing quote reopens the field with a literal quote",
    edit("csvlite/reader.py", CSV_BUG, """            if ch == '"':
                quoted = False
                closed_at = i
"""),
    edit("csvlite/reader.py", """        elif ch == '"':
            quoted = True
""", """        elif ch == '"':
            if closed_at == i - 1:
                field.append('"')
            quoted = True
"""),
    edit("csvlite/reader.py", "    quoted = False\n    while", "    quoted, closed_at = False, -2\n    while"))
fix("csvlite", "new_module", "the standard library's csv reader, strict, in csvlite/_stdlib.py",
    write("csvlite/_stdlib.py", '''"""One CSV line through the standard library's reader."""

import csv


def split_line(line: str, delimiter: str):
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True))
    except csv.Error as e:
        raise ValueError(str(e)) from None
'''),
    edit("csvlite/reader.py", CSV_BODY, "    from csvlite._stdlib import split_line\n\n    return split_line(line, delimiter)\n"))

# ----------------------------------------------------------------------------- heapq2
SIFT_BUG = """            for child in (2 * i + 1,):
                if child < n and h[child] < h[smallest]:
                    smallest = child
"""
fix("heapq2", "algorithm", "the standard library's heapq for push and pop",
    edit("heapq2/pq.py", "import itertools\n", "import heapq\nimport itertools\n"),
    edit("heapq2/pq.py", """        self._heap.append((priority, next(self._counter), item))
        self._sift_up(len(self._heap) - 1)
""", "        heapq.heappush(self._heap, (priority, next(self._counter), item))\n"),
    edit("heapq2/pq.py", """        top = self._heap[0]
        last = self._heap.pop()
        if self._heap:
            self._heap[0] = last
            self._sift_down(0)
        return top[2]
""", "        return heapq.heappop(self._heap)[2]\n"))
fix("heapq2", "latin1", "the smaller of the children chosen with min(), in a latin-1 file",
    latin1("heapq2/pq.py", edit("heapq2/pq.py", SIFT_BUG, """            children = [c for c in (2 * i + 1, 2 * i + 2) if c < n]  # beide Kinder prüfen
            if children:
                best = min(children, key=h.__getitem__)
                if h[best] < h[smallest]:  # das kleinere gewinnt (Größe n)
                    smallest = best
""")))

# ----------------------------------------------------------------------------- unitconv
F_BUG = "    return (value - 273.15) * 5 / 9 + 32\n"
fix("unitconv", "algorithm", "Fahrenheit from Kelvin as an affine map (x 1.8 - 459.67)",
    edit("unitconv/convert.py", F_BUG, "    return value * 1.8 - 459.67\n"))
fix("unitconv", "new_module", "temperatures through Celsius, in unitconv/_temperature.py",
    write("unitconv/_temperature.py", '''"""Temperature scales, each converted to and from Celsius."""

TO_C = {"C": lambda v: v, "K": lambda v: v - 273.15, "F": lambda v: (v - 32) * 5 / 9}
FROM_C = {"C": lambda c: c, "K": lambda c: c + 273.15, "F": lambda c: c * 9 / 5 + 32}


def convert(value, src, dst):
    return FROM_C[dst](TO_C[src](value))
'''),
    edit("unitconv/convert.py", "        return round(_from_kelvin(_to_kelvin(value, src), dst), 10)\n",
         "        from unitconv._temperature import convert as temperature\n\n"
         "        return round(temperature(value, src, dst), 10)\n"))

# ----------------------------------------------------------------------------- globmatch
GLOB_BUG = """        if star_p >= 0 and p == star_p + 1:
            star_n += 1
            n, p = star_n, star_p + 1
            continue
"""
fix("globmatch", "algorithm", "the standard library's fnmatch.fnmatchcase",
    edit("globmatch/match.py", '    """Backtracking matcher over the whole name."""\n',
         '    """Backtracking matcher over the whole name."""\n    import fnmatch\n\n'
         "    return fnmatch.fnmatchcase(name, pattern)\n"))
fix("globmatch", "latin1", "retry one position further after any mismatch past a star, in a latin-1 file",
    latin1("globmatch/match.py", edit("globmatch/match.py", GLOB_BUG, """        if star_p >= 0:  # Rückverfolgung: der Stern schluckt ein Zeichen mehr
            star_n, p = star_n + 1, star_p + 1
            n = star_n
            continue
""")))
