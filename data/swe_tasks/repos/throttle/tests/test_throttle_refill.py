from throttle import TokenBucket


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_refill_is_capped():
    clock = Clock()
    b = TokenBucket(rate=2, capacity=7, clock=clock)
    assert b.try_acquire(7)
    clock.t = 100
    assert b.try_acquire(1)
    assert b.tokens == 6
    assert not b.try_acquire(7)


def test_wait_time():
    clock = Clock()
    b = TokenBucket(rate=2, capacity=4, clock=clock)
    b.try_acquire(4)
    assert b.wait_time(1) == 0.5
    clock.t = 0.5
    assert b.wait_time(1) == 0.0
