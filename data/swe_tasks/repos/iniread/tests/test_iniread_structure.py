import pytest

from iniread import ParseError, parse


def test_sections_and_comments():
    c = parse("# top\n[one]\na = 1\n; note\n[two]\nb = 2\n")
    assert c == {"one": {"a": "1"}, "two": {"b": "2"}}


def test_errors():
    with pytest.raises(ParseError):
        parse("a = 1\n")
    with pytest.raises(ParseError):
        parse("[s]\njunk\n")
