from calcparse import evaluate


def test_mul_before_add():
    assert evaluate("2 + 3 * 4") == 14


def test_left_assoc_sub_div():
    assert evaluate("10 - 4 - 3") == 3
    assert evaluate("64 / 4 / 2") == 8
    assert evaluate("20 - 6 + 5 - 2") == 17


def test_power_right_assoc():
    assert evaluate("2 ** 3 ** 2") == 512
