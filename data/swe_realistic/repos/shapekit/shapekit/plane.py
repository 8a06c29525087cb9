"""Plane geometry helpers: triangle kinds, quadrants, distances, rectangles."""

import enum


class Kind(enum.Enum):
    EQUILATERAL = "equilateral"
    ISOSCELES = "isosceles"
    SCALENE = "scalene"
    INVALID = "invalid"


def classify_triangle(a: float, b: float, c: float) -> Kind:
    a, b, c = sorted((a, b, c))
    if a <= 0 or a + b <= c:
        return Kind.INVALID
    if a == b == c:
        return Kind.EQUILATERAL
    if a == b or b == c or a == c:
        return Kind.ISOSCELES
    return Kind.SCALENE


def quadrant(x: float, y: float) -> int:
    """1..4 counter-clockwise from the upper right; 0 on an axis."""
    if x == 0 or y == 0:
        return 0
    if x > 0:
        return 1 if y > 0 else 4
    return 2 if y > 0 else 3


def manhattan(p: tuple, q: tuple) -> float:
    return abs(p[0] - q[0]) + abs(p[1] - q[1])


def in_rect(point: tuple, rect: tuple) -> bool:
    """rect = (left, bottom, right, top); the edges belong to the rectangle."""
    x, y = point
    left, bottom, right, top = rect
    return left <= x <= right and bottom <= y <= top
