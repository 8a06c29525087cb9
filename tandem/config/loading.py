"""From config.toml (or a saved tree) plus command-line overrides to a validated TandemConfig.

Unknown keys fail before validation, naming the whole dotted key the user typed (or, for
a removed key, why it went and what to do); bad values fail with pydantic's reason, also
naming the key. Both surface as one ConfigError.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tandem.config.cli import help_text, parse_cli
from tandem.config.errors import ConfigError, format_validation_error
from tandem.config.removed import removed_key_message
from tandem.config.schema import TandemConfig

DEFAULT_CONFIG_FILE = "config.toml"


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _check_known(model: type[BaseModel], tree: dict, prefix: str = "") -> None:
    """Fail on the first unknown key, naming it with its full dotted path."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            removed = removed_key_message(dotted)
            if removed:
                raise ConfigError(removed)
            while isinstance(value, dict) and value:  # name the full key the user typed
                key, value = next(iter(value.items()))
                dotted = f"{dotted}.{key}"
            raise ConfigError(f"unknown config key '{dotted}'")
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{dotted}' is a section; got the value {value!r}")
            _check_known(sub, value, dotted + ".")


def build_config(tree: dict) -> TandemConfig:
    _check_known(TandemConfig, tree)
    try:
        return TandemConfig.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def _read_toml(path: str) -> dict[str, Any]:
    if not Path(path).exists():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        return tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file '{path}' is not valid TOML: {err}") from None


def load_config(argv: list[str] | None = None, *, config_file: str | None = None,
                base_tree: dict | None = None) -> TandemConfig:
    """Load config.toml (or --config FILE, or a given base tree), apply CLI overrides, validate."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_file, overrides, want_help = parse_cli(argv)
    if want_help:
        print(help_text())
        raise SystemExit(0)
    if base_tree is not None and cli_file:
        raise ConfigError("--config cannot be combined with --resume (the run's own config.json is used)")
    tree: dict[str, Any] = dict(base_tree or {})
    path = cli_file or config_file
    if base_tree is not None:
        path = None
    elif path is None and Path(DEFAULT_CONFIG_FILE).exists():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        tree = _read_toml(path)
    for dotted, value in overrides.items():
        _set_dotted(tree, dotted, value)
    return build_config(tree)


def config_from_json(path: str | os.PathLike) -> TandemConfig:
    """Children read the launcher's resolved config, so every process sees the same values."""
    return TandemConfig.model_validate_json(Path(path).read_text())
