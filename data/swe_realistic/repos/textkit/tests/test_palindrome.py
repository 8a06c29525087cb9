import pytest

from textkit import is_palindrome


@pytest.mark.parametrize("text, expected", [
    ("racecar", True), ("Racecar", True), ("A man, a plan, a canal: Panama", True), ("hello", False),
    ("", True), ("ab", False), ("No lemon, no melon", True),
])
def test_is_palindrome(text, expected):
    assert is_palindrome(text) == expected
