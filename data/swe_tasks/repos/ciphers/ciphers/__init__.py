from ciphers.classic import caesar, vigenere

__all__ = ["caesar", "vigenere"]
