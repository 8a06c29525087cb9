"""Parametrized expectations held on the host (issue 46: they were refused as guessable).

    @pytest.mark.parametrize("a, b, want", [(7, 3, 4), (20, 5, 15)])
    def test_sub(a, b, want):
        assert sub(a, b) == want

The expected column `want` is a literal in the decorator, so the sandbox's copy of the file
would hold every expectation, and pytest's ids (`test_sub[7-3-4]`) would name them too.
hide() takes that column out of the graded copy (each value None) and names the cases
`case0`, `case1`, ...; the host keeps each case's expected value and maps the case's id back
to the task's. `sub(a, b) == want` is then a reference site whose values the host holds per
case (tandem.envs.coding.checks.Reference, held=True): no sandbox run computes them.

Only what can be done exactly is hidden: one parametrize decorator of constant rows (plain
data, nested tuples and lists included; a `Cls.MEMBER` in an expected column is held as an
EnumMember, tandem.envs.coding.enum_value), no `ids=`, pytest's own ids computed here the way
pytest 7-9 computes them (numbers, None, bools and printable ASCII strings as themselves, a plain
Enum member as `Cls.MEMBER`, containers as argname + the row's index) and unique, every task id
of the function among them (an IntEnum member, whose id is its int, fails this and stays), and
the column used only as the expected side of `==` checks. Anything else is left as written (and refused if that is all a hidden test has).
"""

from __future__ import annotations

import ast
import io
import random
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable

from tandem.envs.coding.checks import NotConstant, constant, parse
from tandem.envs.coding.confined import PROBE_ID, sample
from tandem.envs.coding.fresh_rows import FRESH_ID, fresh_rows
from tandem.envs.coding.hard_rows import hard_rng, hard_rows
from tandem.envs.coding.enum_value import EnumMember
from tandem.envs.coding.pool_rows import mixed, pool_rng, pool_rows

_UNITTEST_EQ = {"assertEqual", "assertEquals"}


@dataclass
class Hidden:
    """What hide() took out of one graded file."""

    source: str
    aliases: dict[str, str] = field(default_factory=dict)
    """Task node id -> the node id of the same case in the graded copy (`...[case0]`)."""
    expected: dict[tuple[int, int, str], dict[str, Any]] = field(default_factory=dict)
    """(first line, last line of the test function, column name) -> graded node id -> expected value."""
    fresh: list[str] = field(default_factory=list)
    """Graded node ids of the fresh rows appended to the tables (tandem.envs.coding.differential)."""
    pool: list[str] = field(default_factory=list)
    """Those of `fresh` that are pool rows (tandem.envs.coding.separating): candidates for separating rows."""
    hard: dict[str, bool] = field(default_factory=dict)
    """Those of `fresh` that are hard rows (tandem.envs.coding.hard_rows), each with whether it lies beyond the fresh
    rows' guard: required by every graded failing test."""


