"""A small inventory: item counts, reorder checks, batching helpers."""


class OutOfStock(Exception):
    pass


class Stock:
    def __init__(self) -> None:
        self._items: dict[str, int] = {}

    def add(self, item: str, qty: int = 1) -> None:
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._items[item] = self._items.get(item, 0) + qty

    def remove(self, item: str, qty: int = 1) -> None:
        have = self._items.get(item, 0)
        if have < qty:
            raise OutOfStock(f"{item}: have {have}, need {qty}")
        self._items[item] = have - qty

    def count(self, item: str) -> int:
        return self._items.get(item, 0)

    def total(self) -> int:
        return sum(self._items.values())


def needs_reorder(count: int, threshold: int) -> bool:
    return count <= threshold


def chunk(seq: list, size: int) -> list[list]:
    if size < 1:
        raise ValueError("size must be at least 1")
    return [seq[i:i + size] for i in range(0, len(seq), size)]


def dedupe(seq: list) -> list:
    seen = set()
    out = []
    for x in seq:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out
