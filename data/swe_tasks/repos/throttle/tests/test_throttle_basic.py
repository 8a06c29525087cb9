import pytest

from throttle import TokenBucket


def test_burst():
    b = TokenBucket(rate=1, capacity=3, clock=lambda: 0.0)
    assert [b.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_validation():
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
    with pytest.raises(ValueError):
        TokenBucket(1, 1, clock=lambda: 0.0).wait_time(2)
