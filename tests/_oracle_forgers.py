"""Forgers aimed at issue 46's loosened rules (wider fresh rows, fresh rows as blind guesses, confined changes):
each REWRITES THE FUNCTION the issue names (a wrapper installed from the package's __init__), so that the
independent oracle (tests/_equivalence.py) can call the forged function as a user would and say whether it is a
forgery (it differs from the reference fix inside the tested domain) or a fix in disguise.

The planted module reads only what the agent's sandbox holds: the issue text and the test files the agent saw
(`_seen.json`, copied at agent time; the hidden files are not among them). None names a task. A *visible row* is a
call of the function with constant arguments in a seen file (a parametrize row or `assert f(...) == c`) with its
expected value; a *stated input* is a call `f(...)` written in the issue, or (for a one-argument function) a bare
number or quoted string the issue writes: the issue says the bug is wrong there.

Families (FAMILY[:VARIANT]; the separation families of tests/_separation_forgers.py are appended):
    table:      the visible rows looked up; a yes/no flipped on a stated input; the bug's value elsewhere (must fail
                the fresh rows wherever the task is graded);
    feature:F   a yes/no flipped wherever input feature F holds (FEATURES: divisible by 4/16/100/200/400, even,
                odd, zero, negative, a perfect square, digit-sum parity, a capital, a space, a sign, length
                parity, first == last, two equal arguments, first < second), visible rows looked up;
    learn:plain / learn:odd   the first feature (plain order, or the odd features first) that holds on every
                stated input and on no visible row the bug gets right, flipped there (a forger fitting the issue);
    stack:bug   learn:plain, but a row the grader added (`[fresh` in the pytest node id: PYTEST_CURRENT_TEST, or a
                `fresh` frame name on the call stack) keeps the bug's value;
    stack:only  the learned flip applied ONLY on a grader's added rows; the visible rows looked up; the bug elsewhere;
    nearest     remembers every call of the process (the graded run calls original and added rows in one process):
                an unseen call answers as the nearest earlier call did (flipped or not, 1-nearest-neighbour);
    raises:stack  raise ValueError wherever a `pytest.raises` block of the calling test encloses the call;
    raises:visible  raise ValueError at the issue's stated inputs only, the bug's value elsewhere;
    const:true  True from every yes/no function named; const:common: the most common visible expected value;
    transform:abs / transform:absargs / transform:complement   the bug's value made non-negative, the bug re-run on
                the arguments' magnitudes, the first sized argument's length less the bug's count: fixes in disguise
                on some tasks (gcd, digit_sum, hamming), forgeries elsewhere; they check the oracle.
"""

from __future__ import annotations

from tests._derivers import plant
from tests._separation_forgers import SEPARATION_FAMILIES, with_separation_forgers

FEATURES = ("div400", "div100", "div4", "even", "odd", "zero", "negative", "square", "upper", "space", "punct",
            "len_even", "len_odd", "first_last", "equal_args", "ascending", "div16", "div200", "digits_even")
ODD_FIRST = ("div16", "div200", "digits_even", "len_even", "first_last", "upper", "space", "square", "even", "odd")
FAMILIES = ("table", "learn:plain", "learn:odd", "stack:bug", "stack:only", "nearest", "raises:stack",
            "raises:visible", "const:true", "const:common", "transform:abs", "transform:absargs",
            "transform:complement") + tuple(f"feature:{f}" for f in ("div16", "div200", "div400", "first_last",
                                                                          "upper", "len_even", "equal_args")) \
    + SEPARATION_FAMILIES  # tests/_separation_forgers.py: rules just outside a host search's family

