from editdist.distance import closest, levenshtein

__all__ = ["levenshtein", "closest"]
