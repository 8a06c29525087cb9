"""Rewrite a config file written for the earlier key layout: `python -m tandem.config.migrate FILE [--write]`.

tandem itself never translates an old key (config/renamed.py: a file that uses one fails, naming
the new key). This script moves each moved key of a TOML file, with its comment, into the table
that holds it now ([rollout] split into [data], [rollout.sampling], [rollout.client] and
[rollout.staleness]; backend settings into [engine.sglang], [engine.embedded], [engine.external];
[agent] and [sandbox] into [environment.args.agent] and [environment.args.sandbox]), prints the
result, or with --write replaces the file after checking that the result loads.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tandem.config.errors import ConfigError
from tandem.config.loading import load_config
from tandem.config.renamed import MOVED_KEYS, MOVED_TABLES

TABLE = re.compile(r"^\s*\[([A-Za-z0-9_.]+)\]\s*(#.*)?$")
KEY = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=")


def new_place(table: str, key: str) -> tuple[str, str] | None:
    """(table, key) a moved `table.key` lives at now, or None when it did not move."""
    moved = MOVED_KEYS.get(f"{table}.{key}")
    if moved is None and table in MOVED_TABLES:
        moved = f"{MOVED_TABLES[table]}.{key}"
    if moved is None:
        return None
    new_table, _, new_key = moved.rpartition(".")
    return new_table, new_key


def migrate(text: str) -> str:
    """`text` with every moved key in its new table; tables left empty by the moves are dropped."""
    kept: list[tuple[str, str]] = []  # (table, line)
    moved: dict[str, list[str]] = {}
    table, pending = "", list[str]()  # comment lines above the next key travel with it
    for line in text.splitlines():
        header = TABLE.match(line)
        key = KEY.match(line)
        if header:
            kept += [(table, c) for c in pending]
            table, pending = header.group(1), []
            kept.append((table, line))
        elif key and (place := new_place(table, key.group(1))):
            new_table, new_key = place
            moved.setdefault(new_table, []).extend(pending + [line.replace(key.group(1), new_key, 1).lstrip()])
            pending = []
        elif line.lstrip().startswith("#"):
            pending.append(line)
        else:
            kept += [(table, c) for c in pending] + [(table, line)]
            pending = []
    kept += [(table, c) for c in pending]
    return _assemble(kept, moved)


def _assemble(kept: list[tuple[str, str]], moved: dict[str, list[str]]) -> str:
    out: list[str] = []
    tables_with_keys = {t for t, line in kept if KEY.match(line)}
    for table, line in kept:
        header = TABLE.match(line)
        if header and table not in tables_with_keys and table not in moved:
            continue  # a table every key left ([agent], [sandbox], often [rollout]): an empty header says nothing
        out.append(line)
        if header and table in moved:
            out.extend(moved.pop(table))
    for table, lines in moved.items():
        out += ["", f"[{table}]", *lines]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n") + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    path = Path(argv[0])
    new = migrate(path.read_text())
    if "--write" not in argv:
        print(new, end="")
        return 0
    backup = path.with_suffix(path.suffix + ".before-migration")
    backup.write_text(path.read_text())
    path.write_text(new)
    try:
        load_config([], config_file=str(path))
    except ConfigError as err:
        path.write_text(backup.read_text())
        print(f"{path}: the migrated file does not load, left as it was:\n{err}", file=sys.stderr)
        return 1
    print(f"{path}: migrated (the original kept as {backup})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
