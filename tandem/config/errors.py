"""ConfigError, and pydantic's validation errors rewritten as one line that names each key."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tandem.config.sections import RULE_ERROR


class ConfigError(ValueError):
    """A config problem, phrased for the user; its message names the offending key."""


def key_path(loc: tuple[str | int, ...]) -> tuple[str, list[int]]:
    """(dotted config key, list positions) of a pydantic error location.

    List and tuple positions (the ints of `loc`) stay out of the key, so the key is one a
    user can type as `--section.key` or find in config.toml; the positions are reported
    beside it. String parts are field names or dict keys and stay, digits or not.
    """
    key = ".".join(part for part in loc if isinstance(part, str))
    return key, [part for part in loc if isinstance(part, int)]


def _describe(error: dict[str, Any]) -> str:
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == RULE_ERROR:
        return f"config: {msg}"  # a cross-field rule names every key it involves itself
    key, positions = key_path(error["loc"])
    if not key:
        return f"config: {msg}"
    where = "".join(f", item {i}" for i in positions)
    got = error.get("input")
    got_text = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"config key '{key}'{where}: {msg}{got_text}"


def format_validation_error(err: ValidationError) -> str:
    return "; ".join(_describe(error) for error in err.errors())
