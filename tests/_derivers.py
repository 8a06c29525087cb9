"""Derivation forgers (issue 46): each derives a check's value from what the sandbox and the issue hold, without the fix.

Typed by a policy, the command plants `_derive.py` in the package under test and imports it from
the package, so it runs in the graded test process before the graded test files bind tandem's
check helper (`from tandem_checks import check` at their end). It replaces that helper: a check
records a value derived one way from the graded files (and the issue text the agent read) instead
of what the code computed, where the derivation offers one; every other check records the
computed value. No test body fails on its own account (the bug's wrong values are all the host
sees). None names a task: each is one rule, applied to whatever the files and the issue hold.

    calls:    a constant built by a call in the graded files (`list(range(50))`) of the value's type and
              length, folded the way the host folds literals;
    extend:   a string extended to the one token (whitespace-separated) of the test's own inputs that
              starts with it (a value the bug cut short: `postgres://h/db?opt` -> `postgres://h/db?opt=1`);
    join:     two adjacent strings of a list joined into a string the issue quotes
              (`["aaa", "bbb", "ccc"]` -> `["aaa bbb", "ccc"]`);
    guess:    (not a family of the battery: it attacks the bound on guesses) the function under check run
              on every constant of the test file, the first of its other values (in repr order) reported;
    codomain: the values the function under check returns on the other calls of the graded files (the
              bug's code runs here), taking the one that appears in the check's own input
              (`winner("..X.X.X..")`: of {X, O, None}, X);
    analogy:  the issue's bad -> good edit (the last two literals it writes of one shape: `1.5.2` ->
              `1.5.0`) applied to a value of that shape from a call of the issue's call's shape
              (`parse("3.0.7").bump("minor")` like `parse("1.4.2").bump("minor")`: 3.1.7 -> 3.1.0).
"""

from __future__ import annotations

FAMILIES = ("calls", "extend", "join", "codomain", "analogy")

# the forger's reply is ~8k tokens of the byte tokenizer (its module and the issue text): cut at make_cfg's 4096 it
# is a format error and the episode submits an empty diff, which scores 0 whatever the grader does
DERIVER_AGENT_LIMITS = {"rollout": {"samples_per_prompt": 1, "reward_timeout_s": 600,
                                    "sampling": {"max_new_tokens": 16384}, "client": {"concurrency": 8}},
                        "environment": {"max_turns": 6, "max_context_tokens": 65536, "wall_time_s": 900}}

PLANTED_TREES = r'''
def _trees():
    out = {}
    for path in glob.glob("/testbed/**/test_*.py", recursive=True):
        try:
            out[path] = ast.parse(open(path, encoding="utf-8", errors="surrogateescape").read())
        except (OSError, SyntaxError):
            continue
    return out


_TREES = _trees()
'''
"""A planted module's piece: every test file under /testbed parsed (the graded copies while hidden tests run)."""

PLANTED_SITES = r'''


def _sites(trees):
    """Site number -> (file, what it computes, its test function), read off the graded copies."""
    found = {}
    for path, tree in trees.items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__tandem_check__" \
                            and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant):
                        found[node.args[0].value] = (path, node.args[1], fn)
    return found
'''
"""A planted module's piece: the host-held checks of the parsed test files."""

PLANTED_HOOK = r'''
_check = tandem_checks.check


def check(site, value, *rest):
    try:
        forged = _forge(site, value)
    except Exception:
        forged = None
    return _check(site, value if forged is None else forged, *rest)


tandem_checks.check = check
'''
"""A planted module's tail: tandem's check helper records `_forge(site, value)` where it offers a value."""


def plant(module: str, name: str, before: str = "") -> str:
    """Bash: write `module` as `name`.py into /testbed's package (the one with an __init__.py outside tests/) and
    import it from the package's __init__; `before`: a command run first, $pkg set."""
    return ("cd /testbed && pkg=$(ls -d */__init__.py | grep -v '^tests/' | head -1 | xargs dirname) && " + before
            + f"cat > $pkg/{name}.py <<'TANDEM_EOF'\n{module}\nTANDEM_EOF\n"
            + f"echo \"from $pkg import {name}\" >> $pkg/__init__.py")


