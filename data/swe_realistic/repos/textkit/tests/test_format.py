import pytest

from textkit import title_words, truncate


@pytest.mark.parametrize("text, expected", [
    ("the lord of the rings", "The Lord of the Rings"), ("a tale of two cities", "A Tale of Two Cities"),
    ("war and peace", "War And Peace"), ("iPhone sales", "IPhone Sales"),
])
def test_title_words(text, expected):
    assert title_words(text) == expected


@pytest.mark.parametrize("text, width, expected", [
    ("hello world", 8, "hello..."), ("short", 10, "short"), ("exactly", 7, "exactly"), ("abcdef", 2, "..."),
])
def test_truncate(text, width, expected):
    assert truncate(text, width) == expected


def test_truncate_custom_suffix():
    assert truncate("hello world", 6, suffix="~") == "hello~"
