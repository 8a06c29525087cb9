from checkout.cart import Cart

__all__ = ["Cart"]
