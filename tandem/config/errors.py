"""ConfigError, and pydantic's validation errors rewritten as one line that names each key."""

from __future__ import annotations

from typing import Any, get_origin

from pydantic import BaseModel, ValidationError

from tandem.config.base import RULE_ERROR
from tandem.config.schema import TandemConfig


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


def _describe(error: dict[str, Any], key: str) -> str:
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == RULE_ERROR or not key:
        return f"config: {msg}"  # a cross-field rule names every key it involves itself
    where = "".join(f", item {i}" for i in key_path(error["loc"])[1])
    got = error.get("input")
    got_text = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"config key '{key}'{where}: {msg}{got_text}"


def field_key(loc: tuple[str | int, ...]) -> str:
    """The dotted config key of an error location, without what pydantic adds after a field of a
    union type (the member it tried: 'int', "literal['all']")."""
    model: Any = TandemConfig
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", None)
        if fields is None:  # past a leaf: a dict's keys stay (engine.sglang_args.foo), union tags go
            if model is dict:
                parts.append(part)
            break
        field = fields.get(part)
        if field is None:
            break
        parts.append(part)
        sub = field.annotation
        model = sub if isinstance(sub, type) and issubclass(sub, BaseModel) else get_origin(sub) or sub
    return ".".join(parts)


def validation_problems(err: ValidationError) -> list[str]:
    """One line per bad key; a union's alternatives (int, or the literal 'all') become one line."""
    by_key: dict[str, list[dict]] = {}
    for error in err.errors():
        by_key.setdefault(field_key(error["loc"]) if error["type"] != RULE_ERROR else "", []).append(error)
    lines = []
    for key, errors in by_key.items():
        if len(errors) > 1 and key:
            got = errors[0].get("input")
            msgs = [e["msg"].removeprefix("Value error, ") for e in errors]
            alternatives = [msgs[0]] + [m.removeprefix("Input should be ") for m in msgs[1:]]
            lines.append(f"config key '{key}': " + " or ".join(alternatives)
                         + ("" if isinstance(got, dict) else f" (got {got!r})"))
        else:
            lines += [_describe(e, key) for e in errors]
    return lines
