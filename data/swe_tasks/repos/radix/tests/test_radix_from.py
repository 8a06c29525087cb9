import pytest

from radix import from_base, to_base


def test_parse():
    assert from_base("ff", 16) == 255
    assert from_base("-1010", 2) == -10


def test_invalid_digit():
    with pytest.raises(ValueError):
        from_base("2", 2)


def test_base36():
    assert from_base("21i3v9", 36) == 123456789
