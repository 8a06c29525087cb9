import pytest

from httpkit import backoff, parse_retry_after


@pytest.mark.parametrize("value, expected", [("120", 120), (" 30 ", 30), ("0", 0), ("-5", 0)])
def test_parse_retry_after(value, expected):
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize("attempt, expected", [(0, 0.5), (1, 1.0), (3, 4.0), (6, 30.0), (10, 30.0)])
def test_backoff(attempt, expected):
    assert backoff(attempt) == expected


def test_backoff_custom_base():
    assert backoff(2, base=0.1, cap=100) == pytest.approx(0.4)
