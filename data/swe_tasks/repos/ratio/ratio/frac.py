"""Exact fractions, always stored in lowest terms with a positive denominator."""

from math import gcd


class Frac:
    __slots__ = ("num", "den")

    def __init__(self, num: int, den: int = 1):
        if den == 0:
            raise ZeroDivisionError("denominator is zero")
        if den < 0:
            num, den = -num, -den
        g = gcd(num, den) or 1
        self.num, self.den = num // g, den // g

    def __add__(self, other):
        other = _coerce(other)
        return Frac(self.num * other.den + other.num * self.den, self.den * other.den)

    def __sub__(self, other):
        other = _coerce(other)
        return Frac(self.num * other.den - other.num * self.den, self.den * other.den)

    def __mul__(self, other):
        other = _coerce(other)
        return Frac(self.num * other.num, self.den * other.den)

    def __truediv__(self, other):
        other = _coerce(other)
        return Frac(self.num * other.den, self.den * other.num)

    def __eq__(self, other):
        other = _coerce(other)
        return (self.num, self.den) == (other.num, other.den)

    def __repr__(self):
        return f"Frac({self.num}, {self.den})"


def _coerce(x):
    return x if isinstance(x, Frac) else Frac(int(x))
