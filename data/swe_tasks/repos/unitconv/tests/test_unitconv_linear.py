import pytest

from unitconv import convert, parse_quantity


def test_length():
    assert convert(1, "mi", "km") == 1.609344
    assert convert(12, "in", "ft") == 1


def test_mass():
    assert convert(1000, "g", "kg") == 1


def test_incompatible_and_parse():
    with pytest.raises(ValueError):
        convert(1, "kg", "m")
    assert parse_quantity(" 3.5 km") == (3.5, "km")
