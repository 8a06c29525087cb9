import pytest

from rlecodec import decode


def test_decode():
    assert decode("3a1b") == "aaab"


def test_decode_multidigit():
    assert decode("12x2y") == "x" * 12 + "yy"


def test_decode_errors():
    with pytest.raises(ValueError):
        decode("a")
    with pytest.raises(ValueError):
        decode("3a2")
