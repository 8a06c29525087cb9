from unitconv.convert import convert, parse_quantity

__all__ = ["convert", "parse_quantity"]
