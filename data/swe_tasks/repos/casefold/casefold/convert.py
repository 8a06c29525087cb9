"""Identifier case conversion."""

import re

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _words(name: str):
    name = _BOUNDARY.sub(" ", name)
    return [w.lower() for w in re.split(r"[\s_\-]+", name) if w]


def to_snake(name: str) -> str:
    return "_".join(_words(name))


def to_kebab(name: str) -> str:
    return "-".join(_words(name))


def to_camel(name: str, upper_first: bool = False) -> str:
    words = _words(name)
    if not words:
        return ""
    first = words[0].capitalize() if upper_first else words[0]
    return first + "".join(w.capitalize() for w in words[1:])
