from iniread.parser import ParseError, parse

__all__ = ["parse", "ParseError"]
