"""Compare dotted version strings numerically."""


def _parts(version: str) -> list[int]:
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return parts


def compare_versions(a: str, b: str) -> int:
    """-1 if a < b, 0 if equal, 1 if a > b."""
    pa, pb = _parts(a), _parts(b)
    return (pa > pb) - (pa < pb)
