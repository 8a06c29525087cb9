"""A plain Enum member as the host holds it (issue 46: enum expectations were sandbox-held).

The graded process writes a member of a plain `enum.Enum` (one whose class keeps Enum's identity
`==`) as {"e": [class name, member name]} (grader_plugin/tandem_checks.encode); a parametrize
expectation `Kind.INVALID` is held as EnumMember("Kind", "INVALID") (tandem.envs.coding.params).
The original `==` on such a member is identity: it equals only itself, never its value, so
EnumMember equals only an EnumMember of the same class name and member name. IntEnum and StrEnum
members are no EnumMember: they travel as their int / str, which they equal under the original `==`,
and the host holds their int / str (enum_table reads the members from the repository's source).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EnumMember:
    cls: str
    """The class's __name__ (what pytest's id and the member's str() show)."""
    name: str

    def __repr__(self) -> str:
        return f"{self.cls}.{self.name}"


_PLAIN = {"Enum"}
_VALUED = {"IntEnum": int, "StrEnum": str}
MAX_SCANNED = 2_000
"""Source files read for enum definitions (ones naming `Enum`): a bigger repository keeps its enums sandbox-held."""


def enum_table(root: Path) -> dict[str, tuple[bool, dict[str, Any]]]:
    """Class name -> (plain Enum?, member -> value) for the enums the repository under `root` defines with
    constant members: a plain `Enum` (its members held as EnumMember), an `IntEnum` / `StrEnum` (held
    as the int / str the original `==` compares them as). A name defined twice, differently, is left out."""
    table: dict[str, tuple[bool, dict[str, Any]] | None] = {}
    files = [p for p in sorted(root.rglob("*.py")) if not p.is_symlink() and p.is_file()][:MAX_SCANNED]
    for path in files:
        text = path.read_text(errors="replace")
        if "Enum" not in text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or (found := _enum_class(node)) is None:
                continue
            table[node.name] = found if table.get(node.name, found) == found else None
    return {name: entry for name, entry in table.items() if entry is not None}


def _enum_class(node: ast.ClassDef) -> tuple[bool, dict[str, Any]] | None:
    bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None) for b in node.bases]
    if len(bases) != 1 or node.keywords or not (bases[0] in _PLAIN or bases[0] in _VALUED):
        return None
    kind = _VALUED.get(bases[0])
    members: dict[str, Any] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in ("__eq__", "__str__", "__hash__", "__new__"):
            return None  # its `==` or str() is its own: not judged here
        if not isinstance(stmt, ast.Assign):
            continue
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name) \
                or not isinstance(stmt.value, ast.Constant):
            return None  # auto(), a computed value: not known without importing
        if kind is not None and type(stmt.value.value) is not kind:
            return None
        members[stmt.targets[0].id] = stmt.value.value
    if kind is None and len(set(members.values())) != len(members):
        return None  # an alias takes its first member's name: judged by name here, it would differ
    return (kind is None, members) if members else None
