from qstring.query import build, parse

__all__ = ["parse", "build"]
