import pytest

from romanum import to_roman


def test_format():
    assert to_roman(1) == "I"
    assert to_roman(2024) == "MMXXIV"


def test_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)
