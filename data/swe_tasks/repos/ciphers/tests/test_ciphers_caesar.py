import pytest

from ciphers import caesar, vigenere


def test_caesar():
    assert caesar("abc xyz", 3) == "def abc"
    assert caesar("Def", 3, decrypt=True) == "Abc"


def test_bad_key():
    with pytest.raises(ValueError):
        vigenere("x", "k3y")
