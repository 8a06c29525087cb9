import pytest

from tictac import Board


def test_alternates():
    b = Board().play(4).play(0)
    assert b.cells == "O...X...."
    assert b.status() == "X to move"


def test_taken():
    with pytest.raises(ValueError):
        Board().play(4).play(4)


def test_draw():
    assert Board("XOXXOOOXX").status() == "draw"
