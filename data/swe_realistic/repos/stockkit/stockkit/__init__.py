from stockkit.stock import OutOfStock, Stock, chunk, dedupe, needs_reorder

__all__ = ["OutOfStock", "Stock", "chunk", "dedupe", "needs_reorder"]
