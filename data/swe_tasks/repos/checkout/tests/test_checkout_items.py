import pytest

from checkout import Cart


def test_add_remove():
    c = Cart({"a": 5})
    c.add("a", 3)
    c.remove("a", 2)
    assert c.items == {"a": 1}
    c.remove("a", 5)
    assert c.items == {}


def test_unknown_sku():
    with pytest.raises(KeyError):
        Cart({}).add("nope")


def test_coupon_range():
    with pytest.raises(ValueError):
        Cart({}).apply_coupon(80)
