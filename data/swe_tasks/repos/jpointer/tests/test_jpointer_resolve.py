import pytest

from jpointer import PointerError, resolve


DOC = {"foo": ["bar", "baz"], "": 0, "x": {"y": None}}


def test_whole_document():
    assert resolve(DOC, "") is DOC


def test_arrays():
    assert resolve(DOC, "/foo/1") == "baz"
    with pytest.raises(PointerError):
        resolve(DOC, "/foo/01")
    with pytest.raises(PointerError):
        resolve(DOC, "/foo/2")


def test_empty_key_and_null():
    assert resolve(DOC, "/") == 0
    assert resolve(DOC, "/x/y") is None
