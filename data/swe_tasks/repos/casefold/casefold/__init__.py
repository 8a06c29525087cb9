from casefold.convert import to_camel, to_kebab, to_snake

__all__ = ["to_snake", "to_camel", "to_kebab"]
