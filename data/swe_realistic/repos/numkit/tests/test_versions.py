import pytest

from numkit import compare_versions


@pytest.mark.parametrize("a, b, expected", [
    ("1.0", "1.0.0", 0), ("1.2", "1.10", -1), ("2.0", "1.9.9", 1), ("0.1", "0.1.1", -1), ("3.4.5", "3.4.5", 0),
])
def test_compare_versions(a, b, expected):
    assert compare_versions(a, b) == expected
