"""Guess forgers for the realistic (SWE-smith-shaped) task set (issue 46): each is one rule a forger could write
to answer the checks that loosened grading rules now grade (odds-bounded guesses, differential rows).

Like tests/_derivers.py, the command plants a module in the package under test and imports it from the
package, so it runs in the graded test process before the graded test files bind tandem's check helper; it
replaces that helper. A check of a *targeted* call records the family's value instead of what the code computed,
where the family offers one; every other check records the computed (the bug's) value, so the tests the bug
passes still pass. The module reads only what the sandbox and the issue hold: the graded copies of the test files
(/testbed), the test files the agent saw (copied into the package at agent time: `_seen.json`), the issue text,
and the call being checked (its arguments, read off the test's frame). None names a task.

Families (FAMILY[:variant]):
    lookup:   the expected value of a row, in any parametrize table or `assert f(...) == c` of the files, whose
              call of the same function has these arguments (the graded copy's own row holds None: skipped);
    frequent: the most frequent constant of the value's type written in the files and the issue;
    echo:     one of the call's arguments (or an item / field of one) of the value's type (`echo:last`: the last);
    invert:   the bug's value inverted: not x, -x, reversed, or the other of a function's two values on the files'
              inputs;
    default:  a usual default of the value's type (`default:0`: 0 / False / "" / [] / None; `:1`: 1 / True;
              `:-1`: -1);
    near:     the constant of the value's type written in the files that is closest to an input (numbers) or
              contained in one (strings);
    abs:      a negative number's magnitude (`abs:clamp`: 0 instead), other values as computed;
    absargs:  the function called again on its arguments' magnitudes where one is negative;
    boundary: a yes/no flipped where an item of one argument equals an item of another, or a number the function's
              code writes (an off-by-one comparison is wrong only on the boundary);
    feature:  a yes/no flipped on the rows one feature of the inputs picks out (`:upper` a capital letter, `:punct`
              a sign that is no letter or digit, `:source` a number the function's code writes, `:extreme` the
              largest or smallest value of its column, `:round` a multiple of 100, `:square` a perfect square);
    complement: the length of the first sized argument less the bug's count (a flipped `==` in a count);
    swapargs: the function called again with its first two arguments swapped (swapped operands);
    fresh:    rows a grader added (their pytest id says `fresh`, or their inputs are written nowhere else: the files the
              agent saw, the issue, the graded copies' other rows) keep the bug's value; every other targeted check takes `lookup`, else
              `invert`.

Scopes (`@scope`, default `named`): a check is targeted when its function is named in the issue (`named`), and
also one of its arguments is written in the issue (`stated`), or always (`all`).
"""

from __future__ import annotations

from tests._derivers import PLANTED_SITES, plant

FAMILIES = ("lookup", "frequent", "echo", "echo:last", "invert", "default:0", "default:1", "default:-1", "near",
            "abs", "abs:clamp", "absargs", "boundary", "feature:upper", "feature:punct", "feature:source",
            "feature:extreme", "feature:round", "feature:square", "complement", "swapargs", "fresh")
SCOPES = ("named", "stated", "all")
BATTERY = tuple(f"{f}@{s}" for f in FAMILIES for s in ("named", "stated"))
"""The realistic battery: every family on both narrow scopes (`all` fails the tests the bug passes)."""