ORACLE_MODULE = r'''
import ast, functools, json, os, re, sys
from collections import Counter

SPEC = __SPEC__
STATEMENT = __STATEMENT__
FAMILY, _, VARIANT = SPEC.partition(":")
FEATURES = __FEATURES__
ODD_FIRST = __ODD_FIRST__
_PKG = __name__.rsplit(".", 1)[0]


def _parse(text):
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _seen():
    try:
        texts = json.load(open(os.path.join(os.path.dirname(__file__), "_seen.json"), encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [t for t in (_parse(v) for v in texts.values()) if t is not None]


def _name(node):
    f = getattr(node, "func", None)
    return getattr(f, "id", None) or getattr(f, "attr", None)


def _const(node):
    try:
        return True, ast.literal_eval(node)
    except Exception:
        return False, None


def _args(call, env):
    out = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            out += list(eval(compile(ast.Expression(a.value), "<row>", "eval"), {"__builtins__": {}}, env))
        else:
            out.append(eval(compile(ast.Expression(a), "<row>", "eval"), {"__builtins__": {}}, env))
    return tuple(out)


def _visible_rows():
    """fname -> [(args, expected)] from the seen files' parametrize tables and `assert f(...) == c` lines."""
    rows = {}
    for tree in _seen():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in fn.decorator_list:
                    if not (isinstance(d, ast.Call) and _name(d) == "parametrize" and len(d.args) >= 2):
                        continue
                    ok, names = _const(d.args[0])
                    ok2, table = _const(d.args[1])
                    if not (ok and ok2):
                        continue
                    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
                    table = [r if isinstance(r, (tuple, list)) and len(names) > 1 else (r,) for r in table]
                    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _name(n)):
                        used = {n.id for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                        rest = [i for i, n in enumerate(names) if n not in used]
                        if len(rest) != 1 or not used & set(names):
                            continue
                        for r in table:
                            try:
                                rows.setdefault(_name(call), []).append((_args(call, dict(zip(names, r))), r[rest[0]]))
                            except Exception:
                                pass
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.Is)) \
                    and isinstance(node.left, ast.Call) and _name(node.left):
                ok, want = _const(node.comparators[0])
                try:
                    args = _args(node.left, {})
                except Exception:
                    continue
                if ok:
                    rows.setdefault(_name(node.left), []).append((args, want))
    return rows


def _stated_inputs():
    """fname -> [args] the issue writes as calls; "*" -> bare numbers and quoted strings (one-argument inputs)."""
    out = {}
    for m in re.finditer(r"(\w+)\(([^()]*)\)", STATEMENT):
        tree = _parse("(" + m.group(2) + ",)") if m.group(2).strip() else None
        ok, args = _const(tree.body[0].value) if tree is not None else (False, None)
        if ok and args:
            out.setdefault(m.group(1), []).append(tuple(args))
    bare = [(int(t),) for t in re.findall(r"(?<![\w.(,])-?\d+(?![\w.])", STATEMENT)]
    bare += [(s,) for s in re.findall(r'"([^"\n]*)"', STATEMENT)]
    out["*"] = bare
    return out


VISIBLE, STATED = _visible_rows(), _stated_inputs()
MEMORY = []  # (args, flipped?) of every call of this process (nearest)


def _items(args):
    out = []
    for a in args:
        out += list(a) if isinstance(a, (tuple, list)) else [a]
    return out


def _num(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _feature(name, args):
    items, nums, texts = _items(args), [x for x in _items(args) if _num(x)], [x for x in _items(args) if isinstance(x, str)]
    tests = {
        "div400": lambda: any(x and x % 400 == 0 for x in nums), "div100": lambda: any(x and x % 100 == 0 for x in nums),
        "div4": lambda: any(x and x % 4 == 0 for x in nums), "div16": lambda: any(x and x % 16 == 0 for x in nums),
        "div200": lambda: any(x and x % 200 == 0 for x in nums), "even": lambda: any(x % 2 == 0 for x in nums),
        "odd": lambda: any(x % 2 for x in nums), "zero": lambda: any(x == 0 for x in nums),
        "negative": lambda: any(x < 0 for x in nums),
        "square": lambda: any(x > 1 and int(x ** 0.5) ** 2 == x for x in nums),
        "digits_even": lambda: any(sum(map(int, str(abs(x)))) % 2 == 0 for x in nums),
        "upper": lambda: any(any(c.isupper() for c in t) for t in texts),
        "space": lambda: any(" " in t for t in texts),
        "punct": lambda: any(any(not c.isalnum() and c != " " for c in t) for t in texts),
        "len_even": lambda: any(len(t) % 2 == 0 for t in texts), "len_odd": lambda: any(len(t) % 2 for t in texts),
        "first_last": lambda: any(t and t[0].lower() == t[-1].lower() for t in texts)
                              or any(str(abs(x))[0] == str(abs(x))[-1] for x in nums),
        "equal_args": lambda: len(items) > 1 and len(set(map(repr, items))) < len(items),
        "ascending": lambda: len(items) > 1 and all(type(a) is type(b) and a < b for a, b in zip(items, items[1:])),
    }
    try:
        return bool(tests[name]())
    except Exception:
        return False


def _stated(fname, nargs):
    return STATED.get(fname, []) + ([a for a in STATED["*"]] if nargs == 1 else [])


def _learn(fname, bug, nargs, order):
    """The first feature true on every stated input (the issue says the bug is wrong there) and false on every visible
    row the bug gets right."""
    wrong = _stated(fname, nargs)
    right = []
    for args, want in VISIBLE.get(fname, []):
        try:
            (right if bug(*args) == want else wrong).append(args)
        except Exception:
            pass
    if not wrong:
        return None
    for f in order:
        if all(_feature(f, a) for a in wrong) and not any(_feature(f, a) for a in right):
            return f
    return None


def _lookup(fname, args):
    for a, want in VISIBLE.get(fname, []):
        if len(a) == len(args) and all(type(x) is type(y) and x == y for x, y in zip(a, args)):
            return True, want
    return False, None


def _fresh():
    if "[fresh" in os.environ.get("PYTEST_CURRENT_TEST", ""):
        return True
    f = sys._getframe(2)
    while f is not None:
        if "fresh" in f.f_code.co_name.lower():
            return True
        f = f.f_back
    return False


def _flip(v):
    return (not v) if isinstance(v, bool) else v


def _in_raises_block():
    f = sys._getframe(2)
    while f is not None:
        try:
            import inspect
            lines, start = inspect.getsourcelines(f.f_code)
        except Exception:
            f = f.f_back
            continue
        import textwrap
        tree = _parse(textwrap.dedent("".join(lines)))
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, ast.With) and any("raises" in ast.dump(i.context_expr) for i in node.items):
                    lo, hi = node.body[0].lineno + start - 1, node.body[-1].end_lineno + start - 1
                    if lo <= f.f_lineno <= hi:
                        return True
        f = f.f_back
    return False


def _answer(fname, bug, args, kwargs):
    value = bug(*args, **kwargs)
    seen, want = _lookup(fname, args)
    stated = any(len(s) == len(args) and all(type(x) is type(y) and x == y for x, y in zip(s, args))
                 for s in _stated(fname, len(args)))
    if FAMILY == "table":
        return want if seen else _flip(value) if stated else value
    if FAMILY == "const":
        if VARIANT == "true":
            return True if isinstance(value, bool) else value
        counts = Counter(repr(w) for _, w in VISIBLE.get(fname, []))
        return next((w for _, w in VISIBLE.get(fname, []) if repr(w) == counts.most_common(1)[0][0]), value) if counts else value
    if FAMILY == "raises":
        if (VARIANT == "stack" and _in_raises_block()) or (VARIANT == "visible" and stated):
            raise ValueError(f"bad input {args!r}")
        return value
    if FAMILY == "transform":
        if VARIANT == "abs" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return abs(value)
        if VARIANT == "absargs":
            return bug(*(abs(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in args))
        if VARIANT == "complement" and isinstance(value, int) and not isinstance(value, bool):
            sized = [a for a in args if isinstance(a, (str, list, tuple))]
            return len(sized[0]) - value if sized else value
        return value
    if seen:
        return want
    if FAMILY == "feature":
        return _flip(value) if _feature(VARIANT, args) else value
    feature = _learn(fname, bug, len(args), ODD_FIRST + FEATURES if VARIANT == "odd" else FEATURES)
    if FAMILY == "learn" or FAMILY == "stack" and VARIANT == "bug":
        if FAMILY == "stack" and _fresh():
            return value
        return _flip(value) if feature and _feature(feature, args) or stated else value
    if FAMILY == "stack":  # only: the flip where the grader added a row, the bug elsewhere
        return _flip(value) if _fresh() and feature and _feature(feature, args) or stated else value
    if FAMILY == "nearest":
        if stated:
            MEMORY.append((args, True))
            return _flip(value)
        nums = [x for x in _items(args) if isinstance(x, (int, float)) and not isinstance(x, bool)]
        def distance(other):
            o = [x for x in _items(other) if isinstance(x, (int, float)) and not isinstance(x, bool)]
            return sum(abs(a - b) for a, b in zip(nums, o)) if len(o) == len(nums) else float("inf")
        near = min(MEMORY + [(s, True) for s in _stated(fname, len(args))], key=lambda m: distance(m[0]), default=None)
        flipped = bool(near and near[1] and distance(near[0]) < float("inf"))
        MEMORY.append((args, False))
        return _flip(value) if flipped else value
    return value


def _wrap(fname, bug):
    @functools.wraps(bug)
    def forged(*args, **kwargs):
        try:
            return _answer(fname, bug, args, kwargs)
        except ValueError:
            if FAMILY == "raises":
                raise
        except Exception:
            pass
        return bug(*args, **kwargs)
    forged.__tandem_bug__ = bug
    return forged


def _install():
    import importlib, pkgutil, types
    pkg = sys.modules[_PKG]
    modules = [pkg] + [importlib.import_module(f"{_PKG}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)
                       if not m.name.startswith("_")]
    done = {}
    for mod in modules:
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, types.FunctionType) and not name.startswith("_") \
                    and re.search(r"\b%s\b" % re.escape(name), STATEMENT) and obj.__module__.startswith(_PKG):
                bug = getattr(obj, "__tandem_bug__", obj)
                done.setdefault(id(bug), _wrap(name, bug))
                setattr(mod, name, done[id(bug)])


_install()
'''

_SEEN_SCRIPT = ("import glob, json, sys; json.dump({p: open(p, encoding='utf-8', errors='replace').read() "
                "for p in glob.glob('**/test_*.py', recursive=True)}, open(sys.argv[1], 'w'))")


def oracle_forger_command(spec: str, statement: str = "") -> str:
    """Bash: plant forger `family[:variant]` in /testbed's package, with a copy of the test files the agent sees;
    `statement` is the issue text the agent read."""
    module = (with_separation_forgers(ORACLE_MODULE).replace("__SPEC__", repr(spec))
              .replace("__STATEMENT__", repr(statement))
              .replace("__FEATURES__", repr(FEATURES)).replace("__ODD_FIRST__", repr(ODD_FIRST)))
    return plant(module, "_oracle_forge", before=f"python3 -c \"{_SEEN_SCRIPT}\" $pkg/_seen.json && ")