def hide(source: str, rel: str, task_tests: tuple[str, ...], enums: Callable[[], dict] = dict,
         rng: random.Random | None = None, failing: tuple[str, ...] = (), drop: AbstractSet[str] = frozenset()) -> Hidden:
    """`source` with its parametrized expectations taken out (unchanged when there are none); `enums()`:
    the repository's enums (enum_value.enum_table), asked for only where a row names a `Cls.MEMBER`;
    with `rng`, each such table gets fresh rows too (tandem.envs.coding.differential), half of them near its
    rows among the `failing` task ids, and a pool of candidate rows (tandem.envs.coding.separating) less the `drop`
    ids."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return Hidden(source)
    out = Hidden(source)
    edits: list[tuple[ast.expr, str]] = []
    for qual, func in _test_functions(tree):
        found = _hideable(func, f"{rel}::{qual}", task_tests, enums, rng, failing, drop)
        if found is None:
            continue
        argvalues, text, aliases, expected, fresh, pool, hard = found
        out.fresh += fresh
        out.pool += pool
        out.hard.update(hard)
        edits.append((argvalues, text))
        out.aliases.update(aliases)
        out.expected.update({(func.lineno, func.end_lineno, name): values for name, values in expected.items()})
    out.source = _replace(source, edits) if edits else source
    return out


def _test_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test"):
                    yield f"{node.name}::{sub.name}", sub


def _hideable(func, node_prefix: str, task_tests: tuple[str, ...], enums: Callable[[], dict],
              rng: random.Random | None, failing: tuple[str, ...] = (), drop: AbstractSet[str] = frozenset()):
    marks = [d for d in func.decorator_list if isinstance(d, ast.Call) and _is_parametrize(d.func)]
    if len(marks) != 1 or len(marks[0].args) != 2 or marks[0].keywords:
        return None
    try:
        names = constant(marks[0].args[0])
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows, members = _rows(marks[0].args[1], len(names) == 1, enums)
    except Exception:  # NotConstant (pytest.param, a name), or a fold that fails
        return None
    if not rows or not isinstance(rows, list) or not all(isinstance(n, str) and n for n in names):
        return None
    rows = [row if len(names) > 1 else (row,) for row in rows]
    if any(not isinstance(row, tuple) or len(row) != len(names) for row in rows):
        return None
    columns = [i for i, name in enumerate(names) if _only_expected(func, name)]
    if members - set(columns):
        return None  # an enum member as an input: the graded copy needs it as written
    ids = [_pytest_id(row, names, n) for n, row in enumerate(rows)]
    if not columns or None in ids or len(set(ids)) != len(ids):
        return None
    originals = [f"{node_prefix}[{i}]" for i in ids]
    ours = [t for t in task_tests if t.startswith(node_prefix + "[")]
    if any(t not in originals for t in ours):
        return None  # pytest named them otherwise: leave the file as written
    graded = [f"{node_prefix}[case{n}]" for n in range(len(rows))]
    hidden_rows = [tuple(None if i in columns else v for i, v in enumerate(row)) for row in rows]
    near = [n for n, t in enumerate(originals) if t in failing]
    fresh, probes = sample(rows, columns, rng, near) if rng is not None else ([], [])
    hard, outer = zip(*found) if rng is not None and near and (found := hard_rows(rows, columns, hard_rng(rng, node_prefix),
                                                                                  near)) else ((), ())
    fresh, probes = [r for r in fresh if r not in hard] + list(hard), [r for r in probes if r not in hard]
    fresh, pooled = _with_pool(rows, columns, rng, near, fresh, probes, node_prefix)
    case_ids = ([f"case{n}" for n in range(len(rows))] + [f"{FRESH_ID}{n}" for n in range(len(fresh))]
                + [f"{PROBE_ID}{n}" for n in range(len(probes))])
    fresh += probes
    rows_out = [*rows, *fresh]
    kept = [n for n, i in enumerate(case_ids) if f"{node_prefix}[{i}]" not in drop]
    hidden_rows = [hidden_rows[n] if n < len(rows) else rows_out[n] for n in kept]
    case_ids = [case_ids[n] for n in kept]
    literal = repr(hidden_rows if len(names) > 1 else [r[0] for r in hidden_rows])
    text = f"{literal}, ids={case_ids!r}"
    expected = {names[i]: {graded[n]: rows[n][i] for n in range(len(rows))} for i in columns}
    fresh_ids = [f"{node_prefix}[{i}]" for i in case_ids[len(rows):]]
    pool = [f"{node_prefix}[{FRESH_ID}{n}]" for n, is_pool in enumerate(pooled) if is_pool]
    hard_ids = {f"{node_prefix}[{FRESH_ID}{n}]": outer[hard.index(row)] for n, (row, is_pool)
                in enumerate(zip(fresh, pooled)) if not is_pool and row in hard}
    return (marks[0].args[1], text, dict(zip(originals, graded)), expected, fresh_ids,
            [p for p in pool if p in fresh_ids], {h: b for h, b in hard_ids.items() if h in fresh_ids})


def _with_pool(rows: list[tuple], columns: list[int], rng: random.Random | None, near: list[int], fresh: list[tuple],
               probes: list[tuple], table: str) -> tuple[list[tuple], list[bool]]:
    """The table's fresh rows and, where it has failing rows, its pool (tandem.envs.coding.separating) in one
    shuffle: (the rows, which are pool rows)."""
    if rng is None or not near or not fresh:
        return fresh, [False] * len(fresh)
    own = pool_rng(rng, table)
    pool = pool_rows(rows, columns, own, lambda k: fresh_rows(rows, columns, own, k, failing=near), near,
                     taken=[*fresh, *probes])
    return mixed(fresh, pool, own)


def _is_parametrize(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "parametrize" and isinstance(func.value, ast.Attribute) \
        and func.value.attr == "mark"


def _only_expected(func, name: str) -> bool:
    """Is `name` used in the function only as one side of `==` checks (`assert E == name`, assertEqual)?"""
    allowed, used = set(), 0
    for node in ast.walk(func):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                and isinstance(node.test.ops[0], ast.Eq):
            sides = [node.test.left, node.test.comparators[0]]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _UNITTEST_EQ \
                and len(node.args) == 2:
            sides = node.args
        else:
            continue
        named = [s for s in sides if isinstance(s, ast.Name) and s.id == name]
        if len(named) == 1:
            allowed.add(id(named[0]))
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == name:
            used += 1
            if id(node) not in allowed:
                return False
    return used > 0


def _pytest_id(row: tuple, names: list[str], index: int) -> str | None:
    """pytest's id of case `index` (None where pytest's own spelling is not certain here)."""
    parts = []
    for value, name in zip(row, names):
        if isinstance(value, str):
            if not (value.isascii() and value.isprintable()) or "\\" in value:
                return None
            parts.append(value)
        elif value is None or isinstance(value, (bool, int, float, complex)):
            parts.append(str(value))
        elif isinstance(value, EnumMember):
            parts.append(repr(value))  # a plain Enum's str(); an IntEnum's differs and fails the id check
        elif type(value) in (tuple, list, dict, set, frozenset):
            parts.append(f"{name}{index}")  # pytest names a container by argname + the row's index
        else:
            return None
    return "-".join(parts)


def _rows(node: ast.expr, single: bool, enums: Callable[[], dict]) -> tuple[list, set[int]]:
    """(the rows' values, the columns naming an enum member): constants, and `Cls.MEMBER` of an enum the
    repository defines held as the host judges it (enum_value: never imported here)."""
    try:
        return constant(node), set()
    except NotConstant:
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise
    rows: list[list[ast.expr]] = []
    for e in node.elts:
        if single:
            rows.append([e])
        elif isinstance(e, ast.Tuple):
            rows.append(list(e.elts))
        else:
            raise NotConstant("a row that is no tuple")
    table = enums()
    values = [tuple(_value(v, table) for v in row) for row in rows]
    members = {i for row in rows for i, v in enumerate(row) if isinstance(v, ast.Attribute)}
    return [v[0] for v in values] if single else values, members


def _value(node: ast.expr, enums: dict) -> Any:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        plain, members = enums.get(node.value.id, (True, {}))
        if node.attr not in members:
            raise NotConstant(f"{node.value.id}.{node.attr}: no enum member the repository defines")
        return EnumMember(node.value.id, node.attr) if plain else members[node.attr]
    return constant(node)


def end_of(node: ast.stmt | ast.expr) -> tuple[int, int]:
    """(line, column) where a parsed node ends (ast.parse sets both)."""
    if node.end_lineno is None or node.end_col_offset is None:
        raise ValueError(f"an ast node without its end position at line {node.lineno}")
    return node.end_lineno, node.end_col_offset


def _replace(source: str, edits: list[tuple[ast.expr, str]]) -> str:
    """Each node's text replaced, keeping every line where it was (pytest's line numbers stay true)."""
    lines = io.StringIO(source, newline="").readlines()
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + len(lines[line - 1].encode()[:col].decode())

    text = source
    for node, new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        a, b = offset(node.lineno, node.col_offset), offset(*end_of(node))
        missing = text[a:b].count("\n")
        new = new[:-1] + "\n" * missing + new[-1]  # inside the ids list's closing bracket
        text = text[:a] + new + text[b:]
    parse(text)  # a rewrite that does not parse is a bug here: fail loudly
    return text