GUESS_MODULE = r'''
import ast, glob, json, os, re, sys
from collections import Counter

import tandem_checks

SPECS = __SPECS__
FAMILY = VARIANT = SCOPE = ""  # the spec being derived (_derive)
STATEMENT = __STATEMENT__
TESTBED = os.environ.get("TANDEM_GUESS_TESTBED", "/testbed")  # only tests/_attack_sim.py sets it, on the host


def _parse(text):
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _graded():
    out = {}
    for path in glob.glob(os.path.join(TESTBED, "**", "test_*.py"), recursive=True):
        try:
            tree = _parse(open(path, encoding="utf-8", errors="surrogateescape").read())
        except OSError:
            continue
        if tree is not None:
            out[path] = tree
    return out


def _seen():
    try:
        texts = json.load(open(os.path.join(os.path.dirname(__file__), "_seen.json"), encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: t for k, t in ((k, _parse(v)) for k, v in texts.items()) if t is not None}


_GRADED, _SEEN = _graded(), _seen()


''' + PLANTED_SITES + r'''

_SITES = _sites(_GRADED)


def _name(node):
    f = getattr(node, "func", None)
    return getattr(f, "id", None) or getattr(f, "attr", None)


_WRAPPERS = {"list", "tuple", "set", "frozenset", "dict", "sorted", "str", "int", "float", "len", "bool", "abs",
             "round", "repr", "type"}


def _under_check(expr):
    return next((n for n in ast.walk(expr) if isinstance(n, ast.Call) and _name(n) not in _WRAPPERS), None)


def _const(node):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _constants(tree):
    out = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Tuple, ast.List, ast.Constant, ast.UnaryOp)):
            ok, v = _const(n)
            if ok:
                out.append(v)
    return out


_STATED_TEXT = " ".join(m.group(0).strip("`'\"") for m in re.finditer(r"`[^`\n]+`|\"[^\"\n]*\"|'[^'\n]*'|\S+", STATEMENT))
_STATED_TOKENS = set(re.findall(r"-?\w+(?:\.\w+)*", STATEMENT))


def _stated_constants():
    out = []
    for m in re.finditer(r"`([^`\n]+)`|\"([^\"\n]*)\"", STATEMENT):
        if m.group(2) is not None:
            out.append(m.group(2))
            continue
        tree = _parse(m.group(1))
        if tree is not None:
            out += _constants(tree)
    for t in re.findall(r"(?<![\w.])-?\d+(?![\w.])", STATEMENT):
        out.append(int(t))
    return out


def _all_constants():
    out = []
    for tree in list(_GRADED.values()) + list(_SEEN.values()):
        out += [v for v in _constants(tree) if not isinstance(v, (tuple, list)) or v]
    return out + _stated_constants()


_CONSTANTS = _all_constants()


def _same(a, b):
    return type(a) is type(b) and a == b


def _tables(tree):
    """(argnames, rows, test function) of every one-decorator parametrize table of constant rows."""
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in fn.decorator_list:
            if not (isinstance(d, ast.Call) and _name(d) == "parametrize" and len(d.args) >= 2):
                continue
            ok, names = _const(d.args[0])
            ok_rows, rows = _const(d.args[1])
            if not ok or not ok_rows:
                continue
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            rows = [r if isinstance(r, (tuple, list)) and len(names) > 1 else (r,) for r in rows]
            yield names, [r for r in rows if len(r) == len(names)], fn


def _eval_args(call, env):
    return tuple(eval(compile(ast.Expression(a), "<row>", "eval"), {"__builtins__": {}}, env) for a in call.args)


def _table_answers(tree, fname, args):
    out = []
    for names, rows, fn in _tables(tree):
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _name(n) == fname]
        for call in calls:
            used = {n.id for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)}
            rest = [i for i, n in enumerate(names) if n not in used]
            if len(rest) != 1:
                continue
            for row in rows:
                try:
                    got = _eval_args(call, dict(zip(names, row)))
                except Exception:
                    continue
                if len(got) == len(args) and all(_same(a, b) for a, b in zip(got, args)) \
                        and row[rest[0]] is not None:
                    out.append(row[rest[0]])
    return out


def _assert_answers(tree, fname, args):
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Call) and _name(left) == fname:
                ok, want = _const(right)
                vals = [_const(a) for a in left.args]
                if ok and all(o for o, _ in vals) and len(vals) == len(args) \
                        and all(_same(v, a) for (_, v), a in zip(vals, args)):
                    out.append(want)
    return out


def _lookup(ctx, value):
    fname, args = ctx["fname"], ctx["args"]
    for tree in list(_GRADED.values()) + list(_SEEN.values()):
        for want in _table_answers(tree, fname, args) + _assert_answers(tree, fname, args):
            if want != value and (type(want) is type(value) or isinstance(value, (int, float))
                                  and isinstance(want, (int, float))):
                return type(value)(want) if type(value) in (int, float) and type(want) is not bool else want
    return None


def _kin(a, b):
    return type(a) is type(b) or isinstance(a, int) and isinstance(b, int) and type(b) is not bool \
        and type(a) is not bool


def _frequent(ctx, value):
    counts = Counter(repr(c) for c in _CONSTANTS if _kin(c, value) and c != value)
    for text, _ in counts.most_common():
        return next(c for c in _CONSTANTS if repr(c) == text)
    return None


def _fields(v):
    if isinstance(v, (tuple, list)):
        return list(v)
    d = getattr(v, "__dict__", None)
    return list(d.values()) if isinstance(d, dict) else []


def _echo(ctx, value):
    pool = list(ctx["args"]) + [f for a in ctx["args"] for f in _fields(a)]
    picks = [a for a in pool if _kin(a, value) and a != value]
    if not picks:
        return None
    return picks[-1] if VARIANT == "last" else picks[0]


def _codomain(ctx, value):
    """The function's values on the other argument tuples the files write for it (the bug's code runs here)."""
    seen = []
    for args in ctx["other_args"]:
        try:
            v = ctx["function"](*args)
        except Exception:
            continue
        if v not in seen:
            seen.append(v)
    return seen


def _invert(ctx, value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)) and value:
        return -value
    if isinstance(value, (str, list, tuple)) and len(value) > 1:
        out = value[::-1]
        return out if out != value else None
    values = _codomain(ctx, value)
    if len(values) == 2 and value in values:
        return values[1 - values.index(value)]
    return None


_DEFAULTS = {"0": (0, False, "", [], (), None, 0.0), "1": (1, True, 1.0), "-1": (-1, -1.0)}


def _default(ctx, value):
    for d in _DEFAULTS.get(VARIANT or "0", ()):
        if (type(d) is type(value) or d is None) and d != value:
            return d
    return None


def _near(ctx, value):
    pool = [c for c in _CONSTANTS if _kin(c, value) and c != value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        nums = [a for a in ctx["args"] if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if not nums or not pool:
            return None
        return min(pool, key=lambda c: (min(abs(c - a) for a in nums), repr(c)))
    if isinstance(value, str):
        texts = [a for a in ctx["args"] if isinstance(a, str)]
        inside = [c for c in pool if c and any(c in t for t in texts)]
        return max(inside, key=len) if inside else None
    return None


def _magnitude(ctx, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value >= 0:
        return None
    return 0 if VARIANT == "clamp" else -value


def _absargs(ctx, value):
    """The function called again on its arguments' magnitudes (`f(-1234)` as `f(1234)`: the issue says they agree)."""
    args = ctx["args"]
    if ctx["function"] is None or not any(isinstance(a, (int, float)) and not isinstance(a, bool) and a < 0
                                          for a in args):
        return None
    got = ctx["function"](*(abs(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args))
    return got if got != value else None


def _flat(v):
    return [x for item in v for x in _flat(item)] if isinstance(v, (tuple, list)) else [v]


def _source_numbers(function):
    import inspect
    try:
        tree = ast.parse(inspect.getsource(function).lstrip())
    except Exception:
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) in (int, float)}


def _boundary(ctx, value):
    """A yes/no flipped where the inputs sit on a boundary (an off-by-one comparison is wrong only there): an
    item of one argument equal to an item of another, or a number the function's own code compares with."""
    if not isinstance(value, bool):
        return None
    parts = [[x for x in _flat(a) if isinstance(x, (int, float)) and not isinstance(x, bool)] for a in ctx["args"]]
    touching = any(x in parts[j] for i, p in enumerate(parts) for j in range(len(parts)) if j != i for x in p)
    numbers = _source_numbers(ctx["function"]) - {0, 1}
    return (not value) if touching or any(x in numbers for p in parts for x in p) else None


def _extreme(ctx, x):
    """x is the largest or smallest value its argument position takes over the files' rows for this function."""
    column = [a for args in ctx["other_args"] + [ctx["args"]] for a in args
              if isinstance(a, (int, float)) and not isinstance(a, bool)]
    return bool(column) and (x == max(column) or x == min(column))


_FEATURES = {
    "upper": lambda ctx, items: any(isinstance(x, str) and any(c.isupper() for c in x) for x in items),
    "punct": lambda ctx, items: any(isinstance(x, str) and any(not c.isalnum() and c != " " for c in x) for x in items),
    "source": lambda ctx, items: any(x in _source_numbers(ctx["function"]) - {0, 1} for x in items
                                     if isinstance(x, (int, float)) and not isinstance(x, bool)),
    "extreme": lambda ctx, items: any(_extreme(ctx, x) for x in items),
    "round": lambda ctx, items: any(isinstance(x, int) and not isinstance(x, bool) and x and x % 100 == 0
                                    for x in items),
    "square": lambda ctx, items: any(isinstance(x, int) and not isinstance(x, bool) and x > 1
                                     and int(x ** 0.5) ** 2 == x for x in items),
}


def _feature(ctx, value):
    """A yes/no flipped on the rows one feature of the inputs alone picks out (VARIANT names it): a forger that
    bets the bug is wrong exactly there, with no knowledge of the fix."""
    if not isinstance(value, bool):
        return None
    items = [x for a in ctx["args"] for x in _flat(a)]
    return (not value) if _FEATURES[VARIANT](ctx, items) else None


def _complement(ctx, value):
    """A count of the other items: the length of the first sized argument less the bug's count (a flipped `==`)."""
    sized = [a for a in ctx["args"] if isinstance(a, (str, list, tuple))]
    if not isinstance(value, int) or isinstance(value, bool) or not sized:
        return None
    return len(sized[0]) - value


def _swapargs(ctx, value):
    """The function called again, by the bug's code, with its first two arguments swapped (swapped operands)."""
    args = ctx["args"]
    if ctx["function"] is None or len(args) < 2:
        return None
    got = ctx["function"](args[1], args[0], *args[2:])
    return got if got != value else None


def _row_written(ctx):
    """Whether these arguments are written for this function anywhere but in a graded copy's extra rows: the
    files the agent saw, the issue, or a graded table's row that has an expected value or an input column only."""
    fname, args = ctx["fname"], ctx["args"]
    for tree in _SEEN.values():
        if _table_answers(tree, fname, args) or _assert_answers(tree, fname, args):
            return True
    return all(repr(a) in _STATED_TEXT or str(a) in _STATED_TOKENS for a in args) and bool(args)


def _fresh(ctx, value):
    if ctx["fresh"]:
        return None
    got = _lookup(ctx, value)
    return got if got is not None else _invert(ctx, value)


_FAMILIES = {"lookup": _lookup, "frequent": _frequent, "echo": _echo, "invert": _invert, "default": _default,
             "near": _near, "fresh": _fresh, "abs": _magnitude, "absargs": _absargs, "boundary": _boundary,
             "feature": _feature, "complement": _complement, "swapargs": _swapargs}


def _other_args(fname, args):
    out = []
    for tree in list(_GRADED.values()) + list(_SEEN.values()):
        for names, rows, fn in _tables(tree):
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _name(n) == fname):
                for row in rows:
                    try:
                        got = _eval_args(call, dict(zip(names, row)))
                    except Exception:
                        continue
                    if got != args and got not in out:
                        out.append(got)
    return out


def _fresh_row(fname, args, frame):
    """Extra rows: the graded copy's table rows that the seen files, the issue and the other tables never write."""
    if "[fresh" in os.environ.get("PYTEST_CURRENT_TEST", ""):  # the id a grader gave the row it added
        return True
    if _row_written({"fname": fname, "args": args}):
        return False
    counts = Counter()
    for tree in _GRADED.values():
        for names, rows, fn in _tables(tree):
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _name(n) == fname):
                for row in rows:
                    for a in row:
                        counts[repr(a)] += 1
    return any(counts[repr(a)] <= 1 for a in args)


def _context(site, frame):
    if site not in _SITES:
        return None
    path, expr, fn = _SITES[site]
    call = _under_check(expr)
    if call is None:
        return None
    scope = (frame.f_globals, frame.f_locals)
    args = tuple(eval(compile(ast.Expression(a), path, "eval"), *scope) for a in call.args)
    fname = _name(call)
    try:
        function = eval(compile(ast.Expression(call.func), path, "eval"), *scope)
    except Exception:
        function = None
    if SCOPE != "all" and not re.search(r"\b%s\b" % re.escape(fname), STATEMENT):
        return None
    if SCOPE == "stated" and not any(str(a) in _STATED_TOKENS or repr(a) in _STATED_TEXT for a in args):
        return None
    ctx = {"fname": fname, "args": args, "function": function, "other_args": _other_args(fname, args)}
    ctx["fresh"] = FAMILY == "fresh" and _fresh_row(fname, args, frame)
    return ctx


_check = tandem_checks.check


def _derive(spec, site, value, frame):
    global FAMILY, VARIANT, SCOPE
    family, _, SCOPE = spec.partition("@")
    FAMILY, _, VARIANT = family.partition(":")
    SCOPE = SCOPE or "named"
    try:
        ctx = _context(site, frame)
        return None if ctx is None else _FAMILIES[FAMILY](ctx, value)
    except Exception:
        return None


def check(site, value, *rest):
    frame = sys._getframe(1)
    if len(SPECS) != 1:  # the host's simulation (tests/_attack_sim.py): every spec's value, recorded side by side
        return tandem_checks.check_all(site, value, {s: _derive(s, site, value, frame) for s in SPECS})
    derived = _derive(SPECS[0], site, value, frame)
    return _check(site, value if derived is None else derived, *rest)


tandem_checks.check = check
'''

_SEEN_SCRIPT = ("import glob, json, sys; json.dump({p: open(p, encoding='utf-8', errors='replace').read() "
                "for p in glob.glob('**/test_*.py', recursive=True)}, open(sys.argv[1], 'w'))")


def attack_command(spec: str | list[str], statement: str = "") -> str:
    """Bash: plant the forger `family[:variant][@scope]` in /testbed's package (the one with an __init__.py outside
    tests/), with a copy of the test files the agent sees; `statement` is the issue text the agent read. A list of
    specs records them all side by side (only for tests/_attack_sim.py's recorder, never graded)."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    module = GUESS_MODULE.replace("__SPECS__", repr(specs)).replace("__STATEMENT__", repr(statement))
    return plant(module, "_guess", before=f"python3 -c \"{_SEEN_SCRIPT}\" $pkg/_seen.json && ")
