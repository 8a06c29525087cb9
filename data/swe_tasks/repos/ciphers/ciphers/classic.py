"""Classical ciphers that keep case and leave non-letters alone."""


def _shift(ch: str, k: int) -> str:
    if "a" <= ch <= "z":
        return chr((ord(ch) - 97 + k) % 26 + 97)
    if "A" <= ch <= "Z":
        return chr((ord(ch) - 65 + k) % 26 + 65)
    return ch


def caesar(text: str, k: int, decrypt: bool = False) -> str:
    return "".join(_shift(c, -k if decrypt else k) for c in text)


def vigenere(text: str, key: str, decrypt: bool = False) -> str:
    if not key.isalpha():
        raise ValueError("key must be letters")
    shifts = [ord(c.lower()) - 97 for c in key]
    out, i = [], 0
    for ch in text:
        if ch.isalpha():
            k = shifts[i % len(shifts)]
            out.append(_shift(ch, -k if decrypt else k))
            i += 1
        else:
            out.append(ch)
    return "".join(out)
