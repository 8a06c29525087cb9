from ratio.frac import Frac

__all__ = ["Frac"]
