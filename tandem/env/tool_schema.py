"""A tool's JSON schema from its type hints and its Google-style docstring.

The schema is the one transformers.utils.get_json_schema writes (what TRL's environment_factory and
the chat templates expect; tests/test_tool_schema.py holds the two equal on every bundled tool and a
table of signatures). tandem writes it itself because the launcher checks an environment's tools
before anything starts, and importing transformers.utils costs seconds (hundreds of modules): a
refused run would pay for them before saying why (tests/test_first_hour.py).

    def search(query: str, limit: int = 5) -> list[str]:
        \"\"\"Search the index.

        Args:
            query: What to look for.
            limit: How many hits at most (choices: [5, 10])
        \"\"\"
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from typing import Any, Callable

JSON_TYPE = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
CONTAINER_TYPE = {list: "array", tuple: "array", dict: "object"}
SECTION = r"(?:Args|Returns|Raises):"
ARG_LINE = re.compile(r"^([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*)$")
CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


class ToolSchemaError(ValueError):
    """A tool whose schema cannot be written: a parameter without a type hint, a type with no JSON
    equivalent, or a parameter the docstring does not describe."""


def tool_schema(fn: Callable) -> dict:
    """{"type": "function", "function": {name, description, parameters[, return]}} for `fn`."""
    name = getattr(fn, "__name__", "operation")
    doc = (inspect.getdoc(fn) or "").strip()
    if not doc:
        raise ToolSchemaError(f"{name} has no docstring")
    description, arg_docs, returns_doc = parse_docstring(doc)
    parameters, returns = parameters_schema(fn, name)
    for arg, schema in parameters["properties"].items():
        if arg not in arg_docs:
            raise ToolSchemaError(f"the docstring of {name} does not describe the argument '{arg}'")
        text = arg_docs[arg]
        choices = CHOICES.search(text)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[:choices.start()].strip()
        schema["description"] = text
    function = {"name": name, "description": description, "parameters": parameters}
    if returns is not None:
        if returns_doc is not None:
            returns["description"] = returns_doc
        function["return"] = returns
    return {"type": "function", "function": function}


def parse_docstring(doc: str) -> tuple[str, dict[str, str], str | None]:
    """(the description before the first section, {argument: its text}, the Returns: text or None)."""
    head = re.match(rf"(.*?)[\n\s]*(?:{SECTION}|\Z)", doc, re.S)  # always matches (\Z); typed Optional
    description = head.group(1).strip() if head else doc.strip()
    args_block = re.search(r"\n\s*Args:\n(.*?)[\n\s]*(?:Returns:|Raises:|\Z)", doc, re.S)
    returns = re.search(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(?:Raises:|\Z)", doc, re.S)
    args: dict[str, str] = {}
    if args_block:
        current, indent = None, ""
        for line in (line for line in args_block.group(1).split("\n") if line.strip()):
            found = ARG_LINE.match(line)
            # A new argument starts at a "name:" not indented deeper than the argument before it.
            if found and (current is None or not (found.group(1).startswith(indent) and
                                                  len(found.group(1)) > len(indent))):
                current, indent = found.group(2), found.group(1)
                args[current] = found.group(3)
            elif current is not None:
                args[current] += "\n" + line
        args = {k: re.sub(r"\s*\n+\s*", " ", v.strip()) for k, v in args.items()}
    return description, args, returns.group(1).strip() if returns else None


def parameters_schema(fn: Callable, name: str) -> tuple[dict, dict | None]:
    """The parameters' object schema (a method's unannotated self/cls left out), and the return's
    schema (None when it has no hint or none that converts: the model never writes it)."""
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    implicit = params[0].name if params and params[0].name in ("self", "cls") and \
        params[0].annotation is inspect.Parameter.empty else None
    required = []
    for param in params:
        if param.name == implicit:
            continue
        if param.annotation is inspect.Parameter.empty:
            raise ToolSchemaError(f"argument {param.name} of {name} has no type hint")
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    properties, returns = {}, None
    for arg, hint in hints.items():
        if arg == implicit:
            continue
        if arg == "return":
            try:
                returns = type_schema(hint)
            except ToolSchemaError:
                pass
        else:
            properties[arg] = type_schema(hint)
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema, returns


def enum_schema(values: list) -> dict:
    kinds = list(dict.fromkeys(JSON_TYPE[type(v)] for v in values))  # each JSON type once, first seen first
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def type_schema(hint: Any) -> dict:
    """The JSON schema of one type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        return _plain_type_schema(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_schema(args)
    if origin is typing.Literal and args:
        if any(type(a) not in JSON_TYPE for a in args):
            raise ToolSchemaError(f"{hint}: a Literal may only list int, float, str, bool or None values")
        return enum_schema(list(args))
    if origin is list:
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise ToolSchemaError(f"{hint}: a tuple of one element or of any length has no schema; use list[...]")
        return {"type": "array", "prefixItems": [type_schema(a) for a in args]}
    if origin is dict:
        return {"type": "object", **({"additionalProperties": type_schema(args[1])} if len(args) == 2 else {})}
    raise ToolSchemaError(f"no JSON schema for the type hint {hint!r}")


def _plain_type_schema(hint: Any) -> dict:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        if not values or any(type(v) not in JSON_TYPE for v in values):
            raise ToolSchemaError(f"the Enum {hint.__name__} needs members valued int, float, str, bool or None")
        return enum_schema(values)
    if hint is Any:
        return {}
    if hint in JSON_TYPE:
        return {"type": JSON_TYPE[hint]}
    if hint in CONTAINER_TYPE:
        return {"type": CONTAINER_TYPE[hint]}
    raise ToolSchemaError(f"no JSON schema for the type hint {hint!r} (a tool takes int, float, str, bool, Enum, "
                          f"Literal, and list, tuple, dict and unions of those)")


def _union_schema(args: tuple) -> dict:
    members = [type_schema(a) for a in args if a is not type(None)]
    if len(members) == 1:
        schema = members[0]
    elif all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        names = sorted({m["type"] for m in members})
        schema = {"type": names[0] if len(names) == 1 else names}
    else:
        schema = {"anyOf": members}
    if type(None) in args:
        schema["nullable"] = True
    return schema
