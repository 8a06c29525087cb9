"""A corpus of correct alternative fixes of the bundled tasks (issue 46): how the fixes are stored and applied.

Each fix is what a colleague might write instead of the reference fix: another algorithm, another
return type the original assert accepts, a helper in a new file, a source file in latin-1, a cache
written beside the module. A fix is a list of edits of the agent's starting repository (the bug in
place), applied in the agent's sandbox by one shell command, so the grader gets the diff's bytes as
CodingEnv takes them. The fixes themselves are in tests/_fix_corpus_a.py and tests/_fix_corpus_b.py
(the bundled tasks, data/swe_tasks) and tests/_fix_corpus_real.py (the realistic set, data/swe_realistic);
bench/fix_corpus.py runs every one under plain pytest and through the grader, and
tests/test_fix_corpus.py runs one fix of each form.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

FORMS = ("algorithm", "return_type", "new_module", "latin1", "cache")
"""algorithm: another way to compute the same thing; return_type: a value of another type that the original
`==` accepts; new_module: the fix's logic in a file the repository did not have; latin1: the fixed source
file saved in latin-1 (with its coding cookie) holding a non-ASCII byte; cache: the fixed module writes a
file beside itself."""

LATIN1_COOKIE = "# -*- coding: latin-1 -*-\n"


@dataclass(frozen=True)
class Fix:
    task: str
    """The bundled task's repository name (tandem/<task>)."""
    form: str
    why: str
    """One line: how this fix differs from the reference."""
    ops: tuple[dict, ...]
    nth: int = 1
    """Which fix of this task and form (a task may have two of one form)."""
    outside: str = ""
    """Where the fix answers differently from the reference on inputs outside the hidden tests' domain (empty:
    nowhere known): a check on fresh inputs (a differential check) could judge such a fix, so these are counted
    apart."""

    @property
    def name(self) -> str:
        return f"{self.task}:{self.form}" + (f"#{self.nth}" if self.nth > 1 else "")


def edit(path: str, old: str, new: str) -> dict:
    """Replace `old` (present exactly once in the buggy file) by `new`."""
    return {"path": path, "old": old, "new": new}


def write(path: str, text: str) -> dict:
    """A new file."""
    return {"path": path, "write": text}


def define(path: str, name: str, source: str) -> dict:
    """The function (or method) `name`, the only one of that name in `path`, replaced by `source` (written at
    column 0; indented where the old definition stood): an agent rewriting a whole function."""
    return {"path": path, "function": name, "source": source}


def latin1(path: str, *edits: dict) -> tuple[dict, ...]:
    """Edits of `path`, then the whole file saved in latin-1 under a coding cookie (the edits hold a non-ASCII
    character, so the file is no longer valid UTF-8)."""
    assert any(any(ord(c) > 127 for c in e.get("new", e.get("source", ""))) for e in edits), \
        "a latin-1 fix must hold a non-ASCII byte"
    return (*edits, {"path": path, "encoding": "latin-1", "prefix": LATIN1_COOKIE})


CORPUS: list[Fix] = []


def fix(task: str, form: str, why: str, *ops, outside: str = "", into: list[Fix] = CORPUS) -> None:
    assert form in FORMS, form
    flat: list[dict] = []
    for op in ops:
        flat.extend(op if isinstance(op, tuple) else (op,))
    nth = 1 + sum(fx.task == task and fx.form == form for fx in into)
    into.append(Fix(task, form, why, tuple(flat), nth, outside))


APPLY = r'''
import base64, json, pathlib, sys
for op in json.loads(base64.b64decode(sys.argv[1])):
    p = pathlib.Path(op["path"])
    if "write" in op:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(op["write"], encoding="utf-8")
    elif "function" in op:
        import ast, textwrap
        text = p.read_text(encoding="utf-8")
        found = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == op["function"]]
        if len(found) != 1:
            sys.exit(f"{op['path']}: {len(found)} functions named {op['function']}")
        node, lines = found[0], text.splitlines(keepends=True)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        body = textwrap.indent(textwrap.dedent(op["source"]).strip("\n") + "\n", " " * node.col_offset)
        p.write_text("".join(lines[:start]) + body + "".join(lines[node.end_lineno:]), encoding="utf-8")
    elif "encoding" in op:
        p.write_bytes((op["prefix"] + p.read_text(encoding="utf-8")).encode(op["encoding"]))
    else:
        text = p.read_text(encoding="utf-8")
        if text.count(op["old"]) != 1:
            sys.exit(f"{op['path']}: the edit's old text is found {text.count(op['old'])} times")
        p.write_text(text.replace(op["old"], op["new"]), encoding="utf-8")
'''


def apply_command(fx: Fix) -> str:
    """Bash, run in /testbed: the fix's edits, as an agent's shell would make them."""
    payload = base64.b64encode(json.dumps(list(fx.ops)).encode()).decode()
    return f"python3 - {payload} <<'TANDEM_EOF'\n{APPLY}TANDEM_EOF\n"


def corpus() -> list[Fix]:
    import tests._fix_corpus_a  # noqa: F401  (each part registers its fixes)
    import tests._fix_corpus_b  # noqa: F401

    return list(CORPUS)
