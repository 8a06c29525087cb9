"""Unit conversion for length, mass and temperature."""

import re

_LINEAR = {
    "length": {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "in": 0.0254, "ft": 0.3048, "mi": 1609.344},
    "mass": {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125},
}
_TEMPS = {"C", "F", "K"}


def _to_kelvin(value, unit):
    if unit == "K":
        return value
    if unit == "C":
        return value + 273.15
    return (value - 32) * 5 / 9 + 273.15


def _from_kelvin(value, unit):
    if unit == "K":
        return value
    if unit == "C":
        return value - 273.15
    return (value - 273.15) * 9 / 5 + 32


def convert(value: float, src: str, dst: str) -> float:
    if src in _TEMPS and dst in _TEMPS:
        return round(_from_kelvin(_to_kelvin(value, src), dst), 10)
    for table in _LINEAR.values():
        if src in table and dst in table:
            return round(value * table[src] / table[dst], 10)
    raise ValueError(f"cannot convert {src} to {dst}")


def parse_quantity(text: str):
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", text)
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    return float(m.group(1)), m.group(2)
