from unitconv import convert


def test_boiling_point():
    assert convert(100, "C", "F") == 212
    assert convert(212, "F", "C") == 100


def test_kelvin():
    assert convert(0, "K", "C") == -273.15
    assert convert(-40, "F", "C") == -40
