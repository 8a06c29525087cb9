from textkit.text import count_vowels, hamming, is_palindrome, title_words, truncate

__all__ = ["count_vowels", "hamming", "is_palindrome", "title_words", "truncate"]
