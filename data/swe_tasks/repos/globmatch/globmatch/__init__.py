from globmatch.match import filter_names, match

__all__ = ["match", "filter_names"]
