from jpointer.pointer import PointerError, resolve, split

__all__ = ["resolve", "split", "PointerError"]
