from radix.convert import from_base, to_base

__all__ = ["to_base", "from_base"]
