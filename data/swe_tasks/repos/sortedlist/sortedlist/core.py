"""A list kept sorted with binary search."""


def lower_bound(xs, x) -> int:
    """First index i with xs[i] >= x (len(xs) if none)."""
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


class SortedList:
    def __init__(self, items=()):
        self._xs = sorted(items)

    def add(self, x) -> None:
        self._xs.insert(lower_bound(self._xs, x), x)

    def remove(self, x) -> None:
        i = lower_bound(self._xs, x)
        if i == len(self._xs) or self._xs[i] != x:
            raise ValueError(f"{x!r} not in list")
        del self._xs[i]

    def count_range(self, lo, hi) -> int:
        """How many items lie in [lo, hi)."""
        return lower_bound(self._xs, hi) - lower_bound(self._xs, lo)

    def __contains__(self, x) -> bool:
        i = lower_bound(self._xs, x)
        return i < len(self._xs) and self._xs[i] == x

    def __iter__(self):
        return iter(self._xs)

    def __len__(self):
        return len(self._xs)
