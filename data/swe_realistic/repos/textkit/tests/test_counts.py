import pytest

from textkit import count_vowels, hamming


@pytest.mark.parametrize("text, expected", [
    ("hello", 2), ("rhythm", 0), ("AEIOU", 5), ("Queueing", 5), ("", 0), ("education", 5),
])
def test_count_vowels(text, expected):
    assert count_vowels(text) == expected


@pytest.mark.parametrize("a, b, expected", [
    ("GAGCCTACTAACGGGAT", "CATCGTAATGACGGCCT", 7), ("AAA", "AAA", 0), ("ABC", "ABD", 1), ("", "", 0),
])
def test_hamming(a, b, expected):
    assert hamming(a, b) == expected


def test_hamming_needs_equal_lengths():
    with pytest.raises(ValueError):
        hamming("AB", "A")
