"""tandem's tool schemas (tandem.env.tool_schema) are transformers.utils.get_json_schema's, which TRL's
environment_factory and the chat templates expect: equal on every bundled environment's tools and on a
table of signatures, and refused where transformers refuses."""

from __future__ import annotations

import enum
from typing import Any, Literal, Optional, Union

import pytest

pytestmark = pytest.mark.unit


class Color(enum.Enum):
    RED = "red"
    ONE = 1


def plain(query: str, limit: int = 5, ratio: float = 0.5, exact: bool = False) -> list[str]:
    """Search the index.

    A second paragraph of description.

    Args:
        query: What to look for,
            over two lines.
        limit (int): How many hits at most (choices: [5, 10])
        ratio: A share.
        exact: Whole words only.

    Returns:
        The hits, best first.
    """
    return []


def containers(a: list[int], b: dict[str, float], c: tuple[int, str], d: list, e: dict, f: tuple,
               g: Any, h: list[list[bool]]) -> None:
    """Containers.

    Args:
        a: a
        b: b
        c: c
        d: d
        e: e
        f: f
        g: g
        h: h
    """


def unions(a: Optional[int], b: Union[int, str], c: int | None = None, d: list[int] | str = "x",
           e: Literal["x", "y"] = "x", f: Literal[1, "a"] = 1, g: Color = Color.RED, h: int | float | None = 0,
           i: list | tuple = ()) -> dict[str, int]:
    """Unions, literals, enums.

    Args:
        a: a
        b: b (choices: ["p", "q"])
        c: c
        d: d
        e: e
        f: f
        g: g
        h: h
        i: i
    """
    return {}


class Tools:
    def method(self, x: int) -> str:
        """A method.

        Args:
            x: a number
        """
        return ""


def no_doc(x: int) -> None:
    pass


def no_hint(x) -> None:
    """No hint.

    Args:
        x: x
    """


def undocumented(x: int, y: int) -> None:
    """Only x.

    Args:
        x: x
    """


def custom(x: Tools) -> None:
    """Custom class.

    Args:
        x: x
    """


def one_tuple(x: tuple[int]) -> None:
    """One-element tuple.

    Args:
        x: x
    """


def unconvertible_return(x: int) -> Tools:
    """The return is left out, the tool kept.

    Args:
        x: x
    """


def bundled_tools():
    from tandem.envs.coding import CodingEnv
    from tandem.envs.counter import Counter
    from tandem.envs.lookup import Lookup
    for cls in (Lookup, Counter, CodingEnv):
        for name in cls.tools():
            yield f"{cls.__name__}.{name}", getattr(cls, name)


CASES = [("plain", plain), ("containers", containers), ("unions", unions), ("method", Tools.method),
         ("unconvertible_return", unconvertible_return), *bundled_tools()]


@pytest.mark.parametrize("fn", [fn for _, fn in CASES], ids=[name for name, _ in CASES])
def test_a_tools_schema_is_transformers_schema(fn):
    from transformers.utils import get_json_schema

    from tandem.env.tool_schema import tool_schema

    assert tool_schema(fn) == get_json_schema(fn)


@pytest.mark.parametrize("fn", [no_doc, no_hint, undocumented, custom, one_tuple])
def test_a_tool_transformers_refuses_is_refused(fn):
    from transformers.utils import get_json_schema

    from tandem.env.tool_schema import ToolSchemaError, tool_schema

    with pytest.raises(Exception):
        get_json_schema(fn)
    with pytest.raises(ToolSchemaError):
        tool_schema(fn)
