import pytest

from csvlite import parse_line, read


def test_read():
    assert read("name;age\nann;3\n", delimiter=";") == [{"name": "ann", "age": "3"}]


def test_empty_fields():
    assert parse_line(",,") == ["", "", ""]


def test_ragged():
    with pytest.raises(ValueError):
        read("a,b\n1\n")
