"""Regenerate config.toml from the typed defaults: `python scripts/write_config_toml.py`.

config.toml is the user-facing copy of the config tree; generating it keeps every key,
default and docstring in one place (the models of tandem/config/). tests/test_config.py
fails if the two drift apart.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]

from tandem.config import TandemConfig
from tandem.config.base import backend_doc, backend_variants, variant_only_keys

HEADER = """\
# tandem configuration. Every key can be overridden on the command line as --section.key VALUE,
# e.g. `python train.py --engines 3 --mode async --trainer.lr 1e-6`. `python train.py --help` lists them.
# The defaults are the CPU run: a tiny Qwen3 model built locally, the echo task, 2 embedded engines.
# Generated from the models in tandem/config/ by scripts/write_config_toml.py.
"""


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {value!r}")


def comment(text: str) -> list[str]:
    return ["# " + line for line in textwrap.wrap(text, 100)]


def render(model: BaseModel, section: str, out: list[str], backend_tables: dict[str, type[BaseModel]] | None = None) -> None:
    """`model`'s keys under [section]. For a section by backend, its backends' own sub-tables are
    written commented out: a table for another backend than the chosen one is an error, so the
    file carries none, and each shows what setting that backend takes."""
    scalars, subsections = [], []
    own = variant_only_keys(backend_tables) if backend_tables else {}
    for name, field in type(model).model_fields.items():
        if name in own:
            continue
        value = getattr(model, name)
        (subsections if isinstance(value, BaseModel) else scalars).append((name, field, value))
    scalars.sort(key=lambda item: item[0] != "backend")  # the key that decides what else the table holds, first
    if section:
        out.append("")
        out.append(f"[{section}]")
    for name, field, value in scalars:
        doc = field.description or ""
        if name == "backend" and backend_tables:
            doc = backend_doc(backend_tables)
        out.extend(comment(doc))
        out.append(f"# {name} =  (unset)" if value is None else f"{name} = {toml_value(value)}")
    for name, field, value in subsections:
        sub = f"{section}.{name}" if section else name
        out.append("")
        out.extend(comment(field.description or ""))
        render(value, sub, out, backend_variants(type(model).model_fields[name].annotation) or None)
    for key, backend in own.items():
        _commented_table(backend_tables[backend], key, f"{section}.{key}", out)


def _commented_table(variant: type[BaseModel], key: str, table: str, out: list[str]) -> None:
    field = variant.model_fields[key]
    block: list[str] = []
    render(field.default, table, block)
    out.append("")
    out.extend(comment(field.description or ""))
    out.extend(line if not line or line.startswith("#") else f"# {line}" for line in block[1:])


def main() -> None:
    out: list[str] = [HEADER.rstrip()]
    render(TandemConfig(), "", out)
    text = "\n".join(line for line in out) + "\n"
    text = text.replace("\n\n\n", "\n\n")
    (REPO / "config.toml").write_text(text)
    print(f"wrote {REPO / 'config.toml'}")


if __name__ == "__main__":
    main()
