from wrapper.wrap import justify, wrap

__all__ = ["wrap", "justify"]
