"""Integers in bases 2..36."""

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(n: int, base: int) -> str:
    if not 2 <= base <= 36:
        raise ValueError("base must be in 2..36")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    n = abs(n)
    out = []
    while n:
        n, r = divmod(n, base)
        out.append(DIGITS[r])
    return sign + "".join(reversed(out))


def from_base(text: str, base: int) -> int:
    if not 2 <= base <= 36:
        raise ValueError("base must be in 2..36")
    text = text.strip().lower()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if not text:
        raise ValueError("empty number")
    value = 0
    for ch in text:
        d = DIGITS.find(ch)
        if d < 0 or d >= base:
            raise ValueError(f"invalid digit {ch!r} for base {base}")
        value = value * base + d
    return sign * value
