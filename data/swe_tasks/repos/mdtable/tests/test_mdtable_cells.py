import pytest

from mdtable import render


def test_escapes_pipes():
    assert "a\\|b" in render(["x"], [["a|b"]])


def test_row_length():
    with pytest.raises(ValueError):
        render(["a", "b"], [[1]])
