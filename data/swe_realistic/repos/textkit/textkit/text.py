"""Small string utilities: palindromes, vowels, Hamming distance, titles, truncation."""

VOWELS = "aeiou"


def is_palindrome(text: str) -> bool:
    letters = [c for c in text.lower() if c.isalnum()]
    return letters == letters[::-1]


def count_vowels(text: str) -> int:
    return sum(1 for c in text.lower() if c in VOWELS)


def hamming(a: str, b: str) -> int:
    if len(a) != len(b):
        raise ValueError("strands of different length")
    return sum(1 for x, y in zip(a, b) if x != y)


def title_words(text: str, small=("a", "an", "of", "the")) -> str:
    words = text.split(" ")
    out = []
    for i, word in enumerate(words):
        if i > 0 and word.lower() in small:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:])
    return " ".join(out)


def truncate(text: str, width: int, suffix: str = "...") -> str:
    if len(text) <= width:
        return text
    return text[: max(width - len(suffix), 0)] + suffix
