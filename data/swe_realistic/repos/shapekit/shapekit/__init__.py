from shapekit.plane import Kind, classify_triangle, in_rect, manhattan, quadrant

__all__ = ["Kind", "classify_triangle", "in_rect", "manhattan", "quadrant"]
