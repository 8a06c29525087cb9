from minimat.matrix import Matrix

__all__ = ["Matrix"]