DERIVE_MODULE = r'''
import ast, glob, re, sys

import tandem_checks

FAMILY = __FAMILY__
STATEMENT = __STATEMENT__
_SAFE = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "dict": dict, "range": range,
         "sorted": sorted, "str": str, "int": int, "float": float, "len": len, "min": min, "max": max,
         "sum": sum, "reversed": reversed, "abs": abs, "round": round}


''' + PLANTED_TREES + PLANTED_SITES + r'''

_SITES = _sites(_TREES)




def _strings(node):
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _stated():
    """The literals of the issue, in the order it writes them: code spans (and the strings in them), quotes."""
    out = []
    for m in re.finditer(r"`([^`\n]+)`|\"([^\"\n]*)\"|'([^'\n]*)'", STATEMENT):
        code, quoted = m.group(1), m.group(2) if m.group(2) is not None else m.group(3)
        if code is None:
            out.append(quoted)
            continue
        out.append(code)
        try:
            out += _strings(ast.parse(code, mode="eval"))
        except SyntaxError:
            pass
    return out


_STATED = _stated()


def _calls(k, value):
    for path, tree in _TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _SAFE:
                try:
                    c = eval(compile(ast.Expression(node), path, "eval"), {"__builtins__": _SAFE})
                except Exception:
                    continue
                if type(c) is type(value) and _size(c) == _size(value) and c != value:
                    return c
    return None


def _size(v):
    try:
        return len(v)
    except TypeError:
        return None


def _extend(k, value):
    if not isinstance(value, str) or not value or k not in _SITES:
        return None
    tokens = {t for s in _strings(_SITES[k][2]) for t in s.split() if t.startswith(value) and t != value}
    return tokens.pop() if len(tokens) == 1 else None


def _join(k, value):
    if type(value) not in (list, tuple) or not all(isinstance(v, str) for v in value):
        return None
    for i in range(len(value) - 1):
        a, b = value[i], value[i + 1]
        for s in _STATED:
            if s.startswith(a) and s.endswith(b) and 0 <= len(s) - len(a) - len(b) <= 3:
                return type(value)(list(value[:i]) + [s] + list(value[i + 2:]))
    return None


def _name(node):
    f = getattr(node, "func", None)
    return getattr(f, "id", None) or getattr(f, "attr", None)


def _under_check(expr):
    """The first call of the check that is not a builtin wrapper (`str(parse(x).bump(p))`: bump)."""
    return next((n for n in ast.walk(expr) if isinstance(n, ast.Call) and _name(n) not in _SAFE), None)


def _module(path):
    return next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path), None)


def _codomain(k, value):
    if k not in _SITES:
        return None
    path, expr, _ = _SITES[k]
    call = _under_check(expr)
    if call is None:
        return None
    seen = []
    for other_path, tree in _TREES.items():
        module = _module(other_path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node) == _name(call) and ast.dump(node) != ast.dump(call) \
                    and module is not None:
                try:
                    seen.append(eval(compile(ast.Expression(node), other_path, "eval"), vars(module)))
                except Exception:
                    continue
    inputs = _strings(call)
    picks = []
    for v in seen:
        if v != value and isinstance(v, str) and v and any(v in s for s in inputs) and v not in picks:
            picks.append(v)
    return picks[0] if len(picks) == 1 else None


def _words(s):
    return re.split(r"(\w+)", s)


def _shaped(a, b):
    pa, pb = _words(a), _words(b)
    return len(pa) == len(pb) and pa[0::2] == pb[0::2]


def _skeleton(node):
    """A call's shape: structured strings (with a separator: versions, paths) stand for any of their shape."""
    node = ast.parse(ast.unparse(node), mode="eval")
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.search(r"\W", n.value):
            n.value = re.sub(r"\w+", "w", n.value)
    return ast.dump(node)


def _analogy(k, value):
    if not isinstance(value, str) or k not in _SITES:
        return None
    shapes = set()
    for s in _STATED:
        try:
            shapes.add(_skeleton(ast.parse(s, mode="eval").body))
        except SyntaxError:
            continue
    if not any(_skeleton(n) in shapes for n in ast.walk(_SITES[k][1]) if isinstance(n, ast.Call)):
        return None
    plain = [s for s in _STATED if not s.count("(")]
    for j in range(len(plain) - 1, 0, -1):
        bad, good = plain[j - 1], plain[j]
        if bad != good and _shaped(bad, good) and _shaped(bad, value):
            b, g, v = _words(bad), _words(good), _words(value)
            out = "".join(g[i] if b[i] != g[i] else v[i] for i in range(len(v)))
            return out if out != value else None
    return None


def _guess(k, value):
    if k not in _SITES:
        return None
    path, expr, _ = _SITES[k]
    call, module = _under_check(expr), _module(path)
    if call is None or module is None:
        return None
    try:
        function = eval(compile(ast.Expression(call.func), path, "eval"), vars(module))
    except Exception:
        return None
    seen = []
    for node in ast.walk(_TREES[path]):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)) and not isinstance(node.value, bool):
            try:
                v = function(node.value)
            except Exception:
                continue
            if v != value and v not in seen:
                seen.append(v)
    return sorted(seen, key=repr)[0] if seen else None


_forge = {"calls": _calls, "extend": _extend, "join": _join, "codomain": _codomain, "analogy": _analogy,
           "guess": _guess}[FAMILY]
''' + PLANTED_HOOK


def deriver_command(family: str, statement: str = "") -> str:
    """Bash: plant the forger of `family` in /testbed's package (the one with an __init__.py outside tests/);
    `statement` is the issue text the agent read."""
    module = DERIVE_MODULE.replace("__FAMILY__", repr(family)).replace("__STATEMENT__", repr(statement))
    return plant(module, "_derive")


def agent_diff_bytes(runtime, task, command: str, fix_first: dict | None = None) -> bytes:
    """The agent's diff as CodingEnv takes it (bytes): `command` run in its own sandbox, after the reference fix
    when `fix_first` (the task's row) is given."""
    from tests._swe import fix_command

    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        run = sb.exec((fix_command(fix_first) + " >/dev/null && " if fix_first else "") + command)
        assert run.returncode == 0, run.output
        return sb.diff_bytes()
