from tinystats import mean, mode, variance


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mode_tie_smallest():
    assert mode([3, 1, 3, 1, 2]) == 1


def test_variance():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False) == 4.0
    assert abs(variance([1, 2, 3, 4]) - 1.6666666) < 1e-6
