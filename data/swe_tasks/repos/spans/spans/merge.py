"""Closed integer intervals [start, end]."""


def overlaps(a, b) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def merge(intervals):
    """Merge overlapping or touching intervals; returns a sorted list."""
    out = []
    for start, end in sorted(intervals):
        if start > end:
            raise ValueError(f"bad interval {(start, end)}")
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def total_length(intervals) -> int:
    return sum(end - start + 1 for start, end in merge(intervals))
