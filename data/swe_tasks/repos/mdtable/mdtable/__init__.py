from mdtable.render import render

__all__ = ["render"]
