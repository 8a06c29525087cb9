from unitconv import convert


def test_boiling_point():
    assert convert(100, "C", "F") == 212
    assert convert(37, "C", "F") == 98.6


def test_kelvin():
    assert convert(0, "K", "C") == -273.15
    assert convert(-40, "F", "C") == -40
