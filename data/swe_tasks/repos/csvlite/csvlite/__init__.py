from csvlite.reader import parse_line, read

__all__ = ["parse_line", "read"]
