"""Tic-tac-toe boards as 9-character strings, row by row ('X', 'O' or '.')."""

LINES = [
    (0, 1, 2), (3, 4, 5), (6, 7, 8),
    (0, 3, 6), (1, 4, 7), (2, 5, 8),
    (0, 4, 8), (2, 4, 6),
]


def winner(cells: str):
    for a, b, c in LINES:
        if cells[a] != "." and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return None


class Board:
    def __init__(self, cells: str = "." * 9):
        if len(cells) != 9 or set(cells) - set("XO."):
            raise ValueError("a board is 9 cells of X, O or .")
        self.cells = cells

    @property
    def to_move(self) -> str:
        return "X" if self.cells.count("X") == self.cells.count("O") else "O"

    def play(self, index: int) -> "Board":
        if winner(self.cells):
            raise ValueError("game is over")
        if self.cells[index] != ".":
            raise ValueError(f"cell {index} is taken")
        return Board(self.cells[:index] + self.to_move + self.cells[index + 1:])

    def status(self) -> str:
        w = winner(self.cells)
        if w:
            return f"{w} wins"
        return "draw" if "." not in self.cells else f"{self.to_move} to move"
