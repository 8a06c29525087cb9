"""A token-bucket rate limiter with an injectable clock (for tests)."""

import time


class TokenBucket:
    def __init__(self, rate: float, capacity: float, clock=time.monotonic):
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate, self.capacity, self.clock = rate, capacity, clock
        self.tokens = capacity
        self.stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def try_acquire(self, n: float = 1) -> bool:
        self._refill()
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def wait_time(self, n: float = 1) -> float:
        """Seconds until n tokens are available (0 if they are now)."""
        if n > self.capacity:
            raise ValueError("request exceeds capacity")
        self._refill()
        return max(0.0, (n - self.tokens) / self.rate)
