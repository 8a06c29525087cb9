import pytest

from csvlite import parse_line


def test_quoted_delimiter():
    assert parse_line('a,"b,c",d') == ["a", "b,c", "d"]


def test_doubled_quote():
    assert parse_line('"say ""hi""",x') == ['say "hi"', "x"]
    assert parse_line('7,"a ""b"" c"') == ["7", 'a "b" c']


def test_unterminated():
    with pytest.raises(ValueError):
        parse_line('"abc')
