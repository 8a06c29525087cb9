from sortedlist.core import SortedList, lower_bound

__all__ = ["SortedList", "lower_bound"]
