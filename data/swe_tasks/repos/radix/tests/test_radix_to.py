from radix import to_base


def test_binary():
    assert to_base(10, 2) == "1010"


def test_hex_negative():
    assert to_base(-255, 16) == "-ff"


def test_zero():
    assert to_base(0, 7) == "0"
