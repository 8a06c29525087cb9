"""Roman numeral conversion for 1..3999."""

_VALUES = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
    (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
    (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
_DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n: int) -> str:
    if not 0 < n < 4000:
        raise ValueError(f"{n} is out of range (1..3999)")
    out = []
    for value, symbol in _VALUES:
        while n >= value:
            out.append(symbol)
            n -= value
    return "".join(out)


def from_roman(text: str) -> int:
    text = text.strip().upper()
    if not text or any(c not in _DIGITS for c in text):
        raise ValueError(f"not a roman numeral: {text!r}")
    total = 0
    for i, c in enumerate(text):
        value = _DIGITS[c]
        if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:
            total -= value
        else:
            total += value
    if to_roman(total) != text:
        raise ValueError(f"non-canonical numeral: {text!r}")
    return total
