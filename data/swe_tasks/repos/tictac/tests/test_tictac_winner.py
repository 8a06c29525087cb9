from tictac import winner


def test_rows_and_columns():
    assert winner("XXX......") == "X"
    assert winner("O..O..O..") == "O"


def test_anti_diagonal():
    assert winner("..X.X.X..") == "X"
    assert [winner(b) for b in ("O.XOX.X..", "X.OXO.O..", "XO.XO....")] == ["X", "O", None]


def test_no_winner():
    assert winner("XOXOXOOXO") is None
