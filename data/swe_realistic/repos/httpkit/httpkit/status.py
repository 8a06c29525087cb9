"""HTTP status helpers: classes of codes, retry decisions, back-off delays."""

import enum

RETRYABLE = frozenset({408, 429, 502, 503, 504})


class StatusClass(enum.IntEnum):
    INFORMATIONAL = 1
    SUCCESS = 2
    REDIRECT = 3
    CLIENT_ERROR = 4
    SERVER_ERROR = 5


def status_class(code: int) -> StatusClass:
    if not 100 <= code < 600:
        raise ValueError(f"not an HTTP status: {code}")
    return StatusClass(code // 100)


def is_retryable(code: int) -> bool:
    return code in RETRYABLE


def parse_retry_after(value: str) -> int:
    """Seconds from a Retry-After header given in seconds (never negative)."""
    seconds = int(value.strip())
    return max(seconds, 0)


def backoff(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    """Exponential back-off: base * 2**attempt, at most cap."""
    return min(cap, base * 2 ** attempt)
