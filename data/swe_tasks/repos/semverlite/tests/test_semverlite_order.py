import pytest

from semverlite import parse


def test_parse_roundtrip():
    assert str(parse("10.20.30-rc.1")) == "10.20.30-rc.1"


def test_order():
    assert parse("1.0.0-alpha") < parse("1.0.0")
    assert parse("1.0.0-alpha.2") < parse("1.0.0-alpha.10")
    assert parse("1.2.3") < parse("1.10.0")


def test_invalid():
    with pytest.raises(ValueError):
        parse("1.2")
