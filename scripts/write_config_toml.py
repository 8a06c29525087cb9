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


def render(model: BaseModel, section: str, out: list[str]) -> None:
    scalars, subsections = [], []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        (subsections if isinstance(value, BaseModel) else scalars).append((name, field, value))
    if section:
        out.append("")
        out.append(f"[{section}]")
    for name, field, value in scalars:
        if value is None:
            out.extend(comment(field.description or ""))
            out.append(f"# {name} =  (unset)")
            continue
        out.extend(comment(field.description or ""))
        out.append(f"{name} = {toml_value(value)}")
    for name, field, value in subsections:
        sub = f"{section}.{name}" if section else name
        out.append("")
        out.extend(comment(field.description or ""))
        render(value, sub, out)


def main() -> None:
    out: list[str] = [HEADER.rstrip()]
    render(TandemConfig(), "", out)
    text = "\n".join(line for line in out) + "\n"
    text = text.replace("\n\n\n", "\n\n")
    (REPO / "config.toml").write_text(text)
    print(f"wrote {REPO / 'config.toml'}")


if __name__ == "__main__":
    main()
