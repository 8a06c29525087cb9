from checkout import Cart


def test_bulk_discount_threshold():
    c = Cart({"pen": 100})
    c.add("pen", 10)
    assert c.subtotal() == 900
    d = Cart({"mug": 35})
    d.add("mug", 10)
    assert d.subtotal() == 315


def test_coupon_after_bulk():
    c = Cart({"pen": 100, "pad": 250})
    c.add("pen", 10)
    c.add("pad", 2)
    c.apply_coupon(10)
    assert c.total() == 1260
