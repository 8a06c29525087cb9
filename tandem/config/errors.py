"""ConfigError, and pydantic's validation errors rewritten as one line that names each key."""

from __future__ import annotations

from typing import Any, get_origin

from pydantic import BaseModel, ValidationError

from tandem.config.base import RULE_ERROR, backend_variants
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


def field_key(loc: tuple[str | int, ...], root: Any = None) -> str:
    """The dotted config key of an error location, without what pydantic adds after a field of a
    union type (the member it tried: 'int', "literal['all']") or of a section by backend (the
    backend's tag)."""
    model: Any = root or TandemConfig
    parts: list[str] = []
    tag_next = False
    for part in loc:
        if isinstance(part, int):
            continue
        if tag_next:  # the backend's tag after a section by backend: it selects the model
            model, tag_next = model.get(part, model), False
            continue
        fields = getattr(model, "model_fields", None)
        if fields is None:  # past a leaf: a dict's keys stay (engine.sglang.args.foo), union tags go
            if model is dict:
                parts.append(part)
            break
        field = fields.get(part)
        if field is None:
            break
        parts.append(part)
        sub = field.annotation
        variants = backend_variants(sub)
        if variants:
            model, tag_next = variants, True
        else:
            model = sub if isinstance(sub, type) and issubclass(sub, BaseModel) else get_origin(sub) or sub
    return ".".join(parts)


def _backend_problem(error: dict[str, Any], key: str) -> str:
    """pydantic's union_tag_invalid, for a section by backend: the backend key named, its choices listed."""
    choices = error.get("ctx", {}).get("expected_tags", "")
    return f"config key '{key}.backend': Input should be one of {choices} (got {error['ctx'].get('tag')!r})"


def validation_problems(err: ValidationError, root: Any = None, prefix: str = "") -> list[str]:
    """One line per bad key; a union's alternatives (int, or the literal 'all') become one line.
    Keys are named from `root` (TandemConfig, or a plug-in's typed arguments under `prefix`)."""
    by_key: dict[str, list[Any]] = {}
    for error in err.errors():
        key = field_key(error["loc"], root) if error["type"] != RULE_ERROR else ""
        by_key.setdefault(prefix + key if key else "", []).append(error)
    lines = []
    for key, errors in by_key.items():
        if errors[0]["type"] == "union_tag_invalid":
            lines.append(_backend_problem(errors[0], key))
        elif len(errors) > 1 and key:
            got = errors[0].get("input")
            msgs = [e["msg"].removeprefix("Value error, ") for e in errors]
            alternatives = [msgs[0]] + [m.removeprefix("Input should be ") for m in msgs[1:]]
            lines.append(f"config key '{key}': " + " or ".join(alternatives)
                         + ("" if isinstance(got, dict) else f" (got {got!r})"))
        else:
            lines += [_describe(e, key) for e in errors]
    return lines
