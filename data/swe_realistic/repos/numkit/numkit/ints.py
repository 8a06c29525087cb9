"""Integer helpers: sign, clamp, gcd, primality, digit sums, bit counts."""


def sign(x: float) -> int:
    if x > 0:
        return 1
    if x < 0:
        return -1
    return 0


def clamp(x: float, lo: float, hi: float) -> float:
    if lo > hi:
        raise ValueError("empty range")
    return min(max(x, lo), hi)


def gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return abs(a)


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for d in range(2, int(n ** 0.5) + 1):
        if n % d == 0:
            return False
    return True


def digit_sum(n: int) -> int:
    n = abs(n)
    total = 0
    while n > 0:
        total += n % 10
        n //= 10
    return total


def popcount(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    count = 0
    while n:
        count += n & 1
        n >>= 1
    return count
