from tictac.board import Board, winner

__all__ = ["Board", "winner"]
