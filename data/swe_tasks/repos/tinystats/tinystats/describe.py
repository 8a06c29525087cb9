"""Descriptive statistics without numpy."""

from collections import Counter


def mean(xs):
    xs = list(xs)
    if not xs:
        raise ValueError("mean of empty data")
    return sum(xs) / len(xs)


def median(xs):
    xs = sorted(xs)
    if not xs:
        raise ValueError("median of empty data")
    mid = len(xs) // 2
    if len(xs) % 2:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2


def mode(xs):
    counts = Counter(xs)
    if not counts:
        raise ValueError("mode of empty data")
    top = max(counts.values())
    return min(x for x, c in counts.items() if c == top)


def variance(xs, sample: bool = True):
    xs = list(xs)
    n = len(xs)
    if n < (2 if sample else 1):
        raise ValueError("not enough data")
    m = mean(xs)
    ss = sum((x - m) ** 2 for x in xs)
    return ss / (n - 1 if sample else n)
