import pytest

from romanum import from_roman


def test_simple():
    assert from_roman("III") == 3
    assert from_roman("VIII") == 8
    assert from_roman("XXVII") == 27


def test_subtractive():
    assert from_roman("IV") == 4
    assert from_roman("XC") == 90
    assert from_roman("MCMXCIV") == 1994


def test_lowercase_and_spaces():
    assert from_roman(" xiv ") == 14


def test_rejects_garbage():
    with pytest.raises(ValueError):
        from_roman("ABC")
    with pytest.raises(ValueError):
        from_roman("IIII")
