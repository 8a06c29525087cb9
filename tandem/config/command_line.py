"""The command line of `python train.py`: `--section.key VALUE` overrides, shorthands, --help.

--help is generated from the config models, so it lists every key with its type, bounds,
default and docstring, and nothing else.
"""

from __future__ import annotations

import tomllib
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tandem.config.base import backend_doc, backend_variants, variant_only_keys
from tandem.config.errors import ConfigError
from tandem.config.schema import TandemConfig

SHORTHANDS = {
    "--engines": "engine.count",
    "--mode": "run.mode",
    "--steps": "run.steps",
    "--run-dir": "run.run_dir",
    "--seed": "run.seed",
    "--model": "model.path",
}
FLAGS = {"--rehearse": ("run.rehearse", True), "--verbose": ("logging.verbose", True)}
"""Options without a value: the key they set, and to what."""
# Options handled by train.py itself, listed here so --help shows them.
LAUNCHER_OPTIONS = {"--resume DIR": "continue the run in DIR from its latest complete checkpoint",
                    "--overwrite": "start afresh in a run dir that already holds a run, deleting that run's outputs "
                                   "(without it, such a run dir is refused and nothing in it is touched)"}


def _parse_value(text: str) -> Any:
    """CLI values are read as TOML literals when they parse (numbers, bools, lists), else as strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_cli(argv: list[str]) -> tuple[str | None, dict[str, Any], bool]:
    """Split argv into (config file, dotted overrides, help requested)."""
    config_file: str | None = None
    overrides: dict[str, Any] = {}
    want_help = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            want_help = True
            i += 1
            continue
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' (options look like --section.key value)")
        if arg in FLAGS:
            key, setting = FLAGS[arg]
            overrides[key] = setting
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        if eq:
            value, i = inline, i + 1
        else:
            if i + 1 >= len(argv):
                raise ConfigError(f"option '{name}' needs a value")
            value, i = argv[i + 1], i + 2
        if name == "--config":
            config_file = value
        elif name in SHORTHANDS:
            overrides[SHORTHANDS[name]] = _parse_value(value)
        elif "." in name:
            overrides[name[2:]] = _parse_value(value)
        else:
            raise ConfigError(f"unknown option '{name}' (see --help)")
    return config_file, overrides, want_help


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin is not None and hasattr(annotation, "__metadata__"):  # Annotated: bounds are shown apart
        return _type_name(args[0])
    if origin is Union or type(annotation).__name__ == "UnionType":
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


_BOUND_SIGNS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))


def _bounds(field: FieldInfo) -> str:
    """', >= 1' style text for the range declared on a field (empty when it has none)."""
    parts = [f"{sign} {getattr(m, attr)}" for m in field.metadata
             for kind, attr, sign in _BOUND_SIGNS if isinstance(m, kind)]
    return "".join(f", {part}" for part in parts)


def help_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(--flag, type and bounds, default, docstring) of every leaf key under `model`; under a
    section by backend, the common keys, then each backend's own, marked with the backend."""
    rows = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        variants = backend_variants(sub)
        if variants:
            rows.extend(_backend_rows(variants, f"{prefix}{name}"))
        elif isinstance(sub, type) and issubclass(sub, BaseModel):
            rows.extend(help_rows(sub, f"{prefix}{name}."))
        else:
            kind = _type_name(sub) + _bounds(field)
            rows.append((f"--{prefix}{name}", kind, repr(field.default), field.description or ""))
    return rows


def _backend_rows(variants: dict[str, type[BaseModel]], section: str) -> list[tuple[str, str, str, str]]:
    default = next(iter(variants.values()))
    own = variant_only_keys(variants)
    rows: list[tuple[str, str, str, str]] = []
    for flag, kind, value, doc in help_rows(default, f"{section}."):
        key = flag[2:].removeprefix(f"{section}.").partition(".")[0]
        if key == "backend":
            rows.insert(0, (flag, "|".join(variants), value, backend_doc(variants)))
        elif key not in own:
            rows.append((flag, kind, value, doc))
    for backend, model in variants.items():
        for key in own:
            if key in model.model_fields:
                rows += [(flag, kind, value, f"[{section}.backend = '{backend}'] {doc}")
                         for flag, kind, value, doc in help_rows(model, f"{section}.")
                         if flag[2:].removeprefix(f"{section}.").partition(".")[0] == key]
    return rows


def help_text(environment_args: dict[str, type[BaseModel]] | None = None) -> str:
    """--help: every config key; with `environment_args` ({environment: its Args model}), each typed
    environment's arguments too, as --environment.args.KEY."""
    lines = [
        "usage: python train.py [--config FILE] [--engines N] [--mode sync|async] [--steps S] [--run-dir DIR] "
        "[--resume DIR | --overwrite] [--rehearse] [--verbose] [--section.key VALUE ...]",
        "",
        "tandem: single-node RL post-training. Every key of config.toml can be overridden as --section.key VALUE",
        "(values are TOML literals: 3, 1e-3, true, '[\"a\", \"b\"]'; anything else is a string).",
        "",
        "shorthands:",
        "  --config FILE        config file to load (default: ./config.toml when present)",
    ]
    lines += [f"  {flag:<20} = --{key}" for flag, key in SHORTHANDS.items()]
    lines += [f"  {flag:<20} = --{key} {str(value).lower()}" for flag, (key, value) in FLAGS.items()]
    lines += [f"  {flag:<20} {doc}" for flag, doc in LAUNCHER_OPTIONS.items()]
    lines += [""]
    sections = [("config keys:", help_rows(TandemConfig))]
    sections += [(f"environment.args of {name} (environment.name = {name!r}):", help_rows(model, "environment.args."))
                 for name, model in (environment_args or {}).items()]
    for title, rows in sections:
        lines += ["", title] if title != "config keys:" else [title]
        for flag, kind, default, doc in rows:
            lines.append(f"  {flag} ({kind}, default {default})")
            if doc:
                lines.append(f"      {doc}")
    return "\n".join(lines)
