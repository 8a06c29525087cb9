"""What of an agent's diff is graded, and how it is applied on the host without trusting its size.

- **Protected paths**: edits to the graded test files and to any conftest.py are dropped
  (and undone from the template after applying, whatever path spelling got them past the
  parse here: restore_protected).
- **Sources only**: bytecode, caches and build leftovers (`*.pyc`, `*.pyo`, `__pycache__/`,
  `.pytest_cache/`, native `*.so` / `*.pyd`, `*.egg-info/` and `*.dist-info/` metadata) are
  dropped from the diff and scrubbed from the graded tree: a fix shipped only as bytecode
  changes nothing, and the metadata `pip install -e .` leaves (entry points included) is
  neither graded nor held against the agent.
- **Bytes are bytes**: the diff is taken as bytes and carried as text that holds them exactly
  (diff_text: an undecodable byte as a surrogate escape), so a fix in a latin-1 source file
  applies as written; a binary file whose contents the diff does not carry is refused by name.
- **Bounded apply**: every binary section's size after applying is read from its header
  before git runs; a file larger than environment.args.sandbox.max_file_mb, a mostly-empty (sparse) file
  of more than a MiB, or more bytes in all than environment.args.sandbox.max_workdir_mb refuses the diff,
  naming the file. git apply itself runs under an address-space and file-size rlimit.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import zlib
from pathlib import Path

from tandem.envs.coding.sandbox.storage import remove_tree, walk_tree
from tandem.envs.coding.swe_data import apply_patch

PROTECTED_NAMES = {"conftest.py"}
LEFTOVER_DIRS = ("__pycache__", ".pytest_cache")
LEFTOVER_DIR_SUFFIXES = (".egg-info", ".dist-info")
LEFTOVER_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd")
SPARSE_MIN_BYTES = 1 << 20
SPARSE_RATIO = 64
"""A binary file that inflates past SPARSE_MIN_BYTES at more than this ratio is mostly empty: refused."""
_DIFF_HEADER = re.compile(r'^diff --git (?:"?a/(.+?)"?) (?:"?b/(.+?)"?)$')


class DiffRefused(ValueError):
    """The diff would make the host build files no sandbox could hold; the message names them."""


def diff_text(diff: str | bytes) -> str:
    """The diff as text that encodes back to the same bytes (apply_patch writes it with surrogateescape)."""
    return diff.decode("utf-8", "surrogateescape") if isinstance(diff, bytes) else diff


def is_leftover(path: str) -> bool:
    """Bytecode, a cache or build metadata: never a source the graded tests should run."""
    parts = os.path.normpath(path).lower().split(os.sep)  # importlib.metadata matches names case-blind
    return (any(p in LEFTOVER_DIRS or p.endswith(LEFTOVER_DIR_SUFFIXES) for p in parts[:-1])
            or parts[-1] in LEFTOVER_DIRS or parts[-1].endswith(LEFTOVER_SUFFIXES + LEFTOVER_DIR_SUFFIXES))


def split_diff(diff: str) -> list[tuple[list[str], str]]:
    """[(paths touched, text of that file's section)] of a git diff."""
    sections: list[tuple[list[str], str]] = []
    current: list[str] = []
    paths: list[str] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            if current:
                sections.append((paths, "".join(current)))
            m = _DIFF_HEADER.match(line.rstrip("\n"))
            paths = [p for p in (m.groups() if m else ()) if p]
            current = [line]
        elif current:
            current.append(line)
            if line.startswith(("--- a/", "+++ b/", "rename from ", "rename to ")):
                p = line.rstrip("\n").split(" ", 2)[-1]
                paths.append(p[2:] if p.startswith(("a/", "b/")) else p)
    if current:
        sections.append((paths, "".join(current)))
    return sections


def filter_diff(diff: str, protected: set[str]) -> tuple[str, list[str]]:
    """Drop file sections that touch protected test files, any conftest.py, or build leftovers."""
    kept, dropped = [], []
    for paths, text in split_diff(diff):
        norm = {os.path.normpath(p) for p in paths}
        if norm & protected or any(os.path.basename(p) in PROTECTED_NAMES or is_leftover(p) for p in norm):
            dropped.extend(sorted(norm))
        else:
            kept.append(text)
    return "".join(kept), sorted(set(dropped))


def restore_protected(testbed: Path, clean: Path, test_files: list[str]) -> list[str]:
    """Put every graded test file and conftest.py back as the clean template has it; return what changed."""
    changed = []
    for rel in protected_paths(test_files, testbed, clean):
        ours, theirs = testbed / rel, clean / rel
        inside(testbed, ours)  # before reading or writing through a directory the diff may have made a link
        if _same_file(ours, theirs):
            continue
        changed.append(rel)
        if ours.is_symlink() or ours.exists():
            remove_tree(ours)
        if theirs.is_file() and not theirs.is_symlink():
            ours.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(theirs, ours)
    return changed


def protected_paths(test_files: list[str], *trees: Path) -> list[str]:
    """The graded test files and every conftest.py of `trees`, relative to each tree."""
    protected = set(test_files)
    for root in trees:
        protected |= {str(Path(p).relative_to(root)) for p, st in walk_tree(root)
                      if os.path.basename(p) in PROTECTED_NAMES}
    return sorted(protected)


def inside(testbed: Path, target: Path) -> None:
    """ValueError unless `target`'s directory resolves inside `testbed`: a directory the diff turned
    into a link leads out of the repository (the host writes as root)."""
    root, parent = os.path.realpath(testbed), os.path.realpath(target.parent)
    if parent != root and not parent.startswith(root + os.sep):
        raise ValueError(f"{os.path.relpath(target, testbed)}: its directory leads out of the repository")


def write_inside(testbed: Path, rel: str, text: str) -> None:
    """Write a graded file at testbed/rel, never through a link that leads out of the repository."""
    target = testbed / rel
    inside(testbed, target)
    if target.is_symlink() or target.exists():
        remove_tree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, errors="surrogateescape")


def _same_file(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return False
    if not (a.is_file() and b.is_file()):
        return not a.exists() and not b.exists()
    return a.read_bytes() == b.read_bytes()


def scrub_leftovers(testbed: Path, template: Path) -> list[str]:
    """Bytecode and caches out of the graded tree, other leftovers back to what the template has.

    However they got there (a path spelling filter_diff did not parse, a rename): no `.pyc` is
    ever loaded, and a native module or package metadata is the repository's own or absent."""
    found: list[str] = []
    for path, _ in walk_tree(testbed):
        rel = os.path.relpath(path, testbed)
        if is_leftover(rel) and not any(rel.startswith(f + os.sep) for f in found):
            found.append(rel)
    for rel in found:
        remove_tree(testbed / rel)
        theirs = template / rel
        if _is_bytecode(rel) or theirs.is_symlink() or not theirs.exists():
            continue
        if theirs.is_dir():
            shutil.copytree(theirs, testbed / rel, symlinks=True)
        else:
            shutil.copyfile(theirs, testbed / rel)
    return sorted(found)


def _is_bytecode(rel: str) -> bool:
    parts = os.path.normpath(rel).lower().split(os.sep)
    return any(p in LEFTOVER_DIRS for p in parts) or parts[-1].endswith((".pyc", ".pyo"))


# ----------------------------------------------------------------------------- sizes before applying
def check_sizes(diff: str, max_file_bytes: int, max_total_bytes: int) -> None:
    """Raise DiffRefused, naming the file, for a binary section too large or too empty to build."""
    total, largest = 0, ("", 0)
    for paths, text in split_diff(diff):
        name = paths[-1] if paths else "?"
        if "GIT binary patch" not in text and re.search(r"^Binary files .* differ$", text, re.M):
            raise DiffRefused(f"the diff changes the binary file {name} without its contents (a diff taken "
                              "without --binary): it cannot be applied as the agent left it")
        for size, encoded in _binary_sizes(text):
            if size > max_file_bytes:
                raise DiffRefused(f"the diff makes {name} {size} bytes, more than a sandbox file may hold "
                                  f"({max_file_bytes} bytes, environment.args.sandbox.max_file_mb)")
            if size > SPARSE_MIN_BYTES and size > SPARSE_RATIO * max(encoded, 1):
                raise DiffRefused(f"the diff makes {name} a mostly empty (sparse) file of {size} bytes from "
                                  f"{encoded} bytes of patch")
            total += size
            largest = max(largest, (name, size), key=lambda x: x[1])
    if total > max_total_bytes:
        raise DiffRefused(f"the diff's binary files add up to {total} bytes, more than a sandbox holds "
                          f"({max_total_bytes} bytes, environment.args.sandbox.max_workdir_mb); the largest is {largest[0]}")


def _binary_sizes(section: str) -> list[tuple[int, int]]:
    """(size after applying, bytes of encoded patch) of each binary hunk ('literal N' / 'delta N') of a section."""
    if "GIT binary patch" not in section:
        return []
    lines = section.splitlines()
    out = []
    for i, line in enumerate(lines):
        kind, _, number = line.partition(" ")
        if kind not in ("literal", "delta") or not number.isdigit():
            continue
        data = []
        for body in lines[i + 1:]:
            if not body:
                break
            data.append(body)
        encoded = sum(len(b) for b in data)
        out.append((int(number) if kind == "literal" else _delta_target_size(data), encoded))
    return out


def _delta_target_size(lines: list[str]) -> int:
    """The result size a git binary delta declares (its second varint), reading no more than its head."""
    inflate = zlib.decompressobj()
    head = b""
    try:
        for line in lines:
            length = ord(line[0]) - (ord("A") - 1 if line[0] <= "Z" else ord("a") - 27)
            head += inflate.decompress(base64.b85decode(line[1:])[:length], 32 - len(head))
            if len(head) >= 20:
                break
    except (ValueError, zlib.error, IndexError):
        return 0  # git refuses it too; nothing is built
    _, at = _varint(head, 0)
    size, _ = _varint(head, at)
    return size


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(data):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return value, at


def bounded_apply(testbed: Path, diff: str, max_file_bytes: int, max_total_bytes: int) -> None:
    """check_sizes, then git apply under rlimits: room for one file, several times over, and no larger file."""
    check_sizes(diff, max_file_bytes, max_total_bytes)
    apply_patch(testbed, diff, rlimits=((256 << 20) + 4 * max_file_bytes, max_file_bytes))
