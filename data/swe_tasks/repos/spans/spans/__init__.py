from spans.merge import merge, total_length, overlaps

__all__ = ["merge", "total_length", "overlaps"]
